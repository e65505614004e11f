"""What the indexer needs of an embedder: texts to vectors. The Triton client that fills it lives on the
serving side (``serving.triton_client.TritonEmbedder``); whoever builds an ``Indexer`` (the index worker, the
CLI) passes it in, so the indexer imports nothing of serving."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np


class Embedder(Protocol):
    def embed(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        """One float32 row of ``inference.EMBEDDING_DIM`` per text, in order; ``progress`` gets each batch's row
        count. Raises ``EmbeddingError`` when the embedder fails."""
        ...
