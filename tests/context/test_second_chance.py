"""The second chance: blocks dropped by the pessimistic estimate are offered the slack the real count left.
A stand-in for the assembly renders a block as its name and counts each block at a fixed real size, so the
estimate and the real count can disagree as they do in a prompt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from context.assembly.selection import _second_chance
from context.assembly.state import Packed
from context.packing.pack import Candidate, Form, Rendered


@dataclass
class CountingAssembly:
    budget: int
    real: dict[str, int]  # each block's real cost in the rendered prompt
    marker_tokens: int = 2
    renders: list[list[str]] = field(default_factory=list)

    def render(self, chosen: list[Candidate], _enc: Any) -> tuple[Rendered, int]:
        names = [c.name for c in chosen]
        self.renders.append(names)
        return Rendered(prefix=" ".join(names), suffix=""), sum(self.real[name] for name in names)


def block(name: str, rank: float, estimate: int) -> Candidate:
    return Candidate(kind="function", name=name, start_line=0, end_line=0, tier=3, rank=rank, reason="",
                     forms=[Form("summary", [], tokens=estimate)])


def packed_with(a: CountingAssembly, chosen: list[Candidate], dropped: list[Candidate]) -> Packed:
    total = sum(a.real[c.name] for c in chosen)
    return Packed(enc=None, chosen=chosen, dropped=dropped, rendered=Rendered("", ""), total=total)  # type: ignore[arg-type]


def test_a_block_the_real_count_rejects_does_not_keep_out_the_ones_that_fit() -> None:
    # 40 tokens of slack; by the estimates all three fit, but "big" costs more for real than estimated
    a = CountingAssembly(budget=100, real={"enc": 60, "imports": 12, "helper": 10, "big": 30})
    enc = block("enc", 0, 60)
    dropped = [block("imports", 1, 14), block("helper", 2, 12), block("big", 3, 16)]
    packed = packed_with(a, [enc], dropped)
    _second_chance(a, packed, a.budget)  # type: ignore[arg-type]
    assert [c.name for c in packed.chosen] == ["enc", "imports", "helper"]
    assert [c.name for c in packed.dropped] == ["big"] and packed.dropped[0].chosen is None
    assert packed.total == 82 and packed.rendered.prefix == "enc imports helper"


def test_nothing_is_added_when_nothing_fits_for_real() -> None:
    a = CountingAssembly(budget=100, real={"enc": 90, "one": 20})
    packed = packed_with(a, [block("enc", 0, 90)], [block("one", 1, 10)])
    _second_chance(a, packed, a.budget)  # type: ignore[arg-type]
    assert [c.name for c in packed.chosen] == ["enc"] and packed.total == 90
    assert packed.dropped[0].chosen is None


def test_the_renders_are_bounded_by_the_blocks_offered() -> None:
    a = CountingAssembly(budget=100, real={"enc": 60, **{f"b{i}": 50 for i in range(10)}})
    packed = packed_with(a, [block("enc", 0, 60)], [block(f"b{i}", i + 1, 3) for i in range(10)])
    _second_chance(a, packed, a.budget)  # type: ignore[arg-type]
    assert [c.name for c in packed.chosen] == ["enc"]
    assert len(a.renders) <= 6  # SECOND_CHANCE_MAX: one render per block offered at most
