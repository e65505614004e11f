"""One packing pass: the reason a candidate is dropped says what it had, and what was held for later tiers."""

from __future__ import annotations

from context.packing.pack import TIER_IMPORTS, TIER_NEARBY, Candidate, Form, Piece, pack


def _candidate(kind: str, tier: int, text: str, line: int) -> Candidate:
    return Candidate(kind=kind, name=kind, start_line=line, end_line=line, tier=tier, rank=0, reason=kind,
                     forms=[Form("summary", [Piece(line, line, text)])])


def test_a_drop_for_the_nearby_reserve_says_what_was_left_and_what_was_held() -> None:
    imports = _candidate("imports", TIER_IMPORTS, "x" * 60 + "\n", 1)
    nearby = _candidate("nearby", TIER_NEARBY, "y" * 40 + "\n", 50)
    result = pack([imports, nearby], 100, lambda s: len(s) // 2, 0, max_whole_tokens=100, reserve=80)
    assert result.chosen == [nearby] and result.dropped == [imports]
    assert imports.drop_reason == ("does not fit: needs 30 tokens as summary, 20 left "
                                   "(80 more held for the lines above: nearby_first)")
    plain = _candidate("imports", TIER_IMPORTS, "x" * 300 + "\n", 1)
    pack([plain], 100, lambda s: len(s) // 2, 0, max_whole_tokens=100)
    assert plain.drop_reason == "does not fit: needs 150 tokens as summary, 100 left"
