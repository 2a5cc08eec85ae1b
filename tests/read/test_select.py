"""Stage-2 selection: rules (fusion + MMR + time consistency) and the LLM selector.

The LLM here is ``ScriptedLLM``, a scripted fake (not a model) that goes through the real
repair/validate/retry path of the LLM client.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from dialogmem import LLMTimeoutError, MemoryRecord
from dialogmem._models import LocalEmbedder, ScriptedLLM
from dialogmem._read import Candidate, HypotheticalQuery, LLMSelector, QueryPlan, RuleSelector

BASE = datetime(2023, 5, 1, tzinfo=UTC)

TEXTS = [
    "Anna adopted a golden retriever puppy named Biscuit",
    "Anna adopted a golden retriever puppy called Biscuit",  # near-duplicate of 0
    "Anna adopted a golden retriever puppy named Biscuit!",  # near-duplicate of 0
    "Biscuit learned to fetch a frisbee in the park",
    "Anna bought a red bicycle",
    "Ben moved to Berlin for work",
    "Anna cooked lasagna on Sunday",
    "Anna took Biscuit to the vet for vaccines",
]


def _candidates(texts: list[str] = TEXTS, *, vectors: np.ndarray | None = None) -> list[Candidate]:
    out = []
    for i, text in enumerate(texts):
        ts = BASE + timedelta(days=i)
        rec = MemoryRecord(id=str(uuid.uuid5(uuid.NAMESPACE_URL, text)), user_id="u", memory=text,
                           time_stamp=ts.isoformat(), float_time_stamp=ts.timestamp(),
                           weekday=ts.strftime("%a"), speaker_name="Anna",
                           created_at=ts.timestamp(), updated_at=ts.timestamp())
        out.append(Candidate(record=rec, score=1.0 / (60 + i), rank=i,
                             vector=None if vectors is None else vectors[i]))
    return out


def _plan(**kw) -> QueryPlan:
    return QueryPlan(query="What is Anna's dog called?",
                     hqs=[HypotheticalQuery(text="What is Anna's dog called?")],
                     keywords=["anna", "dog", "called"], **kw)


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.mark.parametrize("with_vectors", [False, True])
def test_mmr_removes_near_duplicates(embedder, with_vectors: bool) -> None:
    vectors = embedder.embed(TEXTS) if with_vectors else None
    picked = RuleSelector().select("What is Anna's dog called?", _plan(), _candidates(vectors=vectors), 4)
    texts = [p.record.memory for p in picked]
    assert len(texts) == 4
    assert sum("golden retriever puppy" in t for t in texts) == 1
    assert texts[0].startswith("Anna adopted a golden retriever")


def test_duplicates_fill_in_when_nothing_else_is_left() -> None:
    picked = RuleSelector().select("q", _plan(), _candidates(TEXTS[:3]), 3)
    assert len(picked) == 3


def test_rule_selector_is_deterministic_and_within_candidates() -> None:
    cands = _candidates()
    ids = {c.record.id for c in cands}
    first = RuleSelector().select("What is Anna's dog called?", _plan(), cands, 5)
    for _ in range(3):
        again = RuleSelector().select("What is Anna's dog called?", _plan(), list(reversed(cands)), 5)
        assert [h.record.id for h in again] == [h.record.id for h in first]
    assert {h.record.id for h in first} <= ids
    assert RuleSelector().select("q", _plan(), [], 5) == []


def test_time_consistency_prefers_the_window() -> None:
    cands = _candidates(["Anna walked the dog", "Anna's dog went for a walk", "Ben cooked soup",
                         "Ben fixed his car"])
    inside = cands[1].record.float_time_stamp
    plan = _plan(time_from=inside - 1, time_to=inside + 1)
    assert RuleSelector().select("q", plan, cands, 1)[0].record.id == cands[1].record.id
    assert RuleSelector().select("q", _plan(), cands, 1)[0].record.id == cands[0].record.id
    soft = _plan(time_from=inside - 1, time_to=inside + 1, time_strict=False)  # bonus only
    assert RuleSelector().select("q", soft, cands, 1)[0].record.id == cands[0].record.id


def test_keyword_overlap_and_view_agreement_raise_relevance() -> None:
    cands = _candidates(["Anna bought a red bicycle", "Ben moved to Berlin"])
    cands[0].score = cands[1].score  # equal retrieval scores
    cands[1].views = 2  # but the second was found by both views
    plan = QueryPlan(query="q", hqs=[HypotheticalQuery(text="a"), HypotheticalQuery(text="b")])
    assert RuleSelector().select("q", plan, cands, 1)[0].record.memory == "Ben moved to Berlin"
    plan_kw = plan.model_copy(update={"keywords": ["bicycle", "red"]})
    cands[1].views = 1
    assert RuleSelector().select("q", plan_kw, cands, 1)[0].record.memory == "Anna bought a red bicycle"


# -- LLM selector --------------------------------------------------------------------------------

def test_llm_selector_keeps_only_listed_numbers_in_its_order() -> None:
    cands = _candidates()
    llm = ScriptedLLM([json.dumps({"ids": [4, 42, 1, 4, 0, -3, 8]})])
    picked = LLMSelector(llm, RuleSelector()).select("What is Anna's dog called?", _plan(), cands, 2)
    assert [p.record.id for p in picked] == [cands[3].record.id, cands[0].record.id]
    assert [p.record.memory for p in picked] == [cands[3].record.memory, cands[0].record.memory]
    prompt = llm.calls[0].messages[-1]["content"]
    assert "[1] " in prompt and f"[{len(cands)}] " in prompt and "Anna: " in prompt
    assert llm.usage.get("llm", "select").fallbacks == 0


@pytest.mark.parametrize("bad", [
    ["no idea, sorry"] * 3,  # never JSON
    [json.dumps({"ids": [77, 0, -1]})],  # only unknown numbers
    [json.dumps({"ids": []})],  # nothing chosen
    [LLMTimeoutError("slow")],
])
def test_llm_selector_falls_back_to_rules(bad: list) -> None:
    cands = _candidates()
    llm = ScriptedLLM(bad, max_retries=2)
    picked = LLMSelector(llm, RuleSelector()).select("What is Anna's dog called?", _plan(), cands, 3)
    rules = RuleSelector().select("What is Anna's dog called?", _plan(), cands, 3)
    assert [p.record.id for p in picked] == [r.record.id for r in rules]
    assert {p.record.id for p in picked} <= {c.record.id for c in cands}
    assert llm.usage.get("llm", "select").fallbacks == 1


def _reference_mmr(rel: list[float], sim: np.ndarray, ids: list[str], k: int, lam: float, duplicate: float
                   ) -> list[int]:
    """MMR as the module docstring states it, written the plain way (one loop per pick)."""
    remaining = sorted(range(len(rel)), key=lambda i: (-rel[i], ids[i]))
    picked: list[int] = []
    duplicates: list[int] = []
    while remaining and len(picked) < k:
        def value(i: int) -> float:
            return lam * rel[i] - (1 - lam) * (max(float(sim[i, j]) for j in picked) if picked else 0.0)
        best = max(remaining, key=lambda i: (value(i), -remaining.index(i)))
        remaining.remove(best)
        if picked and max(float(sim[best, j]) for j in picked) >= duplicate:
            duplicates.append(best)
            continue
        picked.append(best)
    return picked + duplicates[: max(0, k - len(picked))]


@pytest.mark.parametrize("with_vectors", [False, True])
def test_rule_selector_matches_plain_mmr(with_vectors: bool) -> None:
    """The vectorised selection picks what the plain loop picks, in the same order, on random pools
    (ties, near-duplicates, negative cosines, k above and below the pool size)."""
    from dialogmem._read._select import relevance, similarity_matrix
    from dialogmem._text._words import content_tokens

    rng = np.random.default_rng(5)
    words = ["Anna", "Ben", "dog", "Biscuit", "park", "vet", "frisbee", "bicycle", "Berlin", "lasagna", "Sunday",
             "puppy", "golden", "retriever", "called", "named", "adopted"]
    selector = RuleSelector()
    for trial in range(60):
        n = int(rng.integers(1, 30))
        texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 9)))) + f" #{trial}.{i % 7}" for i in range(n)]
        vectors = rng.standard_normal((n, 6)).astype(np.float32) if with_vectors else None
        cands = _candidates(texts, vectors=vectors)
        for c in cands:
            c.score = float(rng.choice([0.016, 0.0161, 0.02, rng.random()]))
        plan = _plan()
        k = int(rng.integers(1, 35))
        rel = relevance(plan, cands)
        sim, cosine = similarity_matrix(cands)
        if not cosine:  # Jaccard of content-word sets
            sets = [set(content_tokens(c.record.memory)) for c in cands]
            plain = [[len(a & b) / len(a | b) if a | b else 0.0 for b in sets] for a in sets]
            np.fill_diagonal(plain_arr := np.asarray(plain, dtype=np.float32), 1.0)
            assert np.array_equal(sim, plain_arr)
        expected = _reference_mmr(rel, sim, [c.record.id for c in cands], k, selector.mmr_lambda,
                                  selector.duplicate_sim if cosine else selector.duplicate_jaccard)
        got = selector.select("q", plan, cands, k)
        assert [g.record.id for g in got] == [cands[i].record.id for i in expected]
        assert [g.score for g in got] == [round(rel[i], 6) for i in expected]
