"""User isolation: for every verb, user B cannot read, change, delete or count user A's records."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import ingest_sample
from dialogmem import Memory, NotFoundError
from seams import remembered_texts, remembered_users


@pytest.fixture
def two_users(make_memory: Any, sample_data: dict[str, Any]) -> Memory:
    mem = make_memory()
    ingest_sample(mem, sample_data, "alice")
    mem.add([{"content": "I keep bees on my roof in Rotterdam.", "name": "Bob", "id": "b1"}],
            "bob", timestamp="2024-01-01T10:00:00", flush=True)
    return mem


def test_search_and_list_are_scoped(two_users: Memory) -> None:
    mem = two_users
    for query in ("Biscuit the dog", "Maya peanut allergy", "Tom half marathon Lisbon"):
        hits = mem.search(query, "bob", limit=20).hits
        assert [h.source_turn_ids for h in hits] == [["b1"]]  # only bob's single memory, never alice's
    assert {s for r in mem.get_all("bob") for s in r.source_turn_ids} == {"b1"}
    alice_hits = mem.search("bees on the roof in Rotterdam", "alice", limit=20).hits
    assert alice_hits and all("b1" not in h.source_turn_ids for h in alice_hits)


def test_id_verbs_treat_foreign_ids_as_missing(two_users: Memory) -> None:
    mem = two_users
    alice_id = mem.get_all("alice", limit=1)[0].id
    before = mem.get(alice_id, "alice")
    with pytest.raises(NotFoundError):
        mem.get(alice_id, "bob")
    with pytest.raises(NotFoundError):
        mem.update(alice_id, "hijacked", "bob")
    with pytest.raises(NotFoundError):
        mem.delete(alice_id, "bob")
    with pytest.raises(NotFoundError):
        mem.history(alice_id, "bob")
    after = mem.get(alice_id, "alice")
    assert after == before  # untouched


def test_counts_and_forget_are_scoped(two_users: Memory) -> None:
    mem = two_users
    alice_count = mem.stats("alice")["counts"]["memories"]
    assert mem.stats("bob")["counts"] == {"memories": 1,
        "evicted": 0, "turns": 1, "pending_turns": 0, "quarantined_turns": 0,
        "ltm_nodes": 0, "ltm_edges": 0, "ltm_links": 0}
    assert mem.forget_user("bob") == {"memories": 1, "turns": 1}
    assert mem.stats("alice")["counts"]["memories"] == alice_count
    assert mem.forget_user("nobody") == {"memories": 0, "turns": 0}


def test_same_message_id_in_two_users_is_independent(make_memory: Any) -> None:
    mem = make_memory()
    mem.add([{"content": "Alice's secret is the blue door.", "id": "x"}], "alice", flush=True)
    mem.add([{"content": "Bob's note about gardening.", "id": "x"}], "bob", flush=True)
    assert [r.memory for r in mem.get_all("bob")] != [r.memory for r in mem.get_all("alice")]
    assert "blue door" not in " ".join(r.memory for r in mem.get_all("bob"))


def test_sleep_is_scoped(two_users: Memory) -> None:
    mem = two_users
    bob_before = mem.get_all("bob")
    report = mem.sleep("alice")
    assert report is not None
    assert mem.get_all("bob") == bob_before


@pytest.mark.parametrize("vectors", ["text", "turns"])
def test_forget_user_leaves_no_text_in_the_caches(make_memory: Any, vectors: str) -> None:
    """The write stages remember turns between calls (compressed texts; with write.vectors = "turns"
    the parts' vectors): forgetting a user drops that user's, and only that user's. The query
    vectors are kept by text for every user: all of them go."""
    mem = make_memory(write={"vectors": vectors})
    mem.add([{"content": "My locker code is 4417 and I hide the key under the blue mat.", "id": "a1"}],
            "alice", flush=True)
    mem.add([{"content": "I keep bees on my roof in Rotterdam.", "id": "b1"},
             {"content": "The same words, another user.", "id": "x"}], "bob", flush=True)
    mem.add([{"content": "The same words, another user.", "id": "x"}], "alice", flush=True)
    assert mem.search("what is the code of my locker 4417", "alice").hits
    assert mem.search("where are the bees", "bob").hits
    before = remembered_texts(mem)
    assert any("4417" in t for t in before) and any("Rotterdam" in t for t in before)
    assert {"what is the code of my locker 4417", "where are the bees"} <= before
    mem.forget_user("alice")
    after = remembered_texts(mem)
    assert not any("4417" in t for t in after)
    assert any("Rotterdam" in t for t in after)
    # a turn with the same id and text is bob's as well as alice's: his stays
    assert any("The same words, another user." in t for t in after)
    assert "where are the bees" not in after  # the query vectors are everyone's: all dropped
    assert "alice" not in remembered_users(mem)  # not even her id

