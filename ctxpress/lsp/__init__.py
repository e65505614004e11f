"""``ctxpress lsp``: the editor's door, a Language Server on stdio that asks the appliance over NATS."""
