"""postprocessing: token ids -> text for the ensemble (Triton python backend).

In streaming mode each response carries only the newest tokens; the worker concatenates.
"""

from __future__ import annotations

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = config["parameters"]
        self.tokenizer = AutoTokenizer.from_pretrained(params["tokenizer_dir"]["string_value"])
        self.skip_special = params.get("skip_special_tokens", {}).get("string_value", "true") == "true"

    def execute(self, requests: list[object]) -> list[object]:
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()  # [B, beam, len]
            lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()  # [B, beam]
            texts = [
                [
                    self.tokenizer.decode(tokens[b, k, : lengths[b, k]].tolist(), skip_special_tokens=self.skip_special)
                    .encode()
                    for k in range(tokens.shape[1])
                ]
                for b in range(tokens.shape[0])
            ]
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT", np.array(texts, dtype=object))]
            ))
        return responses
