"""The index in PostgreSQL, beside the journal: pgvector for the dense side, term tables for BM25.

``store.backend = "postgres"`` keeps the points in the journal's own database and schema, so the
change writer commits a change and its index rows in one transaction (``bound``): there is no
outbox lag for another node to miss, and nothing to replay after a crash.

* **Dense**: a ``halfvec(dim)`` column (every index stores half-precision values, so half precision
  holds them exactly: half the bytes of ``vector`` to read a ranking or walk the graph; a column of
  ``vector`` from before is converted when the store opens read-write). Scores are computed in
  float32 from the stored values and the query as given. A scope (user) is ranked exactly, its rows read through
  the ``(user_id, id)`` index, until a write takes it past ``exact_max`` points: that write marks
  it graphed (``ix_users.graphed``, for good) and puts its rows in the HNSW graph, a partial index
  over graphed rows alone, so the many small scopes cost no graph insert (~2-10 ms a point). A
  graphed scope's search walks the graph with pgvector's iterative scan, so a filter never leaves
  it short of results. The first scope graphed by a large write (``BULK_GRAPH``) has the graph
  built after its rows are in. Scores are cosine similarities, as Qdrant reports them.
* **BM25**: the same document and query vectors as the Qdrant adapters (``Bm25Encoder``: term
  hashes and BM25-normalised term frequencies), one row per (point, term), read through an index
  ordered by (term, user, weight desc). Qdrant's IDF modifier is computed in the query from the
  collection's counts: ``ln(1 + (N - df + 0.5) / (df + 0.5))``, ``N`` the points of every scope
  (kept per user in ``ix_users``), ``df`` the points holding the term (kept in ``ix_df``, a few
  counters a term, changed by each write in one statement before its commit). A score is
  ``sum(query weight * idf * document weight)``, as in Qdrant. A scope's best candidates come from
  each term's best rows with a bound that proves no other point can beat them (else every term row
  is summed, see ``_lexical_plan``); only they are joined to their points' rows (filters, records),
  all scored points when the filters reject too many.
* **Fusion**: RRF in the search's own statement, as ``_fusion.rrf_fusion`` computes it, or the
  convex fusion of ``ScopedIndex`` over both lists.
* **Filters**: the backend-neutral ``FilterSpec`` (``_filters``) spelt as SQL over plain columns.
  A filter besides the user that fewer than ``FEW_ROWS`` rows pass (a time window through
  ``ix_points_time``, a speaker through ``ix_points_speaker``) is applied first: those rows are
  ranked exactly, dense and BM25, instead of a walk or a term sum over the whole scope that rejects
  nearly all it meets.
* **One round trip a search**: the plan (exact or HNSW) is chosen in SQL from the scope's mark, the
  walk's settings last for the pipeline's implicit transaction, vectors travel as pgvector's binary.
"""

from __future__ import annotations

import json
import logging
import re
import struct
import threading
import time
import weakref
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import qdrant_edge

from .._errors import ConfigError, StoreError
from ._filters import FilterSpec, Match, SearchSpec, translate
from ._payload import FILTER_FIELDS, RECORD_FIELD, RRF_K, backend_errors
from ._scoped import Hit, ScopedIndex, Scored

log = logging.getLogger(__name__)

#: a scope with at most this many points is ranked exactly (all its rows read through the user
#: index); a larger one walks the HNSW graph
EXACT_MAX = 10_000
#: the HNSW graph's candidate list: at least this, and never below the limit asked for
EF_SEARCH = 200
#: an upsert of at least this many points, while no scope is graphed, builds the graph after
#: writing its rows (dropped first: the table is locked meanwhile) instead of inserting them one by one
BULK_GRAPH = 5_000
#: the most points one upsert statement carries (a larger upsert is several, in one transaction)
UPSERT_CHUNK = 2_000
#: points written since the index's tables were last vacuumed that make the next moment outside a
#: transaction run ``VACUUM (ANALYZE)`` on them: rows just bulk-written have no visibility map (an
#: index-only scan of the term rows reads the heap too) and no statistics (the planner guesses), until
#: autovacuum gets to them, which it did in the middle of the first searches (10^5 points: dense p50
#: 424 ms against ~60 after it)
VACUUM_AFTER = BULK_GRAPH
#: the memory that build may take (the graph of 10^5 points of 384 dimensions needs ~250 MB)
BUILD_MEMORY = "512MB"
#: the fewest best-scored points a BM25 search joins to their rows (for its filters) before it
#: widens to all of them
LEXICAL_CANDIDATES = 100
#: a BM25 search of one scope reads this many times its candidates of each term's rows, best first
HEAD_FACTOR = 2
#: a BM25 search of one scope tries the best rows of each term (the bound) only when the scope may hold
#: more than this many times the rows it would read of them: else it sums every row, which costs less
HEAD_SKIP = 4
#: a filtered search (a condition besides the user) that at most this many rows pass ranks those rows
#: exactly, read through the filter's index: no HNSW walk that scans on for rows passing the filter,
#: and BM25 scores their terms alone instead of every term row of the scope
FEW_ROWS = 1_000

_SCALAR = frozenset(FILTER_FIELDS) - {"entities"}
_COLUMNS = ("user_id", "speaker_name", "tier", "entities", "session_id", "agent_id", "level", "float_time_stamp")


