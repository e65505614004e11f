"""A minimal writer for Triton's config.pbtxt (protobuf text format).

Hand-written rather than built with tritonclient's model_config_pb2 so this package needs
no gRPC stack on the build host; the tests parse every file with the real schema.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # model-config enum, e.g. "TYPE_INT32"
    dims: tuple[int, ...]
    optional: bool = False
    scalar: bool = False  # reshape [1] -> [] as the tensorrt_llm backend expects for scalars
    ragged: bool = False


def q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dims(dims: tuple[int, ...]) -> str:
    return "[ " + ", ".join(str(d) for d in dims) + " ]"


def tensor_block(t: Tensor) -> str:
    lines = [f"    name: {q(t.name)}", f"    data_type: {t.dtype}", f"    dims: {_dims(t.dims)}"]
    if t.scalar:
        lines.append("    reshape: { shape: [ ] }")
    if t.ragged:
        lines.append("    allow_ragged_batch: true")
    if t.optional:
        lines.append("    optional: true")
    return "  {\n" + "\n".join(lines) + "\n  }"


def tensors(kind: str, items: list[Tensor]) -> str:
    return f"{kind} [\n" + ",\n".join(tensor_block(t) for t in items) + "\n]"


def parameters(params: dict[str, str]) -> str:
    return "\n".join(
        f"parameters: {{\n  key: {q(k)}\n  value: {{ string_value: {q(v)} }}\n}}" for k, v in params.items()
    )


def ensemble_step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    body = [f"      model_name: {q(model)}", "      model_version: -1"]
    body += [f"      input_map {{ key: {q(k)} value: {q(v)} }}" for k, v in inputs.items()]
    body += [f"      output_map {{ key: {q(k)} value: {q(v)} }}" for k, v in outputs.items()]
    return "    {\n" + "\n".join(body) + "\n    }"
