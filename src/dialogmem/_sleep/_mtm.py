"""The MTM capacity bound (seed 000, eq. 6 and Algorithm 2 lines 11-15): which items leave a user's
mid-term memory when it holds more than ``B`` items, decided without I/O.

Utility of an item ``r`` at wall-clock time ``now``::

    u(r) = w_rec  * 2 ** (-(t_max - r.float_time_stamp) / h_rec)           recency
         + w_cnt  * min(1, log1p(r.access_count) / log1p(n_sat))           access count
         + w_last * 2 ** (-(now - r.last_accessed) / h_last)  (0 if never) last access
         + w_sal  * r.salience                                              salience
         - w_red  * max(0, (c - c0) / (1 - c0))                             redundancy

Why each term:

- *Recency* on the dialogue clock: ``t_max`` is the newest ``float_time_stamp`` among the user's items,
  so "stale" means "the user has talked a lot since", not "the wall clock moved" (a user back after a
  year has not made all their memories equally stale, and a replayed conversation with old
  timestamps is judged on its own clock). Exponential decay with half-life ``h_rec``: equal steps of
  age cost equal factors, and the newest item scores exactly ``w_rec``.
- *Access count*: an item that retrieval returned often has proven useful. ``log1p`` gives
  diminishing returns and ``n_sat`` caps it, so one popular item cannot become untouchable.
- *Last access* on the wall clock (``last_accessed`` is written by search with ``time.time()``): a
  recent hit is evidence that the item still matters now. Never accessed scores 0.
- *Salience*: the write path's own estimate (filler turns get 0.1, ordinary items 0.5).
- *Redundancy*: ``c`` is the largest cosine between ``r`` and another item that is *kept*. An item
  whose content survives in a near neighbour is cheap to lose. MiniLM gives unrelated sentences
  cosines up to about 0.5, so only the part above ``c0`` counts. "Kept" makes it a greedy process:
  after each eviction the redundancy of the evicted item's neighbours is recomputed, so of two
  near-duplicates the weaker one goes and the other one, now unique, is protected.

Ties are broken by older ``float_time_stamp``, then older ``created_at``, then id: deterministic.

*Cost.* The redundancy term only counts above ``c0``, so the plan needs, per item, its neighbours
above ``c0`` (``_neighbours``: exact up to ``EXACT_LIMIT`` items, a seeded partition above, about
``n**1.5`` dot products), best first, at most ``_TOP_K`` of them. When an item is evicted, only the
items whose best kept neighbour it was move to the next entry of their list; a cut list that runs out
is computed again (one row). The greedy order is the same as recomputing every utility after every
eviction (tests compare it with that brute force).

*Compression* (Algorithm 2, line 14) happens before eviction: near-duplicate groups — cosine to the
group's best member ``>= compress_cosine`` and content words of one contained in the other's — are
merged into their best member (highest utility without the redundancy term). The survivor keeps its
text and takes the union of the sources, entities and keywords, the sum of access counts, the latest
access and the highest salience (``compressed_record``). A keeper looks at its best ``_TOP_K``
neighbours (the pairs are capped per item, ``_neighbours``), so a crowd of more copies than that
becomes several groups, not one. Absorbed items leave the MTM index like
evicted ones. Nothing is lost: absorbed and evicted items stay in the journal, get a history row
(``EvictionPlan.history``) and go to LTM consolidation.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .._text._measures import ordered_union
from .._text._words import content_tokens
from .._types import Event, HistoryEntry, MemoryRecord
from ._neighbours import EXACT_LIMIT, NeighbourLists, pairs_above

_SECONDS_PER_DAY = 86_400.0
_TOP_K = 64  # neighbours kept per item; a list that runs out is computed again


class Rankable(Protocol):
    """What the plan reads of an item: a ``MemoryRecord`` or an ``EvictionItem``."""

    @property
    def id(self) -> str: ...
    @property
    def memory(self) -> str: ...
    @property
    def float_time_stamp(self) -> float: ...
    @property
    def created_at(self) -> float: ...
    @property
    def access_count(self) -> int: ...
    @property
    def last_accessed(self) -> float | None: ...
    @property
    def salience(self) -> float: ...


@dataclass(frozen=True, slots=True)
class EvictionItem:
    """The fields of a record the plan reads, ~10x smaller than the record (a 10⁶-item plan holds
    every item of the user at once)."""

    id: str
    memory: str
    float_time_stamp: float
    created_at: float
    access_count: int
    last_accessed: float | None
    salience: float

    @classmethod
    def of(cls, r: MemoryRecord) -> EvictionItem:
        return cls(r.id, r.memory, r.float_time_stamp, r.created_at, r.access_count, r.last_accessed, r.salience)


class UtilityWeights(BaseModel):
    """Weights and constants of the utility score (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    recency: float = Field(1.0, ge=0)
    recency_half_life_days: float = Field(30.0, gt=0)
    access_count: float = Field(0.5, ge=0)
    access_saturation: int = Field(10, ge=1)
    last_access: float = Field(0.5, ge=0)
    last_access_half_life_days: float = Field(7.0, gt=0)
    salience: float = Field(1.0, ge=0)
    redundancy: float = Field(1.0, ge=0)
    redundancy_floor: float = Field(0.5, ge=0, lt=1)
    compress_cosine: float = Field(0.95, gt=0, le=1)


def utility(record: Rankable, now: float, *, redundancy: float, weights: UtilityWeights,
            dialogue_now: float | None = None) -> float:
    """The utility of ``record`` (higher is kept longer). ``now``: wall clock (for last access);
    ``dialogue_now``: newest ``float_time_stamp`` of the user's items (defaults to the record's own,
    i.e. full recency); ``redundancy``: the largest cosine to another kept item."""
    return float(base_utility(record, now, weights=weights, dialogue_now=dialogue_now)
                 - redundancy_penalty(redundancy, weights))


def base_utility(record: Rankable, now: float, *, weights: UtilityWeights,
                 dialogue_now: float | None = None) -> float:
    """Every term of the utility but redundancy."""
    w = weights
    ref = record.float_time_stamp if dialogue_now is None else dialogue_now
    age_days = max(0.0, ref - record.float_time_stamp) / _SECONDS_PER_DAY
    score = w.recency * 2.0 ** (-age_days / w.recency_half_life_days)
    score += w.access_count * min(1.0, math.log1p(record.access_count) / math.log1p(w.access_saturation))
    if record.last_accessed is not None:
        idle_days = max(0.0, now - record.last_accessed) / _SECONDS_PER_DAY
        score += w.last_access * 2.0 ** (-idle_days / w.last_access_half_life_days)
    return score + w.salience * record.salience


def redundancy_penalty(cosine: float | np.ndarray, weights: UtilityWeights) -> float | np.ndarray:
    """The redundancy term for one cosine (a float) or for many at once (an array of them)."""
    floor = weights.redundancy_floor
    return weights.redundancy * np.maximum(0.0, (cosine - floor) / (1.0 - floor))


class CompressGroup(BaseModel):
    """Near-duplicates merged into ``keep_id``; ``min_cosine``: the lowest cosine to the keeper."""

    keep_id: str
    absorbed_ids: list[str]
    min_cosine: float


class EvictionPlan(BaseModel):
    """What the facade applies for one user: compress, then evict (both leave the MTM index)."""

    capacity: int
    before: int
    compress: list[CompressGroup] = Field(default_factory=list)
    evict: list[str] = Field(default_factory=list)  # lowest utility first
    utilities: dict[str, float] = Field(default_factory=dict)  # of evicted items, when evicted

    @property
    def after(self) -> int:
        return self.before - len(self.evict) - sum(len(g.absorbed_ids) for g in self.compress)

    def removed_ids(self) -> list[str]:
        """Every id that leaves the MTM index (hand them to consolidation)."""
        return [*(a for g in self.compress for a in g.absorbed_ids), *self.evict]

    def parts(self, size: int) -> Iterator[EvictionPlan]:
        """The plan in pieces of about ``size`` removals, each applied on its own (a 10⁶-item user's
        change set would hold 9 * 10⁵ records at once): compress groups whole and first, then evictions."""
        compress: list[CompressGroup] = []
        n = 0
        for g in self.compress:
            if compress and n + len(g.absorbed_ids) + 1 > size:
                yield self._part(compress, [])
                compress, n = [], 0
            compress.append(g)
            n += len(g.absorbed_ids) + 1
        start = 0
        if compress:
            start = max(0, size - n)
            yield self._part(compress, self.evict[:start])
        for at in range(start, len(self.evict), size):
            yield self._part([], self.evict[at:at + size])

    def _part(self, compress: list[CompressGroup], evict: list[str]) -> EvictionPlan:
        return EvictionPlan(capacity=self.capacity, before=self.before, compress=compress, evict=evict,
                            utilities={e: self.utilities[e] for e in evict})

    def history(self, records: Mapping[str, Rankable], *, now: float) -> list[HistoryEntry]:
        """One row per changed item. The text is unchanged (the item stays in the journal and
        ``get`` still returns it), so evictions and absorptions are UPDATE rows whose actor says why."""
        rows: list[HistoryEntry] = []
        for g in self.compress:
            keep = records[g.keep_id]
            rows.append(_row(keep, now, f"sleep:mtm:compress:absorbed:{','.join(g.absorbed_ids)}"))
            rows += [_row(records[a], now, f"sleep:mtm:compressed-into:{g.keep_id}") for a in g.absorbed_ids]
        rows += [_row(records[e], now, f"sleep:mtm:evicted:utility={self.utilities[e]:.4f}") for e in self.evict]
        return rows


def _row(record: Rankable, now: float, actor: str) -> HistoryEntry:
    return HistoryEntry(memory_id=record.id, event=Event.UPDATE, old_memory=record.memory,
                        new_memory=record.memory, timestamp=now, actor=actor)


def plan_eviction(records: Sequence[Rankable], vectors: np.ndarray, *, capacity: int, now: float,
                  weights: UtilityWeights | None = None, exact_limit: int = EXACT_LIMIT) -> EvictionPlan:
    """Compress near-duplicates, then evict the lowest-utility items until ``capacity`` remain.

    ``records`` are one user's active MTM items and ``vectors`` their L2-normalised embeddings (one
    row each, same order). Nothing happens while ``len(records) <= capacity``. Up to ``exact_limit``
    items the neighbours are exact; above, they come from a partition (``_neighbours.pairs_above``).
    """
    if capacity < 0:
        raise ValueError("capacity must be >= 0")
    if len(records) != len(vectors):
        raise ValueError("one vector per record is required")
    plan = EvictionPlan(capacity=capacity, before=len(records))
    if len(records) <= capacity:
        return plan
    w = weights or UtilityWeights()
    vecs = np.asarray(vectors, dtype=np.float32)
    t_max = max(r.float_time_stamp for r in records)
    base = [base_utility(r, now, weights=w, dialogue_now=t_max) for r in records]
    rows, cols, cos, over = pairs_above(vecs, min(w.redundancy_floor, w.compress_cosine), cap=_TOP_K,
                                        exact_limit=exact_limit)
    close = cos >= w.compress_cosine
    pairs: dict[int, list[tuple[int, float]]] = {}
    for i, j, c in zip(rows[close].tolist(), cols[close].tolist(), cos[close].tolist(), strict=True):
        pairs.setdefault(i, []).append((j, c))
    plan.compress = _compress_groups(records, pairs, base)
    absorbed = set(plan.removed_ids())
    alive = np.array([r.id not in absorbed for r in records])
    excess = int(alive.sum()) - capacity
    if excess > 0:
        red = cos > w.redundancy_floor
        if not red.all():  # (copies of 73 million pairs for a 10⁶-item user: only when needed)
            rows, cols, cos = rows[red], cols[red], cos[red]
        lists = NeighbourLists.build(len(records), rows, cols, cos, _TOP_K, over)
        del rows, cols, cos, red  # the greedy needs the lists only
        plan.evict, plan.utilities = _greedy_evict(records, vecs, lists, base, alive, excess, w)
    return plan


def _order_key(r: Rankable) -> tuple[float, float, str]:
    return (r.float_time_stamp, r.created_at, r.id)


def _compress_groups(records: Sequence[Rankable], pairs: dict[int, list[tuple[int, float]]],
                     base: list[float]) -> list[CompressGroup]:
    """Greedy: best item first becomes a keeper and absorbs its unclaimed near-duplicates."""
    rank = sorted(range(len(records)), key=lambda i: (-base[i], *_order_key(records[i])))
    position = {i: p for p, i in enumerate(rank)}
    words: dict[int, frozenset[str]] = {}

    def words_of(i: int) -> frozenset[str]:
        if i not in words:
            words[i] = frozenset(content_tokens(records[i].memory))
        return words[i]

    claimed: set[int] = set()
    groups: list[CompressGroup] = []
    for i in rank:
        if i in claimed or i not in pairs:
            continue
        members = [(j, c) for j, c in sorted(pairs[i], key=lambda p: position[p[0]])
                   if j not in claimed and _contained(words_of(i), words_of(j))]
        if members:
            claimed.update([i, *(j for j, _ in members)])
            groups.append(CompressGroup(keep_id=records[i].id, absorbed_ids=[records[j].id for j, _ in members],
                                        min_cosine=min(c for _, c in members)))
    return groups


def _contained(a: frozenset[str], b: frozenset[str]) -> bool:
    """One word set inside the other (two empty sets count): merging loses no content word."""
    return a <= b or b <= a


class _Redundancy:
    """The best kept neighbour of every item, kept current while items are evicted: the next entry of
    the item's neighbour list takes over; a cut list that runs out is computed again (one row)."""

    def __init__(self, vecs: np.ndarray, lists: NeighbourLists, alive: np.ndarray, floor: float) -> None:
        self.vecs, self.lists, self.alive, self.floor = vecs, lists, alive, floor
        self.ptr = lists.starts.copy()
        self.ends = lists.ends.copy()
        self.ids, self.cos, self.cut = lists.ids, lists.cos, lists.cut.copy()
        self.again: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # rows computed again: (ids, cosines)
        self._holders, self._bounds = lists.holders()
        self._more: dict[int, list[int]] = {}  # holders added by rows computed again

    def holders(self, i: int) -> list[int]:
        return [*self._holders[self._bounds[i]:self._bounds[i + 1]].tolist(), *self._more.get(i, ())]

    def best(self, j: int) -> tuple[int, float]:
        while True:
            ids, cos = self.again.get(j, (self.ids, self.cos))
            p, end = int(self.ptr[j]), int(self.ends[j])
            while p < end and not self.alive[ids[p]]:
                p += 1
            self.ptr[j] = p
            if p < end:
                return int(ids[p]), float(cos[p])
            if not self.cut[j]:
                return -1, 0.0
            self._recompute(j)

    def _recompute(self, j: int) -> None:
        sims = self.vecs @ self.vecs[j]
        sims[~self.alive] = -np.inf
        sims[j] = -np.inf
        above = np.flatnonzero(sims >= self.floor)
        cap = _TOP_K
        top = above[np.lexsort((above, -sims[above]))][:cap]
        self.again[j] = (top, sims[top])
        self.ptr[j], self.ends[j], self.cut[j] = 0, len(top), len(above) > cap
        for c in top.tolist():
            self._more.setdefault(c, []).append(j)


def _greedy_evict(records: Sequence[Rankable], vecs: np.ndarray, lists: NeighbourLists, base: list[float],
                  alive: np.ndarray, excess: int, w: UtilityWeights) -> tuple[list[str], dict[str, float]]:
    """Evict ``excess`` items, lowest utility first, recomputing redundancy against kept items.

    Evicting an item only lowers its neighbours' redundancy, so utilities only rise: a lazy heap
    (stale entries skipped on pop) gives the exact greedy order. Only the items whose best kept
    neighbour was the evicted one are looked at again.
    """
    red = _Redundancy(vecs, lists, alive, w.redundancy_floor)
    has = lists.ends > lists.starts  # the first entry of every list, at once
    at = np.minimum(lists.starts, max(0, len(lists.ids) - 1))
    best = np.where(has, lists.ids[at], -1) if len(lists.ids) else np.full(len(records), -1, dtype=np.int64)
    cos = np.where(has, lists.cos[at], 0.0) if len(lists.ids) else np.zeros(len(records))
    for i in np.flatnonzero(alive & has & ~alive[np.maximum(best, 0)]).tolist():  # first neighbour absorbed
        best[i], cos[i] = red.best(i)
    util = (np.asarray(base) - redundancy_penalty(cos, w)).tolist()
    heap = [(util[i], *_order_key(records[i]), i) for i in range(len(records)) if alive[i]]
    heapq.heapify(heap)
    evicted: list[str] = []
    scores: dict[str, float] = {}
    while len(evicted) < excess:
        u, *_, i = heapq.heappop(heap)
        if not alive[i] or u != util[i]:
            continue  # stale entry: the item's utility rose after this entry was pushed
        alive[i] = False
        evicted.append(records[i].id)
        scores[records[i].id] = u
        for j in red.holders(i):
            if alive[j] and best[j] == i:
                best[j], c = red.best(j)
                util[j] = base[j] - redundancy_penalty(c, w)
                heapq.heappush(heap, (util[j], *_order_key(records[j]), j))
    return evicted, scores


def compressed_record(keep: MemoryRecord, absorbed: Sequence[MemoryRecord], *, now: float) -> MemoryRecord:
    """The keeper of a compress group after the merge (its text is unchanged)."""
    group = [keep, *absorbed]
    accessed = [r.last_accessed for r in group if r.last_accessed is not None]
    return keep.model_copy(update={
        "source_turn_ids": ordered_union(r.source_turn_ids for r in group),
        "entities": ordered_union(r.entities for r in group),
        "keywords": ordered_union(r.keywords for r in group),
        "salience": max(r.salience for r in group),
        "access_count": sum(r.access_count for r in group),
        "last_accessed": max(accessed) if accessed else None,
        "updated_at": now,
        "version": keep.version + 1,
    })


