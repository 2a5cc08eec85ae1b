"""The core: one change writer, provenance carried with turns, batched access statistics, one
backend chooser, errors inside the tree, a curated surface. Real SQLite, Edge and MiniLM; the LLM
is ``ScriptedLLM`` (a scripted fake, NOT a model) where one is needed."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import itertools
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dialogmem
from conftest import ingest_sample
from dialogmem import (
    AsyncMemory,
    ConfigError,
    DialogmemError,
    InputError,
    Memory,
    NotFoundError,
    ScriptedLLM,
    StoreError,
)
from dialogmem._transfer._conversation import message_chunks
from seams import parse_conversation, stored_vectors, trace_sql

SESSION = {"session_id": "s1", "timestamp": "2023-05-08T13:56:00"}


def test_every_memory_carries_its_own_turns_provenance(make_memory: Any) -> None:
    mem = make_memory()
    for i in range(5):
        mem.add([{"content": f"Fact {i}: my locker number is {400 + i}.", "id": f"m{i}",
                  "metadata": {"channel": "sms", "n": i}}], "u", agent_id="a1", metadata={"app": "x"}, **SESSION)
    records = mem.get_all("u")
    assert len(records) == 5
    assert {r.agent_id for r in records} == {"a1"}
    by_turn = {r.source_turn_ids[-1]: r for r in records}
    for i in range(5):
        assert by_turn[f"m{i}"].metadata == {"app": "x", "channel": "sms", "n": i}
    hits = mem.search("locker number", "u", limit=5, filters={"agent_id": "a1"}).hits
    assert len(hits) == 5


def test_access_counts_are_batched_and_never_lost(make_memory: Any, tmp_path: Path) -> None:
    mem = make_memory("acc")
    mem.add("My bike is a green Brompton.", "u", flush=True)
    (record,) = mem.get_all("u")
    statements: list[str] = []
    trace_sql(mem, statements.append)
    searches = 4 * 25

    def searcher() -> None:
        for _ in range(25):
            assert mem.search("bike", "u", limit=1).hits[0].id == record.id

    threads = [threading.Thread(target=searcher) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not [s for s in statements if s.startswith(("BEGIN", "UPDATE"))]  # searches write nothing
    assert mem.get(record.id, "u").access_count == searches  # pending counts are visible at once
    mem.close()
    with Memory(data_dir=tmp_path / "acc") as again:
        got = again.get(record.id, "u")
        assert got.access_count == searches and got.last_accessed is not None


def test_a_full_access_log_is_written_off_the_searching_thread(make_memory: Any, tmp_path: Path) -> None:
    mem = make_memory("acc-full")
    mem.add("My bike is a green Brompton.", "u", flush=True)
    (record,) = mem.get_all("u")
    mem._parts.access.threshold = 1  # every search fills the log
    writers: list[str] = []
    trace_sql(mem, lambda sql: writers.append(threading.current_thread().name) if sql.startswith("UPDATE") else None)
    for _ in range(12):
        assert mem.search("bike", "u", limit=1).hits[0].id == record.id
    mem._parts.writer.wait_counters()
    assert writers and set(writers) == {"dialogmem-counters"}  # the searches waited for no write
    assert mem.get(record.id, "u").access_count == 12
    mem.close()
    with Memory(data_dir=tmp_path / "acc-full") as again:
        assert again.get(record.id, "u").access_count == 12  # none lost


def test_a_failed_background_write_of_counts_keeps_them_and_the_next_one_raises(
        make_memory: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    mem = make_memory("acc-fail")
    mem.add("My bike is a green Brompton.", "u", flush=True)
    (record,) = mem.get_all("u")
    mem._parts.access.threshold = 1
    journal = mem._parts.journal
    commit = journal.commit

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("the journal is gone")

    monkeypatch.setattr(journal, "commit", broken)
    mem.search("bike", "u", limit=1)  # its write fails on the background thread: logged, counts kept
    mem._parts.writer.wait_counters()
    assert "writing access counts failed" in caplog.text
    with pytest.raises(StoreError, match="journal is gone"):
        mem.search("bike", "u", limit=1)  # the next write runs on the caller's thread and raises
    monkeypatch.setattr(journal, "commit", commit)
    mem.search("bike", "u", limit=1)
    assert mem.get(record.id, "u").access_count == 3  # none of the three searches' counts lost


def test_an_llm_free_add_is_one_transaction(make_memory: Any) -> None:
    mem = make_memory()
    mem.add("warm up", "u", flush=True)
    statements: list[str] = []
    trace_sql(mem, statements.append)
    mem.add([{"content": "I adopted a dog named Biscuit.", "id": "d1"}], "u", **SESSION)
    assert sum(s.startswith("BEGIN") for s in statements) == 1
    assert [h.source_turn_ids for h in mem.search("Biscuit", "u", limit=1).hits] == [["d1"]]


def test_update_refreshes_keywords_and_entities(make_memory: Any) -> None:
    mem = make_memory()
    mem.add("Caroline joined the Lisbon climbing club.", "u", flush=True)
    (old,) = mem.get_all("u")
    new = mem.update(old.id, "Melanie bought a Yamaha violin in Porto.", "u")
    assert "Porto" in new.entities and "Lisbon" not in new.entities
    assert "violin" in new.keywords and "climbing" not in new.keywords
    assert mem.search("Yamaha violin", "u", limit=1).hits[0].id == old.id
    assert [h.event.value for h in mem.history(old.id, "u")] == ["ADD", "UPDATE"]
    assert mem.history(old.id, "u")[1].previous == old


def test_a_slow_model_for_one_user_blocks_no_one_else(tmp_path: Path) -> None:
    started, release = threading.Event(), threading.Event()

    def script(stage: str, messages: list[dict[str, str]]) -> str:
        if "red bike" in messages[-1]["content"]:  # ann's batch: the model "thinks" until released
            started.set()
            release.wait(120)
        return '{"data": []}'

    mem = Memory(data_dir=tmp_path / "s", llm_client=ScriptedLLM(script),
                 write={"extractor": "llm", "segmenter": "none", "sensory_tokens": 1, "stm_threshold": 0})
    try:
        slow = threading.Thread(target=lambda: mem.add("Ann rides a red bike to work.", "ann", flush=True))
        slow.start()
        assert started.wait(10)
        mem.add([{"content": "Bob keeps bees.", "id": "b1"}], "bob", flush=True)  # while ann's model runs
        assert mem.search("bees", "bob").hits
        mem.stats("bob")
        # bob's calls finished while ann's model call still waits to be released (no timing bound:
        # were bob blocked behind ann, he would finish only after the 120 s wait, with ann done)
        assert slow.is_alive() and not release.is_set()
        release.set()
        slow.join(30)
        assert mem.get_all("ann")  # the rules covered ann's turn when the model gave no fact
    finally:
        release.set()
        mem.close()


@pytest.mark.parametrize("setting", [{"read": {"planner": "llm"}}, {"read": {"selector": "llm"}},
                                     {"write": {"extractor": "llm"}}, {"sleep": {"updater": "llm"}}])
def test_llm_without_a_model_is_a_config_error_in_every_role(tmp_path: Path, setting: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="needs an LLM"):
        Memory(data_dir=tmp_path / "s", **setting)


def test_misspelt_settings_and_bad_values_fail_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="write"):
        Memory(data_dir=tmp_path / "s", write={"contxt_turns": 1})
    with pytest.raises(ConfigError, match=r"read\.max_query_chars"):
        Memory(data_dir=tmp_path / "s", read={"max_query_chars": -1})
    with pytest.raises(ConfigError):
        Memory(dialogmem.Config(data_dir=tmp_path / "s"), store={"backend": "nope"})


def test_errors_stay_inside_the_tree(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match="data directory"):
        Memory(data_dir=blocker / "store")
    with pytest.raises(StoreError):
        _ = AsyncMemory(data_dir=tmp_path / "a").sync
    with pytest.raises(ConfigError):
        Memory("not a config")  # type: ignore[arg-type]


def test_search_reports_its_plan_and_timings(make_memory: Any) -> None:
    mem = make_memory()
    mem.add([{"content": "I ran the Lisbon half marathon.", "name": "Ann"}], "u",
            timestamp="2023-05-08T10:00:00", flush=True)
    result = mem.search("What did Ann run last week?", "u", reference_time="2023-05-15T09:00:00")
    assert result.plan is not None and result.plan.views[0] == "What did Ann run last week?"
    assert result.plan.time_from is not None and result.plan.time_from.startswith("2023-05-08")
    assert "time" in result.plan.filters and result.plan.relaxed == []
    assert set(result.timings_ms) == {"plan", "embed", "retrieve", "select"}
    empty = mem.search("What did Ann run last year?", "u", reference_time="2023-05-15T09:00:00")
    assert empty.plan is not None and empty.plan.relaxed == ["time"]  # nothing in 2022: the window was dropped


def test_add_conversation_and_import_records(make_memory: Any, sample_data: dict[str, Any]) -> None:
    mem = make_memory()
    done: list[int] = []
    result = mem.add_conversation(sample_data, "alice", progress=lambda n, total: done.append(n))
    assert len(result.turn_ids) == 36 == done[-1] and result.pending_turns == 0
    records = mem.get_all("alice", limit=1000)
    vectors = stored_vectors(mem, "alice", [r.id for r in records])
    copies = [r.model_copy(update={"user_id": "bob"}).model_dump() for r in records]
    for c in copies:  # memory ids belong to one user
        c["id"] = c["id"][:-12] + "b0b0b0b0b0b0"
    assert mem.import_records(copies, vectors=[vectors[r.id] for r in records]) == len(records)
    assert mem.search("dog's name", "bob", limit=1).hits
    with pytest.raises(InputError, match="another user"):
        mem.import_records([records[0].model_copy(update={"user_id": "carol"})])
    with pytest.raises(InputError, match="UUID"):
        mem.import_records([{"id": "x", "user_id": "u", "memory": "m", "time_stamp": "2023-01-01T00:00:00",
                             "float_time_stamp": 0, "weekday": "Sun"}])


def test_add_conversation_llm_free_writes_a_session_per_transaction_the_same_memories(
        make_memory: Any, sample_data: dict[str, Any]) -> None:
    """LLM-free, a session goes through one ``add`` (one embedding list, one journal transaction) and
    gives the memories that feeding it message by message gives."""
    whole, one = make_memory("whole"), make_memory("one")
    statements: list[str] = []
    trace_sql(whole, statements.append)
    done: list[int] = []
    whole.add_conversation(sample_data, "alice", progress=lambda n, total: done.append(n))
    sessions = parse_conversation(sample_data)
    assert done == list(itertools.accumulate(len(b.messages) for b in sessions))
    assert sum(s.startswith("BEGIN") for s in statements) <= len(sessions) + 1  # + the final flush's check
    ingest_sample(one, sample_data, "alice")

    def written(mem: Any) -> list[tuple[str, str, tuple[str, ...], str]]:
        return sorted((r.id, r.memory, tuple(r.source_turn_ids), r.time_stamp)
                      for r in mem.get_all("alice", limit=1000))

    assert written(whole) == written(one) and len(written(whole)) == done[-1]
    ids = [w[0] for w in written(whole)]
    ours, theirs = stored_vectors(whole, "alice", ids), stored_vectors(one, "alice", ids)
    assert all(np.array_equal(ours[i], theirs[i]) for i in ids)  # int8: each text embedded alone, in a list too


def test_add_conversation_feeds_message_by_message_where_a_list_would_read_differently(
        make_memory: Any, sample_data: dict[str, Any]) -> None:
    """Coreference resolves a batch's own context turns, not the journaled ones before it: such a
    store is fed one message a call, as a live chat (the same memories as ``add`` turn by turn)."""
    whole, one = make_memory("whole", write={"coref": True}), make_memory("one", write={"coref": True})
    statements: list[str] = []
    trace_sql(whole, statements.append)
    whole.add_conversation(sample_data, "alice")
    ingest_sample(one, sample_data, "alice")
    assert sum(s.startswith("BEGIN") for s in statements) >= 36

    def written(mem: Any) -> list[tuple[str, str]]:
        return sorted((r.id, r.memory) for r in mem.get_all("alice", limit=1000))

    assert written(whole) == written(one)


def test_message_chunks_bound_a_call_and_send_a_repeated_id_later() -> None:
    msgs = [{"id": f"m{i}", "content": "x"} for i in range(5)]
    assert [len(c) for c in message_chunks(msgs, 2)] == [2, 2, 1]
    again = [msgs[0], msgs[1], msgs[0], {"content": "no id"}, {"content": "no id"}]
    assert message_chunks(again, 256) == [[msgs[0], msgs[1]], [msgs[0], {"content": "no id"}, {"content": "no id"}]]


def test_add_conversation_takes_a_repeated_message_as_a_retry(make_memory: Any) -> None:
    mem = make_memory()
    said = [{"id": "a", "content": "I adopted a dog named Biscuit."}, {"id": "b", "content": "He is a beagle."},
            {"id": "a", "content": "I adopted a dog named Biscuit."}]
    result = mem.add_conversation(said, "alice")
    assert result.turn_ids == ["a", "b", "a"] and mem.stats("alice")["counts"]["memories"] == 2


def test_public_surface_is_curated() -> None:
    public = {n for n in dir(dialogmem) if not n.startswith("_") and not inspect.ismodule(getattr(dialogmem, n))}
    assert public == set(dialogmem.__all__) - {"__version__"}
    for name in ("LLMClient", "ScriptedLLM", "Embedder", "VectorIndex", "Memory", "AsyncMemory", "SearchPlan"):
        assert name in dialogmem.__all__
    for sub in ("_write", "_read", "_sleep", "_store", "_models", "_prompts", "_journal"):
        assert importlib.import_module(f"dialogmem.{sub}")  # private subpackages
    assert issubclass(NotFoundError, DialogmemError) and issubclass(NotFoundError, KeyError)


def test_async_memory_has_real_signatures() -> None:
    for name, fn in inspect.getmembers(AsyncMemory, inspect.iscoroutinefunction):
        if name.startswith("_") or name == "open":  # open() takes config overrides, like Memory()
            continue
        params = inspect.signature(fn).parameters.values()
        assert not [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD], name
        assert name in dir(Memory), name
    verbs = {n for n, _ in inspect.getmembers(Memory, inspect.isfunction) if not n.startswith("_")}
    missing = sorted(verbs - {n for n, _ in inspect.getmembers(AsyncMemory) if not n.startswith("_")})
    assert missing == [], missing  # every verb of Memory is a verb of AsyncMemory (repair is a classmethod)


def test_async_first_calls_open_the_store_once(tmp_path: Path) -> None:
    async def main() -> list[Any]:
        amem = AsyncMemory(data_dir=tmp_path / "s")
        try:
            return await asyncio.gather(*(amem.add(f"note {i}", "u", flush=True) for i in range(4)))
        finally:
            await amem.close()

    results = asyncio.run(main())
    assert len(results) == 4 and all(r.memories for r in results)
