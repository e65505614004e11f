"""The completion worker: ``ctxpress.v1.complete`` over NATS request-reply (``python -m workers.completion``).

One request runs through a pipeline, each stage a module: the request off the wire (request.py), its
prompt (the context library, ``context.build``), the engine's admission (engine_load.py), and the metrics
and telemetry of its outcome (observe.py).
service.py runs a request end to end; the worker's other subjects have a module each (cancels.py, feedback.py,
file_events.py: file_opened and its pre-warm); worker.py is the process: its NATS subscriptions and start-up.
"""
