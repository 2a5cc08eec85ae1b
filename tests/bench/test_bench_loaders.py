"""Loaders on the small fixture files (original LoCoMo / LongMemEval formats, invented dialogue)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from dialogmem import InputError
from dialogmem.bench import load_locomo, load_longmemeval
from dialogmem.bench._loaders import parse_locomo_time, parse_longmemeval_time

FIXTURES = Path(__file__).parent.parent / "fixtures"
LOCOMO = FIXTURES / "locomo_mini.json"
LME = FIXTURES / "longmemeval_mini.json"


def test_time_formats() -> None:
    assert parse_locomo_time("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56)
    assert parse_locomo_time("12:09 am on 13 September, 2023") == datetime(2023, 9, 13, 0, 9)
    assert parse_locomo_time("12:30 pm on 1 July, 2023") == datetime(2023, 7, 1, 12, 30)
    assert parse_locomo_time("yesterday") is None
    assert parse_longmemeval_time("2023/05/20 (Sat) 02:21") == datetime(2023, 5, 20, 2, 21)
    assert parse_longmemeval_time("2023/02/30 (Thu) 02:21") is None


def test_locomo_sessions_turns_and_captions() -> None:
    ds = load_locomo(LOCOMO)
    assert ds.name == "locomo" and len(ds.sha256) == 64
    assert [c.id for c in ds.conversations] == ["conv-demo-1", "conv-demo-2"]
    conv = ds.conversations[0]
    assert conv.speakers == ["Ines", "Tomas"]
    assert conv.scope == "locomo-conv-demo-1"
    assert [s.id for s in conv.sessions] == ["session_1", "session_2", "session_3"]
    first = conv.sessions[0]
    assert first.time == datetime(2023, 3, 3, 10, 15) and first.raw_time == "10:15 am on 3 March, 2023"
    turns = conv.turns()
    assert [t.id for t in turns][:5] == ["D1:1", "D1:2", "D1:3", "D1:4", "D2:1"]
    assert turns[3].text.endswith("[image: a photo of a small white sailboat next to a wooden pier]")
    assert all(t.time == conv.sessions[1].time for t in conv.sessions[1].turns)
    assert conv.last_time() == datetime(2023, 6, 2, 13, 5)


def test_locomo_questions_categories_answers_and_evidence() -> None:
    ds = load_locomo(LOCOMO)
    qs = ds.conversations[0].questions
    assert [q.category for q in qs] == ["single-hop", "temporal", "multi-hop", "open-domain", "temporal",
                                        "adversarial"]
    assert qs[2].evidence == ["D1:4", "D2:1", "D3:2"]  # "D2:1; D3:2" split
    assert qs[4].answer == "2023"  # integer answers become text
    assert qs[4].evidence == ["D1:1"] and qs[4].malformed_evidence == ["D"]
    assert qs[5].adversarial and qs[5].answer == "blue"  # adversarial_answer
    assert qs[0].evidence_sessions == ["session_1"]
    q2 = ds.conversations[1].questions
    assert q2[1].evidence == ["D2:1", "D2:2"]  # "D2:02"
    assert q2[4].evidence == [] and q2[4].malformed_evidence == ["D9:9"]  # no such turn
    ev = ds.evidence
    assert (ev.entries, ev.normalised, ev.malformed, ev.questions_without_evidence) == (16, 3, 2, 1)


def test_locomo_subset_and_errors(tmp_path: Path) -> None:
    ds = load_locomo(LOCOMO, ["conv-demo-2"])
    assert [c.id for c in ds.conversations] == ["conv-demo-2"]
    with pytest.raises(InputError, match="conv-nope"):
        load_locomo(LOCOMO, ["conv-nope"])
    with pytest.raises(InputError, match="not found"):
        load_locomo(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="not valid JSON"):
        load_locomo(bad)
    bad.write_text(json.dumps({"sample_id": "x"}), encoding="utf-8")
    with pytest.raises(InputError, match="list"):
        load_locomo(bad)


def test_longmemeval_one_scope_per_question_sessions_in_time_order() -> None:
    ds = load_longmemeval(LME)
    assert [c.id for c in ds.conversations] == ["demo-q1", "demo-q2", "demo-q3_abs"]
    conv = ds.conversations[0]
    assert conv.scope == "lme-demo-q1"
    assert [s.id for s in conv.sessions] == ["sess_a", "sess_b", "sess_c"]  # sorted by haystack date
    assert conv.sessions[1].time == datetime(2023, 5, 20, 2, 21)
    assert [t.id for t in conv.sessions[2].turns] == ["sess_c:0", "sess_c:1", "sess_c:2"]
    assert conv.sessions[0].turns[0].speaker == "user" and conv.sessions[0].turns[1].role == "assistant"
    (q,) = conv.questions
    assert q.category == "single-session-user"
    assert q.evidence == ["sess_b:0"] and q.evidence_sessions == ["sess_b"]
    assert q.question_time == datetime(2023, 6, 1, 9, 0)
    assert not q.abstention
    q2 = ds.conversations[1].questions[0]
    assert q2.evidence == ["s1:0", "s2:0"] and q2.category == "temporal-reasoning"
    assert ds.conversations[2].questions[0].abstention


def test_longmemeval_selection_and_limit(tmp_path: Path) -> None:
    assert [c.id for c in load_longmemeval(LME, limit=2).conversations] == ["demo-q1", "demo-q2"]
    assert [c.id for c in load_longmemeval(LME, ["demo-q2"]).conversations] == ["demo-q2"]
    item = json.loads(LME.read_text(encoding="utf-8"))[0]
    item["haystack_dates"] = item["haystack_dates"][:1]
    bad = tmp_path / "lme.json"
    bad.write_text(json.dumps([item]), encoding="utf-8")
    with pytest.raises(InputError, match="differ in length"):
        load_longmemeval(bad)


def test_locomo_limit_keeps_the_first_questions_and_every_turn(tmp_path: Path) -> None:
    from dialogmem.bench._runner import BenchSpec, load_dataset

    full = load_locomo(LOCOMO)
    limited = load_dataset(BenchSpec(dataset="locomo", data=LOCOMO, out=tmp_path, limit=1))
    for whole, part in zip(full.conversations, limited.conversations, strict=True):
        assert [q.id for q in part.questions] == [q.id for q in whole.questions[:1]]
        assert part.turns() == whole.turns()  # the whole conversation is still ingested


def test_locomo_categories_and_sample_choose_questions(tmp_path: Path) -> None:
    from dialogmem.bench._runner import BenchSpec, load_dataset

    full = load_locomo(LOCOMO)

    def chosen(**kw: object) -> list[list[str]]:
        spec = BenchSpec(dataset="locomo", data=LOCOMO, out=tmp_path, **kw)
        return [[q.id for q in c.questions] for c in load_dataset(spec).conversations]

    wanted = {2, 4}
    by_category = chosen(categories=sorted(wanted))
    assert by_category == [[q.id for q in c.questions if q.category_id in wanted] for c in full.conversations]
    assert any(ids for ids in by_category)
    # a sample: the same questions every time, a subset of the chosen categories, in dataset order
    one = chosen(categories=sorted(wanted), sample=1)
    assert one == chosen(categories=sorted(wanted), sample=1)
    for part, whole in zip(one, by_category, strict=True):
        assert len(part) == min(1, len(whole)) and set(part) <= set(whole)
    two = chosen(sample=2)
    for part, c in zip(two, full.conversations, strict=True):
        order = [q.id for q in c.questions]
        assert part == [q for q in order if q in part] and len(part) == min(2, len(order))
    assert chosen(sample=10_000) == [[q.id for q in c.questions] for c in full.conversations]
    with pytest.raises(InputError, match="give one of them"):
        chosen(limit=1, sample=1)
    with pytest.raises(InputError, match="LoCoMo options"):
        load_dataset(BenchSpec(dataset="longmemeval", data=LOCOMO, out=tmp_path, sample=1))
    for bad in ([6], [0], []):  # an id LoCoMo does not use would choose nothing, silently
        with pytest.raises(ValidationError):
            BenchSpec(dataset="locomo", data=LOCOMO, out=tmp_path, categories=bad)


def test_question_selection_is_part_of_the_run_settings(tmp_path: Path) -> None:
    from dialogmem.bench._runner import BenchSpec, load_dataset

    def settings(**kw: object) -> dict[str, object]:
        spec = BenchSpec(dataset="locomo", data=LOCOMO, out=tmp_path, **kw)
        return spec.settings(load_dataset(spec))

    assert "questions" not in settings()  # run directories written before the selection was recorded resume
    assert "answer_prompt" not in settings()  # a retrieval-only run has no answers
    assert settings(sample=2)["questions"] == {"limit": None, "categories": None, "sample": 2}
    assert settings(sample=2) != settings(sample=3) != settings(limit=3)


def test_report_header_names_the_question_selection() -> None:
    from dialogmem.bench._report import _selection

    assert _selection({}) == "" and _selection({"limit": None, "categories": None, "sample": None}) == ""
    assert _selection({"categories": [1, 4], "sample": 60}) == \
        " (categories 1, 4; a seeded random 60 of each conversation)"
    assert _selection({"limit": 25}) == " (the first 25 of each conversation)"


def test_llm_runs_record_the_answer_prompt_version(tmp_path: Path) -> None:
    from dialogmem._prompts import answer_v2
    from dialogmem.bench._runner import BenchSpec, load_dataset

    spec = BenchSpec(dataset="locomo", data=LOCOMO, out=tmp_path, mode="llm")
    assert spec.settings(load_dataset(spec))["answer_prompt"] == answer_v2.VERSION
