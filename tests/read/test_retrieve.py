"""Stage-1 retrieval and the read pipeline on a real Qdrant Edge index with real MiniLM embeddings.

LLM paths use ``ScriptedLLM``, a scripted fake (not a model) that goes through the real
repair/validate path of the LLM client.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from dialogmem import InputError, MemoryRecord
from dialogmem._models import LocalEmbedder, ScriptedLLM
from dialogmem._read import (
    HypotheticalQuery,
    LLMPlanner,
    LLMSelector,
    QueryPlan,
    ReadPipeline,
    RulePlanner,
    RuleSelector,
    coarse_retrieve,
    context_tokens,
    per_view_budget,
    render_context,
    to_hit,
)
from dialogmem._store import EdgeIndex, IndexFilter, IndexPoint
from dialogmem._store._fusion import convex_fusion
from dialogmem._usage import UsageTracker

BASE = datetime(2023, 5, 1, 10, 0, tzinfo=UTC)
REF = datetime(2023, 6, 1, 12, 0, tzinfo=UTC)

ALICE_FACTS = [  # (speaker, text, day offset from BASE, tier)
    ("Alice", "Alice adopted a golden retriever puppy named Biscuit", 0, "mtm"),
    ("Alice", "Alice went hiking in the Alps with her sister", 2, "mtm"),
    ("Tom", "Tom told Alice that he started a pottery class", 3, "mtm"),
    ("Alice", "Alice bought a red bicycle for commuting to work", 5, "mtm"),
    ("Tom", "Tom said Alice should visit the modern art museum", 7, "mtm"),
    ("Alice", "Alice cooked lasagna for her parents on Sunday", 9, "mtm"),
    ("Alice", "Alice started learning Spanish with an online tutor", 12, "mtm"),
    ("Alice", "Alice's dog Biscuit learned to fetch a frisbee", 15, "mtm"),
    ("Tom", "Tom moved to Berlin for a new engineering job", 18, "mtm"),
    ("Alice", "Alice ran her first half marathon in 2 hours", 21, "mtm"),
    ("Alice", "Alice adopted a golden retriever puppy called Biscuit", 22, "mtm"),  # near-duplicate
    ("", "Owners of young dogs often take them to obedience classes", 25, "ltm"),
]
BOB_FACTS = [
    ("Bob", "Bob adopted a black cat named Shadow", 1, "mtm"),
    ("Bob", "Bob went hiking in the Rockies last summer", 4, "mtm"),
    ("Bob", "Bob bought a blue bicycle for weekend rides", 6, "mtm"),
    ("Eve", "Eve told Bob about her pottery class", 8, "mtm"),
    ("Bob", "Bob is learning French with an app", 11, "mtm"),
    ("Bob", "Bob cooked paella for his friends", 14, "mtm"),
]


def _record(user: str, i: int, speaker: str, text: str, day: int, tier: str) -> MemoryRecord:
    ts = BASE + timedelta(days=day)
    f = ts.timestamp()
    return MemoryRecord(
        id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{user}/{i}")), user_id=user, tier=tier, memory=text,
        time_stamp=ts.isoformat(), float_time_stamp=f, weekday=ts.strftime("%a"), speaker_name=speaker,
        source_turn_ids=[f"{user}-t{i}"], created_at=f, updated_at=f,
    )


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, embedder: LocalEmbedder):
    idx = EdgeIndex(tmp_path_factory.mktemp("read") / "index", dim=384)
    records = [_record("alice", i, *f) for i, f in enumerate(ALICE_FACTS)]
    records += [_record("bob", i, *f) for i, f in enumerate(BOB_FACTS)]
    vectors = embedder.embed([r.memory for r in records])
    idx.upsert([IndexPoint(record=r, vector=v) for r, v in zip(records, vectors, strict=True)])
    yield idx
    idx.close()


class RecordingIndex:
    """The real index, with every ``hybrid_search`` call's arguments kept (a spy, not a fake)."""

    def __init__(self, inner: EdgeIndex) -> None:
        self.inner = inner
        self.dim = inner.dim
        self.calls: list[dict] = []
        self.batches = 0

    def hybrid_search(self, user_id, vector, text, *, limit, flt=None, prefetch_limit=None, dense_weight=None):
        return self.hybrid_search_batch(user_id, np.asarray([vector]), [text], limit=limit, flts=[flt],
                                        prefetch_limit=prefetch_limit, dense_weight=dense_weight)[0]

    def hybrid_search_batch(self, user_id, vectors, texts, *, limit, flts=None, prefetch_limit=None,
                            dense_weight=None):
        """Kept per view, as if each view were its own call; ``batches`` counts the requests."""
        answers = self.inner.hybrid_search_batch(user_id, vectors, texts, limit=limit, flts=flts,
                                                 prefetch_limit=prefetch_limit, dense_weight=dense_weight)
        self.batches += 1
        for text, flt, hits in zip(texts, flts or [None] * len(texts), answers, strict=True):
            self.calls.append({"user_id": user_id, "text": text, "limit": limit, "flt": flt, "n": len(hits),
                               "prefetch": prefetch_limit, "dense_weight": dense_weight})
        return answers

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def _plan(texts: list[str], **kw) -> QueryPlan:
    return QueryPlan(query=texts[0], hqs=[HypotheticalQuery(text=t) for t in texts], **kw)


