"""MTM capacity bound (sleep/_mtm.py): utility arithmetic, eviction order, redundancy, compression.

Vectors are built with known cosines so the expected order can be computed by hand; one test uses
real MiniLM embeddings for compression of real near-duplicates.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from dialogmem import Event, MemoryRecord
from dialogmem._models import LocalEmbedder
from dialogmem._sleep._mtm import (
    CompressGroup,
    EvictionPlan,
    UtilityWeights,
    compressed_record,
    plan_eviction,
    utility,
)
from dialogmem._sleep._neighbours import NeighbourLists, pairs_above

DAY = 86_400.0
NOW = 2_000_000_000.0  # wall clock
DIM = 384


def rec(rid: str, day: float, *, memory: str | None = None, access: int = 0, last: float | None = None,
        salience: float = 0.5, created: float = 1.0, turns: tuple[str, ...] = ()) -> MemoryRecord:
    return MemoryRecord(id=rid, user_id="u", memory=memory or f"memory {rid} unique words {rid}",
                        time_stamp="2023-01-01T00:00:00", float_time_stamp=day * DAY, weekday="Sun",
                        access_count=access, last_accessed=last, salience=salience,
                        created_at=created, updated_at=created, source_turn_ids=list(turns) or [f"t-{rid}"],
                        entities=[rid.upper()])


def orthogonal(n: int) -> np.ndarray:
    return np.eye(n, DIM, dtype=np.float32)


def pair(cos: float) -> np.ndarray:
    """Two unit vectors with cosine ``cos`` (rows 0 and 1), orthogonal to rows 2..5."""
    v = np.zeros((6, DIM), dtype=np.float32)
    v[0, 0] = 1.0
    v[1, 0], v[1, 1] = cos, np.sqrt(1 - cos**2)
    for i in range(2, 6):
        v[i, i] = 1.0
    return v


# A hand-made table. t_max is day 100; defaults: recency half-life 30 d, last access half-life 7 d.
TABLE = [
    rec("A", 100),                                       # 1.0 recency + 0.5 salience = 1.5
    rec("B", 70),                                        # 0.5 + 0.5 = 1.0
    rec("C", 40, access=10, last=NOW - 7 * DAY),         # 0.25 + 0.5 (count, saturated) + 0.25 + 0.5 = 1.5
    rec("D", 100, salience=0.1),                         # 1.0 + 0.1 = 1.1
    rec("E", 10),                                        # 0.125 + 0.5 = 0.625
]
EXPECTED = {"A": 1.5, "B": 1.0, "C": 1.5, "D": 1.1, "E": 0.625}


def test_utility_terms_match_hand_computation() -> None:
    w = UtilityWeights()
    for r in TABLE:
        assert utility(r, NOW, redundancy=0.0, weights=w, dialogue_now=100 * DAY) == pytest.approx(EXPECTED[r.id])
    # redundancy: only the part above the floor (0.5) counts, scaled to [0, 1]: cos 0.9 -> 0.8
    assert utility(TABLE[0], NOW, redundancy=0.9, weights=w, dialogue_now=100 * DAY) == pytest.approx(0.7)
    assert utility(TABLE[0], NOW, redundancy=0.4, weights=w, dialogue_now=100 * DAY) == pytest.approx(1.5)
    # access count has diminishing returns: log1p(3)/log1p(10) of the weight
    three = rec("F", 100, access=3)
    assert utility(three, NOW, redundancy=0, weights=w) == pytest.approx(1.5 + 0.5 * np.log(4) / np.log(11))


def test_eviction_order_on_hand_made_table() -> None:
    plan = plan_eviction(TABLE, orthogonal(5), capacity=3, now=NOW)
    assert plan.evict == ["E", "B"]  # lowest utility first
    assert plan.utilities == pytest.approx({"E": 0.625, "B": 1.0})
    assert plan.after == 3 and plan.compress == []
    # A and C tie at 1.5: the older (C, day 40) goes first
    assert plan_eviction(TABLE, orthogonal(5), capacity=1, now=NOW).evict == ["E", "B", "D", "C"]


def test_nothing_happens_within_capacity_and_inputs_are_checked() -> None:
    plan = plan_eviction(TABLE, orthogonal(5), capacity=5, now=NOW)
    assert plan.evict == [] and plan.compress == [] and plan.after == 5
    with pytest.raises(ValueError):
        plan_eviction(TABLE, orthogonal(4), capacity=3, now=NOW)
    with pytest.raises(ValueError):
        plan_eviction(TABLE, orthogonal(5), capacity=-1, now=NOW)


def test_ties_break_by_older_time_then_created_then_id() -> None:
    # equal utilities: same recency via dialogue_now equal to each (newest day 5 everywhere is not
    # possible), so give equal days and differ only in created_at and id
    rows = [rec("z", 5, created=2.0), rec("y", 5, created=1.0), rec("x", 5, created=1.0), rec("w", 9)]
    plan = plan_eviction(rows, orthogonal(4), capacity=1, now=NOW)
    assert plan.evict == ["x", "y", "z"]


def test_redundancy_is_recomputed_against_kept_items() -> None:
    # P and Q are near neighbours (cos 0.9, different words: no compression); R is unique.
    # base: P 1.5, Q 1.4 (salience 0.4), R 1.2 (recency 0.5 + 0.7 salience).
    rows = [rec("P", 100), rec("Q", 100, salience=0.4), rec("R", 70, salience=0.7)]
    vecs = pair(0.9)[:3]
    plan = plan_eviction(rows, vecs, capacity=1, now=NOW)
    # first Q (1.4 - 0.8 = 0.6 < P's 0.7); then P is unique again (1.5) and R (1.2) goes
    assert plan.evict == ["Q", "R"]
    assert plan.utilities == pytest.approx({"Q": 0.6, "R": 1.2})


def test_compression_merges_near_duplicates_into_the_best_member() -> None:
    rows = [rec("a", 100, memory="Maya adopted a rescue dog named Biscuit", turns=("t1",)),
            rec("b", 90, memory="Maya adopted a rescue dog named Biscuit!", turns=("t2",), access=2, last=NOW),
            rec("c", 80, memory="Tom plays the guitar in a band")]
    vecs = np.zeros((3, DIM), dtype=np.float32)
    vecs[0, 0] = vecs[1, 0] = vecs[2, 1] = 1.0
    plan = plan_eviction(rows, vecs, capacity=2, now=NOW)
    # b has the higher base utility (accessed just now) so it keeps; a is absorbed; nothing evicted
    assert [(g.keep_id, g.absorbed_ids) for g in plan.compress] == [("b", ["a"])]
    assert plan.evict == [] and plan.after == 2
    assert plan.removed_ids() == ["a"]
    merged = compressed_record(rows[1], [rows[0]], now=NOW)
    assert merged.memory == rows[1].memory
    assert merged.source_turn_ids == ["t2", "t1"] and merged.access_count == 2
    assert merged.version == 2 and merged.updated_at == NOW


def test_compression_needs_word_containment_not_only_cosine() -> None:
    # a and b (cos 1.0) each pay the full redundancy penalty: 1.5 - 1.0; c: 2**(-99/30) + 0 ≈ 0.10
    rows = [rec("a", 100, memory="Maya likes tea"), rec("b", 100, memory="Maya likes coffee"),
            rec("c", 1, salience=0.0)]
    vecs = np.zeros((3, DIM), dtype=np.float32)
    vecs[0, 0] = vecs[1, 0] = vecs[2, 1] = 1.0
    plan = plan_eviction(rows, vecs, capacity=2, now=NOW)
    assert plan.compress == [] and plan.evict == ["c"]


def test_history_rows_keep_the_text_and_say_why() -> None:
    records = {r.id: r for r in TABLE}
    plan = EvictionPlan(capacity=3, before=5, evict=["E"], utilities={"E": 0.625},
                        compress=[{"keep_id": "A", "absorbed_ids": ["D"], "min_cosine": 0.97}])  # type: ignore[list-item]
    rows = plan.history(records, now=NOW)
    assert [(h.memory_id, h.event, h.actor) for h in rows] == [
        ("A", Event.UPDATE, "sleep:mtm:compress:absorbed:D"),
        ("D", Event.UPDATE, "sleep:mtm:compressed-into:A"),
        ("E", Event.UPDATE, "sleep:mtm:evicted:utility=0.6250"),
    ]
    assert all(h.old_memory == h.new_memory == records[h.memory_id].memory for h in rows)


def test_plan_for_a_few_thousand_items_is_fast_and_exact() -> None:
    rng = np.random.default_rng(7)
    n = 3000
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    rows = [rec(f"r{i:04d}", float(i % 200), access=i % 3, salience=0.1 + (i % 5) / 10) for i in range(n)]
    started = time.perf_counter()
    plan = plan_eviction(rows, vecs, capacity=1000, now=NOW)
    assert time.perf_counter() - started < 30.0
    assert plan.after == 1000 and len(set(plan.evict)) == 2000
    # random 384-d vectors are far below the redundancy floor: the order is the base-utility order
    w = UtilityWeights()
    base = {r.id: utility(r, NOW, redundancy=0.0, weights=w, dialogue_now=199 * DAY) for r in rows}
    kept = set(base) - set(plan.evict)
    assert max(base[e] for e in plan.evict) <= min(base[k] for k in kept)


@pytest.fixture(scope="module")
def embedder() -> Iterator[LocalEmbedder]:
    yield LocalEmbedder()


def test_real_minilm_near_duplicates_are_compressed(embedder: LocalEmbedder) -> None:
    texts = ["Maya adopted a rescue dog named Biscuit in March 2023.",
             "Maya adopted a rescue dog named Biscuit in March 2023",
             "Tom is learning to play the cello at a community school.",
             "The weather in Lisbon was rainy all week."]
    rows = [rec(f"m{i}", 100 - i, memory=t) for i, t in enumerate(texts)]
    vecs = np.asarray(embedder.embed(texts), dtype=np.float32)
    plan = plan_eviction(rows, vecs, capacity=3, now=NOW)
    assert [(g.keep_id, g.absorbed_ids) for g in plan.compress] == [("m0", ["m1"])]
    assert plan.evict == [] and plan.after == 3


def clustered(n: int, clusters: int, noise: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIM)).astype(np.float32)
    vecs = centres[rng.integers(0, clusters, n)] + noise * rng.standard_normal((n, DIM)).astype(np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def reference_evict(rows: list[MemoryRecord], vecs: np.ndarray, capacity: int) -> list[str]:
    """The greedy of the module docstring by brute force: every step recomputes every utility."""
    w = UtilityWeights()
    t_max = max(r.float_time_stamp for r in rows)
    sims = vecs @ vecs.T
    np.fill_diagonal(sims, -np.inf)
    alive = np.ones(len(rows), dtype=bool)
    out = []
    while alive.sum() > capacity:
        best = np.where(alive[None, :], sims, -np.inf).max(axis=1)
        cand = [(utility(rows[i], NOW, redundancy=max(0.0, float(best[i])), weights=w, dialogue_now=t_max),
                 rows[i].float_time_stamp, rows[i].created_at, rows[i].id, i) for i in np.flatnonzero(alive)]
        *_, i = min(cand)
        alive[i] = False
        out.append(rows[i].id)
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_neighbour_lists_give_the_brute_force_greedy_order(seed: int) -> None:
    # 150 items per cluster: the kept lists (64) run out and are computed again; distinct texts: no compression
    vecs = clustered(300, 2, 0.06, seed)
    rows = [rec(f"r{i:03d}", float(i % 50), access=i % 4, salience=0.1 + (i % 7) / 10) for i in range(300)]
    plan = plan_eviction(rows, vecs, capacity=30, now=NOW)
    assert plan.compress == []
    assert plan.evict == reference_evict(rows, vecs, 30)


def test_partitioned_neighbours_above_the_exact_limit_keep_near_duplicates() -> None:
    # tight clusters (cosine about 0.9 inside): the partition finds the same neighbours as the exact
    # product, so the approximate plan evicts the same items
    vecs = clustered(3000, 300, 0.02, 3)
    rows = [rec(f"r{i:04d}", float(i % 90), salience=0.1 + (i % 5) / 10) for i in range(3000)]
    exact = plan_eviction(rows, vecs, capacity=500, now=NOW)
    approx = plan_eviction(rows, vecs, capacity=500, now=NOW, exact_limit=100)
    assert len(set(exact.evict) & set(approx.evict)) >= 0.98 * len(exact.evict)


@pytest.mark.parametrize("exact_limit", [8192, 50])
def test_capped_pairs_keep_each_items_best_and_flag_the_rest(exact_limit: int) -> None:
    """With a cap, each item keeps its best ``cap`` pairs (ties to the lower index) and is flagged
    ``over`` when it had more: memory stays n * cap pairs even for a crowd of identical copies."""
    rng = np.random.default_rng(5)
    copies = np.repeat(clustered(1, 1, 0.0, 5), 120, axis=0)  # 120 identical vectors: 14,280 pairs at cosine 1
    vecs = np.concatenate([copies, clustered(180, 6, 0.08, 6)])[rng.permutation(300)]
    full = pairs_above(vecs, 0.5, exact_limit=exact_limit)
    capped = pairs_above(vecs, 0.5, cap=16, exact_limit=exact_limit)
    assert np.bincount(capped.rows, minlength=300).max() <= (16 if exact_limit > 300 else 32)
    counts = np.bincount(full.rows, minlength=300)
    assert np.array_equal(capped.over, counts > 16) if exact_limit > 300 else capped.over[counts > 32].all()
    want = NeighbourLists.build(300, full.rows, full.cols, full.cos, 16)
    got = NeighbourLists.build(300, capped.rows, capped.cols, capped.cos, 16, capped.over)
    assert np.array_equal(got.cut, want.cut)
    for i in range(300):  # the same best 16 (ties: lower index first), in the same order
        a, b = slice(want.starts[i], want.ends[i]), slice(got.starts[i], got.ends[i])
        assert want.ids[a].tolist() == got.ids[b].tolist()
        assert np.allclose(want.cos[a], got.cos[b], atol=1e-6)


def test_a_plan_in_parts_applies_every_removal_once_and_never_splits_a_group() -> None:
    groups = [CompressGroup(keep_id=f"k{g}", absorbed_ids=[f"a{g}.{i}" for i in range(g + 1)], min_cosine=0.97)
              for g in range(4)]  # groups of 2, 3, 4, 5 items (keeper included)
    evict = [f"e{i}" for i in range(11)]
    plan = EvictionPlan(capacity=5, before=40, compress=groups, evict=evict,
                        utilities={e: float(i) for i, e in enumerate(evict)})
    parts = list(plan.parts(6))
    assert [g for p in parts for g in p.compress] == groups  # whole, in order
    assert [e for p in parts for e in p.evict] == evict  # lowest utility first, as planned
    assert all(p.utilities == {e: plan.utilities[e] for e in p.evict} for p in parts)
    for p in parts:  # at most ``size`` ids a part, unless one group alone is larger
        size = sum(len(g.absorbed_ids) + 1 for g in p.compress) + len(p.evict)
        assert size <= 6 or (len(p.compress) == 1 and not p.evict)
    assert list(EvictionPlan(capacity=1, before=1).parts(6)) == []
