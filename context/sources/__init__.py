"""The sources of context, one module each: what of the file (or, for ``retrieval``, of other files) a
prompt may show, each turned into packing candidates with the reason they were chosen."""
