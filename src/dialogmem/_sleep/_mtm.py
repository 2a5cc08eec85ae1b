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

*Compression* (Algorithm 2, line 14) happens before eviction: near-duplicate groups — cosine to the
group's best member ``>= compress_cosine`` and content words of one contained in the other's — are
merged into their best member (highest utility without the redundancy term). The survivor keeps its
text and takes the union of the sources, entities and keywords, the sum of access counts, the latest
access and the highest salience (``compressed_record``). Absorbed items leave the MTM index like
evicted ones. Nothing is lost: absorbed and evicted items stay in the journal, get a history row
(``EvictionPlan.history``) and go to LTM consolidation.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .._text import content_tokens
from .._types import Event, HistoryEntry, MemoryRecord

_SECONDS_PER_DAY = 86_400.0
_CHUNK = 1024  # rows of the similarity matrix computed at once (bounded memory for big stores)


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


def utility(record: MemoryRecord, now: float, *, redundancy: float, weights: UtilityWeights,
            dialogue_now: float | None = None) -> float:
    """The utility of ``record`` (higher is kept longer). ``now``: wall clock (for last access);
    ``dialogue_now``: newest ``float_time_stamp`` of the user's items (defaults to the record's own,
    i.e. full recency); ``redundancy``: the largest cosine to another kept item."""
    return base_utility(record, now, weights=weights, dialogue_now=dialogue_now) - redundancy_penalty(
        redundancy, weights)