# -- stage 1 -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("k", "n", "each"), [(5, 1, 10), (5, 2, 5), (5, 3, 4), (4, 4, 2), (10, 3, 7)])
def test_per_view_budget(k: int, n: int, each: int) -> None:
    assert per_view_budget(k, n) == each


def test_budget_split_union_and_final_k(index, embedder) -> None:
    spy = RecordingIndex(index)
    texts = ["Alice's dog", "hiking trip", "bicycle purchase"]
    plan = _plan(texts)
    candidates, _relaxed = coarse_retrieve(spy, embedder, "alice", plan, k=4, dense_weight=None)
    assert [c["limit"] for c in spy.calls] == [per_view_budget(4, 3)] * 3 == [3, 3, 3]
    assert [c["dense_weight"] for c in spy.calls] == [None] * 3  # RRF
    assert spy.batches == 1  # every view in one request
    assert len(candidates) <= 8  # 2K
    assert len({c.record.id for c in candidates}) == len(candidates)
    assert all(1 <= c.views <= 3 for c in candidates)
    # the BM25 side sees the HQ plus the plan keywords
    plan_kw = _plan(["Alice's dog"], keywords=["frisbee"])
    coarse_retrieve(spy, embedder, "alice", plan_kw, k=4)
    assert spy.calls[-1]["text"] == "Alice's dog frisbee"

    pipe = ReadPipeline(spy, embedder, RulePlanner(), RuleSelector())
    result = pipe.search("What did Alice do with her dog, her bike and her sister?", "alice",
                         limit=3, reference_time=REF)
    assert len(result.hits) == 3
    assert result.candidates <= 6
    assert set(result.timings_ms) == {"plan", "embed", "retrieve", "select"}


def test_convex_fusion_normalises_each_list_and_weighs_them() -> None:
    dense = [("a", 0.9), ("b", 0.5), ("c", 0.1)]  # min-max: 1, 0.5, 0
    lexical = [("b", 12.0), ("d", 4.0)]  # min-max: 1, 0
    got = convex_fusion(dense, lexical, dense_weight=0.4, limit=10)
    assert [(i, round(s, 6)) for i, s in got] == [("b", 0.8), ("a", 0.4), ("c", 0.0), ("d", 0.0)]  # ties by id
    assert len(convex_fusion(dense, lexical, dense_weight=0.4, limit=2)) == 2
    # the weight decides: dense alone, BM25 alone
    assert convex_fusion(dense, lexical, dense_weight=1.0, limit=1)[0][0] == "a"
    assert convex_fusion(dense, lexical, dense_weight=0.0, limit=1)[0][0] == "b"
    # one-sided and empty lists; equal scores count as the top of their list
    assert [s for _, s in convex_fusion([("a", 0.3), ("b", 0.3)], [], dense_weight=0.4, limit=5)] \
        == pytest.approx([0.4, 0.4])
    assert convex_fusion([], [], dense_weight=0.4, limit=5) == []


