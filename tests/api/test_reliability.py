"""Never unopenable, never wrong: poison input, quarantine, idempotent retries, cut-off model output,
damaged or missing halves of a store, read-only opens, bounded sizes. Real SQLite, Edge and MiniLM;
``ScriptedLLM`` is a scripted fake (NOT a model)."""

from __future__ import annotations

import datetime as dt
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dialogmem import DialogmemError, InputError, Memory, ScriptedLLM, StoreError
from seams import crash_extractor_on, index_count, journal
from timing import assert_linear

WHEN = {"session_id": "s1", "timestamp": "2023-05-08T13:56:00"}


def nested(levels: int) -> dict[str, Any]:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(levels - 1):
        node["x"] = {}
        node = node["x"]
    return deep


@pytest.mark.parametrize("metadata", [
    {"k": "\ud800"},  # a lone surrogate: SQLite takes it, the index refuses it
    {"\udfff": 1},
    {"deep": nested(17)},
    {"when": dt.datetime(2024, 1, 1)}, {"tags": {"a", "b"}}, {"raw": b"bytes"}, {1: "x"},
    {"nan": float("nan")}, {"big": "x" * 70_000},
], ids=["surrogate-value", "surrogate-key", "17-levels", "datetime", "set", "bytes", "int-key", "nan", "70KB"])
def test_bad_metadata_is_refused_before_anything_is_written(make_memory: Any, tmp_path: Path,
                                                            metadata: dict[Any, Any]) -> None:
    mem = make_memory("poison")
    with pytest.raises(InputError):
        mem.add("hi", "bob", metadata=metadata)
    with pytest.raises(InputError):
        mem.add([{"content": "hi", "metadata": metadata}], "bob")
    assert mem.stats("bob")["counts"]["turns"] == 0
    mem.add("still works", "bob", flush=True)
    mem.close()
    with Memory(data_dir=tmp_path / "poison") as again:  # and the store opens as before
        assert [r.memory for r in again.get_all("bob")] == ["user: still works"]


def test_metadata_nested_130_levels_is_refused(make_memory: Any) -> None:
    with pytest.raises(InputError, match="nested"):
        make_memory().add("hi", "bob", metadata=nested(130))


