"""The context library: the prompt of one completion request, from the file's text and the cursor to the
fill-in-the-middle prompt the engine is sent. ``context.build.build_prompt`` is its entry point; the
sources of context are in ``context/sources/``, the token accounting and packing into a budget in
``context/packing/``. Deployment roles (the NATS worker, ``ctxpress explain``) call it; it knows neither."""
