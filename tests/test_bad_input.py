"""Bad input: clear errors or intact storage, never a broken store."""

from __future__ import annotations

from typing import Any

import pytest

from dialogmem import InputError, Memory, NotFoundError


@pytest.fixture
def mem(make_memory: Any) -> Memory:
    return make_memory()


@pytest.mark.parametrize("messages", [[], "", "   ", [{"content": ""}], [{"content": "  \n"}],
                                      [{"role": "user"}], [42], [{"content": "x", "bogus": 1}]])
def test_empty_or_malformed_messages_raise(mem: Memory, messages: Any) -> None:
    with pytest.raises(InputError):
        mem.add(messages, "u")
    assert mem.stats("u")["counts"]["turns"] == 0  # nothing half-written


@pytest.mark.parametrize("ts", ["yesterday", "not a date", "2023-13-45", "", float("nan"), 1e20, True])
def test_invalid_timestamps_raise(mem: Memory, ts: Any) -> None:
    with pytest.raises(InputError):
        mem.add([{"content": "hello", "timestamp": ts}], "u")
    with pytest.raises(InputError):
        mem.add("hello", "u", timestamp=ts)


def test_one_bad_message_rejects_the_whole_call(mem: Memory) -> None:
    with pytest.raises(InputError, match="message 1"):
        mem.add([{"content": "fine"}, {"content": "bad", "timestamp": "garbage"}], "u")
    assert mem.stats("u")["counts"]["turns"] == 0


def test_lone_surrogates_are_rejected_clearly(mem: Memory) -> None:
    with pytest.raises(InputError, match="surrogate"):
        mem.add([{"content": "broken \ud800 text"}], "u")
    with pytest.raises(InputError, match="surrogate"):
        mem.add("fine", "u\udfff")
    with pytest.raises(InputError):
        mem.search("query \udc00", "u")


def test_invalid_utf8_bytes_are_rejected(mem: Memory) -> None:
    with pytest.raises(InputError):
        mem.add([{"content": b"\xff\xfe broken"}], "u")


def test_one_megabyte_turn_is_stored_intact(make_memory: Any) -> None:
    mem = make_memory(write={"max_turn_chars": 1_000_000})  # the default limit is 200,000 characters
    big = ("The quick brown fox jumps over the lazy dog. " * 23000)[:1_000_000]
    mem.add([{"content": big, "id": "big"}], "u", timestamp="2024-01-01T00:00:00", flush=True)
    turns = mem._parts.journal.turns("u", ids=["big"])
    assert turns[0].content == big  # the raw turn is kept byte for byte
    assert mem.search("quick brown fox", "u").hits[0].source_turn_ids == ["big"]


def test_over_limit_turn_is_rejected(make_memory: Any) -> None:
    mem = make_memory(write={"max_turn_chars": 1000})
    with pytest.raises(InputError, match="max_turn_chars"):
        mem.add("x" * 1001, "u")


def test_unknown_user(mem: Memory) -> None:
    assert mem.search("anything", "ghost").hits == []
    assert mem.get_all("ghost") == []
    with pytest.raises(NotFoundError):
        mem.get("00000000-0000-0000-0000-000000000000", "ghost")
    assert mem.stats("ghost")["counts"] == {"memories": 0,
        "evicted": 0, "turns": 0, "pending_turns": 0, "quarantined_turns": 0,
        "ltm_nodes": 0, "ltm_edges": 0, "ltm_links": 0}


@pytest.mark.parametrize("user", ["", "   ", None, 5, "a" * 300, "tab\tuser"])
def test_bad_user_ids(mem: Memory, user: Any) -> None:
    with pytest.raises(InputError):
        mem.add("hello", user)
    with pytest.raises(InputError):
        mem.search("hello", user)


def test_duplicate_message_id_same_content_is_idempotent(mem: Memory) -> None:
    mem.add([{"content": "I like tea.", "id": "a"}], "u", flush=True)
    mem.add([{"content": "I like tea.", "id": "a"}], "u", flush=True)
    assert mem.stats("u")["counts"]["turns"] == 1
    with pytest.raises(InputError, match="different content"):
        mem.add([{"content": "I like coffee.", "id": "a"}], "u")


def test_bad_filters_and_limits(mem: Memory) -> None:
    with pytest.raises(InputError):
        mem.search("q", "u", filters={"nonsense": 1})
    with pytest.raises(InputError):
        mem.search("q", "u", limit=0)
    with pytest.raises(InputError):
        mem.search("", "u")
    with pytest.raises(InputError):
        mem.update("00000000-0000-0000-0000-000000000000", "", "u")


def test_store_still_works_after_errors(mem: Memory) -> None:
    for bad in ([], [{"content": ""}], [{"content": "x", "timestamp": "nope"}]):
        with pytest.raises(InputError):
            mem.add(bad, "u")
    mem.add("The garage code is 4471.", "u", flush=True)
    assert "4471" in mem.search("garage code", "u").hits[0].memory
