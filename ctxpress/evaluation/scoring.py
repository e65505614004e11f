"""How a completion is scored against what the developer really typed (its first line)."""

from __future__ import annotations

import re

from rapidfuzz.distance import Levenshtein

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def first_line(completion: str) -> str:
    return completion.split("\n", 1)[0]


def exact_match(predicted: str, expected: str) -> bool:
    return predicted.strip() == expected.strip()


def edit_similarity(predicted: str, expected: str) -> float:
    """1 - Levenshtein distance / the longer length (1.0 for two empty strings)."""
    a, b = predicted.strip(), expected.strip()
    longest = max(len(a), len(b))
    if longest == 0:
        return 1.0
    return 1.0 - Levenshtein.distance(a, b) / longest


def identifiers(text: str) -> list[str]:
    return _IDENTIFIER.findall(text)


def identifier_match(predicted: str, expected: str) -> bool:
    """The same identifiers in the same order (CrossCodeEval's identifier exact match)."""
    return identifiers(predicted) == identifiers(expected)


def identifier_f1(predicted: str, expected: str) -> float:
    pred, gold = identifiers(predicted), identifiers(expected)
    if not pred and not gold:
        return 1.0
    if not pred or not gold:
        return 0.0
    remaining = list(gold)
    common = 0
    for name in pred:
        if name in remaining:
            remaining.remove(name)
            common += 1
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def score(completion: str, expected: str) -> dict[str, float]:
    line = first_line(completion)
    return {
        "exact_match": float(exact_match(line, expected)),
        "edit_similarity": edit_similarity(line, expected),
        "identifier_match": float(identifier_match(line, expected)),
        "identifier_f1": identifier_f1(line, expected),
    }
