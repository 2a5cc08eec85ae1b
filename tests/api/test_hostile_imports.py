"""Hostile data through every way data enters: export files, mem0 data, chat logs, ``import_records``.

A number that is not finite or out of range is refused with the line and field named, before
anything is written; an import is all or nothing; a file cut short is refused; a row that an older
version let in (NaN written straight into the journal here) stops nobody: it reads mended, and every
other user's work, and the admin's, goes on."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dialogmem import InputError, Memory
from portable import NOW, USER, header, memory_line, turn_line
from portable import write_export as write
from seams import journal_turn_count, poison_row

BAD_NUMBERS = [
    ("salience", math.nan), ("salience", math.inf), ("salience", 7.0), ("confidence", -math.inf),
    ("confidence", math.nan), ("created_at", math.nan), ("updated_at", 1e20), ("float_time_stamp", -math.inf),
    ("last_accessed", math.nan), ("access_count", 10**30), ("access_count", -1), ("version", 2**64),
    ("topic_id", 2**70), ("speaker_id", -(2**70)),
]


@pytest.mark.parametrize(("field", "value"), BAD_NUMBERS)
def test_a_bad_number_in_a_memory_line_is_named_and_nothing_is_written(
        make_memory: Callable[..., Memory], tmp_path: Path, field: str, value: float) -> None:
    mem = make_memory()
    path = write(tmp_path / "x.jsonl", [header(), turn_line(1), memory_line(1), memory_line(2, **{field: value})])
    with pytest.raises(InputError, match=rf"line 4: record\.{field}: "):
        mem.import_(path)
    assert mem.get_all(USER) == [] and journal_turn_count(mem, USER) == 0


@pytest.mark.parametrize("value", [math.nan, math.inf, -1e300])
def test_a_bad_time_in_a_turn_or_history_line_is_refused(make_memory: Callable[..., Memory], tmp_path: Path,
                                                         value: float) -> None:
    mem = make_memory()
    with pytest.raises(InputError, match=r"line 3: turn\.float_time_stamp"):
        mem.import_(write(tmp_path / "t.jsonl", [header(), turn_line(1), turn_line(2, float_time_stamp=value)]))
    history = {"kind": "history", "user_id": USER, "entry": {
        "memory_id": memory_line(1)["record"]["id"], "event": "ADD", "old_memory": None, "new_memory": "x",
        "timestamp": value, "actor": "import"}}
    with pytest.raises(InputError, match=r"line 3: entry\.timestamp"):
        mem.import_(write(tmp_path / "h.jsonl", [header(), memory_line(1), history]))
    previous = {**history, "entry": {**history["entry"], "timestamp": NOW,
                                     "previous": {**memory_line(1)["record"], "salience": value}}}
    with pytest.raises(InputError, match=r"line 3: entry\.previous\.salience"):
        mem.import_(write(tmp_path / "p.jsonl", [header(), memory_line(1), previous]))
    assert journal_turn_count(mem, USER) == 0 and mem.get_all(USER) == []


def test_an_import_is_all_or_nothing(make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    """520 good turns, then a bad one: before, 500 were committed (one batch) and the call failed."""
    mem = make_memory()
    lines = [header(), *(turn_line(n) for n in range(520)), turn_line(520, float_time_stamp=math.nan)]
    with pytest.raises(InputError, match=r"line 522: turn\.float_time_stamp"):
        mem.import_(write(tmp_path / "x.jsonl", lines))
    assert journal_turn_count(mem, USER) == 0
    lines[-1] = memory_line(1, access_count=10**30)
    with pytest.raises(InputError, match=r"line 522: record\.access_count"):
        mem.import_(write(tmp_path / "y.jsonl", lines))
    assert journal_turn_count(mem, USER) == 0


def test_json_inside_records_is_finite(make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    mem = make_memory()
    for record, where in ((memory_line(1, update_queue=[{"score": math.nan}]), "update_queue"),
                          (memory_line(1, metadata={"w": math.inf}), "metadata"),
                          (turn_line(1, metadata={"x": [1, {"y": -math.inf}]}), "metadata")):
        with pytest.raises(InputError, match=where):
            mem.import_(write(tmp_path / "x.jsonl", [header(), record]))
    assert mem.get_all(USER) == []


def test_a_file_cut_short_is_refused(make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    source = make_memory("source")
    source.add([{"content": f"Fact number {n} about my garden.", "name": "Alice"} for n in range(6)], USER,
               flush=True)
    full = tmp_path / "full.jsonl"
    source.export(full, USER)
    lines = full.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[-1]) == {"kind": "end", "records": len(lines) - 2}
    target = make_memory("target")
    for cut in (1, 2, len(lines) - 2):  # cut at a line boundary: every remaining line is whole
        path = tmp_path / f"cut{cut}.jsonl"
        path.write_text("\n".join(lines[:-cut]) + "\n", encoding="utf-8")
        with pytest.raises(InputError, match="cut short"):
            target.import_(path)
    changed = tmp_path / "changed.jsonl"
    changed.write_text("\n".join([*lines[:2], *lines[3:]]) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="the end line counts"):
        target.import_(changed)
    after = tmp_path / "after.jsonl"
    after.write_text("\n".join([*lines, lines[1]]) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="after the end line"):
        target.import_(after)
    assert journal_turn_count(target, USER) == 0
    assert target.import_(full).turns == 6
    # a version 1 file (before end lines) is read as it is
    v1 = [json.dumps({**json.loads(lines[0]), "version": 1}), *lines[1:-1]]
    (tmp_path / "v1.jsonl").write_text("\n".join(v1) + "\n", encoding="utf-8")
    assert make_memory("v1").import_(tmp_path / "v1.jsonl").turns == 6


MEM0_ID = "3f2b7c1e-8a4d-4e6f-9b0a-1c2d3e4f5a6b"


@pytest.mark.parametrize(("data", "history", "message"), [
    ([{"id": MEM0_ID, "memory": "x", "created_at": 1e20}], None, r"mem0 memory 0: created_at 1e\+20"),
    ([{"id": MEM0_ID, "memory": "x", "created_at": math.nan}], None, "mem0 memory 0: created_at nan"),
    ([{"id": MEM0_ID, "memory": "x", "updated_at": -math.inf}], None, "mem0 memory 0: updated_at"),
    ([{"id": MEM0_ID, "memory": "x", "created_at": True}], None, "a boolean"),
    ([{"id": MEM0_ID, "memory": "x", "created_at": "yesterday"}], None, "not ISO 8601"),
    ([{"id": MEM0_ID, "memory": "x", "metadata": "a string"}], None, "metadata must be an object"),
    ([{"id": MEM0_ID, "memory": "x", "metadata": {"n": math.nan}}], None, "metadata"),
    ([{"id": MEM0_ID, "memory": "x"}], [1, 2], "history must map memory ids"),
    ([{"id": MEM0_ID, "memory": "x"}], {MEM0_ID: "ADD"}, "expected a list of rows"),
    ([{"id": MEM0_ID, "memory": "x"}], {MEM0_ID: [7]}, "row 0: expected an object"),
    ([{"id": MEM0_ID, "memory": "x"}], {MEM0_ID: [{"event": "ADD", "old_memory": 5}]}, "row 0: old_memory"),
    ([{"id": MEM0_ID, "memory": "x"}], {MEM0_ID: [{"event": "ADD", "created_at": math.inf}]}, "row 0: created_at"),
])
def test_hostile_mem0_data_is_an_input_error(make_memory: Callable[..., Memory], data: Any, history: Any,
                                             message: str) -> None:
    mem = make_memory()
    with pytest.raises(InputError, match=message):
        mem.import_mem0(data, "erin", history=history)
    assert mem.get_all("erin") == []


def test_chat_logs_are_all_or_nothing_and_idempotent_by_content(make_memory: Callable[..., Memory],
                                                                tmp_path: Path) -> None:
    good = [{"role": "user", "content": "My sister Ada lives in Lisbon."},
            {"role": "assistant", "content": "Lisbon is lovely."}]
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps([{"role": "user", "content": "bad\u0000text"}]) + "\n",
                    encoding="utf-8")
    mem = make_memory()
    with pytest.raises(InputError, match="conversation 2"):
        mem.import_chats(path, "gus")
    assert journal_turn_count(mem, "gus") == 0  # the first conversation was not written either
    fixed = [{"role": "user", "content": "I started learning the cello."}]
    path.write_text(json.dumps(good) + "\n" + json.dumps(fixed) + "\n", encoding="utf-8")
    assert len(mem.import_chats(path, "gus").turn_ids) == 3
    again = mem.import_chats(path, "gus")
    assert len(again.turn_ids) == 3 and journal_turn_count(mem, "gus") == 3  # the same turns: nothing twice
    memories = len(mem.get_all("gus"))
    mem.import_chats(path, "gus")
    assert len(mem.get_all("gus")) == memories


def test_import_records_checks_a_record_it_is_given(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory()
    record = mem.add("I keep bees on the roof.", USER, flush=True).memories[0]
    full = mem.get(record.id, USER)
    for bad in (full.model_copy(update={"id": "00000000-0000-4000-8000-000000000001", "salience": math.nan}),
                {**full.model_dump(), "id": "00000000-0000-4000-8000-000000000002", "created_at": math.inf}):
        with pytest.raises(InputError, match=r"salience|created_at"):
            mem.import_records([bad])
    assert len(mem.get_all(USER)) == 1


def test_a_bad_row_of_an_older_store_stops_nobody(make_memory: Callable[..., Memory], tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    mem = make_memory(sleep={"ltm": True})
    for user in (USER, "bob"):
        mem.add([{"content": f"{user} moved to Lisbon in May and adopted a cat named Pixel.", "name": user},
                 {"content": f"{user} works as a nurse at the city hospital.", "name": user}], user, flush=True)
    poisoned = mem.get_all(USER)[0].id
    poison_row(mem, poisoned, {"salience": math.nan, "confidence": math.inf, "created_at": math.nan}, math.inf)
    mem.close()
    mem = make_memory()  # reopened: the index is filled from the journal
    record = mem.get(poisoned, USER)
    assert (record.salience, record.confidence, record.last_accessed) == (0.5, 1.0, None)
    assert record.created_at == record.float_time_stamp
    assert "numbers out of range" in caplog.text and poisoned in caplog.text
    assert mem.search("Where does alice live?", USER).hits
    assert len(mem.get_all(USER)) == 2
    mem.sleep("bob")
    mem.sleep()  # the admin's sleep of every user
    out = tmp_path / "all.jsonl"
    report = mem.export(out, all_users=True)
    assert report.memories >= 4
    fresh = make_memory("fresh")
    assert fresh.import_(out).memories == report.memories  # the mended values are valid everywhere
    mem.update(poisoned, "alice moved to Porto.", USER)
    assert mem.get(poisoned, USER).salience == 0.5
