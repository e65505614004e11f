"""One llama.cpp model, its context and its batch (llama-cpp-python's low-level API): tokenize,
decode tokens into a sequence of the KV cache, read the logits, save and restore a sequence's state.

The context holds several sequences (``n_seq_max``), each in its own KV stream of ``n_ctx`` cells,
so one file's attention never spans another's; the KV cache's cell type may be INT8 or INT4.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from serving.engine.cpu_kernels import CpuBackend, load_cpu_backend
from serving.fim import TEMPLATE_MARKERS

KV_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}  # ggml type ids (GGML_TYPE_F16, _Q8_0, _Q4_0)


class LlamaRunner:
    """One llama.cpp model + context + batch: decode tokens into a sequence, read logits."""

    def __init__(self, model_path: Path, *, n_ctx: int, n_slots: int, n_threads: int, n_batch: int,
                 kv_type: str, kernels: str | None = None) -> None:
        """``kernels``: the CPU kernel path (serving.engine.cpu_kernels; None: ``CTXPRESS_CPU_KERNELS``, else the
        best this host runs), chosen and loaded before the model, once per process."""
        from llama_cpp import llama_cpp as C  # heavy import, only in the serving process
        from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel
        from llama_cpp._utils import suppress_stdout_stderr

        if kv_type not in KV_TYPES:
            raise ValueError(f"unknown KV cache type {kv_type!r}; choose one of {', '.join(KV_TYPES)}")
        self._C = C
        self.cpu_backend: CpuBackend = load_cpu_backend(kernels)  # before llama.cpp starts any thread
        mparams = C.llama_model_default_params()
        self.model = LlamaModel(path_model=str(model_path), params=mparams, verbose=False)
        cparams = C.llama_context_default_params()
        cparams.n_ctx = n_ctx * n_slots
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.n_seq_max = n_slots
        # One KV stream per sequence: a sequence's attention spans only its own cells.
        cparams.kv_unified = False
        cparams.type_k = KV_TYPES[kv_type]
        cparams.type_v = KV_TYPES[kv_type]
        # A quantised V cache needs flash attention in llama.cpp.
        cparams.flash_attn_type = (C.LLAMA_FLASH_ATTN_TYPE_ENABLED if kv_type != "f16"
                                   else C.LLAMA_FLASH_ATTN_TYPE_AUTO)
        with suppress_stdout_stderr(disable=False):  # llama.cpp prints its context set-up otherwise
            self.ctx = LlamaContext(model=self.model, params=cparams, verbose=False)
        self.batch = LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)
        self.n_batch = n_batch
        self.n_ctx = n_ctx
        self.n_vocab = self.model.n_vocab()
        self.vocab = self.model.vocab
        self.kv_type = kv_type
        self.n_threads = n_threads  # decoding one token
        self.n_threads_batch = n_threads  # decoding several
        self._piece = ctypes.create_string_buffer(256)

    def tokenize(self, text: str, markers: Sequence[int] | None = None) -> list[int]:
        """``markers``: offsets of the template's special tokens (serving.fim.TEMPLATE_MARKERS); the rest is
        text, never parsed for special tokens. None: the whole of ``text`` is (a caller that built it all)."""
        if markers is None:
            return self.model.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        tokens: list[int] = []
        done = 0
        for at in sorted(m for m in markers if m >= 0):
            marker = next((m for m in TEMPLATE_MARKERS if text.startswith(m, at)), None)
            if marker is None or at < done:
                raise ValueError(f"no template marker at offset {at} of the prompt")
            if at > done:
                tokens += self.model.tokenize(text[done:at].encode("utf-8"), add_bos=False, special=False)
            tokens += self.model.tokenize(marker.encode("utf-8"), add_bos=False, special=True)
            done = at + len(marker)
        if done < len(text):
            tokens += self.model.tokenize(text[done:].encode("utf-8"), add_bos=False, special=False)
        return tokens

    def token_bytes(self, token: int) -> bytes:
        n = self._C.llama_token_to_piece(self.vocab, token, self._piece, len(self._piece), 0, False)
        return self._piece.raw[:n] if n > 0 else b""

    def is_eog(self, token: int) -> bool:
        return bool(self._C.llama_vocab_is_eog(self.vocab, token))

    def set_threads(self, generation: int, batch: int | None = None) -> None:
        """Run the next decodes of one token on ``generation`` threads and of several (a prompt's chunks, a
        verification batch) on ``batch`` threads (None: as many)."""
        batch = generation if batch is None else batch
        if (generation, batch) != (self.n_threads, self.n_threads_batch):
            self._C.llama_set_n_threads(self.ctx.ctx, generation, batch)
            self.n_threads, self.n_threads_batch = generation, batch

    def remove(self, seq: int, from_pos: int) -> None:
        """Forget the sequence's KV from ``from_pos`` on (-1 end: to the end)."""
        self._C.llama_memory_seq_rm(self.ctx.memory, seq, from_pos, -1)

    def decode(self, seq: int, tokens: Sequence[int], pos0: int, *, all_logits: bool) -> None:
        """Decode ``tokens`` at positions pos0.. of ``seq``; logits for the last token, or for all
        of them (verification: then ``len(tokens)`` must fit one batch)."""
        if all_logits and len(tokens) > self.n_batch:
            raise ValueError("a verification batch larger than n_batch")
        b = self.batch.batch
        for start in range(0, len(tokens), self.n_batch):
            part = tokens[start:start + self.n_batch]
            b.n_tokens = len(part)
            for i, tok in enumerate(part):
                b.token[i] = tok
                b.pos[i] = pos0 + start + i
                b.seq_id[i][0] = seq
                b.n_seq_id[i] = 1
                b.logits[i] = all_logits
            b.logits[len(part) - 1] = True
            self.ctx.decode(self.batch)

    def logits(self, i: int) -> np.ndarray:
        """Logits after position ``i`` of the last batch (-1: its last token); a view, not a copy."""
        return np.ctypeslib.as_array(self._C.llama_get_logits_ith(self.ctx.ctx, i), shape=(self.n_vocab,))

    def argmax(self, i: int) -> int:
        """Greedy token after position ``i`` of the last batch."""
        return int(self.logits(i).argmax())

    def sample(self, i: int, temperature: float, rng: np.random.Generator, top_k: int = 40) -> int:
        logits = self.logits(i)
        top = np.argpartition(logits, -top_k)[-top_k:]
        z = logits[top] / max(temperature, 1e-5)
        p = np.exp(z - z.max())
        return int(top[rng.choice(len(top), p=p / p.sum())])

    def seq_bytes(self, seq: int) -> int:
        """Bytes of the sequence's state (its KV cells): the KV memory of one file's context."""
        return int(self._C.llama_state_seq_get_size(self.ctx.ctx, seq))

    def seq_state(self, seq: int) -> bytes:
        """A copy of the sequence's state (what ``set_seq_state`` puts back)."""
        size = self.seq_bytes(seq)
        buffer = (ctypes.c_uint8 * size)()
        written = int(self._C.llama_state_seq_get_data(self.ctx.ctx, buffer, size, seq))
        return ctypes.string_at(buffer, written)

    def set_seq_state(self, seq: int, state: bytes) -> bool:
        """Replace the sequence's KV with a saved state; False when llama.cpp refuses it (the
        sequence is then empty)."""
        self.remove(seq, 0)
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if int(self._C.llama_state_seq_set_data(self.ctx.ctx, buffer, len(state), seq)) == 0:
            self.remove(seq, 0)
            return False
        return True