class PgIndex(ScopedIndex):
    """``VectorIndex`` in a PostgreSQL schema, on a psycopg ``ConnectionPool`` whose connections
    have that schema first on their ``search_path`` (the journal's pool). Tables are created when
    missing (``CREATE EXTENSION vector`` needs pgvector on the server); never dropped. ``read_only``
    (a read-only store, on the journal's read-only connections): nothing is created; the tables must
    be there."""

    _label = "postgres index"
    joins_journal = True
    _lists_with_payloads = True  # a round trip to the server costs more than the payloads' bytes

    def __init__(self, pool: Any, *, dim: int = 384, exact_max: int = EXACT_MAX, owns_pool: bool = False,
                 read_only: bool = False) -> None:
        super().__init__(dim=dim)
        self._pool = pool
        self._owns_pool = owns_pool
        self.exact_max = exact_max
        self._bound = threading.local()
        self._vacuum_lock = threading.Lock()
        self._written = 0  # points upserted since the tables were last vacuumed (``VACUUM_AFTER``)
        self._adapted: weakref.WeakSet[Any] = weakref.WeakSet()  # connections that bind ``_Vector``
        try:
            with backend_errors("opening the postgres index"):
                if read_only:
                    self._check()
                else:
                    self._create()
                from psycopg.types import TypeInfo

                with self._pool.connection() as conn:
                    self._vector_type = TypeInfo.fetch(conn, "vector")
                    self._half_type = TypeInfo.fetch(conn, "halfvec")
                if self._vector_type is None or self._half_type is None:
                    raise StoreError("the pgvector types 'vector' and 'halfvec' are not on this connection's "
                                     "search_path")
                self._vector_dumper = _vector_dumper(self._vector_type.oid)
                self._half_dumper = _vector_dumper(self._half_type.oid)
        except BaseException:
            self.close()
            raise

    @classmethod
    def connect(cls, url: str, *, schema_name: str = "dialogmem", dim: int = 384, exact_max: int = EXACT_MAX,
                pool_max_size: int = 4) -> PgIndex:
        """An index with a pool of its own on ``url``, in ``schema_name`` (created when missing): the
        index alone, without a journal (the adapter's tests, benchmarks)."""
        try:
            from psycopg_pool import ConnectionPool
        except ImportError as exc:
            raise ConfigError("store.backend = 'postgres' needs psycopg: pip install 'dialogmem[postgres]'") from exc
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema_name):
            raise ConfigError(f"invalid PostgreSQL schema name {schema_name!r}")
        with backend_errors(f"connecting to the postgres index in schema {schema_name}"):
            pool = ConnectionPool(url, min_size=1, max_size=pool_max_size, open=False,
                                  kwargs={"autocommit": True, "options": f"-c search_path={schema_name},public"})
            pool.open(wait=True, timeout=10)
            try:
                with pool.connection() as conn:
                    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema_name}"')
            except BaseException:
                pool.close()
                raise
        return cls(pool, dim=dim, exact_max=exact_max, owns_pool=True)

    # -- the journal's transaction ---------------------------------------------------------

    @contextmanager
    def bound(self, conn: Any) -> Iterator[None]:
        """Run this thread's index writes and reads on ``conn`` (a psycopg connection inside an
        open transaction: the journal's commit), so they commit or roll back with it."""
        previous = getattr(self._bound, "conn", None), getattr(self._bound, "df", None)
        self._bound.conn, self._bound.df = conn, Counter()
        try:
            yield
            _count_terms(conn, self._bound.df)  # the last statement before the journal's commit
        finally:
            self._bound.conn, self._bound.df = previous

    @contextmanager
    def _conn(self, *, write: bool = False) -> Iterator[Any]:
        conn = getattr(self._bound, "conn", None)
        if conn is not None:
            self._adapt(conn)
            yield conn
            return
        with self._pool.connection() as conn:
            self._adapt(conn)
            if write:
                with conn.transaction():
                    self._bound.df = Counter()
                    try:
                        yield conn
                        _count_terms(conn, self._bound.df)
                    finally:
                        self._bound.df = None
                self._vacuum_if_due(conn)  # committed: the rows are there for VACUUM to see
            else:
                yield conn

    def _vacuum_if_due(self, conn: Any) -> None:
        """``VACUUM (ANALYZE)`` of the index's tables when ``VACUUM_AFTER`` points or more were upserted
        since the last one: on ``conn``, outside any transaction (VACUUM runs in none), once the writes
        are committed. Deleted rows do not count: a VACUUM that removes rows from the HNSW graph
        repairs their neighbours, which autovacuum does in the background instead of a caller waiting."""
        with self._vacuum_lock:
            if self._written < VACUUM_AFTER:
                return
            self._written = 0
        import psycopg

        started = time.perf_counter()
        # VACUUM marks a page all-visible only when its rows' commits are on disk: a commit with
        # synchronous_commit off is not for up to a few wal_writer_delay, and the check goes by groups of
        # 32 transactions, so one asynchronous commit spoils its neighbours'. The bulk write commits
        # synchronously (``_upsert``); ANALYZE, which commits too, runs after the VACUUM of every table
        try:
            conn.execute("VACUUM ix_points, ix_terms, ix_df, ix_users")
            conn.execute("ANALYZE ix_points, ix_terms, ix_df, ix_users")
        except psycopg.Error as exc:  # the write is committed: its caller must not take it for failed
            log.warning("the postgres index was not vacuumed after a bulk write (autovacuum will): %s", exc)
            return
        log.info("vacuumed the postgres index after a bulk write (%.1f s)", time.perf_counter() - started)

    def _adapt(self, conn: Any) -> None:
        """Let ``conn`` bind ``_Vector`` and ``_HalfVector`` values (and lists of them) as the server's
        binary ``vector`` and ``halfvec``: once a connection (the pool hands the same ones out again; a
        closed one is forgotten)."""
        if conn in self._adapted:
            return
        self._vector_type.register(conn)
        self._half_type.register(conn)
        conn.adapters.register_dumper(_Vector, self._vector_dumper)
        conn.adapters.register_dumper(_HalfVector, self._half_dumper)
        self._adapted.add(conn)

    def _terms_gone(self, rows: list[tuple[int, str, int]]) -> None:
        """Count out the terms of deleted term rows ((term, user, rows)) at this write's end."""
        df: Counter[tuple[int, int]] = self._bound.df
        for term, user, n in rows:
            df[int(term), _shard(user)] -= int(n)

    def _create(self) -> None:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('dialogmem-index:' || current_schema()))")
            if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
                try:
                    with conn.transaction():
                        conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
                except Exception as exc:
                    raise ConfigError(
                        "store.backend = 'postgres' needs the pgvector extension: a superuser runs "
                        f"`CREATE EXTENSION vector` once in this database ({exc})") from exc
            conn.execute(
                "CREATE TABLE IF NOT EXISTS ix_points (id uuid PRIMARY KEY, user_id text NOT NULL, "
                "speaker_name text, tier text, entities text[], session_id text, agent_id text, level text, "
                f"float_time_stamp double precision, record text NOT NULL, dense halfvec({self.dim}) NOT NULL)")
            # a 1.5 KB vector beside a ~0.7 KB record passes PostgreSQL's 2 KB row limit: left to the
            # default, the vector went out of line (TOAST) and an exact ranking of 10^4 points read ~60k
            # buffers (99 ms); kept in the row, the record is what gets compressed
            storage = conn.execute("SELECT attstorage FROM pg_attribute WHERE attrelid = 'ix_points'::regclass "
                                   "AND attname = 'dense'").fetchone()
            if storage is not None and storage[0] != "p":
                conn.execute("ALTER TABLE ix_points ALTER COLUMN dense SET STORAGE PLAIN")
            conn.execute("CREATE INDEX IF NOT EXISTS ix_points_user ON ix_points (user_id, id)")
            # a scope's rows in a time window (the commonest filter), read without the scope's other rows
            conn.execute("CREATE INDEX IF NOT EXISTS ix_points_time ON ix_points (user_id, float_time_stamp)")
            # a scope's rows of one speaker: a speaker filter counts (``_few``) and ranks them without
            # reading every row of the scope (a speaker of few rows in 10^5 was a walk through all of them)
            conn.execute("CREATE INDEX IF NOT EXISTS ix_points_speaker ON ix_points (user_id, speaker_name)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS ix_terms (point_id uuid NOT NULL REFERENCES ix_points (id) "
                "ON DELETE CASCADE, term bigint NOT NULL, user_id text NOT NULL, weight real NOT NULL, "
                "PRIMARY KEY (point_id, term) INCLUDE (weight))")
            # a point's weight of a term read from the key alone (BM25 scores the points it meets by
            # it); a schema from before has the key without the weight
            if conn.execute("SELECT i.indnatts = i.indnkeyatts FROM pg_index i WHERE i.indexrelid = "
                            "'ix_terms_pkey'::regclass").fetchone()[0]:
                conn.execute("ALTER TABLE ix_terms DROP CONSTRAINT ix_terms_pkey, "
                             "ADD PRIMARY KEY (point_id, term) INCLUDE (weight)")
            # a user's rows of a term, best weight first, read from the index alone (point included)
            conn.execute("CREATE INDEX IF NOT EXISTS ix_terms_impact ON ix_terms (term, user_id, weight DESC) "
                         "INCLUDE (point_id)")
            conn.execute("DROP INDEX IF EXISTS ix_terms_cover")  # the impact order replaces them
            conn.execute("DROP INDEX IF EXISTS ix_terms_term")
            conn.execute("CREATE TABLE IF NOT EXISTS ix_users (user_id text PRIMARY KEY, points bigint NOT NULL, "
                         "graphed boolean NOT NULL DEFAULT false)")
            self._create_graph(conn)
            if conn.execute("SELECT to_regclass('ix_df')").fetchone()[0] is None:
                # each term's document frequency, in DF_SHARDS counters by user (writers of different
                # users rarely wait on each other's counter); a schema from before counts its rows once
                conn.execute("CREATE TABLE ix_df (term bigint NOT NULL, shard smallint NOT NULL, df bigint NOT NULL, "
                             "PRIMARY KEY (term, shard))")
                counts = conn.execute("SELECT term, user_id, count(*) FROM ix_terms GROUP BY term, user_id").fetchall()
                df: Counter[tuple[int, int]] = Counter()
                for term, user, n in counts:
                    df[int(term), _shard(user)] += int(n)
                _count_terms(conn, df)
            self._check_dim(conn)

    def _check(self) -> None:
        """A read-only opening: the index's tables are there, in this version's shape, and hold vectors
        of this store's size."""
        with self._pool.connection() as conn:
            missing = [t for t in ("ix_points", "ix_terms", "ix_users", "ix_df")
                       if conn.execute("SELECT to_regclass(%s)", (t,)).fetchone()[0] is None]
            if missing:
                raise StoreError(f"this schema has no postgres index ({', '.join(missing)} missing) or one of an "
                                 "older version: open the store read-write once to create or convert it")
            if _dense_type(conn) != "halfvec":
                raise StoreError("this schema's postgres index keeps its vectors as 'vector', an older version: "
                                 "open the store read-write once to convert it")
            self._check_dim(conn)

    def _check_dim(self, conn: Any) -> None:
        found = conn.execute("SELECT atttypmod FROM pg_attribute WHERE attrelid = 'ix_points'::regclass "
                             "AND attname = 'dense'").fetchone()
        if found is None or found[0] != self.dim:
            raise StoreError(f"the postgres index holds vectors of size {None if found is None else found[0]}, "
                             f"this store embeds {self.dim}")

    def _create_graph(self, conn: Any) -> None:
        """The HNSW graph holds the rows of graphed scopes alone (``ix_points.graphed``, a partial
        index): a scope is graphed, for good, by the write that takes it past ``exact_max``; the rows
        of smaller scopes, ranked exactly, cost no graph insert. A schema from before (one graph over
        every row) is converted: its index dropped, the scopes past ``exact_max`` graphed."""
        for table in ("ix_points", "ix_users"):  # looked up first: an ALTER locks the table even when it finds it
            if conn.execute("SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'graphed'",
                            (table,)).fetchone() is None:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN graphed boolean NOT NULL DEFAULT false")
        if conn.execute("SELECT 1 FROM pg_class WHERE relname = 'ix_points_dense' "
                        "AND relnamespace = current_schema()::regnamespace").fetchone() is not None:
            conn.execute("DROP INDEX ix_points_dense")
            conn.execute("UPDATE ix_users SET graphed = true WHERE points > %s", (self.exact_max,))
            conn.execute("UPDATE ix_points p SET graphed = true FROM ix_users u "
                         "WHERE u.user_id = p.user_id AND u.graphed AND NOT p.graphed")
        self._convert_dense(conn)
        conn.execute(_CREATE_GRAPH)

    def _convert_dense(self, conn: Any) -> None:
        """A ``vector`` column from before becomes ``halfvec`` (the values are half precision already:
        nothing changes but their size); its graph, of the other operator class, is dropped first and
        built again over the converted rows."""
        if _dense_type(conn) != "vector":
            return
        log.warning("converting the postgres index's vectors to halfvec (the graph is built again)")
        conn.execute("DROP INDEX IF EXISTS ix_points_graph")
        conn.execute(f"ALTER TABLE ix_points ALTER COLUMN dense TYPE halfvec({self.dim}) "
                     f"USING dense::halfvec({self.dim}), ALTER COLUMN dense SET STORAGE PLAIN")
        conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (BUILD_MEMORY,))

    @contextmanager
    def rebuilding(self) -> Iterator[None]:
        """One transaction for a rebuild (``reset`` and the fill, run inside): the tables are locked
        against writers, not readers. Another node's change waits for the commit and then lands in the
        rebuilt index (a refill outside it could write back a memory deleted meanwhile); searches read
        the old rows until then."""
        with self._io("rebuild"), self._pool.connection() as conn:
            with conn.transaction():
                conn.execute("LOCK TABLE ix_points, ix_terms, ix_users, ix_df IN EXCLUSIVE MODE")
                with self.bound(conn):
                    yield
            self._vacuum_if_due(conn)

    def reset(self) -> None:
        """Empty the index (a rebuild from the journal follows); the tables stay, and so do the
        scopes' graphed marks (a search that read one a moment ago still finds the rebuilt rows). Rows
        are deleted, not truncated: inside ``rebuilding`` readers keep seeing them until the new ones commit."""
        with self._io("reset"), self._conn(write=True) as conn:
            for table in ("ix_terms", "ix_points", "ix_df"):
                conn.execute(f"DELETE FROM {table}")
            conn.execute("UPDATE ix_users SET points = 0")

    # -- primitives ----------------------------------------------------------------------------

    def _upsert(self, rows: list[tuple[str, list[float], qdrant_edge.SparseVector, dict]]) -> None:
        """Four statements a chunk, in one round trip (a pipeline): the scopes' counts (and graphed
        marks), the old terms out, the points in, their terms in."""
        rows = list({pid: (pid, d, s, p) for pid, d, s, p in rows}.values())  # the last of an id wins
        with self._vacuum_lock:
            self._written += len(rows)  # counted before the write: one that fails costs a VACUUM at most
            due = self._written >= VACUUM_AFTER
        with self._conn(write=True) as conn:
            if due:  # the VACUUM to come needs this commit on disk (see ``_vacuum_if_due``)
                conn.execute("SELECT set_config('synchronous_commit', 'on', true)")
            # the first scope to be graphed, in a bulk write: the graph is built after the rows are in
            # (a build is ~5x faster than inserting one point at a time)
            build = len(rows) >= BULK_GRAPH and conn.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM ix_users WHERE graphed) AND EXISTS (SELECT 1 FROM (SELECT u, "
                "count(*) AS n FROM unnest(%s::text[]) AS u GROUP BY u) b LEFT JOIN ix_users s ON s.user_id = b.u "
                "WHERE coalesce(s.points, 0) + b.n > %s)", ([p["user_id"] for *_, p in rows], self.exact_max)
            ).fetchone()[0]
            if build:
                conn.execute("DROP INDEX IF EXISTS ix_points_graph")
            for lo in range(0, len(rows), UPSERT_CHUNK):
                self._upsert_chunk(conn, rows[lo:lo + UPSERT_CHUNK])
            if build:
                conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (BUILD_MEMORY,))
                conn.execute(_CREATE_GRAPH)

    def _upsert_chunk(self, conn: Any, rows: list[tuple[str, list[float], qdrant_edge.SparseVector, dict]]) -> None:
        ids = [r[0] for r in rows]
        users = [p["user_id"] for _, _, _, p in rows]
        cols = [[p.get(c) for _, _, _, p in rows] for c in _COLUMNS]
        with conn.pipeline():
            conn.execute(_COUNT_UPSERTS, (ids, users, ids, self.exact_max, self.exact_max))
            gone = conn.execute(_DELETE_TERMS, (ids,))
            conn.execute(
                _INSERT_POINTS,
                (ids, cols[0], cols[1], cols[2], [_jsonb(v) for v in cols[3]], cols[4], cols[5], cols[6], cols[7],
                 [_packed(p) for _, _, _, p in rows], [_HalfVector(d) for _, d, _, _ in rows]),
                binary=True)  # arrays of long strings: the text format escapes them char by char
            self._insert_terms(conn, [(pid, p["user_id"], s) for pid, _, s, p in rows])
        self._terms_gone(gone.fetchall())

    def _insert_terms(self, conn: Any, docs: list[tuple[str, str, qdrant_edge.SparseVector]]) -> None:
        df: Counter[tuple[int, int]] = self._bound.df
        pids: list[str] = []
        users: list[str] = []
        terms: list[int] = []
        weights: list[float] = []
        for pid, user, sparse in docs:
            n = len(sparse.indices)
            pids += [pid] * n
            users += [user] * n
            terms += [int(t) for t in sparse.indices]
            weights += [float(w) for w in sparse.values]
            shard = _shard(user)
            for t in sparse.indices:
                df[int(t), shard] += 1
        if terms:
            conn.execute("INSERT INTO ix_terms (point_id, user_id, term, weight) "
                         "SELECT * FROM unnest(%s::uuid[], %s::text[], %s::bigint[], %s::real[])",
                         (pids, users, terms, weights), binary=True)

    def _set_payload(self, id: str, spec: FilterSpec, payload: dict,
                     sparse: qdrant_edge.SparseVector | None) -> None:
        where, params = _where(spec)
        sets = [c for c in _COLUMNS if c in payload and c != "user_id"]
        values = [_array(payload[c]) if c == "entities" else payload[c] for c in sets]
        assignments = ", ".join([*(f"{c} = %s" for c in sets), "record = %s"])
        with self._conn(write=True) as conn:
            done = conn.execute(f"UPDATE ix_points p SET {assignments} WHERE {where} RETURNING p.id::text, p.user_id",
                                (*values, _packed(payload), *params)).fetchall()
            if sparse is not None and done:
                self._terms_gone(conn.execute(_DELETE_TERMS, ([r[0] for r in done],)).fetchall())
                self._insert_terms(conn, [(pid, user, sparse) for pid, user in done])

    def _delete(self, spec: FilterSpec) -> None:
        where, params = _where(spec)
        with self._conn(write=True) as conn:
            self._terms_gone(conn.execute(
                "WITH gone AS (DELETE FROM ix_terms t USING ix_points p WHERE t.point_id = p.id AND "
                f"{where} RETURNING t.term, t.user_id) SELECT term, user_id, count(*) FROM gone GROUP BY 1, 2",
                params).fetchall())
            gone = conn.execute(f"DELETE FROM ix_points p WHERE {where} RETURNING p.user_id", params).fetchall()
            _count_users(conn, Counter({u: -n for u, n in Counter(r[0] for r in gone).items()}))

    def _count(self, spec: FilterSpec) -> int:
        where, params = _where(spec)
        with self._conn() as conn:
            return int(conn.execute(f"SELECT count(*) FROM ix_points p WHERE {where}", params).fetchone()[0])

    def _scroll(self, spec: FilterSpec, limit: int, offset: str | None, with_vectors: bool
                ) -> tuple[list[Hit], str | None]:
        where, params = _where(spec)
        if offset is not None:
            where, params = f"{where} AND p.id >= %s::uuid", [*params, offset]
        vector = ", p.dense::text" if with_vectors else ""
        with self._conn() as conn:
            rows = conn.execute(f"SELECT p.id::text, p.user_id, p.record{vector} FROM ix_points p WHERE {where} "
                                "ORDER BY p.id LIMIT %s", (*params, limit + 1)).fetchall()
        nxt = rows[limit][0] if len(rows) > limit else None
        return [_hit(r, with_vectors) for r in rows[:limit]], nxt

    def _fetch(self, ids: list[str], with_vectors: bool) -> list[Hit]:
        vector = ", p.dense::text" if with_vectors else ""
        with self._conn() as conn:
            rows = conn.execute(f"SELECT p.id::text, p.user_id, p.record{vector} FROM ix_points p "
                                "WHERE p.id = ANY(%s::uuid[])", (ids,)).fetchall()
        return [_hit(r, with_vectors) for r in rows]

    def _query(self, specs: list[SearchSpec]) -> list[list[Scored]]:
        """Every search of the call in one pipelined round trip: a statement each (a hybrid search's
        two lists are fused, and its payloads read, in its one statement; which plan the dense side
        takes, exact or the HNSW walk, is decided in SQL from the scope's graphed mark)."""
        plans: list[_Plan] = []
        for spec in specs:
            if spec.dense is not None and spec.sparse is not None:
                plans.append(_hybrid_plan(spec, self._dense_sql(spec.filter, spec.dense, spec.prefetch_limit),
                                          _lexical_plan(spec.filter, spec.sparse, spec.prefetch_limit, False)))
            elif spec.dense is not None:
                plans.append(self._dense_plan(spec.filter, spec.dense, spec.limit, spec.with_payload))
            elif spec.sparse is not None:
                plans.append(_lexical_plan(spec.filter, spec.sparse, spec.limit, spec.with_payload))
            else:
                raise StoreError("a search needs a dense or a sparse vector")
        with self._conn() as conn:
            _run_plans(conn, plans)
        return [plan.rows for plan in plans]

    def _dense_sql(self, spec: FilterSpec, dense: list[float], limit: int) -> tuple[str, tuple[Any, ...]]:
        """A dense ranking as SQL (columns ``pid`` uuid, ``score``; best first, ``limit`` rows) and its
        parameters. A scope not graphed is ranked exactly, its rows read through the user index (or
        the time index, for a window); a graphed one walks the HNSW graph, unless the search has a
        filter besides the user that fewer than ``FEW_ROWS`` of its rows pass (counted through the
        filter's index, up to that many): those are ranked exactly, since a walk would scan on through
        the graph for rows that pass. Both branches are in the statement; the choice (an init plan,
        run once) runs one of them. A search of no single scope ranks exactly."""
        where, params = _where(spec)
        query, half = _Vector(dense), _HalfVector(dense)
        # ``+ 0`` keeps the planner off the HNSW index: the scope's rows are ranked exactly. Rows are
        # ranked by halfvec's own distance (a cast of each to float32 cost more than it saved), the
        # hits' scores computed in float32 from the stored values and the query as given
        exact = ("SELECT x.pid, 1 - (x.dense::vector <=> %b::vector) AS score FROM (SELECT p.id AS pid, p.dense "
                 "FROM ix_points p WHERE {gate}"
                 f"{where} ORDER BY (p.dense <=> %b::halfvec) + 0, p.id LIMIT %s) x")
        user = _user(spec)
        if user is None:
            return exact.format(gate=""), (query, *params, half, limit)
        graphed = "coalesce((SELECT s.graphed FROM ix_users s WHERE s.user_id = %s), false)"
        walk_args: tuple[Any, ...] = (user,)
        if _narrows(spec):  # counted only for a graphed scope (CASE runs the count's init plan on demand)
            graphed = f"CASE WHEN {graphed} THEN NOT {_few(where)} ELSE false END"
            walk_args = (user, *params, FEW_ROWS, FEW_ROWS)
        # the decision (``w``: walk the graph) is made once, in a CTE both branches' one-time filters
        # read; a graphed scope's rows are all in the graph (``p.graphed`` picks the partial index)
        # the graph is walked by the query in half precision (its operator class's); scores are float32
        walk = ("SELECT p.id AS pid, 1 - (p.dense::vector <=> %b::vector) AS score FROM ix_points p "
                f"WHERE (SELECT w FROM g) AND p.graphed AND {where} ORDER BY p.dense <=> %b::halfvec LIMIT %s")
        sql = (f"WITH g AS MATERIALIZED (SELECT {graphed} AS w) "
               f"({exact.format(gate='NOT (SELECT w FROM g) AND ')}) UNION ALL ({walk})")
        return sql, (*walk_args, query, *params, half, limit, query, *params, half, limit)

    def _dense_plan(self, spec: FilterSpec, dense: list[float], limit: int, with_payload: bool) -> _Plan:
        sql, args = self._dense_sql(spec, dense, limit)
        cols = "p.user_id, p.record" if with_payload else "NULL, NULL"
        # the records of the hits alone are read (an exact ranking sorts ids, not records)
        return _Plan(f"SELECT d.pid::text, {cols}, d.score FROM ({sql}) d JOIN ix_points p ON p.id = d.pid "
                     "ORDER BY d.score DESC, d.pid", args, with_payload, _walk_settings(limit))

    def _make_room(self, operation: str, points: int, *, keep_reserve: bool = False) -> None:
        return None  # the server keeps its own disk: a full one answers an error (StoreError)

    def _flush(self) -> None:
        """Every write is committed (with the journal's transaction) before it returns; a flush outside
        a transaction runs the VACUUM a bulk write made due (an import's writes commit in the journal's
        transactions, which the index cannot follow)."""
        if getattr(self._bound, "conn", None) is None and self._written >= VACUUM_AFTER:
            with self._pool.connection() as conn:
                self._vacuum_if_due(conn)

    def _close(self) -> None:
        if self._owns_pool:  # a journal's pool is closed by the journal
            self._pool.close()


