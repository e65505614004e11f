"""Benchmark scripts run by hand (``python -m benchmarks.<name>``); each prints figures and a summary.

The user-facing measurements are ``ctxpress bench`` and ``ctxpress eval``; these time one part alone.
Nothing in the library imports this package: it sits above every layer.
"""
