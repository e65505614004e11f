"""``python -m ctxpress.console``: the console as ``ctxpress up`` starts it (the settings from the environment)."""

from ctxpress.console.app import serve
from ctxpress_core.settings import get_settings

if __name__ == "__main__":
    raise SystemExit(serve(get_settings()))
