"""``python -m ctxpress.console``: the console as ``ctxpress up`` starts it (the settings from the environment)."""

from ctxpress.console.app import serve
from ctxpress_core.settings import get_settings

raise SystemExit(serve(get_settings()))
