"""The haystack benchmark: its distractor recipe (pure, seeded) and a tiny real run.

The end-to-end run uses real parts only: the fixture LoCoMo file, MiniLM, Qdrant Edge, SQLite,
each unit built and queried in fresh processes. No dev data is read here.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dialogmem.bench import BenchConversation, BenchQuestion, BenchSession, BenchTurn, bench_app, load_locomo
from dialogmem.bench._chatgen import PEOPLE, PLACES
from dialogmem.bench._distractors import MIN_ANSWER_CHARS, DistractorRecipe, proper_nouns
from dialogmem.bench._haystack import HaystackSpec, run_haystack
from dialogmem.bench._metrics import locomo_session, normalize_answer

LOCOMO = Path(__file__).parent.parent / "fixtures" / "locomo_mini.json"


def _fixture() -> tuple[BenchConversation, BenchConversation]:
    demo1, demo2 = load_locomo(LOCOMO).conversations
    return demo1, demo2


def _leaky_source() -> BenchConversation:
    """A source conversation that says the needle's (conv-demo-2's) answers and names its speakers."""
    when = datetime(2022, 6, 1, 10, 0)
    lines = [("Marta", "We had jollof rice at the party, it was great."),
             ("Pieter", "Nice. I keep dreaming about the Dolomites."),
             ("Marta", "Did you know Olu from the book club?"),
             ("Pieter", "Wen? Never met."),  # a name only at a sentence start: not substituted
             ("Pieter", "No, but I met a lovely baker in Antwerp last May."),
             ("Marta", "Antwerp has the best waffles.")]
    turns = [BenchTurn(id=f"D1:{i + 1}", session_id="session_1", speaker=s, text=t, time=when)
             for i, (s, t) in enumerate(lines)]
    return BenchConversation(id="leaky", scope="locomo-leaky", speakers=["Marta", "Pieter"],
                             sessions=[BenchSession(id="session_1", time=when, turns=turns)],
                             questions=[BenchQuestion(id="leaky/q0", question="?", answer="waffles", category="x")])


def test_the_recipe_is_deterministic_and_seeded() -> None:
    demo1, demo2 = _fixture()
    first = DistractorRecipe(demo2, [demo1, demo2], seed=3)
    first.plan(400)
    again = DistractorRecipe(demo2, [demo1, demo2], seed=3)
    again.plan(400)
    other = DistractorRecipe(demo2, [demo1, demo2], seed=4)
    other.plan(400)
    turns = [t.model_dump() for t in first.turns()]
    assert len(turns) == 400
    assert turns == [t.model_dump() for t in again.turns()]
    assert first.report == again.report
    assert [t["text"] for t in turns] != [t.text for t in other.turns()]
    # ids are unique, in time order, and never look like LoCoMo dia_ids (no session of their own there)
    assert len({t["id"] for t in turns}) == 400
    assert [t["time"] for t in turns] == sorted(t["time"] for t in turns)
    assert all(locomo_session(t["id"]) is None for t in turns)


def test_copies_of_other_conversations_get_invented_people_and_places() -> None:
    demo1, demo2 = _fixture()
    assert {"Ines", "Tomas", "Lisbon", "Biscuit"} <= set(proper_nouns(demo1))
    recipe = DistractorRecipe(demo2, [demo1, demo2], seed=0)
    report = recipe.plan(300)
    assert report.sources == ["conv-demo-1"]  # the needle is never its own distractor
    assert report.copies >= 2 and report.copied_turns > 0 and report.generated_turns > 0
    turns = list(recipe.turns())
    original = re.compile(r"\b(Ines|Tomas|Lisbon|Biscuit|Wen|Olu)\b")
    assert not [t.text for t in turns if original.search(t.text) or original.search(t.speaker)]
    invented = set(PEOPLE) | set(PLACES)
    assert {t.speaker for t in turns} <= invented
    # each copy renames consistently, and two copies differently
    adoption = [t for t in turns if "adopted a greyhound" in t.text]
    assert len(adoption) >= 2
    for t in adoption:  # "Morning Tomas! I finally adopted...", said by Ines, names the other speaker
        speakers = {u.speaker for u in turns if u.session_id == t.session_id}
        named = t.text.split("!")[0].removeprefix("Morning ")
        assert named in PEOPLE and speakers == {t.speaker, named}
    assert len({t.speaker for t in adoption}) >= 2


def test_no_distractor_turn_holds_a_needle_answer_or_speaker() -> None:
    _, demo2 = _fixture()
    recipe = DistractorRecipe(demo2, [_leaky_source()], seed=1)
    report = recipe.plan(200)
    assert report.dropped_answer >= 2  # jollof rice, the Dolomites: in every copy of the source
    assert report.dropped_name >= 1  # "Wen", a needle speaker
    answers = [normalize_answer(q.answer) for q in demo2.questions]
    checked = [a for a in answers if len(a) >= MIN_ANSWER_CHARS]
    assert "jollof rice" in checked and "dolomites" in checked
    turns = list(recipe.turns())
    assert len(turns) == 200
    for t in turns:
        text = f" {normalize_answer(t.text)} "
        assert not [a for a in checked if f" {a} " in text], t.text
        assert not re.search(r"\b(wen|olu)\b", t.text.lower())
    # the source's own words survive where they leak nothing; its people and places are replaced
    assert any("waffles" in t.text for t in turns)
    assert not any("Antwerp" in t.text or "Marta" in t.text for t in turns)


def test_distractor_sessions_fall_before_and_between_the_needle_sessions() -> None:
    demo1, demo2 = _fixture()
    recipe = DistractorRecipe(demo2, [demo1], seed=0, years_before=4)
    recipe.plan(3000)
    times = sorted({t.time for t in recipe.turns()})
    first, last = (s.time for s in demo2.sessions)
    assert first is not None and last is not None
    assert times[-1] < last and (first - times[0]).days > 3 * 365
    assert any(first < t < last for t in times)


@pytest.mark.slow  # eight fresh processes (each unit is built and queried in its own)
def test_a_tiny_haystack_run_reports_both_systems_and_reuses_its_cache(tmp_path: Path) -> None:
    spec = HaystackSpec(data=LOCOMO, out=tmp_path / "out", cache_dir=tmp_path / "cache",
                        conversations=["conv-demo-2"], haystack=[50])
    results = run_haystack(spec)
    size = results["sizes"][0]
    assert size["h"] == 50 and set(size["systems"]) == {"dialogmem", "naive-hybrid"}
    for name, s in size["systems"].items():
        assert s["haystack_turns"] == 50, name
        assert s["scored"] == 3  # conv-demo-2: 4 questions with evidence, one adversarial
        for part in ("recall", "recall_at_budget"):
            for level in ("turn", "session"):
                assert all(v is not None and 0.0 <= v <= 1.0 for v in s[part][level].values()), (name, part)
        assert s["search_p50_ms"] > 0 and s["search_p95_ms"] >= s["search_p50_ms"]
        assert s["haystack_turns_per_s"] > 0 and s["needle_turns_per_s"] > 0
        assert s["rss_after_open_mb"] > 0 and s["rss_peak_search_mb"] >= s["rss_after_open_mb"]
        assert s["disk_mb"] > 0 and s["memories"] >= 56
        assert s["query_cache"] == [0]
    # the first run fills the cache through the write path, and imports it like any later run
    assert size["systems"]["dialogmem"]["haystack_path"] == ["import"]
    assert size["systems"]["dialogmem"]["write_turns_per_s"] > 0
    assert size["systems"]["naive-hybrid"]["haystack_path"] == ["embedded"]
    assert size["recipes"]["conv-demo-2"]["turns"] == 50
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| 50 | dialogmem |" in report and "| 50 | naive-hybrid |" in report
    assert "turn recall@10" in report and "session recall @512 tok" in report
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["sizes"][0]["systems"]["dialogmem"]["recall"] == size["systems"]["dialogmem"]["recall"]
    assert not (tmp_path / "out" / "scratch" / "h50" / "conv-demo-2" / "dialogmem").exists()

    # a second run of the same H embeds nothing: dialogmem imports its export, naive reads its vectors
    again = run_haystack(spec.model_copy(update={"out": tmp_path / "again"}))["sizes"][0]["systems"]
    assert again["dialogmem"]["haystack_path"] == ["import"]
    assert again["dialogmem"]["embedded_on_import"] == 0 and again["dialogmem"]["write_turns_per_s"] is None
    assert again["naive-hybrid"]["haystack_path"] == ["cached vectors"]
    for name in ("dialogmem", "naive-hybrid"):
        assert again[name]["memories"] == size["systems"][name]["memories"]
        assert again[name]["recall"] == size["systems"][name]["recall"]


@pytest.mark.parametrize(("args", "message"), [
    (["--haystack", "-5"], "--haystack"),
    (["--haystack", "ten"], "--haystack"),
    (["--systems", "naive-bm25"], "unknown system naive-bm25"),
    (["--conversations", "conv-nope"], "no conversation conv-nope"),
])
def test_the_command_refuses_bad_options(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(bench_app, ["haystack", "--data", str(LOCOMO), "--out", str(tmp_path / "o"),
                                            "--cache-dir", str(tmp_path / "c"), "--haystack", "0", *args])
    assert result.exit_code == 1
    assert message in result.output
    assert not (tmp_path / "c").exists()
