"""Shared fixtures. Everything here is real: SQLite on disk, Qdrant Edge, MiniLM embeddings."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dialogmem import Memory
from dialogmem._conversation import parse_conversation, sample_path


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