def base_utility(record: MemoryRecord, now: float, *, weights: UtilityWeights,
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


def redundancy_penalty(cosine: float, weights: UtilityWeights) -> float:
    floor = weights.redundancy_floor
    return weights.redundancy * max(0.0, (cosine - floor) / (1.0 - floor))


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

    def history(self, records: Mapping[str, MemoryRecord], *, now: float) -> list[HistoryEntry]:
        """One row per changed item. The text is unchanged (the item stays in the journal and
        ``get`` still returns it), so evictions and absorptions are UPDATE rows whose actor says why."""
        rows: list[HistoryEntry] = []
        for g in self.compress:
            keep = records[g.keep_id]
            rows.append(_row(keep, now, f"sleep:mtm:compress:absorbed:{','.join(g.absorbed_ids)}"))
            rows += [_row(records[a], now, f"sleep:mtm:compressed-into:{g.keep_id}") for a in g.absorbed_ids]
        rows += [_row(records[e], now, f"sleep:mtm:evicted:utility={self.utilities[e]:.4f}") for e in self.evict]
        return rows


def _row(record: MemoryRecord, now: float, actor: str) -> HistoryEntry:
    return HistoryEntry(memory_id=record.id, event=Event.UPDATE, old_memory=record.memory,
                        new_memory=record.memory, timestamp=now, actor=actor)


def plan_eviction(records: Sequence[MemoryRecord], vectors: np.ndarray, *, capacity: int, now: float,
                  weights: UtilityWeights | None = None) -> EvictionPlan:
    """Compress near-duplicates, then evict the lowest-utility items until ``capacity`` remain.

    ``records`` are one user's active MTM items and ``vectors`` their L2-normalised embeddings (one
    row each, same order). Nothing happens while ``len(records) <= capacity``.
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
    plan.compress = _compress_groups(records, vecs, base, w)
    absorbed = set(plan.removed_ids())
    alive = np.array([r.id not in absorbed for r in records])
    excess = int(alive.sum()) - capacity
    if excess > 0:
        plan.evict, plan.utilities = _greedy_evict(records, vecs, base, alive, excess, w)
    return plan


def _order_key(r: MemoryRecord) -> tuple[float, float, str]:
    return (r.float_time_stamp, r.created_at, r.id)


def _compress_groups(records: Sequence[MemoryRecord], vecs: np.ndarray, base: list[float],
                     w: UtilityWeights) -> list[CompressGroup]:
    """Greedy: best item first becomes a keeper and absorbs its unclaimed near-duplicates."""
    rank = sorted(range(len(records)), key=lambda i: (-base[i], *_order_key(records[i])))
    position = {i: p for p, i in enumerate(rank)}
    pairs = _pairs_above(vecs, w.compress_cosine)
    words = [frozenset(content_tokens(r.memory)) for r in records]
    claimed: set[int] = set()
    groups: list[CompressGroup] = []
    for i in rank:
        if i in claimed:
            continue
        members = [(j, c) for j, c in sorted(pairs.get(i, []), key=lambda p: position[p[0]])
                   if j not in claimed and _contained(words[i], words[j])]
        if members:
            claimed.update([i, *(j for j, _ in members)])
            groups.append(CompressGroup(keep_id=records[i].id, absorbed_ids=[records[j].id for j, _ in members],
                                        min_cosine=min(c for _, c in members)))
    return groups


def _pairs_above(vecs: np.ndarray, threshold: float) -> dict[int, list[tuple[int, float]]]:
    """Every other row with cosine >= ``threshold``, per row (chunked: bounded memory)."""
    out: dict[int, list[tuple[int, float]]] = {}
    for start in range(0, len(vecs), _CHUNK):
        sims = vecs[start:start + _CHUNK] @ vecs.T
        for r, j in zip(*np.nonzero(sims >= threshold), strict=True):
            i = start + int(r)
            if i != int(j):
                out.setdefault(i, []).append((int(j), float(sims[r, j])))
    return out


def _contained(a: frozenset[str], b: frozenset[str]) -> bool:
    """One word set inside the other (two empty sets count): merging loses no content word."""
    return a <= b or b <= a


def _greedy_evict(records: Sequence[MemoryRecord], vecs: np.ndarray, base: list[float],
                  alive: np.ndarray, excess: int, w: UtilityWeights) -> tuple[list[str], dict[str, float]]:
    """Evict ``excess`` items, lowest utility first, recomputing redundancy against kept items.

    Evicting an item only lowers its neighbours' redundancy, so utilities only rise: a lazy heap
    (stale entries skipped on pop) gives the exact greedy order.
    """
    best, best_cos = _nearest_alive(vecs, alive)
    util = [base[i] - redundancy_penalty(best_cos[i], w) for i in range(len(records))]
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
        for j in np.flatnonzero(alive & (best == i)):
            best[j], best_cos[j] = _nearest_one(vecs, alive, int(j))
            util[j] = base[j] - redundancy_penalty(best_cos[j], w)
            heapq.heappush(heap, (util[j], *_order_key(records[j]), int(j)))
    return evicted, scores


def _nearest_alive(vecs: np.ndarray, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every row, the index and cosine of its most similar other alive row (-1, 0.0 if none)."""
    n = len(vecs)
    best = np.full(n, -1, dtype=np.int64)
    best_cos = np.zeros(n, dtype=np.float64)
    cols = np.flatnonzero(alive)
    if len(cols) < 2:
        return best, best_cos
    for start in range(0, n, _CHUNK):
        rows = np.arange(start, min(n, start + _CHUNK))
        sims = vecs[rows] @ vecs[cols].T
        sims[cols[None, :] == rows[:, None]] = -np.inf  # not oneself
        arg = np.argmax(sims, axis=1)
        best[rows] = cols[arg]
        best_cos[rows] = sims[np.arange(len(rows)), arg]
    return best, best_cos


def _nearest_one(vecs: np.ndarray, alive: np.ndarray, j: int) -> tuple[int, float]:
    # one product over every row, the dead ones masked afterwards: no copy of the alive rows
    sims = vecs @ vecs[j]
    sims[~alive] = -np.inf
    sims[j] = -np.inf
    k = int(np.argmax(sims))
    if not np.isfinite(sims[k]):
        return -1, 0.0
    return k, float(sims[k])


def compressed_record(keep: MemoryRecord, absorbed: Sequence[MemoryRecord], *, now: float) -> MemoryRecord:
    """The keeper of a compress group after the merge (its text is unchanged)."""
    group = [keep, *absorbed]
    accessed = [r.last_accessed for r in group if r.last_accessed is not None]
    return keep.model_copy(update={
        "source_turn_ids": _union(r.source_turn_ids for r in group),
        "entities": _union(r.entities for r in group),
        "keywords": _union(r.keywords for r in group),
        "salience": max(r.salience for r in group),
        "access_count": sum(r.access_count for r in group),
        "last_accessed": max(accessed) if accessed else None,
        "updated_at": now,
        "version": keep.version + 1,
    })


def _union(lists: Iterable[Sequence[str]]) -> list[str]:
    return list(dict.fromkeys(x for seq in lists for x in seq))
