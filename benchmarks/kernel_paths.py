"""Prompt tokens/s and ms a generated token per CPU kernel path (AMX / AVX-512 / AVX2, forced), against a
baseline measured in the same run: ``python -m benchmarks.kernel_paths [--baseline-python OTHER/bin/python]``;
the same as ``ctxpress bench --scenario kernels`` (``ctxpress.evaluation.kernel_paths``)."""

from __future__ import annotations

import sys

from ctxpress.evaluation.kernel_paths import main

if __name__ == "__main__":
    sys.exit(main())
