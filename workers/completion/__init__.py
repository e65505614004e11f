"""The completion worker: ``ctxpress.v1.complete`` over NATS request-reply (``python -m workers.completion``)."""
