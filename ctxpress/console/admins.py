"""``ctxpress users admin NAME``: a console admin, with a generated password shown once or one the caller gives."""

from __future__ import annotations

from ctxpress.console import auth
from ctxpress.members import Actor
from ctxpress_core import identity
from ctxpress_core.settings import Settings
from db import console as store


def make_admin(settings: Settings, actor: Actor, name: str, password: str | None, *, reset: bool = False) -> str | None:
    """Adds the admin (or, ``reset``, gives them a new password and ends their sessions). Returns the generated
    password, to be shown once; None when the caller gave one."""
    name = identity.validate_name(name)
    generated = auth.new_password() if password is None else None
    url = settings.effective_database_url()
    store.add_admin(url, name, auth.hash_password(generated or password or ""), replace=reset)
    store.audit(url, actor.name, "reset admin password" if reset else "add admin", name, "", actor.source)
    return generated
