"""Retrieval planning: temporal windows, keywords, speakers, complexity, LLM plan + fallback.

The LLM here is ``ScriptedLLM``, a scripted fake (not a model) that goes through the real
repair/validate/retry path of the LLM client.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from dialogmem import LLMTimeoutError, ScriptedLLM
from dialogmem._read import (
    LLMPlanner,
    QueryPlan,
    RulePlanner,
    estimate_complexity,
    match_speakers,
    parse_time_window,
)

REF = datetime(2023, 5, 17, 15, 30, tzinfo=UTC)  # a Wednesday


def _day(y: int, m: int, d: int, h: int = 0, tz: timezone = UTC) -> float:
    return datetime(y, m, d, h, tzinfo=tz).timestamp()


def _end(y: int, m: int, d: int, h: int = 0, tz: timezone = UTC) -> float:
    """Inclusive end of a window whose next period starts at y-m-d h:00."""
    return _day(y, m, d, h, tz) - 0.001


WINDOWS = [
    ("What did I do yesterday?", _day(2023, 5, 16), _end(2023, 5, 17)),
    ("Where did we eat last week?", _day(2023, 5, 8), _end(2023, 5, 15)),
    ("What happened last month?", _day(2023, 4, 1), _end(2023, 5, 1)),
    ("What did Anna buy in May 2023?", _day(2023, 5, 1), _end(2023, 6, 1)),
    ("What did Anna say on 8 May 2023?", _day(2023, 5, 8), _end(2023, 5, 9)),
    ("Which books did I read in 2022?", _day(2022, 1, 1), _end(2023, 1, 1)),
    ("Where did I travel last year?", _day(2022, 1, 1), _end(2023, 1, 1)),
    ("What did I cook two weeks ago?", _day(2023, 5, 1), _end(2023, 5, 8)),
    ("What did I eat this morning?", _day(2023, 5, 17), _end(2023, 5, 17, 12)),
    ("What have I been reading recently?", _day(2023, 4, 18), _end(2023, 5, 18)),
    ("What did Tom say on May 8th?", _day(2023, 5, 8), _end(2023, 5, 9)),
    ("What did Tom say on May 20?", _day(2022, 5, 20), _end(2022, 5, 21)),  # latest past May 20
    ("Whom did I meet last Monday?", _day(2023, 5, 15), _end(2023, 5, 16)),
    ("What happened 3 days ago?", _day(2023, 5, 14), _end(2023, 5, 15)),
    ("What did I do last weekend?", _day(2023, 5, 13), _end(2023, 5, 15)),
    ("What did I plan in the past 3 days?", _day(2023, 5, 14), _end(2023, 5, 18)),
    ("What did I do before May 2023?", None, _end(2023, 5, 1)),
    ("What changed since 2022?", _day(2022, 1, 1), None),
    ("What happened between March 2023 and May 2023?", _day(2023, 3, 1), _end(2023, 6, 1)),
    ("What did I do on 2023-05-08?", _day(2023, 5, 8), _end(2023, 5, 9)),
    ("Where did we go in June?", _day(2022, 6, 1), _end(2022, 7, 1)),
    ("What happened a month ago?", _day(2023, 4, 1), _end(2023, 5, 1)),
]


@pytest.mark.parametrize(("question", "lo", "hi"), WINDOWS, ids=[w[0] for w in WINDOWS])
def test_temporal_phrase_gives_exact_window(question: str, lo: float | None, hi: float | None) -> None:
    window = parse_time_window(question, REF)
    assert window is not None
    assert window.time_from == lo
    assert window.time_to == hi


def test_recently_is_soft_and_calendar_phrases_are_strict() -> None:
    soft = parse_time_window("what have I done lately", REF)
    assert soft is not None and soft.strict is False
    strict = parse_time_window("what did I do last week", REF)
    assert strict is not None and strict.strict is True


def test_windows_follow_the_reference_zone_not_the_wall_clock() -> None:
    tz = timezone(timedelta(hours=-5))
    ref = datetime(2020, 1, 1, 9, 0, tzinfo=tz)  # a Wednesday, far from today
    window = parse_time_window("what did I do yesterday", ref)
    assert window is not None
    assert (window.time_from, window.time_to) == (_day(2019, 12, 31, tz=tz), _end(2020, 1, 1, tz=tz))
    naive = parse_time_window("what did I do yesterday", datetime(2020, 1, 1, 9, 0))
    assert naive is not None and naive.time_from == _day(2019, 12, 31)  # naive = UTC


def test_no_window_for_relational_or_absent_phrases() -> None:
    assert parse_time_window("What did Anna do after her birthday party?", REF) is None
    assert parse_time_window("Where does Anna live?", REF) is None
    assert parse_time_window("I may go to the lake", REF) is None
    plan = RulePlanner().plan("What did Anna do after her birthday party?", reference_time=REF)
    assert not plan.has_window
    assert {"birthday", "party"} <= set(plan.keywords)  # the event stays searchable by its words
    assert plan.complexity != "simple"  # a temporal comparison


def test_speaker_matching_is_case_insensitive_and_soft_unless_asked_what_they_said() -> None:
    known = ["Caroline", "Melanie Smith"]
    assert match_speakers("what did caroline buy?", known) == ["Caroline"]
    assert match_speakers("When did Melanie paint a sunrise?", known) == ["Melanie Smith"]
    assert match_speakers("What did Bob do?", known) == []
    planner = RulePlanner()
    about = planner.plan("Where did Caroline move from?", reference_time=REF, known_speakers=known)
    assert about.speakers == ["Caroline"] and about.speaker_filter is False
    assert "Caroline" in about.entities
    said = planner.plan("What did Caroline say about adoption?", reference_time=REF, known_speakers=known)
    assert said.speakers == ["Caroline"] and said.speaker_filter is True
    told = planner.plan("What has Melanie told you about her kids?", reference_time=REF, known_speakers=known)
    assert told.speaker_filter is True


def test_pronoun_questions_borrow_names_from_recent_context() -> None:
    plan = RulePlanner().plan("What did she bring to the picnic?", reference_time=REF,
                              recent_context=["Anna: I am going to the picnic with Ben."])
    assert "Anna" in plan.entities and "anna" in plan.keywords


@pytest.mark.parametrize(("question", "complexity", "k"), [
    ("Where does Anna live?", "simple", 5),
    ("When did Melanie paint a sunrise?", "simple", 5),
    ("What did Anna buy before the party?", "moderate", 10),
    ("How many times has Anna been to Paris?", "complex", 15),
    ("What did Anna and Ben do before they moved to Berlin, and why?", "complex", 20),  # 3 entities
])
def test_complexity_sets_depth(question: str, complexity: str, k: int) -> None:
    plan = RulePlanner().plan(question, reference_time=REF, known_speakers=["Anna", "Ben", "Melanie"])
    assert (plan.complexity, plan.k) == (complexity, k)
    assert [hq.text for hq in plan.hqs] == [question]  # one view, the question: its keywords join its BM25 side
    assert plan.source == "rules"


def test_estimate_complexity_counts_signals() -> None:
    assert estimate_complexity("Where is it?", [], ["it"], False) == "simple"
    assert estimate_complexity("Which came first, the trip or the party?", ["A", "B"], ["trip", "party"],
                               False) == "complex"


# -- LLM planner ---------------------------------------------------------------------------------

def _plan_json(**over: object) -> str:
    body: dict[str, object] = {
        "queries": [{"text": "Anna adopted a dog", "route": "mtm"},
                    {"text": "Anna likes dogs", "route": "ltm"}],
        "keywords": ["dog", "adopt"],
        "time_from": None, "time_to": None,
        "speakers": ["anna", "Zed"], "entities": ["Anna"], "complexity": "moderate",
    }
    body.update(over)
    return json.dumps(body)


def test_llm_plan_is_used_and_clamped() -> None:
    llm = ScriptedLLM([_plan_json(k=99, queries=[{"text": f"q{i}", "route": "weird"} for i in range(7)])])
    plan = LLMPlanner(llm, RulePlanner()).plan("Did Anna adopt a dog?", reference_time=REF,
                                              known_speakers=["Anna"])
    assert plan.source == "llm"
    assert plan.k == 20  # clamped into [3, 20]
    assert len(plan.hqs) == 4 and all(h.route == "any" for h in plan.hqs)
    assert plan.speakers == ["Anna"]  # "Zed" is no known speaker; names map to their known spelling
    assert llm.stages() == ["plan"]
    assert "Did Anna adopt a dog?" in llm.calls[0].messages[-1]["content"]


def test_llm_plan_routes_window_and_keeps_raw_question() -> None:
    llm = ScriptedLLM([_plan_json(time_from="2023-05-10", time_to="2023-05-01", k=1)])
    plan = LLMPlanner(llm).plan("When did Anna get the dog around her move?", reference_time=REF,
                                known_speakers=["Anna"])
    assert [h.route for h in plan.hqs] == ["mtm", "ltm", "any"]
    assert plan.hqs[-1].text == "When did Anna get the dog around her move?"
    assert plan.k == 3
    # reversed bounds are put in order; a bare end date covers its whole day
    assert (plan.time_from, plan.time_to) == (_day(2023, 5, 1), _end(2023, 5, 11))
    assert {"dog", "adopt", "anna"} <= {k.lower() for k in plan.keywords}


def test_rules_window_wins_over_llm_arithmetic() -> None:
    llm = ScriptedLLM([_plan_json(time_from="2021-01-01", time_to="2021-01-31")])
    plan = LLMPlanner(llm).plan("What did Anna do last week?", reference_time=REF)
    assert (plan.time_from, plan.time_to) == (_day(2023, 5, 8), _end(2023, 5, 15))


def test_llm_window_outside_sane_range_is_dropped() -> None:
    llm = ScriptedLLM([_plan_json(time_from="1066-10-14", time_to="3000-01-01")])
    plan = LLMPlanner(llm).plan("What did Anna do around the festival?", reference_time=REF)
    assert not plan.has_window


@pytest.mark.parametrize("bad", [
    ["I think Anna adopted a dog."] * 3,  # prose, never JSON
    ['{"queries": []}'] * 3,  # no query at all
    [LLMTimeoutError("slow")],
])
def test_llm_failure_falls_back_to_rules_and_is_recorded(bad: list) -> None:
    llm = ScriptedLLM(bad, max_retries=2)
    planner = LLMPlanner(llm, RulePlanner())
    plan = planner.plan("What did Anna do last week?", reference_time=REF, known_speakers=["Anna"])
    assert plan.source == "rules"
    assert plan == RulePlanner().plan("What did Anna do last week?", reference_time=REF,
                                      known_speakers=["Anna"])
    assert llm.usage.get("llm", "plan").fallbacks == 1


def test_plan_model_bounds() -> None:
    with pytest.raises(ValueError):
        QueryPlan(query="x", hqs=[], k=5)
    with pytest.raises(ValueError):
        QueryPlan(query="x", hqs=[{"text": "x"}], k=50)


@pytest.mark.parametrize("ref", [datetime(2024, 3, 10, 15, 0), datetime(2023, 2, 28, 8, 0),
                                 datetime(2025, 12, 31, 23, 0)])
def test_explicit_dates_are_the_days_dateparser_gives(ref: datetime) -> None:
    """Explicit dates are read by calendar arithmetic (dateparser took 3-70 ms a date on the search
    path): the same day dateparser gives with dates preferred from the past ("8 May", "May 8th, 2023"),
    none where it finds none."""
    import dateparser

    months = ["January", "Feb", "march", "Apr", "May", "June", "jul", "Aug", "Sept", "October", "nov", "December"]
    checked = 0
    ordinal = {1: "1st", 2: "2nd", 28: "28th", 29: "29th", 31: "31st"}
    phrases = [form for month in months for day in (1, 2, 28, 29, 31) for year in ("", " 2023", " 2024")
               for form in (f"{day} {month}{year}", f"{month} {ordinal[day]}{',' if year else ''}{year}")]
    for phrase in phrases:
        theirs = dateparser.parse(phrase, languages=["en"], settings={
            "RELATIVE_BASE": ref, "PREFER_DATES_FROM": "past", "RETURN_AS_TIMEZONE_AWARE": False})
        window = parse_time_window(f"what happened on {phrase}?", ref.replace(tzinfo=UTC))
        one_day = window is not None and window.time_to == window.time_from + 86400 - 0.001
        if theirs is None:  # no such day: no day window ("29 Feb 2023" is then February 2023)
            assert not one_day, phrase
            continue
        assert one_day and window is not None, phrase
        assert datetime.fromtimestamp(window.time_from or 0, UTC).date() == theirs.date(), phrase
        checked += 1
    assert checked > 250  # most of the grid is on the calendar
