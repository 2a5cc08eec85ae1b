"""The changes probe set and its bench: metric functions on synthetic hit lists, the bundled file's
shape, the loader's refusals, and one real run (dialogmem and naive hybrid) on a tiny invented file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dialogmem import InputError
from dialogmem.bench import bench_app
from dialogmem.bench._changes_bench import (
    ChangesSpec,
    group_summaries,
    render_tables,
    run_changes,
    score_question,
    summarise_records,
)
from dialogmem.bench._changes_probe import (
    BUNDLED,
    ChangeNote,
    bundled_path,
    copied_words,
    distinctive_words,
    load_changes,
)
from dialogmem.bench._metrics import first_rank, stale_first

KINDS = {"residence", "job", "relationship", "pet", "vehicle", "diet", "favourite", "plan", "device",
         "role_person", "school_gym", "hobby"}


# --- metric functions ---------------------------------------------------------------------------------

def test_first_rank_is_the_first_hit_citing_any_target() -> None:
    hits = [["D1:1"], ["D2:4", "D2:5"], ["D3:1"], ["D2:5"]]
    assert first_rank(["D2:5"], hits) == 2
    assert first_rank(["D3:1", "D2:4"], hits) == 2
    assert first_rank(["D1:1"], hits) == 1
    assert first_rank(["D9:9"], hits) is None
    assert first_rank([], hits) is None
    assert first_rank(["D1:1"], []) is None


def test_stale_first_cases() -> None:
    ev, old = ["D3:5"], ["D1:2", "D2:7"]
    assert stale_first(ev, old, [["D1:2"], ["D3:5"]]) == 1.0  # stale above current
    assert stale_first(ev, old, [["D3:5"], ["D2:7"]]) == 0.0  # current above stale
    assert stale_first(ev, old, [["D2:7"], ["D9:1"]]) == 1.0  # stale shown, current missing
    assert stale_first(ev, old, [["D9:1"], ["D9:2"]]) == 0.0  # neither shown
    assert stale_first(ev, old, [["D3:4", "D3:5"], ["D1:2"]]) == 0.0
    assert stale_first(ev, old, [["D2:7", "D3:5"]]) == 0.0  # one hit cites both: the evidence is not below it
    assert stale_first(ev, [], [["D1:2"]]) is None  # nothing superseded


def test_score_question_and_summaries() -> None:
    note = ChangeNote(state="present", change_kind="residence", said="implicit", superseded=["D1:2"])
    first = score_question(["D3:5"], note, [["D3:5"], ["D1:2"]])
    third = score_question(["D3:5"], note, [["D1:2"], ["D2:1"], ["D3:5"]])
    missing = score_question(["D3:5"], note, [["D2:1"]] * 5)
    assert (first["rank"], first["at1"], first["at3"], first["found"], first["stale_first"], first["stale_rank"]) == (
        1, 1.0, 1.0, 1.0, 0.0, 2)
    assert (third["rank"], third["at1"], third["at3"], third["found"], third["stale_first"]) == (3, 0.0, 1.0, 1.0, 1.0)
    assert (missing["rank"], missing["at1"], missing["at3"], missing["found"], missing["stale_first"]) == (
        None, 0.0, 0.0, 0.0, 0.0)
    late = score_question(["D3:5"], note, [["D2:1"]] * 4 + [["D3:5"]])
    assert (late["at3"], late["found"]) == (0.0, 1.0)
    past = score_question(["D1:2"], ChangeNote(state="past", change_kind="job", said="negation"), [["D1:2"]])
    assert past["stale_first"] is None

    records = [{**first, "state": "present", "change_kind": "residence", "said": "implicit"},
               {**third, "state": "present", "change_kind": "job", "said": "explicit"},
               {**past, "state": "past", "change_kind": "job", "said": "negation"}]
    overall = summarise_records(records)
    assert overall["n"] == 3 and overall["at1"] == pytest.approx(2 / 3) and overall["at3"] == 1.0
    assert overall["stale_first"] == 0.5  # the past question has none and is left out
    by_state = group_summaries(records, lambda r: r["state"])
    assert list(by_state) == ["past", "present"]
    assert by_state["present"]["n"] == 2 and by_state["past"]["stale_first"] is None

    md = render_tables({"state": {k: {"sys": v} for k, v in by_state.items()}}, ["sys"], depth=10)
    assert "### By state" in md and "sys recall@10" in md
    assert "| present | 2 | 50 % | 100 % | 100 % | 50 % |" in md
    assert "| past | 1 | 100 % | 100 % | 100 % | – |" in md


def test_distinctive_words() -> None:
    assert distinctive_words("Where does Priya live now?", {"priya"}) == set()
    assert distinctive_words("My sister's flat in Leeds, my sisters' cats", set()) == {"sister", "leed"}
    assert distinctive_words("Where is the class held?") == {"class"}  # a double s is not a plural
    assert distinctive_words("Night classes, two coaches") == {"night", "class", "coach"}


# --- the bundled probe set ----------------------------------------------------------------------------

def test_bundled_probe_set_is_well_formed() -> None:
    probe = load_changes(BUNDLED)
    assert Path(probe.dataset.path) == bundled_path()
    convs = probe.dataset.conversations
    questions = [q for c in convs for q in c.questions]
    assert len(convs) >= 20 and len(questions) >= 60
    for conv in convs:
        assert 3 <= len(conv.sessions) <= 6, conv.id
        assert all(s.time is not None for s in conv.sessions), conv.id
        times = [s.time for s in conv.sessions]
        assert times == sorted(times), conv.id
        assert all(15 <= len(s.turns) <= 40 for s in conv.sessions), conv.id
        known = {t.id for t in conv.turns()}
        kinds = {probe.notes[q.id].change_kind for q in conv.questions}
        assert len(kinds) >= 2, conv.id  # at least two facts change in every conversation
        for q in conv.questions:
            note = probe.notes[q.id]
            assert q.evidence and set(q.evidence) <= known and set(note.superseded) <= known, q.id
            assert not set(q.evidence) & set(note.superseded), q.id
            if note.state == "present":
                assert note.superseded, q.id
                # the current statement is newer than every statement it superseded
                order = [t.id for t in conv.turns()]
                assert min(order.index(e) for e in q.evidence) > max(order.index(s) for s in note.superseded)
    notes = list(probe.notes.values())
    assert {n.change_kind for n in notes} == KINDS
    assert {n.said for n in notes} == {"explicit", "implicit", "negation", "correction"}
    assert sum(n.state == "present" for n in notes) >= 30 and sum(n.state == "past" for n in notes) >= 20
    assert sum(len(n.superseded) >= 2 for n in notes) >= 5  # chains A -> B -> C


def test_bundled_questions_do_not_copy_their_evidence() -> None:
    """A question may share at most one distinctive word (five letters or more, not a speaker's name, not
    a common word) with an evidence turn, and at most one question in ten may share any: one word can be
    the natural name of the thing asked about ("sister"), two mean the question was copied from the turn."""
    probe = load_changes(BUNDLED)
    copied = copied_words(probe)
    assert all(len(words) <= 1 for words in copied.values()), copied
    assert len(copied) <= len(probe.notes) // 10, copied


# --- the loader's refusals ----------------------------------------------------------------------------

def _tiny(**qa_changes: Any) -> list[dict[str, Any]]:
    def turns(s: int, texts: list[tuple[str, str]]) -> list[dict[str, str]]:
        return [{"speaker": who, "dia_id": f"D{s}:{i}", "text": text} for i, (who, text) in enumerate(texts, 1)]

    conv = {
        "speaker_a": "Wren", "speaker_b": "Idris",
        "session_1_date_time": "9:00 am on 2 February, 2023",
        "session_1": turns(1, [("Wren", "I rent a narrow houseboat moored in Oxford."),
                               ("Idris", "Sounds peaceful."),
                               ("Idris", "My sedan is a 2009 Skoda Octavia.")]),
        "session_2_date_time": "6:30 pm on 9 April, 2023",
        "session_2": turns(2, [("Wren", "The storm last night rattled every window."),
                               ("Idris", "Same here, barely slept.")]),
        "session_3_date_time": "1:15 pm on 20 June, 2023",
        "session_3": turns(3, [("Wren", "Signed for a terraced house in Reading, the boat is sold."),
                               ("Idris", "Congratulations on the new place!")]),
    }
    qa = {"question": "Where does Wren live at present?", "answer": "Reading", "evidence": ["D3:1"],
          "category": 4, "state": "present", "change_kind": "residence", "said": "explicit",
          "superseded": ["D1:1"]}
    past = {"question": "What home did Wren have in early 2023?", "answer": "a houseboat in Oxford",
            "evidence": ["D1:1"], "category": 4, "state": "past", "change_kind": "residence",
            "said": "explicit", "superseded": []}
    return [{"sample_id": "tiny-1", "conversation": conv, "qa": [{**qa, **qa_changes}, past]}]


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_loader_reads_a_file_of_the_format(tmp_path: Path) -> None:
    probe = load_changes(_write(tmp_path, _tiny()))
    assert [c.id for c in probe.dataset.conversations] == ["tiny-1"]
    assert probe.notes["tiny-1/q0"].superseded == ["D1:1"] and probe.notes["tiny-1/q1"].state == "past"


@pytest.mark.parametrize(("change", "message"), [
    ({"state": "now"}, "state"),
    ({"said": None}, "said"),
    ({"change_kind": ""}, "change_kind"),
    ({"superseded": ["D1:9"]}, "superseded turns that do not exist"),
    ({"superseded": []}, "without superseded"),
    ({"evidence": ["D7:1"]}, "evidence that names no turn"),
])
def test_loader_refuses_bad_annotations(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_changes(_write(tmp_path, _tiny(**change)))


# --- one real run -------------------------------------------------------------------------------------

def test_run_scores_dialogmem_and_naive_hybrid_and_the_cli_prints_the_table(tmp_path: Path) -> None:
    data = _write(tmp_path, _tiny())
    results = run_changes(ChangesSpec(data=str(data), out=tmp_path / "out"))
    assert results["run"]["questions"] == 2 and results["run"]["systems"] == ["dialogmem", "naive-hybrid"]
    records = results["records"]
    assert len(records) == 4 and {r["system"] for r in records} == {"dialogmem", "naive-hybrid"}
    for r in records:
        assert r["at1"] in (0.0, 1.0) and r["at3"] >= r["at1"]
        assert (r["stale_first"] is None) == (r["state"] == "past")
    saved = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert saved["summary"]["state"]["present"]["naive-hybrid"]["n"] == 1
    assert "### By kind of change" in (tmp_path / "out" / "report.md").read_text(encoding="utf-8")

    result = CliRunner().invoke(bench_app, ["changes", "--data", str(data), "--out", str(tmp_path / "cli"),
                                            "--systems", "naive-hybrid", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "naive-hybrid rank 1" in result.output and "present · residence" in result.output
    bad = CliRunner().invoke(bench_app, ["changes", "--data", str(data), "--systems", "full-context",
                                         "--out", str(tmp_path / "x"), "--quiet"])
    assert bad.exit_code == 1 and "full-context" in bad.output
