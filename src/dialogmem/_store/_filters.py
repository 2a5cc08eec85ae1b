"""Backend-neutral filters and searches.

The scope rules (user first, then the optional constraints) are decided once here; each adapter
only translates these plain values into its own client's classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import qdrant_edge

from .._errors import InputError
from ._base import IndexFilter
from ._payload import point_ids


@dataclass(frozen=True)
class Match:
    key: str
    value: str


@dataclass(frozen=True)
class MatchAny:
    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Range:
    key: str
    gte: float | None
    lte: float | None


@dataclass(frozen=True)
class HasId:
    ids: tuple[str, ...]


Condition = Match | MatchAny | Range | HasId
T_co = TypeVar("T_co", covariant=True)


class ConditionBuilder(Protocol, Generic[T_co]):
    """How one client spells each kind of condition."""

    def match(self, key: str, value: str) -> T_co: ...
    def match_any(self, key: str, values: list[str]) -> T_co: ...
    def range(self, key: str, gte: float | None, lte: float | None) -> T_co: ...
    def has_id(self, ids: list[str]) -> T_co: ...


@dataclass(frozen=True)
class FilterSpec:
    must: tuple[Condition, ...]
    must_not: tuple[Condition, ...] = ()


@dataclass(frozen=True)
class SearchSpec:
    """One search: dense only, sparse only, or both fused with RRF (hybrid)."""

    filter: FilterSpec
    limit: int
    dense: list[float] | None = None
    sparse: qdrant_edge.SparseVector | None = None
    prefetch_limit: int = 0
    with_payload: bool = True  # False: ids and scores only

    @property
    def hybrid(self) -> bool:
        return self.dense is not None and self.sparse is not None


def translate(spec: FilterSpec, builder: ConditionBuilder[T_co]) -> tuple[list[T_co], list[T_co] | None]:
    """(must, must_not) in the builder's classes; must_not is None when there is none."""
    must_not = [_native(c, builder) for c in spec.must_not]
    return [_native(c, builder) for c in spec.must], must_not or None


def _native(c: Condition, b: ConditionBuilder[T_co]) -> T_co:
    match c:
        case Match(key, value):
            return b.match(key, value)
        case MatchAny(key, values):
            return b.match_any(key, list(values))
        case Range(key, gte, lte):
            return b.range(key, gte, lte)
        case HasId(ids):
            return b.has_id(list(ids))
    raise TypeError(f"unknown filter condition {c!r}")


def scope(user_id: str, flt: IndexFilter | None = None, *, ids: Sequence[str] | None = None
          ) -> FilterSpec:
    """The user scope as a must-condition, plus ``flt`` and an optional id restriction."""
    if not isinstance(user_id, str) or not user_id:
        raise InputError("user_id must be a non-empty string")
    must: list[Condition] = [Match("user_id", user_id)]
    must_not: list[Condition] = []
    if ids is not None:
        must.append(HasId(tuple(point_ids(ids))))
    if flt is not None:
        must.extend(_constraints(flt))
        if flt.exclude_ids:
            must_not.append(HasId(tuple(point_ids(flt.exclude_ids))))
    return FilterSpec(tuple(must), tuple(must_not))


def _constraints(flt: IndexFilter) -> list[Condition]:
    out: list[Condition] = []
    for key in ("agent_id", "session_id", "tier", "level"):
        value = getattr(flt, key)
        if value is not None:
            out.append(Match(key, value))
    if flt.time_from is not None or flt.time_to is not None:
        if flt.time_from is not None and flt.time_to is not None and flt.time_from > flt.time_to:
            raise InputError(f"time_from {flt.time_from} is after time_to {flt.time_to}")
        out.append(Range("float_time_stamp", flt.time_from, flt.time_to))
    # An empty list is kept on purpose: "any of nothing" matches nothing in both backends.
    if flt.speakers is not None:
        out.append(MatchAny("speaker_name", tuple(flt.speakers)))
    if flt.entities is not None:
        out.append(MatchAny("entities", tuple(flt.entities)))
    if flt.ids is not None:
        out.append(HasId(tuple(point_ids(flt.ids))))
    return out
