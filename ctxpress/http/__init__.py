"""``ctxpress serve-http``: the HTTP APIs editor plugins already speak, each request turned into the
same ``ctxpress.v1.complete`` request that ``ctxpress lsp`` sends (docs/editors.md)."""
