"""Export and import (``dialogmem export`` / ``import``): the portable JSON Lines format, a lossless round
trip into an empty store, idempotent imports, refusal of a bad line before anything is written."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from conftest import ingest_sample
from dialogmem import AsyncMemory, ExportReport, ImportReport, InputError, Memory
from dialogmem.cli import app
from seams import crash_extractor_on, export_schema, export_schema_text

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "export-schema.json"
QUERIES = ("What is the name of Maya's dog?", "Where does Tom live now?", "What allergy does Maya have?")
WHEN = {"timestamp": "2023-05-08T13:56:00"}
def body(path: Path) -> list[str]:
    """The record lines of an export (the header holds the time of the export; the end line counts them)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[-1]) == {"kind": "end", "records": len(lines) - 2}
    return lines[1:-1]


def kinds(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in body(path):
        kind = json.loads(line)["kind"]
        out[kind] = out.get(kind, 0) + 1
    return out


def hits(mem: Memory, user: str) -> list[list[tuple[str, str, float]]]:
    return [[(h.id, h.memory, round(h.score, 5)) for h in mem.search(q, user, limit=5).hits] for q in QUERIES]


@pytest.fixture
def full_store(make_memory: Callable[..., Memory], sample_data: dict[str, Any],
               monkeypatch: pytest.MonkeyPatch) -> Memory:
    """One store with every kind of record: processed, quarantined and dropped turns, memories active,
    updated, deleted and evicted, and a second user."""
    mem = make_memory("a", sleep={"mtm_capacity": 30, "ltm": False})
    ingest_sample(mem, sample_data, "alice")
    mem.add("Bob keeps bees on the roof.", "bob", flush=True, **WHEN)
    first, second = mem.get_all("alice", limit=2)
    mem.update(first.id, "Maya's dog is called Biscuit and he is three.", "alice")
    mem.delete(second.id, "alice")
    mem.sleep("alice")  # over capacity: the oldest items are evicted
    fixed = crash_extractor_on(monkeypatch, "poison")  # an extractor bug: a quarantined turn
    got = mem.add([{"content": "This is poison.", "id": "bad"}, {"content": "More poison.", "id": "bad2"}],
                  "alice", flush=True, **WHEN)
    fixed()
    assert sorted(got.quarantined) == ["bad", "bad2"]
    mem.drop_quarantined("alice", ["bad2"])
    assert mem.stats("alice")["counts"]["evicted"] > 0
    return mem


def test_round_trip_into_an_empty_store_is_lossless(full_store: Memory, make_memory: Callable[..., Memory],
                                                    tmp_path: Path) -> None:
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    report = full_store.export(first, all_users=True)  # all: BM25's IDF counts every user's memories
    assert isinstance(report, ExportReport) and report.users == ["alice", "bob"]
    counts = kinds(first)
    assert counts == {"turn": report.turns, "quarantined": 1, "memory": report.memories, "history": report.history}
    records = [json.loads(line) for line in body(first)]
    statuses = {r["status"] for r in records if r["kind"] == "memory"}
    assert statuses == {"active", "evicted", "deleted"}
    assert {r["status"] for r in records if r["kind"] == "turn"} == {"processed", "dropped"}
    assert {r["entry"]["event"] for r in records if r["kind"] == "history"} >= {"ADD", "UPDATE", "DELETE", "EVICT"}

    target = make_memory("b", sleep={"mtm_capacity": 30, "ltm": False})
    got = target.import_(first)
    assert isinstance(got, ImportReport)
    assert (got.turns, got.quarantined, got.memories, got.history) == (report.turns, 1, report.memories,
                                                                          report.history)
    assert got.embedded == 0 and got.without_sources == []  # the vectors came along, and every source turn
    target.export(second, all_users=True)
    assert body(second) == body(first)
    full_store.rebuild_index()  # BM25's IDF still counts deleted and replaced points until a rebuild
    assert hits(target, "alice") == hits(full_store, "alice")
    assert hits(target, "bob") == hits(full_store, "bob")
    assert target.stats("alice")["counts"] == full_store.stats("alice")["counts"]
    assert [q.turn.id for q in target.quarantined("alice")] == ["bad"]
    mid = next(r["record"]["id"] for r in records if r["kind"] == "memory" and r["status"] == "active"
               and r["record"]["source_turn_ids"])
    assert target.sources(mid, "alice") == full_store.sources(mid, "alice")


def test_importing_the_same_file_twice_adds_nothing(full_store: Memory, make_memory: Callable[..., Memory],
                                                    tmp_path: Path) -> None:
    path, again = tmp_path / "x.jsonl", tmp_path / "again.jsonl"
    full_store.export(path, all_users=True)
    target = make_memory("b")
    first = target.import_(path)
    assert first.users == ["alice", "bob"] and first.memories > 0
    second = target.import_(path)
    assert (second.turns, second.quarantined, second.memories, second.history) == (0, 0, 0, 0)
    assert second.skipped_memories == first.memories and second.skipped_turns == first.turns + first.quarantined
    target.export(again, all_users=True)
    assert body(again) == body(path)


def test_an_export_holds_one_user_only(full_store: Memory, tmp_path: Path) -> None:
    path = tmp_path / "bob.jsonl"
    report = full_store.export(path, "bob")
    assert report.turns == 1 and report.memories >= 1
    assert "alice" not in path.read_text(encoding="utf-8")
    full_store.export(path, "alice")
    records = [json.loads(line) for line in body(path)]
    assert {r["user_id"] if r["kind"] == "history" else r.get("turn", r.get("record"))["user_id"]
            for r in records} == {"alice"}
    with pytest.raises(InputError, match="user_id or all_users"):
        full_store.export(path, "bob", all_users=True)


def _corrupt(path: Path, out: Path, n: int, change: Callable[[dict[str, Any]], Any]) -> None:
    """Copy of ``path`` whose line ``n`` (1-based) is replaced by ``change(parsed line)`` (a string as is)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    new = change(json.loads(lines[n - 1]))
    lines[n - 1] = new if isinstance(new, str) else json.dumps(new)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_bad_line_is_refused_with_its_number_and_nothing_is_written(
        full_store: Memory, make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    full_store.export(good, "alice")
    n_lines = len(good.read_text(encoding="utf-8").splitlines())
    target = make_memory("b")
    last = n_lines - 1  # a history row: everything before it would have been written by a careless importer
    cases: list[tuple[int, Callable[[dict[str, Any]], Any], str]] = [
        (last, lambda d: '{"kind": "history", "user_id": ', r"line \d+: .*(JSON|EOF)"),
        (last, lambda d: {**d, "kind": "memo"}, f"line {last}: .*tag"),
        (5, lambda d: {**d, "turn": {**d["turn"], "float_time_stamp": "soon"}}, "line 5: turn.float_time_stamp"),
        (5, lambda d: {**d, "extra": 1}, "line 5: extra: Extra inputs"),
        (5, lambda d: {**d, "turn": {**d["turn"], "user_id": "a\u200bb"}}, "line 5: user_id holds the invisible"),
        (1, lambda d: {**d, "version": 3}, "format version 3, written by a newer dialogmem"),
        (1, lambda d: {"kind": "turn"}, "line 1: not a dialogmem export header"),
    ]
    for n, change, message in cases:
        _corrupt(good, bad, n, change)
        with pytest.raises(InputError, match=message):
            target.import_(bad)
        assert target.stats()["counts"]["turns"] == 0 and target.stats()["counts"]["memories"] == 0
    text = good.read_text(encoding="utf-8").splitlines()
    memory_at = next(i for i, line in enumerate(text, 1) if json.loads(line)["kind"] == "memory")
    _corrupt(good, bad, memory_at, lambda d: {**d, "vector": d["vector"][:-8] + "AAAAAA=="})
    with pytest.raises(InputError, match=f"line {memory_at}: vector"):
        target.import_(bad)
    bad.write_text("\n".join([text[0], text[memory_at - 1], text[memory_at - 1]]) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"line 3: memory .* appears twice"):
        target.import_(bad)
    assert target.stats()["counts"]["turns"] == 0 and target.stats()["counts"]["memories"] == 0


def test_ids_held_by_the_store_with_other_content_or_owner_are_refused(
        full_store: Memory, make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    path, renamed = tmp_path / "alice.jsonl", tmp_path / "carol.jsonl"
    full_store.export(path, "alice")
    target = make_memory("b")
    target.add([{"content": "a different first turn", "id": "D1:1"}], "alice", **WHEN)
    with pytest.raises(InputError, match=r"line \d+: turn 'D1:1' of user 'alice' is already stored with other"):
        target.import_(path)
    assert target.stats("alice")["counts"]["turns"] == 1
    text = path.read_text(encoding="utf-8").replace('"user_id":"alice"', '"user_id":"carol"')
    renamed.write_text(text, encoding="utf-8")
    full_store.close()
    other = make_memory("c")
    other.import_(path)
    with pytest.raises(InputError, match="already belongs to another user"):
        other.import_(renamed)  # the same memory ids for another user
    assert other.stats("carol")["counts"]["turns"] == 0


def test_vectors_absent_or_from_another_embedder_are_computed_again(
        full_store: Memory, make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    bare, foreign, back = tmp_path / "bare.jsonl", tmp_path / "foreign.jsonl", tmp_path / "back.jsonl"
    report = full_store.export(bare, "alice", vectors=False)
    assert all(json.loads(line).get("vector") is None for line in body(bare))
    assert json.loads(bare.read_text(encoding="utf-8").splitlines()[0])["embedder"] is None
    full_store.export(foreign, "alice")
    target = make_memory("b")
    got = target.import_(bare)
    assert got.embedded == report.memories
    target.export(back, "alice")
    assert body(back) == body(foreign)  # the vectors computed on import are the ones exported with vectors

    _corrupt(foreign, foreign, 1, lambda d: {**d, "embedder": "openai/another-model/1536"})
    other = make_memory("c")
    assert other.import_(foreign).embedded == report.memories  # not this store's embedder: not used
    other.export(back, "alice")
    assert body(back) == body(foreign)


def test_memories_without_raw_turns_say_so(make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    mid = "0b5f3f53-4a4c-4bb8-9a3e-2f3c7d0d6a11"
    lines = [{"kind": "header", "format": "dialogmem-export", "version": 1, "source": "handmade"},
             {"kind": "memory", "record": {"id": mid, "user_id": "dana", "memory": "Dana plays the oboe.",
                                           "time_stamp": "2024-01-02T10:00:00", "float_time_stamp": 1704189600.0,
                                           "weekday": "Tue", "created_at": 1704189600.0,
                                           "updated_at": 1704189600.0, "source_turn_ids": ["t9"]}}]
    path = tmp_path / "handmade.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in lines), encoding="utf-8")
    mem = make_memory()
    got = mem.import_(path)
    assert got.memories == 1 and got.embedded == 1 and got.without_sources == [mid]
    assert mem.sources(mid, "dana") == []
    assert mem.search("Which instrument does Dana play?", "dana").hits[0].id == mid


def test_a_history_row_needs_its_memory_in_the_file(make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    path = tmp_path / "orphan.jsonl"
    lines = [{"kind": "header", "format": "dialogmem-export", "version": 1},
             {"kind": "history", "user_id": "dana", "entry": {
                 "memory_id": "0b5f3f53-4a4c-4bb8-9a3e-2f3c7d0d6a11", "event": "ADD", "old_memory": None,
                 "new_memory": "x", "timestamp": 1.0, "actor": "import"}}]
    path.write_text("".join(json.dumps(d) + "\n" for d in lines), encoding="utf-8")
    with pytest.raises(InputError, match="line 2: a history row of memory"):
        make_memory().import_(path)


def test_file_objects_and_the_async_facade(full_store: Memory, tmp_path: Path) -> None:
    buffer = io.StringIO()
    full_store.export(buffer, "alice")
    text = buffer.getvalue()
    full_store.close()

    async def go() -> tuple[ImportReport, ExportReport]:
        async with AsyncMemory(data_dir=tmp_path / "async") as mem:
            got = await mem.import_(io.StringIO(text))
            return got, await mem.export(tmp_path / "async.jsonl", "alice")

    got, again = asyncio.run(go())
    assert got.memories == again.memories > 0
    assert body(tmp_path / "async.jsonl") == text.splitlines()[1:-1]


def test_every_exported_line_matches_the_committed_json_schema(full_store: Memory, tmp_path: Path) -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == export_schema_text(), (
        "docs/export-schema.json is stale: regenerate it with PYTHONPATH=tests "
        "python -c \"from seams import export_schema_text as t; print(t(), end='')\" > docs/export-schema.json")
    path = tmp_path / "x.jsonl"
    full_store.export(path, all_users=True)
    validator = jsonschema.Draft202012Validator(export_schema())
    lines = path.read_text(encoding="utf-8").splitlines()
    for line in lines:
        validator.validate(json.loads(line))
    assert not validator.is_valid({**json.loads(lines[1]), "kind": "memo"})


def test_cli_export_and_import(full_store: Memory, tmp_path: Path) -> None:
    source = str(full_store.data_dir)
    full_store.close()
    runner = CliRunner()
    out = tmp_path / "cli.jsonl"
    res = runner.invoke(app, ["export", "--user", "alice", "-o", str(out), "--data-dir", source])
    assert res.exit_code == 0, res.stderr
    assert "exported" in res.stdout and "memories" in res.stdout
    res = runner.invoke(app, ["export", "-o", str(out), "--data-dir", source])
    assert res.exit_code == 1 and "give --user U or --all" in res.stderr
    target = ["--data-dir", str(tmp_path / "cli-store")]
    res = runner.invoke(app, ["import", str(out), *target])
    assert res.exit_code == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["memories"] > 0 and report["quarantined"] == 1
    lines = out.read_text(encoding="utf-8").splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*lines[:3], "{not json", *lines[3:]]) + "\n", encoding="utf-8")
    res = runner.invoke(app, ["import", str(broken), "--data-dir", str(tmp_path / "empty")])
    assert res.exit_code == 1 and "line 4" in res.stderr and "\n" not in res.stderr.strip()
    res = runner.invoke(app, ["export", "--all", "-o", "-", *target])
    assert res.exit_code == 0 and res.stdout.splitlines()[1:] == lines[1:]


MEM0_ID = "5b0c1a52-7d7e-4f44-9f0e-6a3f0c2b9d10"
MEM0 = {"results": [{"id": MEM0_ID, "memory": "Likes hiking in the Alps", "hash": "abc123",
                     "metadata": {"source": "chat"}, "created_at": "2024-07-20T10:15:00.123456-07:00",
                     "updated_at": "2024-07-21T08:00:00-07:00", "user_id": "erin"}]}
MEM0_HISTORY = {MEM0_ID: [
    {"id": "h1", "memory_id": MEM0_ID, "old_memory": None, "new_memory": "Likes hiking", "event": "ADD",
     "created_at": "2024-07-20T10:15:00-07:00", "is_deleted": 0, "actor_id": None, "role": "user"},
    {"id": "h2", "memory_id": MEM0_ID, "old_memory": "Likes hiking", "new_memory": "Likes hiking in the Alps",
     "event": "UPDATE", "created_at": "2024-07-21T08:00:00-07:00", "is_deleted": 0, "actor_id": None,
     "role": "user"}]}


def test_mem0_memories_and_history_come_in_without_sources(make_memory: Callable[..., Memory],
                                                           tmp_path: Path) -> None:
    mem = make_memory()
    got = mem.import_mem0(MEM0, "erin", history=MEM0_HISTORY)
    assert (got.memories, got.history, got.embedded, got.without_sources) == (1, 2, 1, [MEM0_ID])
    record = mem.get(MEM0_ID, "erin")
    assert record.memory == "Likes hiking in the Alps" and record.source_turn_ids == []
    assert record.metadata == {"source": "chat", "imported_from": "mem0", "mem0_hash": "abc123"}
    assert record.time_stamp == "2024-07-20T17:15:00.123" and record.weekday == "Sat"
    assert [(h.event.value, h.new_memory) for h in mem.history(MEM0_ID, "erin")] == [
        ("ADD", "Likes hiking"), ("UPDATE", "Likes hiking in the Alps")]
    assert mem.sources(MEM0_ID, "erin") == []
    assert mem.search("Where does she go hiking?", "erin").hits[0].id == MEM0_ID
    assert mem.import_mem0(MEM0, "erin", history=MEM0_HISTORY).memories == 0  # ids: nothing added twice
    with pytest.raises(InputError, match="needs a string 'id' and 'memory'"):
        mem.import_mem0([{"memory": "no id"}], "erin")
    with pytest.raises(InputError, match="must be a UUID"):
        mem.import_mem0([{"id": "not-a-uuid", "memory": "x"}], "erin")
    data, history = tmp_path / "mem0.json", tmp_path / "history.json"
    data.write_text(json.dumps(MEM0), encoding="utf-8")
    history.write_text(json.dumps(MEM0_HISTORY), encoding="utf-8")
    mem.close()
    res = CliRunner().invoke(app, ["import", str(data), "--from", "mem0", "--user", "fay", "--history", str(history),
                                   "--data-dir", str(tmp_path / "cli")])
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["without_sources"] == [MEM0_ID] and json.loads(res.stdout)["history"] == 2
    res = CliRunner().invoke(app, ["import", str(data), "--from", "mem0", "--data-dir", str(tmp_path / "cli")])
    assert res.exit_code == 1 and "--user goes with --from mem0" in res.stderr


def test_openai_chat_logs_go_through_the_write_path(make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    one = tmp_path / "chat.json"
    one.write_text(json.dumps({"messages": [{"role": "user", "content": "My sister Ada lives in Lisbon."},
                                            {"role": "assistant", "content": "Lisbon is lovely."}]}), "utf-8")
    many = tmp_path / "chats.jsonl"
    many.write_text("\n".join(json.dumps(c) for c in (
        [{"role": "user", "content": "I started learning the cello in March."}],
        {"messages": [{"role": "user", "content": "My cat is named Pixel."}]})) + "\n", "utf-8")
    mem = make_memory()
    got = mem.import_chats(one, "gus")
    assert len(got.turn_ids) == 2 and got.memories
    assert len(mem.import_chats(many, "gus").turn_ids) == 2
    hit = mem.search("What is the cat called?", "gus", expand=True).hits[0]
    assert "Pixel" in hit.memory and hit.sources and hit.sources[0].session_id == "chats-2"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('[{"role": "user", "content": "fine"}]\n[{"role": "user"}]\n', "utf-8")
    with pytest.raises(InputError, match=r"bad\.jsonl line 2: expected a non-empty list"):
        mem.import_chats(bad, "hal")
    assert mem.stats("hal")["counts"]["turns"] == 0
