"""Sleep-time update queues and decisions (sleep/_queue.py, sleep/_update.py).

Real parts: the Qdrant Edge index (``EdgeIndex``) and, for the near-duplicate rules, real MiniLM
cosines are not needed — vectors are built with known cosines so the expected queues can be written
down. The LLM is ``ScriptedLLM``: a scripted fake (NOT a model) going through the real client path.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from dialogmem._models import ChatMessage, ScriptedLLM
from dialogmem._sleep import (
    LLMUpdater,
    RuleUpdater,
    UpdateDecision,
    UpdateQueues,
    apply_decision,
    build_update_queues,
    plan_sleep,
    resolve_decisions,
)
from dialogmem._store import EdgeIndex, IndexFilter, IndexPoint
from dialogmem._types import MemoryRecord, ScoredRecord

DIM = 384
USER = "u1"


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def basis(seed: int) -> np.ndarray:
    return unit(np.random.default_rng(seed).standard_normal(DIM))


def at_cosine(base: np.ndarray, cos: float, seed: int) -> np.ndarray:
    """A unit vector whose cosine with ``base`` is exactly ``cos``."""
    r = np.random.default_rng(seed).standard_normal(DIM)
    r -= r.dot(base) * base
    r = unit(r)
    return unit(cos * base + np.sqrt(1 - cos**2) * r)


def uid(name: str) -> str:
    """Record ids are UUIDs (the index requires it); tests name records by short names."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"dialogmem-test/{name}"))


def name(record: MemoryRecord) -> str:
    return record.original_memory.removeprefix("orig ")


def irec(rid: str, memory: str, t: float, **kw: object) -> MemoryRecord:
    return rec(rid, memory, t, indexed=True, **kw)  # type: ignore[arg-type]


def queue_names(q: UpdateQueues) -> dict[str, list[str]]:
    return {name(q.targets[t]): [name(s.record) for s in src] for t, src in q.queues.items()}


def rec(rid: str, memory: str, t: float, *, turns: Sequence[str] = (), created: float = 0.0,
        user: str = USER, indexed: bool = False) -> MemoryRecord:
    """A record named ``rid``; ``indexed`` records get a UUID id as the index requires."""
    return MemoryRecord(id=uid(rid) if indexed else rid, user_id=user, memory=memory,
                        original_memory=f"orig {rid}",
                        time_stamp=f"2023-05-{int(t):02d}T10:00:00", float_time_stamp=t * 86400.0,
                        weekday="Mon", source_turn_ids=list(turns) or [f"turn-{rid}"],
                        created_at=created or t, updated_at=created or t, entities=[rid.upper()])