#: the HNSW graph, of the graphed scopes' rows
_CREATE_GRAPH = ("CREATE INDEX IF NOT EXISTS ix_points_graph ON ix_points USING hnsw (dense halfvec_cosine_ops) "
                 "WHERE graphed")
#: points in (a new id) or replaced; a point of a graphed scope is put in the HNSW graph
_INSERT_POINTS = (
    "INSERT INTO ix_points (id, user_id, speaker_name, tier, entities, session_id, agent_id, level, "
    "float_time_stamp, record, dense, graphed) "
    "SELECT u.id, u.user_id, u.speaker_name, u.tier, "
    "CASE WHEN u.entities IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(u.entities)) END, "
    "u.session_id, u.agent_id, u.level, u.fts, u.record, u.dense, "
    "coalesce((SELECT s.graphed FROM ix_users s WHERE s.user_id = u.user_id), false) "
    "FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::text[], %s::text[], "
    "%s::text[], %s::float8[], %s::text[], %b::halfvec[]) AS u(id, user_id, speaker_name, tier, entities, "
    "session_id, agent_id, level, fts, record, dense) "
    "ON CONFLICT (id) DO UPDATE SET user_id = excluded.user_id, speaker_name = excluded.speaker_name, "
    "tier = excluded.tier, entities = excluded.entities, session_id = excluded.session_id, "
    "agent_id = excluded.agent_id, level = excluded.level, float_time_stamp = excluded.float_time_stamp, "
    "record = excluded.record, dense = excluded.dense, graphed = excluded.graphed")
