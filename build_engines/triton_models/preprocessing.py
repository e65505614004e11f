"""preprocessing: text -> token ids for the ensemble (Triton python backend).

Our own small tokenizer step (the stock one handles many inputs we never send). Tensor
names follow TensorRT-LLM's stock ensemble so the wiring reads familiarly.
"""

from __future__ import annotations

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer


def word_list(words: list[list[int]]) -> np.ndarray:
    """TensorRT-LLM's [2, N] word list: flat ids, then end offsets padded with -1."""
    flat = [t for w in words for t in w] or [0]
    offsets, end = [], 0
    for w in words:
        end += len(w)
        offsets.append(end)
    width = max(len(flat), len(offsets), 1)
    ids = np.zeros(width, dtype=np.int32)
    ids[: len(flat)] = flat
    offs = np.full(width, -1, dtype=np.int32)
    offs[: len(offsets)] = offsets
    return np.stack([ids, offs])


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        tokenizer_dir = config["parameters"]["tokenizer_dir"]["string_value"]
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, trust_remote_code=False)
        self.end_id = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        self.pad_id = self.end_id if pad is None else pad

    def execute(self, requests: list[object]) -> list[object]:
        responses = []
        for request in requests:
            query = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy().reshape(-1)[0]
            text = query.decode() if isinstance(query, bytes) else str(query)
            out_len = pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN").as_numpy().reshape(1, 1)
            # Completion prompts are raw code: no chat template, no BOS the model never saw in FIM.
            ids = np.array([self.tokenizer.encode(text, add_special_tokens=False)], dtype=np.int32)
            stop_t = pb_utils.get_input_tensor_by_name(request, "STOP_WORDS_DICT")
            words: list[list[int]] = []
            if stop_t is not None:
                for w in stop_t.as_numpy().reshape(-1):
                    s = w.decode() if isinstance(w, bytes) else str(w)
                    if s:
                        words.append(self.tokenizer.encode(s, add_special_tokens=False))
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("INPUT_ID", ids),
                pb_utils.Tensor("REQUEST_INPUT_LEN", np.array([[ids.shape[1]]], dtype=np.int32)),
                pb_utils.Tensor("REQUEST_OUTPUT_LEN", out_len.astype(np.int32)),
                pb_utils.Tensor("STOP_WORDS_IDS", word_list(words)[np.newaxis, ...]),
                pb_utils.Tensor("OUT_END_ID", np.array([[self.end_id]], dtype=np.int32)),
                pb_utils.Tensor("OUT_PAD_ID", np.array([[self.pad_id]], dtype=np.int32)),
            ]))
        return responses
