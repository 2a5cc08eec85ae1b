"""The journal's schema, as registered migrations, written once for both databases.

Each migration takes the dialect for what the two spell differently (``INTEGER``/``BIGINT``,
``REAL``/``DOUBLE PRECISION``, ``BLOB``/``BYTEA``, ``AUTOINCREMENT``/identity, a random id) and runs
in the opening transaction together with the record of its version. Migrations only add: opening
a store never deletes or rewrites data. The statements keep the layout they always had: SQLite
keeps each ``CREATE`` statement's text in the file, so a store made now holds, byte for byte, the
schema of one made before (``tests/storage/test_schema_snapshot.py`` checks both databases).

* v1 — raw turns, history, usage counters, sleep queue, speakers.
* v2 — the journal becomes the source of truth for memories: canonical memory rows (payload,
  dense vector, status, index state, access counters) beside the raw turns; turn status codes
  (pending, processed, quarantined, dropped) with an error text; the full previous record on
  history rows (so a change can be undone); the store's identity (``store_id``) and the
  generation of its vector index. A store written by v1 keeps its memories in the index only;
  ``import_index`` tells the facade to copy them into the journal once.
* v3 (``_v3_keys``) — API keys of the server: an id, the SHA-256 of the secret (never the secret),
  the user it reaches (none for an admin key), a label, when it was created and revoked.
* v4 (``_v4_graph``) — the LTM graph, shared by the users of the store and de-identified: nodes
  (with their embedding), edges, and evidence links from one subject's memory to one node or edge
  (the subject is a keyed hash of the user id, never the id itself).
* v5 (``_v5_ltm_pending``) — the LTM hand-over queue: evicted MTM items waiting for the next
  consolidation cycle (marked in the eviction's transaction, cleared in the cycle's).
* v6 (``_v6_row_formats``) — no table changes: rows may now hold formats a v5 reader cannot decode
  (a memory's vector as int8 with a scale, ``_vectors``; an ADD history row that refers to its
  memory's text instead of a copy, event ``ADD=``; a payload that keeps a repeated field once,
  ``compressed_memory: true``). The version is raised so that an older dialogmem
  refuses the store ("schema version 6; this dialogmem reads up to 5") instead of failing on the
  first such row. This version reads v5 rows as they are, so a v5 store opens read-only without
  an upgrade (``READABLE_FROM``).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum

from ._dialect import Dialect
from ._rows import Conn

SCHEMA_VERSION = 6
#: the oldest version this code reads as it is (later migrations changed no table): a store of that
#: version opens read-only without an upgrade
READABLE_FROM = 5


class TurnStatus(IntEnum):
    """The ``processed`` column of a turn."""

    PENDING = 0  # journaled, its memories not written yet (the write buffer)
    PROCESSED = 1
    QUARANTINED = 2  # processing failed; kept for an operator to retry or drop
    DROPPED = 3  # an operator gave up on it; the raw turn stays


class IndexState(IntEnum):
    """Whether a memory row's index copy is up to date (the outbox of the vector index)."""

    SYNCED = 0
    UPSERT = 1  # the index must hold this row as it is in the journal
    REMOVE = 2  # the index must not hold it (deleted or evicted)
    FAILED = 3  # the index refused it; ``dialogmem repair`` retries


def run_script(db: Conn, script: str) -> None:
    # sqlite3's executescript() would COMMIT first and break the migration's transaction
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement, ())


def _v1(db: Conn, d: Dialect) -> None:
    run_script(db, f"""
        CREATE TABLE IF NOT EXISTS turns (
            seq {d.serial_key},
            id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            agent_id TEXT,
            session_id TEXT,
            speaker TEXT NOT NULL,
            role TEXT,
            content TEXT NOT NULL,
            time_stamp TEXT NOT NULL,
            float_time_stamp {d.real} NOT NULL,
            weekday TEXT NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{{}}',
            processed {d.integer} NOT NULL DEFAULT 0,
            created_at {d.real} NOT NULL,
            UNIQUE (user_id, id)
        );
        CREATE INDEX IF NOT EXISTS turns_pending ON turns (processed, user_id, seq);
        CREATE TABLE IF NOT EXISTS history (
            seq {d.serial_key},
            memory_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            event TEXT NOT NULL,
            old_memory TEXT,
            new_memory TEXT,
            timestamp {d.real} NOT NULL,
            actor TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS history_memory ON history (user_id, memory_id, seq);
        CREATE TABLE IF NOT EXISTS usage (
            kind TEXT NOT NULL,
            stage TEXT NOT NULL,
            calls {d.integer} NOT NULL DEFAULT 0,
            prompt_tokens {d.integer} NOT NULL DEFAULT 0,
            completion_tokens {d.integer} NOT NULL DEFAULT 0,
            latency_ms {d.real} NOT NULL DEFAULT 0,
            failures {d.integer} NOT NULL DEFAULT 0,
            fallbacks {d.integer} NOT NULL DEFAULT 0,
            PRIMARY KEY (kind, stage)
        );
        CREATE TABLE IF NOT EXISTS sleep_pending (
            memory_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            PRIMARY KEY (user_id, memory_id)
        );
        CREATE TABLE IF NOT EXISTS speakers (
            user_id TEXT NOT NULL,
            speaker TEXT NOT NULL,
            PRIMARY KEY (user_id, speaker)
        )
    """)


