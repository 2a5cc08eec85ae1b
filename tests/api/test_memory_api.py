"""The Memory API end to end on the LLM-free default, run against both Memory and AsyncMemory."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ingest_sample
from dialogmem import AsyncMemory, Event, Memory, NotFoundError, SearchResult


class AsyncDriver:
    """Calls AsyncMemory's coroutines from a sync test, so one suite exercises both facades."""

    def __init__(self, data_dir: Path) -> None:
        self._loop = asyncio.new_event_loop()
        self._mem = self._loop.run_until_complete(AsyncMemory.open(data_dir=data_dir))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._mem, name)
        return lambda *a, **kw: self._loop.run_until_complete(method(*a, **kw))

    def close(self) -> None:
        self._loop.run_until_complete(self._mem.close())
        self._loop.close()


@pytest.fixture(params=["sync", "async"])
def mem(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    m = Memory(data_dir=tmp_path / "store") if request.param == "sync" else AsyncDriver(tmp_path / "store")
    yield m
    m.close()


def test_add_search_cites_caller_ids(mem: Any, sample_data: dict[str, Any]) -> None:
    ingest_sample(mem, sample_data, "alice")
    result = mem.search("What is the name of Maya's dog?", "alice", limit=5)
    assert isinstance(result, SearchResult)
    assert result.hits, "no hits"
    top_sources = {s for h in result.hits[:3] for s in h.source_turn_ids}
    assert "D1:3" in top_sources  # "His name is Biscuit" cited by the caller's own message id
    hit = result.hits[0]
    assert hit.time_stamp.startswith("2023-") and hit.weekday in {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
    context = result.context().splitlines()
    assert context[0].startswith("[") and context[0].endswith("]") and " 2023 " in context[0]  # a time
    # header ("[Mon 8 May 2023 13:56]"), then the memories' lines, each once
    assert all(line in context for h in result.hits for line in h.memory.splitlines() if not line.endswith(" ..."))
    assert result.context_tokens > 0


def test_get_update_delete_history(mem: Any, sample_data: dict[str, Any]) -> None:
    ingest_sample(mem, sample_data, "alice")
    hit = mem.search("peanut allergy", "alice", limit=3).hits[0]
    rec = mem.get(hit.id, "alice")
    assert rec.id == hit.id and rec.user_id == "alice" and rec.version == 1

    new = mem.update(hit.id, "Maya is allergic to shellfish, not peanuts.", "alice")
    assert new.version == 2 and new.memory.startswith("Maya is allergic to shellfish")
    # re-embedded and re-indexed: the new wording is found by a query only it matches
    found = mem.search("shellfish", "alice", limit=3).hits
    assert found and found[0].id == hit.id and "shellfish" in found[0].memory

    mem.delete(hit.id, "alice")
    with pytest.raises(NotFoundError):
        mem.get(hit.id, "alice")
    events = [h.event for h in mem.history(hit.id, "alice")]
    assert events == [Event.ADD, Event.UPDATE, Event.DELETE]
    upd = mem.history(hit.id, "alice")[1]
    assert upd.old_memory == rec.memory and upd.new_memory == new.memory and upd.actor == "user"


def test_get_all_pages_and_stats(mem: Any, sample_data: dict[str, Any]) -> None:
    ingest_sample(mem, sample_data, "alice")
    total = mem.stats("alice")["counts"]["memories"]
    assert total >= 30  # 36 turns, one memory each at least in LLM-free mode
    seen: list[str] = []
    offset = None
    while True:
        page = mem.get_all("alice", limit=7, offset=offset)
        if not page:
            break
        seen += [r.id for r in page]
        if len(page) < 7:
            break
        offset = page[-1].id
    assert len(seen) == len(set(seen)) == total
    stats = mem.stats("alice")
    assert stats["counts"]["turns"] == 36 and stats["counts"]["pending_turns"] == 0
    assert stats["summary"]["total_embedding_calls"] > 0
    assert "latency" in stats


def test_forget_user_removes_everything(mem: Any, sample_data: dict[str, Any]) -> None:
    ingest_sample(mem, sample_data, "alice")
    ingest_sample(mem, sample_data, "bob")
    some_id = mem.get_all("alice", limit=1)[0].id
    counts = mem.forget_user("alice")
    assert counts["memories"] >= 30 and counts["turns"] == 36
    assert mem.get_all("alice") == []
    assert mem.search("Biscuit", "alice").hits == []
    assert mem.stats("alice")["counts"] == {"memories": 0, "evicted": 0, "turns": 0, "pending_turns": 0,
                                            "quarantined_turns": 0, "ltm_nodes": 0, "ltm_edges": 0,
                                            "ltm_links": 0}
    with pytest.raises(NotFoundError):
        mem.history(some_id, "alice")
    assert mem.stats("bob")["counts"]["memories"] >= 30  # the other user is untouched


def test_multi_party_any_order(mem: Any) -> None:
    msgs = [
        {"content": "I booked the venue for the reunion at Lakeside Hall.", "name": "Ana", "id": "m1"},
        {"content": "Great, I will bring the projector.", "name": "Ben", "id": "m2"},
        {"content": "And I will handle the catering from Rosa's Kitchen.", "name": "Chidi", "id": "m3"},
        {"content": "Rosa's Kitchen makes the best empanadas.", "name": "Chidi", "id": "m4"},
        {"content": "Agreed!", "name": "Ana", "id": "m5"},
    ]
    mem.add(msgs, "team", timestamp="2024-02-10T18:00:00", flush=True)
    hits = mem.search("who is doing the catering", "team", limit=3).hits
    catering = [h for h in hits if h.source_turn_ids[-1] == "m3"]  # m3's memory (m2 as its context)
    assert catering and catering[0].speaker_name == "Chidi"
    all_ids = {s for r in mem.get_all("team") for s in r.source_turn_ids}
    assert all_ids == {"m1", "m2", "m3", "m4", "m5"}  # nothing dropped, even "Agreed!"


def test_role_is_speaker_without_name(mem: Any) -> None:
    mem.add([{"role": "user", "content": "My favourite tea is genmaicha."},
             {"role": "assistant", "content": "Noted, genmaicha it is."}], "u", flush=True)
    speakers = {r.speaker_name for r in mem.get_all("u")}
    assert speakers == {"user", "assistant"}


def test_llm_free_end_to_end_add_flush_sleep_search(mem: Any, sample_data: dict[str, Any]) -> None:
    ingest_sample(mem, sample_data, "alice")
    # the same exchange delivered again under new ids (a client retry): its memories repeat old ones
    mem.add([{"content": "No way, congratulations! What's the dog's name?", "name": "Tom", "id": "dup1"},
             {"content": "His name is Biscuit. He's a three-year-old beagle mix from the Harbor Street shelter.",
              "name": "Maya", "id": "dup2"}], "alice", session_id="retry", timestamp="2023-03-05T09:00:00",
            flush=True)
    report = mem.sleep("alice")
    assert report.new_entries >= 37 and report.llm_calls == 0  # LLM-free: rules only
    assert report.merged >= 1  # the repeated sentence was merged into its older twin
    assert mem.sleep("alice").new_entries == 0  # incremental: nothing new, nothing to do
    planted = {  # question -> the messages that answer it
        "What is the name of Maya's dog?": {"D1:3"},
        "Which hospital does Maya work at?": {"D1:5", "D3:9"},
        "What allergy does Maya have?": {"D2:4"},
        "Who teaches Maya the cello?": {"D2:8"},
        "What was Tom's half marathon time?": {"D4:2"},
    }
    for question, answers in planted.items():
        cited = {s for h in mem.search(question, "alice", limit=5).hits for s in h.source_turn_ids}
        assert answers & cited, question
