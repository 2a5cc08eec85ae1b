"""Bad input: clear errors or intact storage, never a broken store."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dialogmem import InputError, Memory, NotFoundError
from seams import journal


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
    turns = journal(mem).turns("u", ids=["big"])
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


@pytest.mark.parametrize("char, name", [("\x7f", "U+007F"), ("\x00", "U+0000"), ("\u2028", "U+2028"),
                                        ("\u2029", "U+2029"), ("\u200b", "U+200B"), ("\u202e", "U+202E"),
                                        ("\ufeff", "U+FEFF"), ("\x85", "U+0085")])
def test_ids_with_invisible_characters_are_refused_saying_which_and_where(mem: Memory, char: str,
                                                                          name: str) -> None:
    user, code = f"eve{char}x", re.escape(name)
    with pytest.raises(InputError, match=rf"user_id .*{code}.* at position 3"):
        mem.add("hello", user)
    with pytest.raises(InputError, match=rf"session_id .*{code}"):
        mem.add("hello", "u", session_id=f"s{char}")
    with pytest.raises(InputError, match=rf"message 0 id .*{code}"):
        mem.add([{"content": "hello", "id": f"m{char}"}], "u")
    with pytest.raises(InputError, match=code):
        mem.search("hello", user)
    assert mem.stats("u")["counts"]["turns"] == 0


def test_a_long_id_is_told_its_length(mem: Memory) -> None:
    with pytest.raises(InputError, match="300 characters; at most 256"):
        mem.add("hello", "a" * 300)


def test_one_person_is_one_user_nfd_ids_are_refused(mem: Memory) -> None:
    import unicodedata

    nfc, nfd = unicodedata.normalize("NFC", "éve"), unicodedata.normalize("NFD", "éve")
    assert nfc != nfd
    mem.add("I keep bees.", nfc, flush=True)
    with pytest.raises(InputError, match="NFC") as err:
        mem.add("I keep wasps.", nfd)
    assert repr(nfc) in str(err.value)  # the message gives the id to send instead
    with pytest.raises(InputError, match="NFC"):
        mem.search("bees", nfd)
    assert mem.stats(nfc)["counts"]["turns"] == 1 and "bees" in mem.search("bees", nfc).hits[0].memory


@pytest.mark.parametrize("size", [101, 200_000, 480_000])
def test_long_timestamps_are_refused_before_parsing(mem: Memory, size: int) -> None:
    import time

    value = ("8 May 2023 " * (size // 11 + 1))[:size]
    start = time.process_time()
    with pytest.raises(InputError, match=f"{size} characters; a date is at most 100"):
        mem.add("hello", "u", timestamp=value)
    with pytest.raises(InputError, match="at most 100"):
        mem.add([{"content": "hello", "timestamp": value}], "u")
    with pytest.raises(InputError, match="at most 100"):
        mem.search("hello", "u", reference_time=value)
    assert time.process_time() - start < 0.5  # 200k characters took 5.1 s in dateparser
    mem.add("hello", "u", timestamp="Wednesday, the 27th of September 2023 at 11:59:59 pm")  # a long real date


@pytest.fixture(params=["sqlite", "postgres"])
def either_journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Memory]:
    journal: dict[str, Any] = {}
    if request.param == "postgres":  # its schema is dropped after this store is closed
        journal = {"url": request.getfixturevalue("postgres_url"), "schema_name": request.getfixturevalue("pg_schema")}
    with Memory(data_dir=tmp_path / "s", journal=journal) as mem:
        yield mem


def test_nul_is_refused_the_same_way_on_both_journals(either_journal: Memory) -> None:
    """The rule: no text the store keeps may hold NUL (U+0000). PostgreSQL text cannot, so SQLite
    refuses it too, before anything is written; other control characters in content are kept."""
    mem = either_journal
    for call in (lambda: mem.add("before\x00after", "u"),
                 lambda: mem.add([{"content": "fine", "name": "A\x00"}], "u"),
                 lambda: mem.add("fine", "u", metadata={"k": "v\x00"}),
                 lambda: mem.add("fine", "u", metadata={"k\x00": "v"}),
                 lambda: mem.add("fine", "u\x00"),
                 lambda: mem.search("q\x00", "u")):
        with pytest.raises(InputError, match=r"U\+0000"):
            call()
    assert mem.stats("u")["counts"]["turns"] == 0
    mem.add("tab\tand\x01 bell\x07 kept", "u", flush=True)
    memory = mem.get_all("u")[0]
    with pytest.raises(InputError, match=r"U\+0000"):
        mem.update(memory.id, "new\x00text", "u")
    assert journal(mem).turns("u")[0].content == "tab\tand\x01 bell\x07 kept"