class BatchSpy:
    """Counts index calls and passes them to the real EdgeIndex (not a fake)."""

    def __init__(self, index: EdgeIndex) -> None:
        self._index = index
        self.calls: list[str] = []

    def dense_search_batch(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.calls.append("dense_search_batch")
        return self._index.dense_search_batch(*args, **kwargs)

    def dense_search(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.calls.append("dense_search")
        return self._index.dense_search(*args, **kwargs)


@pytest.fixture
def index(tmp_path: Path) -> Iterator[EdgeIndex]:
    idx = EdgeIndex(tmp_path / "edge", dim=DIM)
    yield idx
    idx.close()


def load(index: EdgeIndex, entries: Sequence[tuple[MemoryRecord, np.ndarray]]) -> None:
    index.upsert([IndexPoint(record=r, vector=v) for r, v in entries])


# ---------------------------------------------------------------- queues


def test_queues_older_never_updates_newer(index: EdgeIndex) -> None:
    base = basis(1)
    a = (irec("a", "Ann likes tea.", 1), base)
    b = (irec("b", "Ann likes green tea.", 2), at_cosine(base, 0.95, 2))
    c = (irec("c", "Ann likes green tea a lot.", 3), at_cosine(base, 0.9, 3))
    other = (irec("z", "Bob fixes bikes.", 2), basis(99))
    load(index, [a, b, c, other])
    spy = BatchSpy(index)
    q = build_update_queues(spy, USER, [a, b, c, other], top_k=20, keep_top_n=10, threshold=0.8)  # type: ignore[arg-type]
    assert spy.calls == ["dense_search_batch"]  # one batched request, no per-entry queries
    assert queue_names(q) == {"a": ["b", "c"], "b": ["c"]}
    assert [name(t) for t, _ in q.items()] == ["a", "b"]  # oldest target first
    assert q.queues[uid("a")][0].score == pytest.approx(0.95, abs=1e-3)
    for target, sources in q.items():
        assert all(s.record.float_time_stamp >= target.float_time_stamp for s in sources)
    assert q.payloads()[uid("b")] == [
        {"id": uid("c"), "score": pytest.approx(q.queues[uid("b")][0].score)}]


def test_equal_timestamps_update_one_way_only(index: EdgeIndex) -> None:
    base = basis(5)
    x = (irec("x", "Cy owns a red car.", 4, created=100.0), base)
    y = (irec("y", "Cy owns a red car.", 4, created=101.0), at_cosine(base, 0.99, 6))
    load(index, [x, y])
    q = build_update_queues(index, USER, [x, y])
    assert queue_names(q) == {"x": ["y"]}


def test_threshold_top_n_and_scope(index: EdgeIndex) -> None:
    base = basis(7)
    target = (irec("t", "Dee runs.", 1), base)
    newer = [(irec(f"n{i}", f"Dee runs {i} km.", 2 + i), at_cosine(base, 0.99 - 0.02 * i, 10 + i))
             for i in range(8)]  # cosines 0.99 … 0.85
    weak = (irec("w", "Dee sings.", 9), at_cosine(base, 0.7, 30))
    foreign = (irec("f", "Dee runs.", 9, user="u2"), base)
    load(index, [target, *newer, weak, foreign])
    q = build_update_queues(index, USER, [*newer, weak], keep_top_n=5, threshold=0.8)
    queues = queue_names(q)
    assert queues["t"] == ["n0", "n1", "n2", "n3", "n4"]  # best 5 of 8
    assert all(len(v) <= 5 for v in queues.values())
    assert "w" not in {n for v in queues.values() for n in v}  # cosine 0.7 < 0.8
    assert build_update_queues(index, "u2", [foreign]).queues == {}
    assert build_update_queues(index, USER, []).queues == {}


def test_queues_match_brute_force(index: EdgeIndex) -> None:
    """Differential check against an exact numpy construction of seed 001's Q(e_i)."""
    rng = np.random.default_rng(3)
    centres = [basis(100 + k) for k in range(4)]
    entries = []
    for i in range(60):
        c = centres[i % 4]
        entries.append((irec(f"e{i:02d}", f"memory {i}", 1 + (i * 7) % 20, created=float(i)),
                        at_cosine(c, float(rng.uniform(0.85, 0.99)), 1000 + i)))
    load(index, entries)
    new = entries[30:]
    q = build_update_queues(index, USER, new, top_k=60, keep_top_n=4, threshold=0.8)

    key = {r.id: (r.float_time_stamp, r.created_at, r.id) for r, _ in entries}
    expected: dict[str, list[tuple[float, str]]] = {}
    for s, sv in new:
        for t, tv in entries:
            cos = float(np.dot(sv, tv))
            if t.id != s.id and key[t.id] < key[s.id] and cos >= 0.8:
                expected.setdefault(t.id, []).append((cos, s.id))
    want = {t: [sid for _, sid in sorted(v, key=lambda p: (-p[0], p[1]))[:4]]
            for t, v in expected.items()}
    got = {t: [s.record.id for s in src] for t, src in q.queues.items()}
    assert got == want


# ---------------------------------------------------------------- rule updater


def scored(r: MemoryRecord, score: float) -> ScoredRecord:
    return ScoredRecord(record=r, score=score)


@pytest.mark.parametrize(("target", "source", "score", "merged"), [
    ("Ann likes green tea.", "Ann likes green tea.", 0.99, "Ann likes green tea."),  # exact
    ("Ann likes green tea.", "Ann really likes green tea!", 0.97, "Ann really likes green tea!"),
    ("Ann: I adopted a cat named Miso from the shelter on 2023-05-02",
     "Ann: I adopted a cat named Miso from the shelter in Oslo on 2023-05-02", 0.97,
     "Ann: I adopted a cat named Miso from the shelter in Oslo on 2023-05-02"),  # richer text kept
    ("Ann is happy with the new job at the bank", "Ann is not happy with the new job at the bank", 0.97,
     None),  # negation differs
    ("Ann ran 5 km in the park on Sunday", "Ann ran 10 km in the park on Sunday", 0.98, None),  # numbers
    ("Ann adopted a cat named Luna from the shelter in Oslo last spring",
     "Ann adopted a cat named Max from the shelter in Oslo last spring", 0.97, None),  # names
    ("Ann likes green tea.", "Ann likes green tea.", 0.9, None),  # cosine too low
])
def test_rule_updater_merges_only_near_duplicates(target: str, source: str, score: float,
                                                  merged: str | None) -> None:
    t, s = rec("t", target, 1), rec("s", source, 2)
    d = RuleUpdater().decide(t, [scored(s, score)])
    if merged is None:
        assert d == UpdateDecision(target_id=t.id, action="ignore", method="rule")
    else:
        assert d == UpdateDecision(target_id=t.id, action="update", new_memory=merged, source_ids=[s.id],
                                   absorbed_ids=[s.id], method="rule")


def test_apply_absorption_unions_provenance() -> None:
    t = rec("t", "Ann likes green tea.", 1, turns=["m1"])
    s = rec("s", "Ann likes green tea every morning.", 2, turns=["m7", "m1"])
    d = UpdateDecision(target_id="t", action="update", new_memory=s.memory, source_ids=["s"],
                       absorbed_ids=["s"])
    new = apply_decision(t, d, {"s": s}, now=500.0)
    assert new is not None
    assert (new.memory, new.source_turn_ids, new.version, new.updated_at) == (
        "Ann likes green tea every morning.", ["m1", "m7"], 2, 500.0)
    assert new.original_memory == "orig t" and new.id == "t" and new.entities == ["T", "S"]
    assert apply_decision(t, UpdateDecision(target_id="t", action="delete"), {}, now=1.0) is None
    assert apply_decision(t, UpdateDecision(target_id="t", action="ignore"), {}, now=1.0) is t
    with pytest.raises(ValueError):
        apply_decision(t, UpdateDecision(target_id="other", action="ignore"), {}, now=1.0)


def test_resolve_absorption_chains() -> None:
    a, b, c = rec("a", "x", 1), rec("b", "x", 2), rec("c", "x", 3)
    records = {r.id: r for r in (a, b, c)}
    decisions = [
        UpdateDecision(target_id="b", action="update", new_memory="x", source_ids=["c"], absorbed_ids=["c"]),
        UpdateDecision(target_id="a", action="update", new_memory="x", source_ids=["b", "c"],
                       absorbed_ids=["b", "c"]),
    ]
    out = resolve_decisions(decisions, records)
    # "a" (oldest) absorbs both; "b"'s own plan is dropped since "b" is merged away.
    assert [(d.target_id, d.absorbed_ids) for d in out] == [("a", ["b", "c"])]


def test_resolve_one_absorber_per_entry() -> None:
    a, b, c = rec("a", "Ann likes tea", 1), rec("b", "Ann likes tea", 2), rec("c", "Ann likes tea", 3)
    records = {r.id: r for r in (a, b, c)}
    decisions = [
        UpdateDecision(target_id="a", action="update", new_memory="Ann likes tea", source_ids=["c"],
                       absorbed_ids=["c"]),
        UpdateDecision(target_id="b", action="update", new_memory="Ann likes tea", source_ids=["c"],
                       absorbed_ids=["c"]),
    ]
    out = resolve_decisions(decisions, records)
    assert [(d.target_id, d.action, d.absorbed_ids) for d in out] == [
        ("a", "update", ["c"]), ("b", "ignore", [])]


# ---------------------------------------------------------------- LLM updater and planning


def queues_for(*pairs: tuple[MemoryRecord, list[tuple[MemoryRecord, float]]]) -> UpdateQueues:
    q = UpdateQueues()
    for target, sources in pairs:
        q.targets[target.id] = target
        q.queues[target.id] = [scored(s, sc) for s, sc in sources]
    return q


def target_of(messages: list[ChatMessage]) -> str:
    return messages[-1]["content"].splitlines()[0].split("]: ", 1)[1]


def test_llm_plan_update_delete_ignore() -> None:
    coffee = rec("t1", "Ann likes coffee.", 1, turns=["m1"])
    capp = rec("s1", "Ann prefers cappuccino in the mornings.", 5, turns=["m5"])
    decaf = rec("s2", "Ann avoids decaf.", 6, turns=["m6"])
    home = rec("t2", "Ann lives in New York.", 2)
    moved = rec("s3", "Ann moved to San Francisco in 2023.", 7)
    italian = rec("t3", "Ann is learning Italian cooking.", 3)
    yoga = rec("s4", "Ann started practicing yoga.", 8)
    answers = {
        "Ann likes coffee.": {"action": "update", "sources": [1],
                              "new_memory": "Ann likes coffee, especially cappuccino in the mornings."},
        "Ann lives in New York.": {"action": "Delete", "new_memory": None, "sources": [1]},
        "Ann is learning Italian cooking.": {"action": "ignore"},
    }

    def script(stage: str, messages: list[ChatMessage]) -> str:
        assert stage == "update"
        return json.dumps(answers[target_of(messages)])

    llm = ScriptedLLM(script)
    q = queues_for((coffee, [(capp, 0.86), (decaf, 0.82)]), (home, [(moved, 0.85)]),
                   (italian, [(yoga, 0.81)]))
    plan = plan_sleep(q, LLMUpdater(llm), max_workers=3)
    assert plan == [
        UpdateDecision(target_id="t1", action="update", method="llm", source_ids=["s1"],
                       new_memory="Ann likes coffee, especially cappuccino in the mornings."),
        # the model's "delete" (contradicted) is carried out as a supersession: kept, linked to s3
        UpdateDecision(target_id="t2", action="supersede", method="llm", source_ids=["s3"]),
        UpdateDecision(target_id="t3", action="ignore", method="llm"),
    ]
    new = apply_decision(coffee, plan[0], q.records(), now=99.0)
    assert new is not None and new.source_turn_ids == ["m1", "m5"] and new.version == 2
    old_home = apply_decision(home, plan[1], q.records(), now=99.0)
    assert old_home is not None and old_home.memory == home.memory and old_home.version == home.version + 1
    assert old_home.superseded_by == "s3" and old_home.invalid_at == moved.time_stamp
    # three workers: the calls arrive in any order, so the coffee target's prompt is looked up
    prompt = next(c.messages[-1]["content"] for c in llm.calls if target_of(c.messages) == coffee.memory)
    assert "CANDIDATES:" in prompt and "1. [2023-05-05T10:00:00]" in prompt
    assert llm.usage.get("llm", "update").calls == 3


@pytest.mark.parametrize("bad", [
    "no idea",  # not JSON at all
    '{"action": "merge"}',  # not an allowed action
    '{"action": "update", "new_memory": null}',  # update without text
    '{"action": "update", "new_memory": "   "}',
    '{"action": "update", "new_memory": "Bo plays chess daily.", "sources": [42]}',  # names no candidate
    '{"action": "update", "new_memory": "Bo plays chess daily."}',  # names nothing at all
    '{"action": "delete"}',
    '{"action": "delete", "sources": [0]}',
])
def test_malformed_llm_output_falls_back_to_rules(bad: str) -> None:
    t = rec("t", "Bo plays chess.", 1)
    dup = rec("d", "Bo plays chess.", 2)
    llm = ScriptedLLM(lambda stage, messages: bad, max_retries=1)
    plan = plan_sleep(queues_for((t, [(dup, 0.99)])), LLMUpdater(llm))
    assert plan == [UpdateDecision(target_id="t", action="update", new_memory="Bo plays chess.",
                                   source_ids=["d"], absorbed_ids=["d"], method="rule")]
    assert llm.usage.get("llm", "update").fallbacks == 1


def test_one_failing_target_does_not_affect_others() -> None:
    class Flaky:
        """Test stand-in updater that crashes on one target."""

        def __init__(self) -> None:
            self.threads: set[str] = set()

        def decide(self, target: MemoryRecord, sources: Sequence[ScoredRecord]) -> UpdateDecision:
            self.threads.add(threading.current_thread().name)
            if target.id == "t3":
                raise RuntimeError("boom")
            return UpdateDecision(target_id=target.id, action="delete", source_ids=[sources[0].record.id],
                                  method="llm")

    pairs = []
    for i in range(6):
        t = rec(f"t{i}", f"Cy has {i} cats.", 1 + i)
        s = rec(f"s{i}", f"Cy has {i} cats.", 10 + i)
        pairs.append((t, [(s, 0.99)]))
    flaky = Flaky()
    plan = plan_sleep(queues_for(*pairs), flaky, max_workers=4)
    assert [d.target_id for d in plan] == [f"t{i}" for i in range(6)]
    assert [d.action for d in plan] == ["delete"] * 3 + ["update"] + ["delete"] * 2
    assert plan[3].method == "rule" and plan[3].absorbed_ids == ["s3"]
    assert all(name.startswith("dialogmem-sleep") for name in flaky.threads)


def test_end_to_end_with_edge_index(index: EdgeIndex) -> None:
    base = basis(42)
    old = (irec("old", "Eve works at a bakery in Leeds.", 1), base)
    new = (irec("new", "Eve quit the bakery and now works at a library in York.", 9),
           at_cosine(base, 0.88, 43))
    dup_old = (irec("p", "Eve: I play the violin", 2), basis(50))
    dup_new = (irec("q", "Eve: I play the violin", 8), at_cosine(basis(50), 0.999, 51))
    load(index, [old, new, dup_old, dup_new])
    q = build_update_queues(index, USER, [new, dup_new])

    def script(stage: str, messages: list[ChatMessage]) -> str:
        if target_of(messages).startswith("Eve works"):
            return '{"action": "delete", "sources": [1]}'
        return "garbage"  # the duplicate pair goes to the rule fallback

    plan = plan_sleep(q, LLMUpdater(ScriptedLLM(script, max_retries=0)))
    assert [(d.target_id, d.action, d.method, d.absorbed_ids) for d in plan] == [
        (uid("old"), "supersede", "llm", []), (uid("p"), "update", "rule", [uid("q")])]
    flt = IndexFilter(time_to=1e12)
    assert index.count(USER, flt) == 4  # planning itself changed nothing