#: the scopes' point counts after an upsert of ``ids`` (owned by ``users``): +1 for a new point, and
#: for one that changes owner, -1 to the old; locked in user order (two writers never wait on each
#: other in a cycle). A scope past the limit is marked graphed and its rows put in the HNSW graph.
_COUNT_UPSERTS = (
    "WITH new AS (SELECT * FROM unnest(%s::uuid[], %s::text[]) AS n(id, user_id)), "
    "old AS (SELECT p.id, p.user_id FROM ix_points p WHERE p.id = ANY(%s::uuid[]) FOR UPDATE), "
    "delta AS (SELECT x.user_id, sum(x.d)::bigint AS d FROM ("
    "SELECT n.user_id, CASE WHEN o.user_id IS DISTINCT FROM n.user_id THEN 1 ELSE 0 END AS d "
    "FROM new n LEFT JOIN old o ON o.id = n.id "
    "UNION ALL SELECT o.user_id, -1 FROM new n JOIN old o ON o.id = n.id WHERE o.user_id <> n.user_id"
    ") x GROUP BY x.user_id), "
    "prior AS (SELECT s.user_id, s.graphed FROM ix_users s WHERE s.user_id IN (SELECT user_id FROM delta)), "
    "up AS (INSERT INTO ix_users (user_id, points, graphed) SELECT user_id, d, d > %s FROM delta ORDER BY user_id "
    "ON CONFLICT (user_id) DO UPDATE SET points = ix_users.points + excluded.points, "
    "graphed = ix_users.graphed OR ix_users.points + excluded.points > %s RETURNING user_id, graphed) "
    "UPDATE ix_points p SET graphed = true FROM up LEFT JOIN prior ON prior.user_id = up.user_id "
    "WHERE p.user_id = up.user_id AND up.graphed AND NOT coalesce(prior.graphed, false) AND NOT p.graphed")