def test_a_failing_turn_is_quarantined_and_never_blocks_the_store(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "s"
    with Memory(data_dir=data_dir, write={"sensory_tokens": 100_000}) as mem:  # the turns stay pending
        mem.add([{"content": "Fine turn about my cat Tom.", "id": "ok1"},
                 {"content": "This is poison.", "id": "bad"}], "u", **WHEN)
    fixed = crash_extractor_on(monkeypatch, "poison")  # an extractor bug
    with Memory(data_dir=data_dir) as mem:  # the replay at open fails: quarantined, the open succeeds
        (q,) = mem.quarantined()  # the batch failed; turn by turn, only the poison one fails again
        assert q.turn.id == "bad" and "extractor bug" in q.error
        assert [r.source_turn_ids[-1] for r in mem.get_all("u")] == ["ok1"]
        assert mem.stats("u")["counts"]["quarantined_turns"] == 1
        result = mem.add([{"content": "Another poison pill.", "id": "bad2"}], "u", **WHEN)
        assert result.quarantined == ["bad2"] and result.memories == []
        fixed()  # the bug is fixed
        retried = mem.retry_quarantined("u", ["bad"])
        assert [r.source_turn_ids[-1] for r in retried.memories] == ["bad"]
        assert mem.drop_quarantined("u", ["bad2"]) == 1
        assert mem.quarantined("u") == []
        assert [t.id for t in journal(mem).turns("u", ids=["bad2"])] == ["bad2"]  # kept, dropped


def test_adversarial_text_through_add_is_fast(make_memory: Any) -> None:
    mem = make_memory(write={"max_turn_chars": 200_000})
    for make in (lambda n: "A" + "a" * n, lambda n: "Aaaa " * (n // 5), lambda n: "(2023 " * (n // 6),
                 lambda n: "a" + "'." * (n // 2)):
        assert_linear(lambda text: mem.add(text, "u", flush=True), make, 100_000, repeats=1)
    with pytest.raises(InputError, match="speaker"):
        mem.add([{"content": "hi", "name": "N" * 100_000}], "u")


def test_resending_an_accepted_turn_changes_nothing(make_memory: Any) -> None:
    mem = make_memory()
    turns = [{"content": "What's the dog's name?", "name": "Tom", "id": "c1"},
             {"content": "His name is Biscuit.", "name": "Maya", "id": "c2"},
             {"content": "He is a beagle mix.", "name": "Maya", "id": "c3"}]
    for t in turns:
        mem.add([t], "u", **WHEN)
    before = sorted(r.id for r in mem.get_all("u"))
    again = mem.add([turns[1]], "u", **WHEN)
    assert again.turn_ids == ["c2"]  # a retry: answered with the memories the turn made, none new
    assert again.memories and {h.id for h in again.memories} <= set(before)
    assert all("c2" in h.source_turn_ids for h in again.memories)
    mem.add(turns, "u", flush=True, **WHEN)
    assert sorted(r.id for r in mem.get_all("u")) == before and len(before) == 3


def test_cut_off_model_output_never_becomes_a_fact(tmp_path: Path) -> None:
    cut = '{"data": [{"source_id": 0, "fact": "Ivy has locker 4'
    llm = ScriptedLLM(lambda stage, messages: cut, max_retries=1)
    with Memory(data_dir=tmp_path / "s", llm_client=llm, write={"extractor": "llm", "segmenter": "none"}) as mem:
        mem.add([{"content": "My locker is number 418.", "name": "Ivy"}], "u", flush=True, **WHEN)
        texts = [r.memory for r in mem.get_all("u")]
        assert texts == ["Ivy: My locker is number 418."]  # the rules, not the half fact
        usage = mem.stats()["llm"]["add_memory"]
        assert usage["failures"] == 2 and usage["fallbacks"] == 1


def test_a_missing_index_is_rebuilt_from_the_journal(make_memory: Any, tmp_path: Path,
                                                     sample_data: dict[str, Any]) -> None:
    mem = make_memory("s")
    mem.add_conversation(sample_data, "alice")
    n = mem.stats("alice")["counts"]["memories"]
    mem.close()
    shutil.rmtree(tmp_path / "s" / "index")
    with Memory(data_dir=tmp_path / "s") as again:
        assert index_count(again, "alice") == n
        assert again.search("dog's name", "alice", limit=3).hits


def test_a_missing_journal_refuses_to_open_and_repair_recovers_memories(make_memory: Any, tmp_path: Path,
                                                                       sample_data: dict[str, Any]) -> None:
    mem = make_memory("s", store={"index_records": True})  # the index keeps a copy of each record
    mem.add_conversation(sample_data, "alice")
    n = mem.stats("alice")["counts"]["memories"]
    mem.close()
    (tmp_path / "s" / "journal.sqlite3").unlink()
    for extra in ("journal.sqlite3-wal", "journal.sqlite3-shm"):
        (tmp_path / "s" / extra).unlink(missing_ok=True)
    with pytest.raises(StoreError, match="repair --from-index"):
        Memory(data_dir=tmp_path / "s")
    assert not (tmp_path / "s" / "journal.sqlite3").exists()  # refusing created nothing
    report = Memory.repair(data_dir=tmp_path / "s", from_index=True)
    assert report.memories_recovered == n
    with Memory(data_dir=tmp_path / "s") as again:
        assert again.stats("alice")["counts"]["memories"] == n
        assert again.search("dog's name", "alice", limit=3).hits


def test_repair_from_an_index_without_records_refuses_and_writes_nothing(make_memory: Any, tmp_path: Path,
                                                                        sample_data: dict[str, Any]) -> None:
    """By default the index keeps no copy of the records (the journal is their one copy): recovering a
    lost journal from it is refused, clearly, before a journal file is made."""
    mem = make_memory("s")
    mem.add_conversation(sample_data, "alice")
    mem.close()
    for name in ("journal.sqlite3", "journal.sqlite3-wal", "journal.sqlite3-shm"):
        (tmp_path / "s" / name).unlink(missing_ok=True)
    with pytest.raises(StoreError, match="keeps no copies of the memories"):
        Memory.repair(data_dir=tmp_path / "s", from_index=True)
    assert not (tmp_path / "s" / "journal.sqlite3").exists()
    assert any((tmp_path / "s" / "index").iterdir())  # the index is left as it was


def test_a_damaged_index_is_a_store_error_and_repair_rebuilds_it(make_memory: Any, tmp_path: Path,
                                                                 sample_data: dict[str, Any]) -> None:
    mem = make_memory("s")
    mem.add_conversation(sample_data, "alice")
    mem.close()
    damaged = 0
    for f in (tmp_path / "s" / "index").rglob("*"):
        if f.is_file() and f.name != "dialogmem-index.json" and f.stat().st_size > 64:
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 3])  # truncate every data file
            damaged += 1
    assert damaged
    with pytest.raises(StoreError, match="dialogmem repair"):
        Memory(data_dir=tmp_path / "s")
    report = Memory.repair(data_dir=tmp_path / "s")
    assert report.index_moved_to and Path(report.index_moved_to).exists()  # moved aside, not deleted
    with Memory(data_dir=tmp_path / "s") as again:
        assert again.search("dog's name", "alice", limit=3).hits


def test_an_index_of_another_store_is_refused(tmp_path: Path) -> None:
    for name in ("a", "b"):
        with Memory(data_dir=tmp_path / name) as m:
            m.add(f"store {name}", "u", flush=True)
    shutil.rmtree(tmp_path / "a" / "index")
    shutil.copytree(tmp_path / "b" / "index", tmp_path / "a" / "index")
    with pytest.raises(StoreError, match="another store"):
        Memory(data_dir=tmp_path / "a")
    Memory.repair(data_dir=tmp_path / "a")
    with Memory(data_dir=tmp_path / "a") as m:
        assert [h.memory for h in m.search("store", "u").hits] == ["user: store a"]


def test_read_only_open_beside_a_writer(make_memory: Any, tmp_path: Path) -> None:
    writer = make_memory("s")
    writer.add([{"content": "I keep bees on the roof.", "id": "r1"}], "u", flush=True, **WHEN)
    with Memory(data_dir=tmp_path / "s", read_only=True) as reader:
        assert [h.source_turn_ids for h in reader.search("bees", "u", limit=1).hits] == [["r1"]]
        assert len(reader.get_all("u")) == 1
        for call in (lambda: reader.add("x", "u"), lambda: reader.sleep(), lambda: reader.forget_user("u")):
            with pytest.raises(StoreError, match="read-only"):
                call()
    writer.add("and the writer goes on", "u", flush=True)


def test_sizes_are_bounded_with_clear_errors(make_memory: Any) -> None:
    mem = make_memory()
    mem.add("My bike is a green Brompton.", "u", flush=True)
    (record,) = mem.get_all("u")
    for call, setting in ((lambda: mem.update(record.id, "x" * 10_000_000, "u"), "max_turn_chars"),
                          (lambda: mem.search("q" * 1_000_000, "u"), "max_query_chars")):
        started = time.perf_counter()
        with pytest.raises(InputError, match=setting):
            call()
        assert time.perf_counter() - started < 1.0
    for bad in ("5", 5.0, True, 0, 201):
        with pytest.raises(InputError, match="limit"):
            mem.search("bike", "u", limit=bad)  # type: ignore[arg-type]


def test_calls_racing_close_get_store_errors(make_memory: Any) -> None:
    mem = make_memory()
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            try:
                mem.add(f"note {i}", "u")
            except BaseException as exc:
                errors.append(exc)
                return
            i += 1

    threads = [threading.Thread(target=writer) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    mem.close()
    stop.set()
    for t in threads:
        t.join(10)
    assert errors and all(isinstance(e, StoreError) and "closed" in str(e) for e in errors)
    assert all(isinstance(e, DialogmemError) for e in errors)


def test_a_poison_turn_in_a_list_leaves_the_others_their_context(make_memory: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that fails is retried turn by turn; each turn keeps the turns before it in the list
    as its context (they are not journaled yet, so the journal cannot give them): the memories are
    those that one message a call writes."""
    crash_extractor_on(monkeypatch, "poison")
    said = [{"id": f"m{i}", "name": "Ann" if i % 2 else "Bo", "content": text} for i, text in enumerate(
        ["I adopted a dog.", "What is its name?", "poison pill", "His name is Biscuit.", "He is a beagle."])]
    whole, one = make_memory("whole"), make_memory("one")
    whole.add([{"content": "Earlier, in another call.", "id": "e0"}], "alice", session_id="s1")
    one.add([{"content": "Earlier, in another call.", "id": "e0"}], "alice", session_id="s1")
    result = whole.add(said, "alice", session_id="s1")
    for message in said:
        one.add([message], "alice", session_id="s1")
    assert result.quarantined == ["m2"]

    def written(mem: Any) -> list[tuple[str, ...]]:
        return sorted(tuple(r.source_turn_ids) for r in mem.get_all("alice"))

    assert written(whole) == written(one)
    assert ("e0", "m0", "m1") in written(whole) and ("m2", "m3", "m4") in written(whole)
