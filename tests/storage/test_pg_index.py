"""The PostgreSQL index's own mechanics, on the real pgvector server (tests/pg_server.py): BM25 ranked on
the term rows with a bounded candidate list that widens when filters reject, document frequencies kept in
counters that follow every write, and the HNSW graph holding only the rows of scopes past ``exact_max``.
Edge, with the same points, is the reference for hits and scores."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import psycopg
import pytest

from dialogmem import MemoryRecord, StoreError
from dialogmem._store import EdgeIndex, IndexFilter, IndexPoint, PgIndex
from dialogmem._store import _postgres as pg_module
from dialogmem._store._filters import scope
from dialogmem._store._payload import RRF_K, dense_list

DIM = 384


def _record(user: str, text: str, **fields: object) -> MemoryRecord:
    base = dict(id=str(uuid.uuid4()), user_id=user, memory=text, time_stamp="2024-05-01T10:00:00",
                float_time_stamp=1_714_557_600.0, weekday="Wed", created_at=1_714_557_600.0,
                updated_at=1_714_557_600.0)
    return MemoryRecord(**(base | fields))  # type: ignore[arg-type]


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _put(indexes: list, records: list[MemoryRecord], seed: int = 0) -> np.ndarray:
    vecs = _unit(np.random.default_rng(seed), len(records))
    for idx in indexes:
        idx.upsert([IndexPoint(record=r, vector=v) for r, v in zip(records, vecs, strict=True)])
    return vecs


def _rows(url: str, schema: str, sql: str) -> list[tuple]:
    with psycopg.connect(url, options=f"-c search_path={schema},public") as conn:
        return conn.execute(sql).fetchall()


def _same(a: list, b: list) -> None:
    assert [round(h.score, 4) for h in a] == [round(h.score, 4) for h in b]
    assert {(round(h.score, 4), h.record.id) for h in a} == {(round(h.score, 4), h.record.id) for h in b}


@pytest.fixture
def pair(tmp_path: Path, pgvector_url: str, pgvector_schema: str) -> Iterator[tuple[EdgeIndex, PgIndex]]:
    edge = EdgeIndex(tmp_path / "edge", dim=DIM)
    pg = PgIndex.connect(pgvector_url, schema_name=pgvector_schema, dim=DIM)
    try:
        yield edge, pg
    finally:
        edge.close()
        pg.close()


def test_bm25_with_filters_that_reject_the_best_candidates_ranks_them_all(
        pair: tuple[EdgeIndex, PgIndex], monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the best-scored points are joined to their rows for the filters; when the filters leave
    fewer than the limit of a full candidate list, the search ranks every scored point instead: the
    answer is Edge's in every case (no filter, a filter passing some, a filter passing a few far down)."""
    monkeypatch.setattr(pg_module, "LEXICAL_CANDIDATES", 1)  # candidates = 4 x limit: 20 of 120 points
    edge, pg = pair
    things = ["garden", "garden roses", "garden roses tulips", "garden shed"]
    # every text of its own length: no two scores tie at a cut
    records = [_record("u1", " ".join([things[i % 4], *(f"w{i}x{j}" for j in range(i))]),
                       speaker_name="Ana" if i % 40 == 7 else "Bo",
                       tier="ltm" if i < 30 else "mtm") for i in range(120)]
    records += [_record("u2", "garden roses tulips everywhere") for _ in range(5)]
    _put([edge, pg], records)
    for flt in (None, IndexFilter(tier="ltm"), IndexFilter(speakers=["Ana"]), IndexFilter(speakers=["Nobody"])):
        for query in ("garden roses tulips", "shed", "tulips w47x3"):
            got_edge = edge.lexical_search("u1", query, limit=5, flt=flt)
            got_pg = pg.lexical_search("u1", query, limit=5, flt=flt)
            _same(got_edge, got_pg)
            assert all(h.record.user_id == "u1" for h in got_pg)
    assert len(pg.lexical_search("u1", "garden", limit=5, flt=IndexFilter(speakers=["Ana"]))) == 3