class _Plan:
    """One SQL search and, once run, its hits."""

    def __init__(self, sql: str | None, args: tuple[Any, ...], with_payload: bool,
                 settings: dict[str, str] | None = None) -> None:
        self.sql, self.args, self.with_payload, self.settings = sql, args, with_payload, settings
        self.rows: list[Scored] = []


def _run_plans(conn: Any, plans: list[_Plan]) -> None:
    """Run ``plans`` in one pipeline: one round trip (a ``Sync`` ends it). Outside a transaction the
    pipelined statements run in one implicit transaction, which ``set_config(…, true)`` settings (an
    HNSW walk's) last until, so no ``BEGIN``/``COMMIT`` (each a round trip of its own in psycopg's
    pipeline) is needed. Inside the caller's transaction, plans run one by one, a plan's settings
    restored after it."""
    todo = [p for p in plans if p.sql is not None]
    if not todo:
        return
    if conn.info.transaction_status == 0:  # idle: autocommit, no transaction of the caller's
        with conn.pipeline():
            cursors = []
            for plan in todo:
                if plan.settings:  # one statement for all of them (each is parsed, planned, run)
                    conn.execute("SELECT set_config(s.name, s.value, true) FROM unnest(%s::text[], %s::text[]) "
                                 "AS s(name, value)", (list(plan.settings), list(plan.settings.values())))
                cursors.append(conn.execute(plan.sql, plan.args))
        for plan, cur in zip(todo, cursors, strict=True):
            plan.rows = [_scored(r, plan.with_payload) for r in cur.fetchall()]
        return
    for plan in todo:
        with _local_settings(conn, plan.settings or {}):
            plan.rows = [_scored(r, plan.with_payload) for r in conn.execute(plan.sql, plan.args).fetchall()]


