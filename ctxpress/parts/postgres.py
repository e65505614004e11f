"""The PostgreSQL part: the embedded server (``db.embedded``) or an external database; migrated on start."""

from __future__ import annotations

import time

from ctxpress.parts.base import Part, StartError
from ctxpress.parts.probes import port_open
from ctxpress_core.settings import Settings
from db.embedded import EmbeddedPostgres


class PostgresPart(Part):
    name = "postgres"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.server = EmbeddedPostgres(settings.state_dir / "postgres", settings.bind_host, settings.postgres_port)

    @property
    def external(self) -> bool:
        return self.settings.database_url is not None

    def address(self) -> str:
        from sqlalchemy import make_url

        return make_url(self.settings.effective_database_url()).render_as_string(hide_password=True)

    def pid(self) -> int | None:
        return self.server.pid()

    def ready(self) -> bool:
        if self.external:
            from db.session import can_connect

            return can_connect(self.settings.effective_database_url())
        return port_open(self.settings.bind_host, self.settings.postgres_port)

    def start(self, timeout_s: float) -> float:
        started = time.perf_counter()
        if not self.external and not self.running():
            self.server.start(timeout_s=timeout_s)
        elif self.external and not self.ready():
            raise StartError(f"postgres: external database at {self.address()} does not answer")
        from db.migrations import migrate

        migrate(self.settings.effective_database_url())
        return time.perf_counter() - started

    def stop(self, timeout_s: float = 30.0) -> None:
        if not self.external:
            self.server.stop(timeout_s=timeout_s)