def test_document_frequencies_follow_every_write(pair: tuple[EdgeIndex, PgIndex], pgvector_url: str,
                                                 pgvector_schema: str, tmp_path: Path) -> None:
    """BM25's IDF reads each term's document frequency from counters: after upserts, a replaced text
    and a payload change of text the scores equal Edge's; after deletes and a user forgotten, the
    counters equal a count of the term rows and the scores equal those of an Edge index holding the
    points that are left (Edge itself keeps counting deleted points until it optimizes)."""
    edge, pg = pair
    records = [_record(f"u{i % 3}", t) for i, t in enumerate(
        ["apple pie recipe", "apple orchard visit", "pie contest", "orchard in autumn", "apple apple apple",
         "cider from the orchard", "the contest winner", "autumn leaves"])]
    _put([edge, pg], records)
    records[1] = records[1].model_copy(update={"memory": "a pear orchard visit"})
    _put([edge, pg], [records[1]], seed=3)
    for idx in (edge, pg):
        assert idx.set_payload(records[0].id, "u0", {"memory": "cherry pie recipe"})
    records[0] = records[0].model_copy(update={"memory": "cherry pie recipe"})
    queries = ("apple pie", "orchard", "cherry pear contest")
    for user in ("u0", "u1", "u2"):
        for query in queries:
            _same(edge.lexical_search(user, query, limit=5), pg.lexical_search(user, query, limit=5))
    assert pg.delete([records[4].id], "u1") == 1
    assert pg.delete_user("u2") > 0
    counted = _rows(pgvector_url, pgvector_schema, "SELECT term, count(*) FROM ix_terms GROUP BY term ORDER BY term")
    kept = _rows(pgvector_url, pgvector_schema,
                 "SELECT term, sum(df) FROM ix_df GROUP BY term HAVING sum(df) <> 0 ORDER BY term")
    assert counted and [(t, int(n)) for t, n in kept] == [(t, int(n)) for t, n in counted]
    left = EdgeIndex(tmp_path / "left", dim=DIM)
    try:
        _put([left], [r for i, r in enumerate(records) if i != 4 and r.user_id != "u2"])
        for user in ("u0", "u1", "u2"):
            for query in queries:
                _same(left.lexical_search(user, query, limit=5), pg.lexical_search(user, query, limit=5))
    finally:
        left.close()


def test_the_graph_holds_the_rows_of_scopes_past_exact_max(tmp_path: Path, pgvector_url: str,
                                                           pgvector_schema: str) -> None:
    """A scope is graphed by the write that takes it past ``exact_max`` (its earlier rows too); a smaller
    scope's rows stay out of the HNSW graph and are ranked exactly. Both answer the exact top."""
    pg = PgIndex.connect(pgvector_url, schema_name=pgvector_schema, dim=DIM, exact_max=50)
    try:
        big = [_record("big", f"note {i}") for i in range(80)]
        small = [_record("small", f"note {i}") for i in range(20)]
        vecs = np.concatenate([_put([pg], big[:40], seed=1), _put([pg], small, seed=2), _put([pg], big[40:], seed=3)])
        rows = dict(_rows(pgvector_url, pgvector_schema, "SELECT user_id, graphed FROM ix_users"))
        assert rows == {"big": True, "small": False}
        assert _rows(pgvector_url, pgvector_schema, "SELECT user_id, bool_and(graphed), bool_or(graphed) "
                     "FROM ix_points GROUP BY user_id ORDER BY user_id") == [("big", True, True),
                                                                             ("small", False, False)]
        mine = {"big": (big, np.concatenate([vecs[:40], vecs[60:]])), "small": (small, vecs[40:60])}
        for q in _unit(np.random.default_rng(4), 5):
            for user, (recs, vs) in mine.items():
                truth = [recs[i].id for i in np.argsort(-(vs @ q))[:5]]
                assert [h.record.id for h in pg.dense_search(user, q, limit=5)] == truth
    finally:
        pg.close()


