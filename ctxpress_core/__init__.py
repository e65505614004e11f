"""The foundation every layer imports: settings, the wire format, the one language table, features,
the inference protocol, identity, errors. It imports nothing of the project outside ``ctxpress_core``
(the import contract in pyproject.toml checks it)."""
