"""The context library: the prompt of one completion request, from the file's text and the cursor to the
fill-in-the-middle prompt the engine is sent. ``ContextLibrary.build_prompt`` (context/build.py) is its entry point; the
sources of context are in ``context/sources/``, the token accounting and packing into a budget in
``context/packing/``. The completion worker calls ``build_prompt``, ``ctxpress explain`` the in-file context
(``context.prepare``); the library imports neither."""
