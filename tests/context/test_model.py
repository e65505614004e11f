"""The assembly's blocks as the wire reports them."""

from __future__ import annotations

from dataclasses import asdict, fields

from context.model import ContextBlock
from ctxpress_core.wire.v1 import BlockReport


def test_a_block_is_reported_field_for_field() -> None:
    block = ContextBlock(kind="method", name="A.f", start_line=3, end_line=9, form="summary", tokens=42,
                         reason="referenced at line 12")
    assert {f.name for f in fields(ContextBlock)} == set(BlockReport.model_fields)  # none left out either way
    assert block.to_report().model_dump() == asdict(block)