def _walk_settings(limit: int) -> dict[str, str]:
    """The HNSW walk's settings, for a statement that may take it: a candidate list of at least
    ``limit``, and pgvector's iterative scan (a filter never leaves it short of results)."""
    return {"hnsw.ef_search": str(min(1000, max(EF_SEARCH, limit))), "hnsw.iterative_scan": "strict_order",
            # the plan not taken is planned too: a parallel one launched its workers (~17 ms) before
            # its one-time filter said it would not run
            "max_parallel_workers_per_gather": "0",
            # a scope's rows read by a bitmap of the user (or time) index, then sorted, looked cheaper to
            # the planner than the walk for a freshly filled scope (10^4 rows: 27 ms against ~3): the
            # ordered scans left are the graph's and the exact branch's plain index scan
            "enable_bitmapscan": "off"}


def _hybrid_plan(spec: SearchSpec, dense: tuple[str, tuple[Any, ...]], lexical: _Plan) -> _Plan:
    """Dense and BM25 lists (``spec.prefetch_limit`` each) fused by RRF as ``_fusion.rrf_fusion``
    does it (``1 / (RRF_K + position)`` from each list, ties by id), the best ``spec.limit`` joined
    to their records: one statement."""
    cols = "p.user_id, p.record" if spec.with_payload else "NULL, NULL"
    lex = (f"SELECT y.pid::uuid, row_number() OVER (ORDER BY y.score DESC, y.pid::uuid) AS rn FROM ({lexical.sql}) y"
           if lexical.sql is not None else "SELECT NULL::uuid, 0::bigint WHERE false")
    sql = (f"WITH d AS (SELECT x.pid, row_number() OVER (ORDER BY x.score DESC, x.pid) AS rn FROM ({dense[0]}) x), "
           f"l(pid, rn) AS ({lex}), "
           "f AS (SELECT u.pid, sum(1.0::float8 / (%s + u.rn - 1)) AS score FROM "
           "(SELECT * FROM d UNION ALL SELECT * FROM l) u GROUP BY u.pid ORDER BY 2 DESC, 1 LIMIT %s) "
           f"SELECT f.pid::text, {cols}, f.score FROM f JOIN ix_points p ON p.id = f.pid ORDER BY f.score DESC, f.pid")
    return _Plan(sql, (*dense[1], *lexical.args, RRF_K, spec.limit), spec.with_payload,
                 _walk_settings(spec.prefetch_limit))


def _user(spec: FilterSpec) -> str | None:
    users = [c.value for c in spec.must if isinstance(c, Match) and c.key == "user_id"]
    return users[0] if users else None