def test_convex_fusion_on_the_index(index, embedder) -> None:
    vector = embedder.embed_query("Alice's dog Biscuit")
    got = index.hybrid_search("alice", vector, "Alice's dog Biscuit", limit=3, prefetch_limit=12, dense_weight=0.4)
    dense = index.dense_search("alice", vector, limit=12)
    lexical = index.lexical_search("alice", "Alice's dog Biscuit", limit=12)
    expected = convex_fusion([(h.record.id, h.score) for h in dense], [(h.record.id, h.score) for h in lexical],
                             dense_weight=0.4, limit=3)
    assert [(h.record.id, round(h.score, 6)) for h in got] == [(i, round(s, 6)) for i, s in expected]
    assert all(h.record.user_id == "alice" for h in got) and "Biscuit" in got[0].record.memory
    assert index.hybrid_search("nobody", vector, "dog", limit=3, dense_weight=0.4) == []
    with pytest.raises(InputError, match="dense_weight"):
        index.hybrid_search("alice", vector, "dog", limit=3, dense_weight=1.5)


def test_convex_views_pass_the_weight(index, embedder) -> None:
    spy = RecordingIndex(index)
    plan = _plan(["Alice's dog", "bicycle purchase"])
    candidates, _ = coarse_retrieve(spy, embedder, "alice", plan, k=3, dense_weight=0.3)
    assert [(c["limit"], c["prefetch"], c["dense_weight"]) for c in spy.calls] == [(3, 20, 0.3)] * 2
    assert 0 < len(candidates) <= 6 and all(c.record.user_id == "alice" for c in candidates)
    texts = [c.record.memory for c in candidates]
    assert any("Biscuit" in t for t in texts) and any("bicycle" in t for t in texts)
    spy.calls.clear()
    ReadPipeline(spy, embedder, RulePlanner(), RuleSelector()).search("Alice's dog", "alice", limit=2,
                                                                      reference_time=REF)
    assert {c["dense_weight"] for c in spy.calls} == {0.4}  # the default
    spy.calls.clear()
    ReadPipeline(spy, embedder, RulePlanner(), RuleSelector(), dense_weight=None).search(
        "Alice's dog", "alice", limit=2, reference_time=REF)
    assert {c["dense_weight"] for c in spy.calls} == {None}


def test_time_window_is_respected(index, embedder) -> None:
    lo = (BASE + timedelta(days=4)).timestamp()
    hi = (BASE + timedelta(days=10)).timestamp()
    plan = _plan(["what did Alice do"], time_from=lo, time_to=hi)
    candidates, relaxed = coarse_retrieve(index, embedder, "alice", plan, k=10)
    assert candidates
    assert all(lo <= c.record.float_time_stamp <= hi for c in candidates)
    assert relaxed == []


def test_empty_window_degrades_to_unfiltered(index, embedder) -> None:
    plan = _plan(["what did Alice do"], time_from=datetime(2020, 1, 1, tzinfo=UTC).timestamp(),
                 time_to=datetime(2020, 1, 31, tzinfo=UTC).timestamp())
    candidates, relaxed = coarse_retrieve(index, embedder, "alice", plan, k=5)
    assert len(candidates) == 10
    assert relaxed == ["time"]


def test_soft_window_does_not_filter(index, embedder) -> None:
    lo = (BASE + timedelta(days=20)).timestamp()
    plan = _plan(["Alice's dog Biscuit"], time_from=lo, time_to=REF.timestamp(), time_strict=False)
    candidates, _relaxed = coarse_retrieve(index, embedder, "alice", plan, k=5)
    assert any(c.record.float_time_stamp < lo for c in candidates)


def test_speaker_filter_only_when_hard(index, embedder) -> None:
    hard = _plan(["what did Tom say about Alice"], speakers=["Tom"], speaker_filter=True)
    got, relaxed = coarse_retrieve(index, embedder, "alice", hard, k=5)
    assert got and all(c.record.speaker_name == "Tom" for c in got)
    soft = _plan(["what did Tom say about Alice"], speakers=["Tom"], speaker_filter=False)
    got, relaxed = coarse_retrieve(index, embedder, "alice", soft, k=5)
    assert {c.record.speaker_name for c in got} > {"Tom"}
    nobody = _plan(["what did Zed say"], speakers=["Zed"], speaker_filter=True)
    got, relaxed = coarse_retrieve(index, embedder, "alice", nobody, k=3)
    assert got and relaxed == ["speakers"]


def test_route_tier_and_fallback_when_tier_is_empty(index, embedder) -> None:
    plan = QueryPlan(query="dogs", hqs=[HypotheticalQuery(text="dogs and training", route="ltm")])
    got, relaxed = coarse_retrieve(index, embedder, "alice", plan, k=5)
    assert got and all(c.record.tier == "ltm" for c in got)
    bob_plan = QueryPlan(query="pets", hqs=[HypotheticalQuery(text="pets", route="ltm")])
    got, relaxed = coarse_retrieve(index, embedder, "bob", bob_plan, k=5)  # bob has no LTM at all
    assert got and all(c.record.user_id == "bob" for c in got)
    assert relaxed == ["tier"]


