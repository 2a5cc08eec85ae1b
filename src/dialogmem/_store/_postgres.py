"""The index in PostgreSQL, beside the journal: pgvector for the dense side, term tables for BM25.

``store.backend = "postgres"`` keeps the points in the journal's own database and schema, so the
change writer commits a change and its index rows in one transaction (``bound``): there is no
outbox lag for another node to miss, and nothing to replay after a crash.

* **Dense**: a ``vector(dim)`` column with an HNSW index (cosine). A search scoped to a user with
  at most ``EXACT_MAX`` points reads that user's rows through the ``(user_id, id)`` index and ranks
  them exactly; a larger one walks the HNSW graph with pgvector's iterative scan, so a filter
  never leaves it short of results. Scores are cosine similarities, as Qdrant reports them.
* **BM25**: the same document and query vectors as the Qdrant adapters (``Bm25Encoder``: term
  hashes and BM25-normalised term frequencies), one row per (point, term). Qdrant's IDF modifier is
  computed in the query from the collection's counts: ``ln(1 + (N - df + 0.5) / (df + 0.5))``,
  ``N`` the points of every scope (kept per user in ``ix_users``), ``df`` the points holding the
  term. A score is ``sum(query weight * idf * document weight)``, as in Qdrant.
* **Fusion**: ranks fused by RRF (``_fusion.rrf_fusion``) or the convex fusion of ``ScopedIndex``.
* **Filters**: the backend-neutral ``FilterSpec`` (``_filters``) spelt as SQL over plain columns.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import qdrant_edge

from .._errors import ConfigError, StoreError
from ._filters import FilterSpec, Match, SearchSpec, translate
from ._fusion import rrf_fusion
from ._payload import FILTER_FIELDS, RECORD_FIELD, RRF_K, backend_errors
from ._scoped import Hit, ScopedIndex, Scored

log = logging.getLogger(__name__)

#: a scope with at most this many points is ranked exactly (all its rows read through the user
#: index); a larger one walks the HNSW graph
EXACT_MAX = 10_000
#: the HNSW graph's candidate list: at least this, and never below the limit asked for
EF_SEARCH = 64
#: how long a scope's size, read to choose a search's plan, is used again; and how many are kept
SIZES_TTL_S = 30.0
SIZES_KEPT = 10_000

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
        # scope sizes read recently: only which plan a search takes depends on them (exact or HNSW,
        # both answer the same top), so one a little stale costs nothing but that choice
        self._sizes: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._sizes_lock = threading.Lock()
        try:
            with backend_errors("opening the postgres index"):
                if read_only:
                    self._check()
                else:
                    self._create()
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
        previous = getattr(self._bound, "conn", None)
        self._bound.conn = conn
        try:
            yield
        finally:
            self._bound.conn = previous

    @contextmanager
    def _conn(self, *, write: bool = False) -> Iterator[Any]:
        conn = getattr(self._bound, "conn", None)
        if conn is not None:
            yield conn
            return
        with self._pool.connection() as conn:
            if write:
                with conn.transaction():
                    yield conn
            else:
                yield conn

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
                f"float_time_stamp double precision, record text NOT NULL, dense vector({self.dim}) NOT NULL)")
            # a 1.5 KB vector beside a ~0.7 KB record passes PostgreSQL's 2 KB row limit: left to the
            # default, the vector went out of line (TOAST) and an exact ranking of 10^4 points read ~60k
            # buffers (99 ms); kept in the row, the record is what gets compressed
            storage = conn.execute("SELECT attstorage FROM pg_attribute WHERE attrelid = 'ix_points'::regclass "
                                   "AND attname = 'dense'").fetchone()
            if storage is not None and storage[0] != "p":
                conn.execute("ALTER TABLE ix_points ALTER COLUMN dense SET STORAGE PLAIN")
            conn.execute("CREATE INDEX IF NOT EXISTS ix_points_user ON ix_points (user_id, id)")
            conn.execute("CREATE INDEX IF NOT EXISTS ix_points_dense ON ix_points USING hnsw (dense vector_cosine_ops)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS ix_terms (point_id uuid NOT NULL REFERENCES ix_points (id) "
                "ON DELETE CASCADE, term bigint NOT NULL, user_id text NOT NULL, weight real NOT NULL, "
                "PRIMARY KEY (point_id, term))")
            conn.execute("CREATE INDEX IF NOT EXISTS ix_terms_term ON ix_terms (term, user_id)")
            conn.execute("CREATE TABLE IF NOT EXISTS ix_users (user_id text PRIMARY KEY, points bigint NOT NULL)")
            self._check_dim(conn)

    def _check(self) -> None:
        """A read-only opening: the index's tables are there and hold vectors of this store's size."""
        with self._pool.connection() as conn:
            missing = [t for t in ("ix_points", "ix_terms", "ix_users")
                       if conn.execute("SELECT to_regclass(%s)", (t,)).fetchone()[0] is None]
            if missing:
                raise StoreError(f"this schema has no postgres index ({', '.join(missing)} missing): open the "
                                 "store read-write once to create it")
            self._check_dim(conn)

    def _check_dim(self, conn: Any) -> None:
        found = conn.execute("SELECT atttypmod FROM pg_attribute WHERE attrelid = 'ix_points'::regclass "
                             "AND attname = 'dense'").fetchone()
        if found is None or found[0] != self.dim:
            raise StoreError(f"the postgres index holds vectors of size {None if found is None else found[0]}, "
                             f"this store embeds {self.dim}")

    @contextmanager
    def rebuilding(self) -> Iterator[None]:
        """One transaction for a rebuild (``reset`` and the fill, run inside): the tables are locked
        against writers, not readers. Another node's change waits for the commit and then lands in the
        rebuilt index (a refill outside it could write back a memory deleted meanwhile); searches read
        the old rows until then."""
        with self._io("rebuild"), self._pool.connection() as conn, conn.transaction():
            conn.execute("LOCK TABLE ix_points, ix_terms, ix_users IN EXCLUSIVE MODE")
            with self.bound(conn):
                yield

    def reset(self) -> None:
        """Empty the index (a rebuild from the journal follows); the tables stay. Rows are deleted, not
        truncated: inside ``rebuilding`` readers keep seeing them until the new ones commit."""
        with self._io("reset"), self._conn(write=True) as conn:
            for table in ("ix_terms", "ix_points", "ix_users"):
                conn.execute(f"DELETE FROM {table}")

    # -- primitives ----------------------------------------------------------------------------

    def _upsert(self, rows: list[tuple[str, list[float], qdrant_edge.SparseVector, dict]]) -> None:
        rows = list({pid: (pid, d, s, p) for pid, d, s, p in rows}.values())  # the last of an id wins
        ids = [r[0] for r in rows]
        with self._conn(write=True) as conn:
            old = dict(conn.execute("SELECT id::text, user_id FROM ix_points WHERE id = ANY(%s::uuid[]) "
                                    "FOR UPDATE", (ids,)).fetchall())
            conn.execute("DELETE FROM ix_terms WHERE point_id = ANY(%s::uuid[])", (ids,))
            cols = [[p.get(c) for _, _, _, p in rows] for c in _COLUMNS]
            conn.execute(
                "INSERT INTO ix_points (id, user_id, speaker_name, tier, entities, session_id, agent_id, level, "
                "float_time_stamp, record, dense) "
                "SELECT u.id, u.user_id, u.speaker_name, u.tier, "
                "CASE WHEN u.entities IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(u.entities)) END, "
                "u.session_id, u.agent_id, u.level, u.fts, u.record, u.dense::vector "
                "FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::text[], %s::jsonb[], %s::text[], %s::text[], "
                "%s::text[], %s::float8[], %s::text[], %s::text[]) AS u(id, user_id, speaker_name, tier, entities, "
                "session_id, agent_id, level, fts, record, dense) "
                "ON CONFLICT (id) DO UPDATE SET user_id = excluded.user_id, speaker_name = excluded.speaker_name, "
                "tier = excluded.tier, entities = excluded.entities, session_id = excluded.session_id, "
                "agent_id = excluded.agent_id, level = excluded.level, float_time_stamp = excluded.float_time_stamp, "
                "record = excluded.record, dense = excluded.dense",
                (ids, cols[0], cols[1], cols[2], [_jsonb(v) for v in cols[3]], cols[4], cols[5], cols[6], cols[7],
                 [_packed(p) for _, _, _, p in rows], [_vector_text(d) for _, d, _, _ in rows]),
                binary=True)  # arrays of long strings: the text format escapes them char by char (~4 ms a row)
            self._insert_terms(conn, [(pid, p["user_id"], s) for pid, _, s, p in rows])
            delta: Counter[str] = Counter()
            for pid, _, _, payload in rows:
                before = old.get(pid)
                if before != payload["user_id"]:
                    delta[payload["user_id"]] += 1
                    if before is not None:
                        delta[before] -= 1
            _count_users(conn, delta)

    @staticmethod
    def _insert_terms(conn: Any, docs: list[tuple[str, str, qdrant_edge.SparseVector]]) -> None:
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
                conn.execute("DELETE FROM ix_terms WHERE point_id = ANY(%s::uuid[])", ([r[0] for r in done],))
                self._insert_terms(conn, [(pid, user, sparse) for pid, user in done])

    def _delete(self, spec: FilterSpec) -> None:
        where, params = _where(spec)
        with self._conn(write=True) as conn:
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
        """Every search of the call in one pipelined round trip (after one read of the scopes' sizes);
        a search that walks the HNSW graph runs on its own, with its settings. RRF's payloads follow
        in one more read."""
        with self._conn() as conn:
            exact = self._exact(conn, specs)
            plans: list[list[_Plan]] = []
            for spec in specs:
                if spec.dense is not None and spec.sparse is not None:
                    plans.append([self._dense_plan(spec.filter, spec.dense, spec.prefetch_limit, False, exact),
                                  _lexical_plan(spec.filter, spec.sparse, spec.prefetch_limit, False)])
                elif spec.dense is not None:
                    plans.append([self._dense_plan(spec.filter, spec.dense, spec.limit, spec.with_payload, exact)])
                elif spec.sparse is not None:
                    plans.append([_lexical_plan(spec.filter, spec.sparse, spec.limit, spec.with_payload)])
                else:
                    raise StoreError("a search needs a dense or a sparse vector")
            _run_plans(conn, [plan for group in plans for plan in group])
            answers: list[list[Scored]] = []
            wanted: list[str] = []
            for spec, group in zip(specs, plans, strict=True):
                if len(group) == 2:
                    dense, lexical = (plan.rows for plan in group)
                    fused = rrf_fusion([i for i, _, _ in dense], [i for i, _, _ in lexical], k=RRF_K,
                                       limit=spec.limit)
                    answers.append([(i, None, s) for i, s in fused])
                    if spec.with_payload:
                        wanted += [i for i, _ in fused]
                else:
                    answers.append(group[0].rows)
            if not wanted:
                return answers
            payloads = {pid: payload for pid, payload, _ in self._payloads(conn, wanted)}
        return [[(i, payloads.get(i), s) for i, _, s in answer if i in payloads]
                if len(group) == 2 and spec.with_payload else answer
                for spec, group, answer in zip(specs, plans, answers, strict=True)]

    def _payloads(self, conn: Any, ids: list[str]) -> list[Scored]:
        rows = conn.execute("SELECT p.id::text, p.user_id, p.record FROM ix_points p WHERE p.id = ANY(%s::uuid[])",
                            (list(dict.fromkeys(ids)),)).fetchall()
        return [(r[0], {"user_id": r[1], RECORD_FIELD: r[2]}, 0.0) for r in rows]

    def _exact(self, conn: Any, specs: list[SearchSpec]) -> set[str]:
        """The users of ``specs`` whose points a search ranks exactly (at most ``exact_max``)."""
        users = sorted({u for s in specs if s.dense is not None and (u := _user(s.filter)) is not None})
        now = time.monotonic()
        with self._sizes_lock:
            known = {u: self._sizes[u][1] for u in users if u in self._sizes and now - self._sizes[u][0] < SIZES_TTL_S}
        missing = [u for u in users if u not in known]
        if missing:
            found = dict(conn.execute("SELECT user_id, points FROM ix_users WHERE user_id = ANY(%s)",
                                      (missing,)).fetchall())
            with self._sizes_lock:
                for u in missing:
                    known[u] = int(found.get(u, 0))
                    self._sizes[u] = (now, known[u])
                    self._sizes.move_to_end(u)
                while len(self._sizes) > SIZES_KEPT:
                    self._sizes.popitem(last=False)
        return {u for u in users if known[u] <= self.exact_max}

    def _dense_plan(self, spec: FilterSpec, dense: list[float], limit: int, with_payload: bool,
                    exact: set[str]) -> _Plan:
        where, params = _where(spec)
        query = _vector_text(dense)
        cols = "p.id::text, p.user_id, p.record" if with_payload else "p.id::text, NULL, NULL"
        ranked_exactly = _user(spec) in exact
        # ``+ 0`` keeps the planner off the HNSW index: the scope's rows are ranked exactly
        order = "(p.dense <=> %s::vector) + 0" if ranked_exactly else "p.dense <=> %s::vector"
        sql = (f"SELECT {cols}, 1 - (p.dense <=> %s::vector) FROM ix_points p WHERE {where} "
               f"ORDER BY {order}, p.id LIMIT %s")
        settings = None if ranked_exactly else {"hnsw.ef_search": str(min(1000, max(EF_SEARCH, limit))),
                                                "hnsw.iterative_scan": "strict_order"}
        return _Plan(sql, (query, *params, query, limit), with_payload, settings)

    def _make_room(self, operation: str, points: int, *, keep_reserve: bool = False) -> None:
        return None  # the server keeps its own disk: a full one answers an error (StoreError)

    def _flush(self) -> None:
        return None  # every write is committed (with the journal's transaction) before it returns

    def _close(self) -> None:
        if self._owns_pool:  # a journal's pool is closed by the journal
            self._pool.close()


class _Plan:
    """One SQL search and, once run, its hits."""

    def __init__(self, sql: str | None, args: tuple[Any, ...], with_payload: bool,
                 settings: dict[str, str] | None = None) -> None:
        self.sql, self.args, self.with_payload, self.settings = sql, args, with_payload, settings
        self.rows: list[Scored] = []


def _run_plans(conn: Any, plans: list[_Plan]) -> None:
    """Run ``plans``: those without settings in one pipeline (one round trip), the others one by one."""
    batch = [p for p in plans if p.sql is not None and p.settings is None]
    if len(batch) > 1:
        with conn.pipeline():
            cursors = [conn.execute(p.sql, p.args) for p in batch]
        for plan, cur in zip(batch, cursors, strict=True):
            plan.rows = [_scored(r, plan.with_payload) for r in cur.fetchall()]
    elif batch:
        batch[0].rows = [_scored(r, batch[0].with_payload) for r in conn.execute(batch[0].sql, batch[0].args)]
    for plan in plans:
        if plan.sql is not None and plan.settings is not None:
            with _local_settings(conn, plan.settings):
                plan.rows = [_scored(r, plan.with_payload) for r in conn.execute(plan.sql, plan.args).fetchall()]


def _user(spec: FilterSpec) -> str | None:
    users = [c.value for c in spec.must if isinstance(c, Match) and c.key == "user_id"]
    return users[0] if users else None


def _lexical_plan(spec: FilterSpec, sparse: qdrant_edge.SparseVector, limit: int, with_payload: bool) -> _Plan:
    """BM25 with Qdrant's IDF: ``N`` every scope's points, ``df`` the points holding the term."""
    terms = [int(t) for t in sparse.indices]
    if not terms:
        return _Plan(None, (), with_payload)
    where, params = _where(spec)
    user = _user(spec)
    scope = " AND t.user_id = %s" if user is not None else ""
    cols = "p.id::text, p.user_id, p.record" if with_payload else "p.id::text, NULL, NULL"
    sql = (
        "WITH q(term, qw) AS (SELECT * FROM unnest(%s::bigint[], %s::float8[])), "
        "n AS (SELECT coalesce(sum(points), 0)::float8 AS n FROM ix_users), "
        "s AS MATERIALIZED (SELECT q.term, q.qw * ln(1 + (n.n - d.df + 0.5) / (d.df + 0.5)) AS w FROM q CROSS JOIN n "
        "CROSS JOIN LATERAL (SELECT count(*)::float8 AS df FROM ix_terms x WHERE x.term = q.term) d), "
        # scores summed by point id alone; the points' rows (filters, records) joined to the sums only
        f"sc AS (SELECT t.point_id, sum(s.w * t.weight) AS score FROM s JOIN ix_terms t ON t.term = s.term{scope} "
        "GROUP BY t.point_id) "
        f"SELECT {cols}, sc.score FROM sc JOIN ix_points p ON p.id = sc.point_id WHERE {where} "
        "ORDER BY sc.score DESC, p.id LIMIT %s")
    args = (terms, [float(v) for v in sparse.values], *([user] if user is not None else []), *params, limit)
    return _Plan(sql, args, with_payload)


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


def _vector_text(vector: list[float]) -> str:
    return "[" + ",".join(map(repr, vector)) + "]"


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
    return payload, vector


def _scored(row: Any, with_payload: bool) -> Scored:
    payload = {"user_id": row[1], RECORD_FIELD: row[2]} if with_payload else None
    return row[0], payload, float(row[3])