def _lexical_plan(spec: FilterSpec, sparse: qdrant_edge.SparseVector, limit: int, with_payload: bool) -> _Plan:
    """BM25 with Qdrant's IDF: ``N`` every scope's points, ``df`` the points holding the term.

    A score is ``sum(w_t * weight)`` over the query's terms, ``w_t`` the query weight times the
    IDF. The best ``K = candidates(limit)`` are joined to their points' rows for the other filters
    and the records; when the filters reject so many that fewer than ``limit`` remain, every scored
    point is ranked instead. Either way the hits are those of ranking every scored point (a score
    tie goes to the smaller id).

    The best ``K`` of one scope are found without summing every term row it holds (a user of 10^5
    points: ~40k rows a query). Each term's rows are read best weight first (``ix_terms_impact``),
    ``head_size(K)`` of them; the points met are scored exactly. A point met in no list scores at
    most ``sum(w_t * lo_t)`` over the lists that were cut, ``lo_t`` the lowest weight read of term
    t. When the ``K``-th best of the points met beats that bound on what the rows read already add
    up to (a lower bound of its exact score), no point outside can enter the best ``K``: the points
    met are scored exactly (by the key, which holds the weight) and their best ``K`` are the full
    ranking's. Otherwise (or with no single scope) the statement sums every term row, as it does for
    the wide ranking; the check costs the head's rows alone (a corpus of few, evenly spread words,
    like the benchmarks' synthetic one, never passes it).

    A filter besides the user that fewer than ``FEW_ROWS`` rows pass (a time window, a speaker) is
    applied first: those rows are read through the filter's index and their rows of the query's
    terms alone are scored, by the key (``(point, term)``), instead of every term row of the scope
    then every scored point joined to its row to be rejected."""
    terms = [int(t) for t in sparse.indices]
    if not terms:
        return _Plan(None, (), with_payload)
    where, params = _where(spec)
    user = _user(spec)
    cands = candidates(limit)
    cols = ("p.id AS pid, p.user_id AS uid, p.record AS rec" if with_payload
            else "p.id AS pid, NULL::text AS uid, NULL::text AS rec")
    head = ""
    if user is not None:
        head = (
            "head AS MATERIALIZED (SELECT s.term, s.w, h.point_id, h.weight FROM s CROSS JOIN LATERAL ("
            "SELECT t.point_id, t.weight FROM ix_terms t WHERE t.term = s.term AND t.user_id = %s "
            "ORDER BY t.weight DESC LIMIT %s) h), "
            "bound AS (SELECT coalesce(sum(c.w * c.lo), 0) AS ub FROM (SELECT min(h.w) AS w, min(h.weight) AS lo, "
            "count(*) AS got FROM head h GROUP BY h.term) c WHERE c.got >= %s), "
            # each point met: its rows of the query's terms, read by the primary key (point, term)
            "met AS MATERIALIZED (SELECT m.point_id, e.score FROM (SELECT DISTINCT h.point_id FROM head h) m "
            "CROSS JOIN LATERAL (SELECT sum(s.w * t.weight) AS score FROM ix_terms t JOIN s ON s.term = t.term "
            "WHERE t.point_id = m.point_id AND t.term = ANY(%s::bigint[])) e), "
            # what the rows read already add up to: a point's exact score is at least that
            "low AS (SELECT h.point_id, sum(h.w * h.weight) AS score FROM head h GROUP BY h.point_id), "
            # not tried when the scope's rows of the query's terms are few beside the head (their count is
            # at most the terms' df, in the scope's shard): summing them all costs less than the head's probes
            "safe AS (SELECT CASE WHEN (SELECT sum(s.df) FROM s) <= %s THEN false ELSE "
            "(SELECT bool_and(s.w > 0) FROM s) AND ((SELECT ub FROM bound) = 0 OR coalesce(("
            "SELECT x.score FROM low x ORDER BY x.score DESC OFFSET %s LIMIT 1) > (SELECT ub FROM bound), "
            "false)) END AS v), ")
    scope = " AND t.user_id = %s" if user is not None else ""
    scored = ("(SELECT * FROM met WHERE (SELECT v FROM safe) UNION ALL SELECT * FROM sc WHERE NOT (SELECT v FROM safe))"
              if user is not None else "sc")
    few = few_case = few_list = ""
    few_args: tuple[Any, ...] = ()
    if _narrows(spec):
        few = f"fw AS MATERIALIZED (SELECT p.id FROM ix_points p WHERE {where} LIMIT %s), "
        few_case = "WHEN (SELECT count(*) FROM fw) < %s THEN 0 "
        few_list = (
            f" UNION ALL (SELECT {cols}, f.score FROM (SELECT t.point_id, sum(s.w * t.weight) AS score FROM fw "
            "JOIN ix_terms t ON t.point_id = fw.id JOIN s ON s.term = t.term WHERE t.term = ANY(%s::bigint[]) "
            "GROUP BY t.point_id) f JOIN ix_points p ON p.id = f.point_id WHERE (SELECT v FROM mode) = 0 "
            "ORDER BY f.score DESC, p.id LIMIT %s)")
        few_args = (*params, FEW_ROWS, FEW_ROWS)
    sql = (
        "WITH q(term, qw) AS (SELECT * FROM unnest(%s::bigint[], %s::float8[])), "
        "n AS (SELECT coalesce(sum(points), 0)::float8 AS n FROM ix_users), "
        "s AS MATERIALIZED (SELECT q.term, q.qw * ln(1 + (n.n - d.df + 0.5) / (d.df + 0.5)) AS w, e.df "
        "FROM q CROSS JOIN n "
        "CROSS JOIN LATERAL (SELECT coalesce(sum(x.df), 0)::float8 AS df FROM ix_df x WHERE x.term = q.term) d "
        # the term's count in the scope's shard: the scope holds at most that many of its rows
        "CROSS JOIN LATERAL (SELECT coalesce(sum(x.df), 0)::float8 AS df FROM ix_df x WHERE x.term = q.term "
        "AND x.shard = %s) e), "
        f"{head}"
        # every term row of the scope summed, the best K kept as the sum's hash table is read (no list of
        # every scored point stored and read again: at 10^5 points that list was ~30k rows, a third of the time)
        f"sc AS MATERIALIZED (SELECT t.point_id, sum(s.w * t.weight) AS score FROM s JOIN ix_terms t "
        f"ON t.term = s.term{scope} GROUP BY t.point_id ORDER BY 2 DESC, 1 LIMIT %s), "
        # every scored point, for the rare search whose filters reject too many of the best K (mode 2):
        # computed only then
        f"wide AS MATERIALIZED (SELECT t.point_id, sum(s.w * t.weight) AS score FROM s JOIN ix_terms t "
        f"ON t.term = s.term{scope} GROUP BY t.point_id), "
        f"top AS (SELECT x.point_id, x.score FROM {scored} x ORDER BY x.score DESC, x.point_id LIMIT %s), "
        f"hit AS MATERIALIZED (SELECT {cols}, top.score FROM top JOIN ix_points p ON p.id = top.point_id "
        f"WHERE {where} ORDER BY top.score DESC, p.id LIMIT %s), "
        # the rows a narrowing filter passes, when fewer than FEW_ROWS: scored alone, by the key
        f"{few}"
        # which list answers: 0 the few rows passing the filter, 1 the best candidates that pass it,
        # 2 every scored point that passes it (the filter rejected too many candidates)
        f"mode AS (SELECT CASE {few_case}WHEN (SELECT count(*) FROM hit) < %s AND (SELECT count(*) FROM top) >= %s "
        "THEN 2 ELSE 1 END AS v) "
        "SELECT r.pid::text, r.uid, r.rec, r.score FROM ("
        "SELECT * FROM hit WHERE (SELECT v FROM mode) = 1 UNION ALL "
        f"(SELECT {cols}, wide.score FROM wide JOIN ix_points p ON p.id = wide.point_id "
        f"WHERE (SELECT v FROM mode) = 2 AND {where} ORDER BY wide.score DESC, p.id LIMIT %s)"
        f"{few_list}) r ORDER BY r.score DESC, r.pid")
    size = head_size(cands)
    args = (terms, [float(v) for v in sparse.values], _shard(user) if user is not None else -1,
            *((user, size, size, terms, HEAD_SKIP * size * len(terms), cands - 1) if user is not None else ()),
            *([user] if user is not None else []), cands, *([user] if user is not None else []), cands, *params,
            limit, *few_args, limit, cands, *params, limit,
            *((terms, limit) if few else ()))
    return _Plan(sql, args, with_payload)


def _narrows(spec: FilterSpec) -> bool:
    """Whether the filter has a condition besides the user's (one that may leave few of the scope's rows)."""
    return bool(spec.must_not) or any(not (isinstance(c, Match) and c.key == "user_id") for c in spec.must)