def test_caller_filter_is_kept(index, embedder) -> None:
    only = _record("alice", 0, *ALICE_FACTS[0]).id
    plan = _plan(["anything"])
    got, _relaxed = coarse_retrieve(index, embedder, "alice", plan, k=5, base_filter=IndexFilter(ids=[only]))
    assert [c.record.id for c in got] == [only]


# -- isolation on every path ---------------------------------------------------------------------

def _script(stage: str, messages: list[dict]) -> str:
    if stage == "plan":
        return json.dumps({"queries": [{"text": "someone adopted a pet", "route": "mtm"},
                                       {"text": "pottery class", "route": "ltm"}],
                           "keywords": ["Biscuit", "Alice", "pottery"], "complexity": "moderate",
                           "speakers": ["Alice"], "entities": ["Alice"]})
    if stage == "select":
        return json.dumps({"ids": [1, 2, 3, 99, -1]})
    raise AssertionError(stage)


@pytest.mark.parametrize("planner_kind", ["rules", "llm"])
@pytest.mark.parametrize("selector_kind", ["rules", "llm"])
def test_user_isolation_on_every_path(index, embedder, planner_kind: str, selector_kind: str) -> None:
    llm = ScriptedLLM(_script)
    planner = RulePlanner() if planner_kind == "rules" else LLMPlanner(llm, RulePlanner())
    selector = RuleSelector() if selector_kind == "rules" else LLMSelector(llm, RuleSelector())
    pipe = ReadPipeline(index, embedder, planner, selector)
    alice_ids = {_record("alice", i, *f).id for i, f in enumerate(ALICE_FACTS)}
    # Questions aimed squarely at Alice's memories, asked in Bob's scope.
    for q in ["Did Alice adopt Biscuit the golden retriever?", "What did Tom tell Alice last month?",
              "What did Alice say about the Alps in May 2023?"]:
        result = pipe.search(q, "bob", reference_time=REF, known_speakers=["Alice", "Tom"])
        assert result.hits
        assert all(h.record.user_id == "bob" for h in result.hits)
        assert not alice_ids & {h.record.id for h in result.hits}
    if planner_kind == "llm" or selector_kind == "llm":
        assert llm.calls  # the LLM path really ran


# -- pipeline ------------------------------------------------------------------------------------

def test_pipeline_finds_the_memory_and_records_latency(index, embedder) -> None:
    usage = UsageTracker()
    pipe = ReadPipeline(index, embedder, RulePlanner(), RuleSelector(), usage)
    result = pipe.search("What is the name of Alice's dog?", "alice", reference_time=REF)
    assert result.plan.source == "rules"
    assert len(result.hits) == result.plan.k == 5
    assert "Biscuit" in result.hits[0].record.memory
    memories = [h.record.memory for h in result.hits]
    assert sum("golden retriever puppy" in m for m in memories) == 1  # the near-duplicate is dropped
    for stage in ("search.plan", "search.embed", "search.retrieve", "search.select", "search"):
        assert usage.get("latency", stage).calls == 1
    hits = [to_hit(h) for h in result.hits]
    assert hits[0].source_turn_ids and hits[0].id == result.hits[0].record.id
    lines = render_context(hits).splitlines()
    headers = [line for line in lines if line.startswith("[")]
    assert headers and len(lines) == 5 + len(headers)  # one line per (one-line) memory, under time headers
    assert all(h.memory in lines for h in hits)
    assert context_tokens(hits) > 20


def test_pipeline_time_question_stays_in_window(index, embedder) -> None:
    pipe = ReadPipeline(index, embedder, RulePlanner(), RuleSelector())
    ref = BASE + timedelta(days=13)  # a Sunday; "last week" = days 4..10 after BASE (Mon 8 – Sun 14 May)
    result = pipe.search("What did Alice do last week?", "alice", reference_time=ref)
    assert result.plan.has_window and result.relaxed == []
    assert result.hits
    assert all(result.plan.time_from <= h.record.float_time_stamp <= result.plan.time_to
               for h in result.hits)
