"""Measurement: evaluation cases, scoring, ``ctxpress eval``, ``ctxpress bench``, ``ctxpress stats``."""