def _few(where: str) -> str:
    """SQL: fewer than ``FEW_ROWS`` rows pass ``where`` (its parameters, then ``FEW_ROWS`` twice): the
    count stops at ``FEW_ROWS`` rows, so it costs no more than reading those through the filter's index."""
    return f"((SELECT count(*) FROM (SELECT 1 FROM ix_points p WHERE {where} LIMIT %s) c) < %s)"


def head_size(cands: int) -> int:
    """How many of each query term's rows a BM25 search of one scope reads, best weight first."""
    return HEAD_FACTOR * cands


def candidates(limit: int) -> int:
    """How many of the best-scored points a BM25 search joins to their rows for its filters."""
    return max(4 * limit, LEXICAL_CANDIDATES)


def _where(spec: FilterSpec) -> tuple[str, list[Any]]:
    must, must_not = translate(spec, _Sql())
    parts = [sql for sql, _ in must] + [f"NOT ({sql})" for sql, _ in must_not or ()]
    params = [v for _, vs in must for v in vs] + [v for _, vs in must_not or () for v in vs]
    return (" AND ".join(parts) or "TRUE"), params


class _Sql:
    """Each condition as (SQL over ``ix_points p``, its parameters)."""

    def match(self, key: str, value: str) -> tuple[str, list[Any]]:
        if key == "entities":
            return "%s = ANY(p.entities)", [value]
        return f"p.{_scalar(key)} = %s", [value]

    def match_any(self, key: str, values: list[str]) -> tuple[str, list[Any]]:
        if key == "entities":
            return "p.entities && %s::text[]", [values]
        return f"p.{_scalar(key)} = ANY(%s::text[])", [values]

    def range(self, key: str, gte: float | None, lte: float | None) -> tuple[str, list[Any]]:
        column = _scalar(key)
        parts, params = [f"p.{column} IS NOT NULL"], []
        if gte is not None:
            parts.append(f"p.{column} >= %s")
            params.append(gte)
        if lte is not None:
            parts.append(f"p.{column} <= %s")
            params.append(lte)
        return " AND ".join(parts), params

    def has_id(self, ids: list[str]) -> tuple[str, list[Any]]:
        return "p.id = ANY(%s::uuid[])", [ids]


def _scalar(key: str) -> str:
    if key not in _SCALAR:
        raise StoreError(f"no filterable field {key!r} in the postgres index")
    return key


#: the terms of some points deleted, counted by (term, user)
_DELETE_TERMS = ("WITH gone AS (DELETE FROM ix_terms WHERE point_id = ANY(%s::uuid[]) RETURNING term, user_id) "
                 "SELECT term, user_id, count(*) FROM gone GROUP BY 1, 2")
#: a term's document frequency is kept in this many counters, by user
DF_SHARDS = 16


def _shard(user: str) -> int:
    return zlib.crc32(user.encode()) % DF_SHARDS


def _count_terms(conn: Any, df: Counter[tuple[int, int]]) -> None:
    """Apply document frequency deltas ((term, shard): n) in one statement, in key order (the
    counters are the last rows a write locks, all at once: two writers never wait in a cycle)."""
    changes = sorted((k, n) for k, n in df.items() if n)
    if changes:
        conn.execute("INSERT INTO ix_df (term, shard, df) SELECT * FROM unnest(%s::bigint[], %s::smallint[], "
                     "%s::bigint[]) ORDER BY 1, 2 ON CONFLICT (term, shard) DO UPDATE SET df = ix_df.df + excluded.df",
                     ([t for (t, _), _ in changes], [sh for (_, sh), _ in changes], [n for _, n in changes]))


def _count_users(conn: Any, delta: Counter[str]) -> None:
    """Apply per-scope point deltas (in a fixed order, so two writers never wait on each other in a cycle)."""
    changes = sorted((u, n) for u, n in delta.items() if n)
    if changes:
        conn.execute("INSERT INTO ix_users (user_id, points) SELECT * FROM unnest(%s::text[], %s::bigint[]) "
                     "ON CONFLICT (user_id) DO UPDATE SET points = ix_users.points + excluded.points",
                     ([u for u, _ in changes], [n for _, n in changes]))


@contextmanager
def _local_settings(conn: Any, settings: dict[str, str]) -> Iterator[None]:
    """``SET LOCAL`` for one statement: inside the caller's transaction, or a short one of its own."""
    if conn.info.transaction_status == 0:  # idle (autocommit): open one for the settings to live in
        with conn.transaction():
            for name, value in settings.items():
                conn.execute("SELECT set_config(%s, %s, true)", (name, value))
            yield
        return
    saved = {name: conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0] for name in settings}
    for name, value in settings.items():
        conn.execute("SELECT set_config(%s, %s, true)", (name, value))
    try:
        yield
    finally:
        for name, value in saved.items():
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))


class _Vector:
    """A dense vector bound as pgvector's binary ``vector``: no float printed as text by the client
    and parsed back by the server (``repr`` of 384 floats took ~1.8 ms a vector here)."""

    __slots__ = ("data",)

    def __init__(self, values: list[float]) -> None:
        self.data = np.asarray(values, dtype=">f4")  # float16-exact values: float32 holds them exactly


class _HalfVector(_Vector):
    """A dense vector bound as pgvector's binary ``halfvec`` (big-endian float16s): what the column
    stores, and the query the graph is walked with."""

    __slots__ = ()

    def __init__(self, values: list[float]) -> None:
        self.data = np.asarray(values, dtype=">f2")


def _dense_type(conn: Any) -> str | None:
    """The type of ``ix_points.dense``: ``halfvec``, or ``vector`` in a schema from before."""
    row = conn.execute("SELECT t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                       "WHERE a.attrelid = 'ix_points'::regclass AND a.attname = 'dense'").fetchone()
    return None if row is None else str(row[0])


def _vector_dumper(oid: int) -> type:
    """A psycopg dumper of ``_Vector`` or ``_HalfVector`` as the server's ``vector`` or ``halfvec``
    (their OIDs differ per database): pgvector's binary input, a 16-bit size, 16 unused bits, the
    big-endian values."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    class VectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: _Vector) -> bytes:
            return struct.pack(">HH", len(obj.data), 0) + obj.data.tobytes()

    VectorDumper.oid = oid
    return VectorDumper


def _packed(payload: dict[str, Any]) -> str:
    """The record as one JSON string (a payload spread over fields, as points were before packing,
    is the record's fields themselves)."""
    packed = payload.get(RECORD_FIELD)
    return packed if isinstance(packed, str) else json.dumps(payload)


def _jsonb(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _array(value: Any) -> list[str] | None:
    return None if value is None else [str(v) for v in value]


def _hit(row: Any, with_vectors: bool) -> Hit:
    payload = {"user_id": row[1], RECORD_FIELD: row[2]}
    vector = np.array(row[3][1:-1].split(","), dtype=np.float32) if with_vectors else None
    return row[0], payload, vector


def _scored(row: Any, with_payload: bool) -> Scored:
    payload = {"user_id": row[1], RECORD_FIELD: row[2]} if with_payload else None
    return row[0], payload, float(row[3])
