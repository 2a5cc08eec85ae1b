"""The journal's SQL: its schema is what stores of schema version 5 hold (version 6 changed no table,
only the row formats a store may hold), on both databases, byte for byte; and every statement takes
its parameter marks from the dialect.

``tests/fixtures/journal_schema_v5.txt`` was written by the journal as it was before its SQL was
written once over a dialect (the SQLite journal had its own DDL, the PostgreSQL journal a twin):
SQLite's ``sqlite_master`` text of every table and index, PostgreSQL's columns (type, default,
identity), indexes and constraints, for a new store and for one migrated from version 1. A store
made now must hold exactly that, or stores made before and after would differ. A schema change
comes with a new version (and this file rewritten from the new migration)."""

from __future__ import annotations

import ast
import re
import sqlite3
import uuid
from pathlib import Path

from dialogmem._config import JournalConfig
from dialogmem._journal import SCHEMA_VERSION, SQLiteJournal, open_journal
from dialogmem._journal._dialect import POSTGRES, SQLITE
from dialogmem._journal._schema import MIGRATIONS

SNAPSHOT = Path(__file__).resolve().parents[1] / "fixtures" / "journal_schema_v5.txt"


def _snapshot() -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    for line in SNAPSHOT.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            sections[line[3:]] = []
        else:
            sections[next(reversed(sections))].append(line)
    return sections


def _sqlite_schema(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
                          "ORDER BY type, name").fetchall()
        keys = db.execute("SELECT key FROM meta ORDER BY key").fetchall()
    finally:
        db.close()
    return [repr(r) for r in rows] + [repr(keys)]


def _pg_schema(url: str, schema: str) -> list[str]:
    import psycopg

    with psycopg.connect(url) as c:
        out = [repr(r) for r in c.execute(
            "SELECT table_name, column_name, ordinal_position, data_type, column_default, is_nullable, is_identity, "
            "identity_generation FROM information_schema.columns WHERE table_schema=%s "
            "ORDER BY table_name, ordinal_position", (schema,))]
        out += [repr(r) for r in c.execute(
            "SELECT tablename, indexname, replace(indexdef, %s, 'S') FROM pg_indexes WHERE schemaname=%s "
            "ORDER BY tablename, indexname", (schema, schema))]
        out += [repr(r).replace(schema, "S") for r in c.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE connamespace=%s::regnamespace ORDER BY 1, 2", (schema,))]
        out.append(repr(c.execute(f"SELECT key FROM {schema}.meta ORDER BY key").fetchall()))
    return out


def test_the_snapshot_is_of_this_schema_version() -> None:
    assert SCHEMA_VERSION == 6 and set(_snapshot()) == {
        "sqlite fresh", "sqlite from v1", "postgres fresh", "postgres from v1"}


def test_a_sqlite_store_holds_this_schema_byte_for_byte(tmp_path: Path) -> None:
    expected = _snapshot()
    SQLiteJournal(tmp_path / "fresh.sqlite3").close()
    assert _sqlite_schema(tmp_path / "fresh.sqlite3") == expected["sqlite fresh"]
    db = sqlite3.connect(tmp_path / "v1.sqlite3")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    MIGRATIONS[1](db, SQLITE)
    db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    db.commit()
    db.close()
    SQLiteJournal(tmp_path / "v1.sqlite3").close()
    assert _sqlite_schema(tmp_path / "v1.sqlite3") == expected["sqlite from v1"]


def test_a_postgres_store_holds_this_schema(postgres_url: str, tmp_path: Path) -> None:
    import psycopg

    expected = _snapshot()
    fresh, old = ("s_" + uuid.uuid4().hex[:12] for _ in range(2))
    try:
        open_journal(JournalConfig(url=postgres_url, schema_name=fresh), tmp_path / "unused").close()
        assert _pg_schema(postgres_url, fresh) == expected["postgres fresh"]
        with psycopg.connect(postgres_url, autocommit=True) as raw:
            raw.execute(f"CREATE SCHEMA {old}")
            raw.execute(f"SET search_path TO {old}")
            raw.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            MIGRATIONS[1](raw, POSTGRES)
            raw.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        open_journal(JournalConfig(url=postgres_url, schema_name=old), tmp_path / "unused").close()
        assert _pg_schema(postgres_url, old) == expected["postgres from v1"]
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            for name in (fresh, old):
                conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def test_every_bound_parameter_of_the_journal_comes_from_its_dialect() -> None:
    """The SQL is written once and nothing rewrites it on the way to the database: a statement that
    spells a mark itself (``?`` or ``%s``) would run on one database and fail on the other, perhaps
    only on a path the contract suite does not take. So no SQL text in ``_journal/`` holds one; the
    dialect alone (``_dialect.py``) does."""
    sql = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|VALUES|WHERE|SET)\b")
    src = Path(__file__).resolve().parents[2] / "src" / "dialogmem" / "_journal"
    found = []
    for path in sorted(src.glob("*.py")):
        if path.name == "_dialect.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
            if sql.search(text) and ("?" in text or "%s" in text):
                found.append(f"{path.name}: {text[:80]}")
    assert found == []
    assert not (src / "_pg_schema.py").exists()  # one schema, in _schema.py, for both