def _v2(db: Conn, d: Dialect) -> None:
    had_turns = db.execute("SELECT EXISTS (SELECT 1 FROM turns)", ()).fetchone()[0]
    run_script(db, f"""
        ALTER TABLE turns {d.add_column} error TEXT;
        ALTER TABLE history {d.add_column} old_record TEXT;
        CREATE TABLE IF NOT EXISTS memories (
            id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            status TEXT NOT NULL DEFAULT 'active',
            tier TEXT NOT NULL DEFAULT 'mtm',
            agent_id TEXT,
            session_id TEXT,
            speaker_name TEXT NOT NULL DEFAULT '',
            float_time_stamp {d.real} NOT NULL,
            version {d.integer} NOT NULL DEFAULT 1,
            payload TEXT NOT NULL,
            vector {d.blob},
            access_count {d.integer} NOT NULL DEFAULT 0,
            last_accessed {d.real},
            index_state {d.integer} NOT NULL DEFAULT 1,
            index_error TEXT,
            updated_at {d.real} NOT NULL
        );
        CREATE INDEX IF NOT EXISTS memories_user ON memories (user_id, status, id);
        CREATE INDEX IF NOT EXISTS memories_outbox ON memories (index_state) WHERE index_state != 0
    """)
    insert = "INSERT INTO meta (key, value) VALUES ({}) ON CONFLICT DO NOTHING"
    db.execute(insert.format(f"'store_id', {d.random_hex32}"), ())
    db.execute(insert.format("'index_generation', '1'"), ())
    if had_turns:  # a v1 store: its memories live only in the vector index so far
        db.execute(insert.format("'import_index', '1'"), ())


def _v3_keys(db: Conn, d: Dialect) -> None:
    run_script(db, f"""
        CREATE TABLE IF NOT EXISTS api_keys (
            key_id TEXT PRIMARY KEY,
            secret_sha256 TEXT NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('user', 'admin')),
            user_id TEXT,
            label TEXT NOT NULL DEFAULT '',
            created_at {d.real} NOT NULL,
            revoked_at {d.real},
            CHECK ((role = 'admin') = (user_id IS NULL))
        );
        CREATE INDEX IF NOT EXISTS api_keys_user ON api_keys (user_id)
    """)


def _v4_graph(db: Conn, d: Dialect) -> None:
    run_script(db, f"""
        CREATE TABLE IF NOT EXISTS ltm_nodes (
            id TEXT PRIMARY KEY,
            type TEXT NOT NULL,
            text TEXT NOT NULL,
            evidence {d.integer} NOT NULL,
            confidence {d.real} NOT NULL,
            created_at {d.real} NOT NULL,
            updated_at {d.real} NOT NULL,
            dropped_at {d.real},
            vector {d.blob}
        );
        CREATE TABLE IF NOT EXISTS ltm_edges (
            id TEXT PRIMARY KEY,
            type TEXT NOT NULL,
            source TEXT NOT NULL,
            target TEXT NOT NULL,
            evidence {d.integer} NOT NULL,
            confidence {d.real} NOT NULL,
            created_at {d.real} NOT NULL,
            updated_at {d.real} NOT NULL,
            dropped_at {d.real}
        );
        CREATE INDEX IF NOT EXISTS ltm_edges_source ON ltm_edges (source);
        CREATE INDEX IF NOT EXISTS ltm_edges_target ON ltm_edges (target);
        CREATE TABLE IF NOT EXISTS ltm_links (
            subject_key TEXT NOT NULL,
            memory_id TEXT NOT NULL,
            target_id TEXT NOT NULL,
            PRIMARY KEY (subject_key, memory_id, target_id)
        );
        CREATE INDEX IF NOT EXISTS ltm_links_target ON ltm_links (target_id)
    """)


def _v5_ltm_pending(db: Conn, d: Dialect) -> None:
    run_script(db, """
        CREATE TABLE IF NOT EXISTS ltm_pending (
            user_id TEXT NOT NULL,
            memory_id TEXT NOT NULL,
            PRIMARY KEY (user_id, memory_id)
        )
    """)


def _v6_row_formats(db: Conn, d: Dialect) -> None:
    """Nothing to change: the version says which row formats the store may hold (see above)."""


#: version -> migration; each runs in the opening transaction together with its version record
MIGRATIONS: dict[int, Callable[[Conn, Dialect], None]] = {1: _v1, 2: _v2, 3: _v3_keys, 4: _v4_graph,
                                                          5: _v5_ltm_pending, 6: _v6_row_formats}
