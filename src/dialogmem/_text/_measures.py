"""Similarity measures and ordered unions shared by the features (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import numpy as np


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two vectors; 0.0 when either is all zeros."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(np.dot(a, b) / (na * nb)) if na and nb else 0.0


def jaccard(a: Collection[str], b: Collection[str]) -> float:
    """|a ∩ b| / |a ∪ b| of two word sets; 1.0 when both are empty."""
    sa, sb = set(a), set(b)
    return len(sa & sb) / len(sa | sb) if sa or sb else 1.0


def ordered_union(lists: Iterable[Sequence[str]]) -> list[str]:
    """The items of every list, each once, in first-seen order."""
    return list(dict.fromkeys(x for seq in lists for x in seq))
