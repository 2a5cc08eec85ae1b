"""Shared fixtures. Everything here is real: SQLite on disk, Qdrant Edge, MiniLM embeddings."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dialogmem import Memory
from seams import parse_conversation, sample_path


@pytest.fixture(scope="session")
def sample_data() -> dict[str, Any]:
    return json.loads(sample_path().read_text(encoding="utf-8"))


@pytest.fixture
def make_memory(tmp_path: Path) -> Iterator[Callable[..., Memory]]:
    """Opens Memory stores under tmp_path (LLM-free defaults); closes them after the test."""
    opened: list[Memory] = []

    def make(name: str = "store", **overrides: Any) -> Memory:
        mem = Memory(data_dir=tmp_path / name, **overrides)
        opened.append(mem)
        return mem

    yield make
    for mem in opened:
        mem.close()


def ingest_sample(mem: Memory, data: dict[str, Any], user_id: str) -> None:
    """Feed the sample conversation turn by turn, as a live chat, then flush."""
    for batch in parse_conversation(data):
        for msg in batch.messages:
            mem.add([msg], user_id, session_id=batch.session_id, timestamp=batch.timestamp)
    mem.flush(user_id)


def _server(needed_for: str, **options: Any) -> Iterator[str]:
    """A real PostgreSQL server (tests/pg_server.py) for a test session: a missing one fails the run,
    never skips it."""
    from pg_server import PostgresServer, PostgresUnavailable

    try:
        server = PostgresServer(**options).start()
    except PostgresUnavailable as exc:
        pytest.fail(f"{needed_for}: {exc}", pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()


def _schema(url: str, prefix: str) -> Iterator[str]:
    """A fresh schema (one store) on the server at ``url`` for one test, dropped afterwards."""
    import uuid

    import psycopg

    name = prefix + uuid.uuid4().hex[:16]
    yield name
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server for this test session; never skipped."""
    yield from _server("the PostgreSQL tests need a PostgreSQL server")


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    """A real PostgreSQL server with pgvector for this test session (``store.backend = "postgres"``);
    never skipped."""
    yield from _server("the PostgreSQL index tests need a PostgreSQL server with pgvector", vector=True)


@pytest.fixture
def pg_schema(postgres_url: str) -> Iterator[str]:
    """A fresh PostgreSQL schema (one store) for one test, dropped afterwards."""
    yield from _schema(postgres_url, "t_")


@pytest.fixture
def pgvector_schema(pgvector_url: str) -> Iterator[str]:
    """A fresh schema (one store) on the pgvector server for one test, dropped afterwards."""
    yield from _schema(pgvector_url, "v_")