def test_a_bulk_write_that_graphs_the_first_scope_builds_the_graph_after(
        pgvector_url: str, pgvector_schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first scope graphed by a large write: the graph index is dropped, the rows written, the graph
    built once over them (in the same transaction); every row is in it and searches find the exact top."""
    monkeypatch.setattr(pg_module, "BULK_GRAPH", 100)
    monkeypatch.setattr(pg_module, "UPSERT_CHUNK", 70)  # several statements a write
    pg = PgIndex.connect(pgvector_url, schema_name=pgvector_schema, dim=DIM, exact_max=50)
    try:
        recs = [_record("u1", f"note {i}") for i in range(150)]
        vecs = _put([pg], recs, seed=1)
        assert _rows(pgvector_url, pgvector_schema, "SELECT count(*) FILTER (WHERE graphed), count(*) "
                     "FROM ix_points") == [(150, 150)]
        assert _rows(pgvector_url, pgvector_schema, "SELECT indexdef LIKE '%hnsw%WHERE graphed%' FROM pg_indexes "
                     "WHERE schemaname = current_schema() AND indexname = 'ix_points_graph'") == [(True,)]
        for q in _unit(np.random.default_rng(4), 5):
            truth = [recs[i].id for i in np.argsort(-(vecs @ q))[:5]]
            assert [h.record.id for h in pg.dense_search("u1", q, limit=5)] == truth
        more = [_record("u1", f"later {i}") for i in range(3)]  # graphed now: inserted into the graph
        _put([pg], more, seed=9)
        graphed = _rows(pgvector_url, pgvector_schema, "SELECT bool_and(graphed), count(*) FROM ix_points")
        assert graphed == [(True, 153)]
    finally:
        pg.close()


def test_a_schema_from_before_is_converted_when_opened(pgvector_url: str, pgvector_schema: str) -> None:
    """A schema written before the graph held only large scopes (one HNSW index over every row, no
    graphed marks, no frequency counters) opens with its points kept: counters counted from its term
    rows, its large scopes graphed, and searches answer as before."""
    pg = PgIndex.connect(pgvector_url, schema_name=pgvector_schema, dim=DIM, exact_max=10)
    recs = [_record("big" if i % 4 else "small", f"apple note {i}") for i in range(40)]
    vecs = _put([pg], recs, seed=1)
    before = [(h.record.id, round(h.score, 4)) for h in pg.lexical_search("big", "apple note", limit=5)]
    pg.close()
    with psycopg.connect(pgvector_url, autocommit=True, options=f"-c search_path={pgvector_schema},public") as conn:
        conn.execute("DROP INDEX ix_points_graph")
        conn.execute("DROP TABLE ix_df")
        conn.execute("ALTER TABLE ix_points DROP COLUMN graphed")
        conn.execute("ALTER TABLE ix_users DROP COLUMN graphed")
        conn.execute(f"ALTER TABLE ix_points ALTER COLUMN dense TYPE vector({DIM}) USING dense::vector({DIM})")
        conn.execute("CREATE INDEX ix_points_dense ON ix_points USING hnsw (dense vector_cosine_ops)")
    pg = PgIndex.connect(pgvector_url, schema_name=pgvector_schema, dim=DIM, exact_max=10)
    try:
        assert pg.count("big") == 30 and pg.count("small") == 10
        assert dict(_rows(pgvector_url, pgvector_schema, "SELECT user_id, graphed FROM ix_users")) == {
            "big": True, "small": False}
        assert _rows(pgvector_url, pgvector_schema, "SELECT count(*) FROM pg_indexes "
                     "WHERE schemaname = current_schema() AND indexname = 'ix_points_dense'") == [(0,)]
        assert [(h.record.id, round(h.score, 4)) for h in pg.lexical_search("big", "apple note", limit=5)] == before
        mine = np.array([i for i in range(40) if i % 4])
        q = _unit(np.random.default_rng(4), 1)[0]
        truth = [recs[i].id for i in mine[np.argsort(-(vecs[mine] @ q))[:5]]]
        assert [h.record.id for h in pg.dense_search("big", q, limit=5)] == truth
    finally:
        pg.close()


def test_a_search_is_one_round_trip_and_fuses_as_rrf_fusion(pgvector_url: str, pgvector_schema: str,
                                                            tmp_path: Path) -> None:
    """Each search — dense, BM25, hybrid by RRF with its records, the convex fusion's two lists — is one
    round trip to the server (one ``ReadyForQuery`` in libpq's protocol trace), for a scope ranked
    exactly and for a graphed one alike; the RRF fused in SQL is ``rrf_fusion``'s, ids and scores."""
    from psycopg import pq
    from psycopg_pool import ConnectionPool

    from dialogmem._store._fusion import rrf_fusion

    trace = tmp_path / "trace.txt"
    with psycopg.connect(pgvector_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{pgvector_schema}"')
    pool = ConnectionPool(pgvector_url, min_size=1, max_size=1, open=False,
                          kwargs={"autocommit": True, "options": f"-c search_path={pgvector_schema},public"})
    pool.open(wait=True)
    pg = PgIndex(pool, dim=DIM, exact_max=50, owns_pool=True)

    def round_trips(search: Callable[..., object], *args: object, **kwargs: object) -> int:
        with pool.connection() as conn:  # the pool's one connection, the search's too
            pass
        with trace.open("w") as fh:
            conn.pgconn.trace(fh.fileno())
            conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
            try:
                search(*args, **kwargs)
            finally:
                conn.pgconn.untrace()
        return trace.read_text().count("ReadyForQuery")

    try:
        words = ["garden", "roses", "shed", "tulips", "autumn", "orchard"]
        for user, n in (("big", 80), ("small", 20)):
            _put([pg], [_record(user, f"{words[i % 6]} {words[(i * 5) % 6]} note {i}") for i in range(n)], seed=n)
        assert dict(_rows(pgvector_url, pgvector_schema, "SELECT user_id, graphed FROM ix_users")) == {
            "big": True, "small": False}
        for user in ("big", "small"):
            for q, text in zip(_unit(np.random.default_rng(5), 3), ("garden roses", "shed autumn", "orchard"),
                               strict=True):
                assert round_trips(pg.dense_search, user, q, limit=5) == 1
                assert round_trips(pg.lexical_search, user, text, limit=5) == 1
                assert round_trips(pg.hybrid_search, user, q, text, limit=5, prefetch_limit=20) == 1
                assert round_trips(pg.hybrid_search, user, q, text, limit=5, dense_weight=0.4) == 1
                fused = pg.hybrid_search(user, q, text, limit=5, prefetch_limit=20)
                want = rrf_fusion([h.record.id for h in pg.dense_search(user, q, limit=20)],
                                  [h.record.id for h in pg.lexical_search(user, text, limit=20)], k=RRF_K, limit=5)
                assert [(h.record.id, round(h.score, 12)) for h in fused] == [(i, round(s, 12)) for i, s in want]
                assert all(h.record.user_id == user and h.record.memory for h in fused)
    finally:
        pg.close()



def test_the_vector_adapters_are_registered_once_a_connection(pgvector_url: str, pgvector_schema: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool hands out the same connection again: pgvector's types are registered on it at its first
    use, not at every search or write (each registration rebuilt the connection's adapters map)."""
    from psycopg_pool import ConnectionPool

    with psycopg.connect(pgvector_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{pgvector_schema}"')
    pool = ConnectionPool(pgvector_url, min_size=1, max_size=1, open=False,
                          kwargs={"autocommit": True, "options": f"-c search_path={pgvector_schema},public"})
    pool.open(wait=True)
    pg = PgIndex(pool, dim=DIM, owns_pool=True)
    calls: list[object] = []
    register = pg._vector_type.register
    monkeypatch.setattr(pg._vector_type, "register", lambda conn: (calls.append(conn), register(conn))[1])
    try:
        _put([pg], [_record("u1", f"note {i}") for i in range(5)])
        for q in _unit(np.random.default_rng(2), 4):
            assert len(pg.hybrid_search("u1", q, "note", limit=3, dense_weight=0.5)) == 3
        assert len(calls) == 1 and len({id(c) for c in calls}) == 1
    finally:
        pg.close()


def _zipf_text(rng: np.random.Generator, vocabulary: int, words: int) -> str:
    """Words of a Zipf-distributed vocabulary (s = 1.1, as in English text): a few common, most rare."""
    ranks = np.minimum(rng.zipf(1.1, size=words), vocabulary)
    return " ".join(f"v{int(r)}x" for r in ranks)


def _sc_ran(url: str, schema: str, plan: pg_module._Plan) -> bool:
    """Whether the statement summed every term row of the scope (its ``sc`` step ran)."""
    with psycopg.connect(url, options=f"-c search_path={schema},public") as conn:
        (doc,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + str(plan.sql), plan.args).fetchone()

    def nodes(node: dict) -> Iterator[dict]:
        yield node
        for child in node.get("Plans", ()):
            yield from nodes(child)

    return any(n.get("Subplan Name") == "CTE sc" and n.get("Actual Loops", 0) > 0 for n in nodes(doc[0]["Plan"]))


def test_bm25_reads_the_best_rows_of_each_term_and_ranks_as_the_full_sum(
        pair: tuple[EdgeIndex, PgIndex], pgvector_url: str, pgvector_schema: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a corpus with a natural vocabulary (Zipf-distributed words, texts of 4-30 words, 3,000 points
    in one scope), a BM25 search reads each query term's best rows and scores the points met exactly;
    its top equals Edge's full BM25 (scores and ids) for every query, and for most queries the bound
    held, so the scope's term rows were never all summed (the statement's ``sc`` step did not run)."""
    monkeypatch.setattr(pg_module, "HEAD_SKIP", 0)  # the bound tried at any size (3,000 points: often skipped)
    edge, pg = pair
    rng = np.random.default_rng(11)
    records = [_record("big", _zipf_text(rng, 5000, int(rng.integers(4, 31)))) for _ in range(3000)]
    records += [_record("other", _zipf_text(rng, 5000, int(rng.integers(4, 31)))) for _ in range(300)]
    _put([edge, pg], records)
    skipped = 0
    queries = [_zipf_text(rng, 400, int(rng.integers(2, 7))) for _ in range(30)]
    for query in queries:
        for limit in (5, 10):
            want, got = edge.lexical_search("big", query, limit=limit), pg.lexical_search("big", query, limit=limit)
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-3)
            cut = want[-1].score + 1e-3 if want else 0.0  # above the last score: no tie left to either side
            assert {h.record.id for h in got if h.score > cut} == {h.record.id for h in want if h.score > cut}
        plan = pg_module._lexical_plan(pg_module.FilterSpec(must=(pg_module.Match("user_id", "big"),)),
                                       pg._bm25.query(query), 10, False)
        skipped += not _sc_ran(pgvector_url, pgvector_schema, plan)
    assert skipped >= len(queries) * 2 // 3, skipped


def _ran(pg: PgIndex, plan: pg_module._Plan) -> set[str]:
    """The steps of the statement that ran: CTE names and the indexes it scanned."""
    with pg._conn() as conn, conn.transaction():
        for name, value in (plan.settings or {}).items():
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))
        (doc,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + str(plan.sql), plan.args).fetchone()

    def nodes(node: dict) -> Iterator[dict]:
        yield node
        for child in node.get("Plans", ()):
            yield from nodes(child)

    return {n.get("Subplan Name") or n.get("Index Name") or "" for n in nodes(doc[0]["Plan"])
            if n.get("Actual Loops", 0) > 0}


def _rows_out(pg: PgIndex, plan: pg_module._Plan, step: str) -> int:
    """The most rows a step of the statement (a CTE's name, or a node type) returned, by EXPLAIN ANALYZE."""
    with pg._conn() as conn:
        (doc,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + str(plan.sql), plan.args).fetchone()

    def nodes(node: dict) -> Iterator[dict]:
        yield node
        for child in node.get("Plans", ()):
            yield from nodes(child)

    return max((int(n.get("Actual Rows", 0)) for n in nodes(doc[0]["Plan"])
                if step in (n.get("Subplan Name"), n.get("Node Type"))), default=0)


def test_a_filter_few_rows_pass_ranks_those_rows_alone(
        pair: tuple[EdgeIndex, PgIndex], pgvector_url: str, pgvector_schema: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A graphed scope searched with a filter besides the user (a time window, a speaker) that fewer than
    ``FEW_ROWS`` rows pass: its rows are read through the filter and ranked exactly (no HNSW walk), and BM25
    scores their terms alone (the scope's term rows are not all summed). Hits and scores are Edge's, with
    that path and without it (``FEW_ROWS`` below the rows passing), and for a window no row falls in."""
    edge, pg = pair
    pg.exact_max = 50
    day = 86_400.0
    words = ["garden", "roses", "tulips", "shed", "violin", "lesson", "beach", "trip"]
    records = [_record("big", " ".join(words[(i * k) % 8] for k in range(1, 2 + i % 5)),
                       float_time_stamp=1_700_000_000.0 + i * day, speaker_name="Ana" if i % 30 == 0 else "Bo")
               for i in range(400)]
    vecs = _put([edge, pg], records, seed=5)
    assert _rows(pgvector_url, pgvector_schema, "SELECT graphed FROM ix_users WHERE user_id = 'big'") == [(True,)]
    filters = {"window": IndexFilter(time_from=1_700_000_000.0 + 100 * day, time_to=1_700_000_000.0 + 130 * day),
               "speaker": IndexFilter(speakers=["Ana"]),
               "empty window": IndexFilter(time_from=1_900_000_000.0, time_to=1_900_100_000.0)}
    queries = _unit(np.random.default_rng(6), 3)
    for few_rows in (1_000, 5):  # 5: fewer than pass any non-empty filter here, the walk and the full sum
        monkeypatch.setattr(pg_module, "FEW_ROWS", few_rows)
        for name, flt in filters.items():
            passing = [i for i, r in enumerate(records) if flt.time_from is None or
                       flt.time_from <= r.float_time_stamp <= flt.time_to]
            passing = [i for i in passing if not flt.speakers or records[i].speaker_name in flt.speakers]
            for q in queries:
                truth = [records[i].id for i in sorted(passing, key=lambda i: -float(vecs[i] @ q))[:5]]
                assert [h.record.id for h in pg.dense_search("big", q, limit=5, flt=flt)] == truth, name
            for text in ("garden roses", "violin lesson beach"):
                want, got = (x.lexical_search("big", text, limit=5, flt=flt) for x in (edge, pg))
                assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4), name
                cut = want[-1].score + 1e-4 if want else 0.0  # the texts repeat: ties at the cut go either way
                assert {h.record.id for h in got if h.score > cut} == {h.record.id for h in want if h.score > cut}
                if few_rows == 1_000:
                    spec = scope("big", flt)
                    lexical = pg_module._lexical_plan(spec, pg._bm25.query(text), 5, False)
                    dense = pg._dense_plan(spec, dense_list(queries[0], DIM), 5, False)
                    steps = _ran(pg, lexical) | _ran(pg, dense)
                    assert "CTE sc" not in steps and "ix_points_graph" not in steps, (name, steps)


def test_bm25_sums_a_small_scope_without_trying_the_bound(
        pair: tuple[EdgeIndex, PgIndex], pgvector_url: str, pgvector_schema: str) -> None:
    """A scope whose rows of the query's terms are few beside what the bound would read of them (at most
    ``HEAD_SKIP`` times) sums them all at once: the head of each term is not read; hits are Edge's."""
    edge, pg = pair
    rng = np.random.default_rng(12)
    records = [_record("u1", _zipf_text(rng, 300, int(rng.integers(4, 20)))) for _ in range(600)]
    _put([edge, pg], records)
    wider = 0
    for query in (_zipf_text(rng, 100, 3) for _ in range(5)):
        want, got = edge.lexical_search("u1", query, limit=10), pg.lexical_search("u1", query, limit=10)
        assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-3)
        cut = want[-1].score + 1e-3 if want else 0.0
        assert {h.record.id for h in got if h.score > cut} == {h.record.id for h in want if h.score > cut}
        plan = pg_module._lexical_plan(pg_module.FilterSpec(must=(pg_module.Match("user_id", "u1"),)),
                                       pg._bm25.query(query), 10, False)
        steps = _ran(pg, plan)
        assert "CTE sc" in steps and "CTE head" not in steps, steps
        # the sum keeps the best candidates as it is read: no list of every scored point is stored
        scored = _rows_out(pg, plan, "Aggregate")
        assert _rows_out(pg, plan, "CTE sc") == min(scored, pg_module.candidates(10)) > 0
        wider += scored > pg_module.candidates(10)
    assert wider  # some query scored more points than the candidates kept


def _visibility(url: str, schema: str) -> dict[str, tuple[int, int, float]]:
    """(pages all-visible, pages, tuples) of the index's tables, as VACUUM and ANALYZE leave them in pg_class."""
    rows = _rows(url, schema, "SELECT relname, relallvisible, relpages, reltuples FROM pg_class "
                 "WHERE relnamespace = current_schema()::regnamespace AND relname IN ('ix_points', 'ix_terms')")
    return {r[0]: (int(r[1]), int(r[2]), float(r[3])) for r in rows}


def test_a_bulk_write_leaves_the_tables_vacuumed_and_analyzed(pgvector_url: str, pgvector_schema: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A write of ``VACUUM_AFTER`` points or more, once committed, is followed by ``VACUUM (ANALYZE)``:
    every page of the points and term rows is marked all-visible (an index-only scan of the term rows
    reads no heap) and the planner's row counts are the tables' own; a small write leaves that to
    autovacuum. A rebuild (``rebuilding``: one transaction) vacuums after its commit."""
    monkeypatch.setattr(pg_module, "VACUUM_AFTER", 100)
    pg = PgIndex.connect(pgvector_url, schema_name=pgvector_schema, dim=DIM, exact_max=50)
    try:
        _put([pg], [_record("u1", f"apple note {i}") for i in range(10)], seed=1)
        assert all(v[0] == 0 for v in _visibility(pgvector_url, pgvector_schema).values())
        records = [_record("u1", f"pear note number {i}") for i in range(150)]
        _put([pg], records, seed=2)
        seen = _visibility(pgvector_url, pgvector_schema)
        assert seen["ix_points"][0] == seen["ix_points"][1] > 0 and seen["ix_points"][2] == 160
        assert seen["ix_terms"][0] == seen["ix_terms"][1] > 0 and seen["ix_terms"][2] == 10 * 3 + 150 * 4
        with pg.rebuilding():
            pg.reset()
            pg.upsert([IndexPoint(record=r, vector=v) for r, v in zip(records, _unit(np.random.default_rng(3), 150),
                                                                        strict=True)])
        seen = _visibility(pgvector_url, pgvector_schema)
        assert seen["ix_points"][0] == seen["ix_points"][1] > 0 and seen["ix_points"][2] == 150
        assert len(pg.lexical_search("u1", "pear number", limit=5)) == 5
    finally:
        pg.close()


def test_a_vacuum_that_fails_after_a_bulk_write_leaves_the_write_committed(
        pgvector_url: str, pgvector_schema: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The VACUUM after a bulk write runs once the write has committed: if the server refuses it (here a
    lock timeout, injected on the VACUUM statement alone), the write is not reported failed — it is there,
    searchable — and the refusal is logged for autovacuum to make up."""
    monkeypatch.setattr(pg_module, "VACUUM_AFTER", 100)
    vacuum = PgIndex._vacuum_if_due
    refused: list[str] = []

    class Refusing:
        def __init__(self, conn: object) -> None:
            self._conn = conn

        def execute(self, sql: str, *args: object) -> object:
            if sql.startswith("VACUUM"):
                refused.append(sql)
                raise psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")
            return self._conn.execute(sql, *args)  # type: ignore[attr-defined]

    monkeypatch.setattr(PgIndex, "_vacuum_if_due", lambda self, conn: vacuum(self, Refusing(conn)))
    pg = PgIndex.connect(pgvector_url, schema_name=pgvector_schema, dim=DIM, exact_max=50)
    try:
        with caplog.at_level("WARNING", logger=pg_module.log.name):
            _put([pg], [_record("u1", f"pear note number {i}") for i in range(150)], seed=2)
        assert refused and "was not vacuumed" in caplog.text
        assert _rows(pgvector_url, pgvector_schema, "SELECT count(*) FROM ix_points")[0][0] == 150
        assert len(pg.lexical_search("u1", "pear number", limit=5)) == 5
    finally:
        pg.close()


def test_a_speaker_filter_reads_the_speakers_rows_through_their_index(
        pair: tuple[EdgeIndex, PgIndex], pgvector_url: str, pgvector_schema: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A graphed scope searched for a speaker who said little: the count that picks the exact ranking of
    the few rows, and that ranking, read the speaker's rows through ``ix_points_speaker`` (not every row of
    the scope through the user index); hits and scores are Edge's."""
    monkeypatch.setattr(pg_module, "VACUUM_AFTER", 100)  # analysed: the planner knows the speaker is rare
    edge, pg = pair
    pg.exact_max = 50
    words = ["garden", "roses", "tulips", "shed", "violin", "lesson", "beach", "trip"]
    records = [_record("big", f"{words[i % 8]} {words[(i * 3) % 8]} note {i}",
                       speaker_name="Ana" if i % 200 == 0 else "Bo") for i in range(2000)]
    vecs = _put([edge, pg], records, seed=7)
    flt = IndexFilter(speakers=["Ana"])
    spec = scope("big", flt)
    q = _unit(np.random.default_rng(8), 1)[0]
    ana = [i for i, r in enumerate(records) if r.speaker_name == "Ana"]
    truth = [records[i].id for i in sorted(ana, key=lambda i: -float(vecs[i] @ q))[:5]]
    assert [h.record.id for h in pg.dense_search("big", q, limit=5, flt=flt)] == truth
    want, got = (x.lexical_search("big", "garden roses", limit=5, flt=flt) for x in (edge, pg))
    assert len(got) == 5 and [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-4)
    cut = want[-1].score + 1e-4  # the texts repeat: ties at the cut go either way
    assert {h.record.id for h in got if h.score > cut} == {h.record.id for h in want if h.score > cut}
    assert all(h.record.speaker_name == "Ana" for h in got)
    for plan in (pg_module._lexical_plan(spec, pg._bm25.query("garden roses"), 5, False),
                 pg._dense_plan(spec, dense_list(q, DIM), 5, False)):
        steps = _ran(pg, plan)
        assert "ix_points_speaker" in steps and "ix_points_graph" not in steps and "CTE sc" not in steps, steps


def test_vectors_of_a_schema_from_before_become_halfvec(tmp_path: Path, pgvector_url: str,
                                                         pgvector_schema: str) -> None:
    """An index whose vectors are pgvector's ``vector`` (float32), with its graph of that operator class,
    is converted by a read-write opening: the column becomes ``halfvec`` (the values were half precision
    already), the graph is built again, and dense, BM25 and hybrid hits and scores are those of before
    and Edge's. A read-only opening refuses the old schema with a clear error instead of misreading it."""
    from psycopg_pool import ConnectionPool

    edge = EdgeIndex(tmp_path / "edge", dim=DIM)
    pg = PgIndex.connect(pgvector_url, schema_name=pgvector_schema, dim=DIM, exact_max=30)
    try:
        records = [_record("big" if i % 3 else "small", f"apple pear note {i} " + "x" * (i % 7)) for i in range(90)]
        vecs = _put([edge, pg], records, seed=1)
        queries = _unit(np.random.default_rng(4), 3)

        def answers(idx: EdgeIndex | PgIndex) -> list:
            out = []
            for user in ("big", "small"):
                for q in queries:
                    out.append([(h.record.id, round(h.score, 4)) for h in idx.dense_search(user, q, limit=5)])
                    out.append([round(h.score, 4) for h in idx.lexical_search(user, "apple note 7", limit=5)])
                    out.append([h.record.id for h in idx.hybrid_search(user, q, "pear 11", limit=5)])
            return out

        before = answers(pg)
    finally:
        pg.close()
    with psycopg.connect(pgvector_url, autocommit=True, options=f"-c search_path={pgvector_schema},public") as conn:
        conn.execute("DROP INDEX ix_points_graph")
        conn.execute(f"ALTER TABLE ix_points ALTER COLUMN dense TYPE vector({DIM}) USING dense::vector({DIM})")
        conn.execute("CREATE INDEX ix_points_graph ON ix_points USING hnsw (dense vector_cosine_ops) WHERE graphed")
    pool = ConnectionPool(pgvector_url, min_size=1, max_size=1, open=False,
                          kwargs={"autocommit": True, "options": f"-c search_path={pgvector_schema},public"})
    pool.open(wait=True)
    try:
        with pytest.raises(StoreError, match="open the store read-write once"):
            PgIndex(pool, dim=DIM, read_only=True)
    finally:
        pool.close()
    pg = PgIndex.connect(pgvector_url, schema_name=pgvector_schema, dim=DIM, exact_max=30)
    try:
        assert _rows(pgvector_url, pgvector_schema, "SELECT format_type(atttypid, atttypmod), attstorage FROM "
                     "pg_attribute WHERE attrelid = 'ix_points'::regclass AND attname = 'dense'") == [
            (f"halfvec({DIM})", "p")]
        assert _rows(pgvector_url, pgvector_schema, "SELECT indexdef LIKE '%halfvec_cosine_ops%WHERE graphed%' "
                     "FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'ix_points_graph'") == [
            (True,)]
        assert pg.count("big") == 60 and answers(pg) == before
        got, want = answers(pg), answers(edge)
        for mine, edges in zip(got[0::3], want[0::3], strict=True):  # dense hits and scores
            assert [i for i, _ in mine] == [i for i, _ in edges]
            assert [v for _, v in mine] == pytest.approx([v for _, v in edges], abs=2e-4)
        flat = [[v for scores in out[1::3] for v in scores] for out in (got, want)]
        assert flat[0] == pytest.approx(flat[1], abs=2e-4)  # BM25 scores
        stored = {h[0]: h[2] for h in pg._fetch([str(r.id) for r in records[:5]], True)}
        for r, v in zip(records[:5], vecs[:5], strict=True):
            assert np.array_equal(stored[r.id], v.astype(np.float16).astype(np.float32))
    finally:
        pg.close()
        edge.close()
