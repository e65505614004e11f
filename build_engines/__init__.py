"""GPU production path: TensorRT-LLM engine builds and the Triton model repository.

This package stands alone: it must not import ``workers``, ``serving``, ``db`` or
``indexer``, so that a GPU build host needs nothing but this package and the
``gpu`` extra. Nothing here imports ``tensorrt_llm`` at module level either: plans,
dry runs and repository generation all work on a CPU-only machine.
"""

# The one TensorRT-LLM release every flag in this package was written and checked for.
# The ``gpu`` extra in pyproject.toml pins the same version; tests assert they agree.
TENSORRT_LLM_VERSION = "1.2.1"
