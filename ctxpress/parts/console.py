"""The team console's part (``python -m ctxpress.console``): started by ``ctxpress up`` in team mode, ready once its
sign-in page answers."""

from __future__ import annotations

import sys

from ctxpress.parts.base import Part
from ctxpress.parts.probes import http_ok, port_open
from ctxpress_core import identity
from ctxpress_core.settings import Settings


def console_wanted(settings: Settings) -> bool:
    """Team mode with a console port: a single-user appliance has nobody to administer."""
    return identity.team_mode(settings) and settings.console_port != 0


class ConsolePart(Part):
    name = "console"
    hang_checked = True

    def address(self) -> str:
        return self.settings.console_url()

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "ctxpress.console"]

    def ready(self) -> bool:
        host = self.settings.console_host
        local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        if self.settings.console_tls():  # the team's certificate: a TCP answer, no verification from here
            return port_open(local, self.settings.console_port)
        return http_ok(f"http://{local}:{self.settings.console_port}/login", timeout_s=2.0)
