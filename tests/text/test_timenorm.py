"""Relative time phrases made absolute against the turn time (_timenorm.py)."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from dialogmem._text._timenorm import absolutize, anchored

MON = datetime(2023, 5, 8, 13, 56)  # Monday
SAT = datetime(2023, 5, 6, 9, 0)  # Saturday
JAN31 = datetime(2023, 1, 31, 18, 30)  # Tuesday, end of month

CASES = [
    # (reference, input, expected output)
    (MON, "I went hiking yesterday", "I went hiking yesterday (2023-05-07)"),
    (MON, "Yesterday was long.", "Yesterday (2023-05-07) was long."),
    (MON, "See you tomorrow!", "See you tomorrow (2023-05-09)!"),
    (MON, "I'm tired today", "I'm tired today (2023-05-08)"),
    (MON, "we watched it last night", "we watched it last night (2023-05-07)"),
    (MON, "I ran this morning", "I ran this morning (2023-05-08)"),
    (MON, "the day before yesterday", "the day before yesterday (2023-05-06)"),
    (MON, "the day after tomorrow", "the day after tomorrow (2023-05-10)"),
    (MON, "two days ago", "two days ago (2023-05-06)"),
    (MON, "2 days ago", "2 days ago (2023-05-06)"),
    (MON, "a couple of days ago we talked", "a couple of days ago (2023-05-06) we talked"),
    (MON, "a week ago", "a week ago (the week of 2023-05-01)"),
    (MON, "three weeks ago", "three weeks ago (the week of 2023-04-17)"),
    (MON, "3 months ago", "3 months ago (February 2023)"),
    (MON, "a year ago", "a year ago (2022)"),
    (MON, "in 3 weeks", "in 3 weeks (the week of 2023-05-29)"),
    (MON, "in two days", "in two days (2023-05-10)"),
    (MON, "in a month", "in a month (June 2023)"),
    (MON, "Last week I met Bob", "Last week (the week of 2023-05-01) I met Bob"),
    (MON, "this week", "this week (the week of 2023-05-08)"),
    (MON, "next week", "next week (the week of 2023-05-15)"),
    (MON, "last month", "last month (April 2023)"),
    (MON, "next month I fly to Paris", "next month (June 2023) I fly to Paris"),
    (MON, "last year", "last year (2022)"),
    (MON, "next year", "next year (2024)"),
    (MON, "this weekend", "this weekend (the weekend of 2023-05-13)"),
    (MON, "last weekend", "last weekend (the weekend of 2023-05-06)"),
    (MON, "last Saturday", "last Saturday (2023-05-06)"),
    (MON, "next Friday", "next Friday (2023-05-12)"),
    (MON, "this Monday", "this Monday (2023-05-08)"),
    (SAT, "last Saturday", "last Saturday (2023-04-29)"),
    (SAT, "next Saturday", "next Saturday (2023-05-13)"),
    (SAT, "this weekend", "this weekend (the weekend of 2023-05-06)"),
    (JAN31, "this Monday", "this Monday (2023-01-30)"),
    (JAN31, "next month", "next month (February 2023)"),
    (JAN31, "a month ago", "a month ago (December 2022)"),
    (JAN31, "last year", "last year (2022)"),
    # Two phrases in one turn, original casing kept.
    (MON, "Yesterday I booked it for next Friday.",
     "Yesterday (2023-05-07) I booked it for next Friday (2023-05-12)."),
    # Not temporal phrases: untouched.
    (MON, "the last time we spoke", "the last time we spoke"),
    (MON, "in an hour", "in an hour"),
    (MON, "Today's special", "Today's (2023-05-08) special"),
    (MON, "last week's game", "last week's (the week of 2023-05-01) game"),
    (MON, "a few days ago", "a few days ago"),
    (MON, "", ""),
]


@pytest.mark.parametrize(("ref", "text", "expected"), CASES)
def test_absolutize_table(ref: datetime, text: str, expected: str) -> None:
    assert absolutize(text, ref) == expected


@pytest.mark.parametrize(("ref", "text", "expected"), CASES)
def test_absolutize_is_idempotent(ref: datetime, text: str, expected: str) -> None:
    assert absolutize(expected, ref) == expected


def test_reference_not_wall_clock() -> None:
    # Same phrase, references years apart: the output follows the reference only.
    assert absolutize("yesterday", datetime(1999, 3, 1)) == "yesterday (1999-02-28)"
    assert absolutize("yesterday", datetime(2031, 1, 1, 0, 5)) == "yesterday (2030-12-31)"


def test_timezone_aware_reference_uses_its_own_wall_date() -> None:
    tokyo = timezone(timedelta(hours=9))
    ref = datetime(2023, 5, 8, 1, 0, tzinfo=tokyo)  # still 2023-05-07 in UTC
    assert absolutize("yesterday", ref) == "yesterday (2023-05-07)"
    assert absolutize("today", datetime(2023, 5, 8, 23, 0, tzinfo=UTC)) == "today (2023-05-08)"


def test_fast_without_temporal_phrases() -> None:
    turn = ("Hey Mel, how have you been doing? I just got back from a great trip with my family to the "
            "mountains, we saw so many birds and my kids loved the lake.")
    absolutize(turn, MON)
    n = 2000
    start = time.perf_counter()
    for _ in range(n):
        assert absolutize(turn, MON) == turn
    per_turn = (time.perf_counter() - start) / n
    assert per_turn < 1e-3, f"{per_turn * 1e6:.0f} µs per turn"


def test_deterministic_across_calls() -> None:
    text = "two weeks ago and last Sunday and in 4 days"
    outs = {absolutize(text, MON) for _ in range(5)}
    assert outs == {"two weeks ago (the week of 2023-04-24) and last Sunday (2023-05-07) "
                    "and in 4 days (2023-05-12)"}


FRI = datetime(2023, 6, 9, 13, 0)  # Friday

ANCHORED = [
    # (said, text before it is stored, what a reader is shown)
    (FRI, "I spoke at a school last week", "I spoke at a school the week before 2023-06-09"),
    (FRI, "we camped last weekend", "we camped the weekend before 2023-06-09"),
    (FRI, "I ran a race last Saturday", "I ran a race the Saturday before 2023-06-09"),
    (FRI, "two weeks ago I painted", "two weeks before 2023-06-09 I painted"),
    (FRI, "a week ago", "a week before 2023-06-09"),
    (FRI, "this week I applied", "the week of 2023-06-09 I applied"),
    # day-, month- and year-grained brackets are already what people say
    (FRI, "yesterday I went", "yesterday (2023-06-08) I went"),
    (FRI, "two days ago", "two days ago (2023-06-07)"),
    (FRI, "I read it last year", "I read it last year (2022)"),
    (FRI, "last month", "last month (May 2023)"),
    (FRI, "next week", "next week (the week of 2023-06-12)"),
]


@pytest.mark.parametrize(("said", "text", "shown"), ANCHORED)
def test_anchored_re_says_week_phrases_from_the_day_said(said: datetime, text: str, shown: str) -> None:
    stored = absolutize(text, said)
    assert anchored(stored, said.date()) == shown
    assert anchored(shown, said.date()) == shown  # idempotent


def test_anchored_leaves_brackets_it_did_not_write() -> None:
    stored = absolutize("I went to a school last week", FRI)
    # the text is shown with another day than the one it was written against: left as stored
    assert anchored(stored, date(2023, 6, 20)) == stored
    # a bracket the speaker typed after the phrase is not a date bracket
    assert anchored("last week (at last) we met", FRI.date()) == "last week (at last) we met"
    assert anchored("no phrase (2023-06-02) here", FRI.date()) == "no phrase (2023-06-02) here"
    # two phrases in one text, each re-said
    both = absolutize("last week and last Friday", FRI)
    assert anchored(both, FRI.date()) == "the week before 2023-06-09 and the Friday before 2023-06-09"
    # a capital and a possessive are kept
    assert anchored(absolutize("Last week's talk", FRI), FRI.date()) == "The week before 2023-06-09's talk"


@pytest.mark.parametrize("ref", [date(2024, 2, 29), date(2023, 3, 31), date(2023, 12, 31), date(2023, 5, 10)])
def test_relative_phrases_resolve_to_the_dates_dateparser_gives(ref: date) -> None:
    """The calendar arithmetic that replaced dateparser for relative phrases agrees with it (month
    ends, leap days, "next"/"last" weekday on that weekday itself)."""
    import dateparser

    phrases = ["yesterday", "tomorrow", "the day before yesterday", "the day after tomorrow", "last night",
               *(f"{w} {d}" for w in ("last", "next") for d in ("monday", "wednesday", "friday", "sunday")),
               *(p.format(n=n, u=u) for n in (0, 1, 2, 13) for u in ("day", "week", "month", "year")
                 for p in ("{n} {u}s ago", "in {n} {u}s"))]
    base = datetime(ref.year, ref.month, ref.day, 12, 0)
    for phrase in phrases:
        theirs = dateparser.parse(phrase, languages=["en"], settings={
            "PREFER_DATES_FROM": "past", "RETURN_AS_TIMEZONE_AWARE": False, "RELATIVE_BASE": base})
        assert theirs is not None
        unit = next((u for u in ("week", "month", "year") if u in phrase and ("ago" in phrase or "in " in phrase)),
                    "day")
        label = {"week": f"the week of {(theirs.date() - timedelta(days=theirs.weekday())).isoformat()}",
                 "month": theirs.strftime("%B %Y"), "year": str(theirs.year)}.get(unit, theirs.date().isoformat())
        assert absolutize(f"It was {phrase}.", base) == f"It was {phrase} ({label}).", phrase


@pytest.mark.parametrize("text", ["yeſterday", "laſt night", "next ſunday", "3 dayſ ago"])
def test_a_lookalike_letter_is_not_a_time_phrase(text: str) -> None:
    """"ſ" (long s) matches "s" under a Unicode case-insensitive pattern but is no time word."""
    assert absolutize(text, MON) == text and anchored(text, MON.date()) == text


@pytest.mark.parametrize(("text", "ref"), [
    ("last week", datetime(1, 1, 2, 12)), ("3 days ago", datetime(1, 1, 2)),
    ("next weekend", datetime(9999, 12, 31)), ("in 2 years", datetime(9999, 1, 1))])
def test_a_day_off_the_calendar_leaves_the_phrase_as_it_is(text: str, ref: datetime) -> None:
    assert absolutize(f"See you {text}.", ref) == f"See you {text}."
    assert anchored(f"{text} (2023-05-01)", ref.date()) == f"{text} (2023-05-01)"


@pytest.mark.parametrize("text", [
    "I'm single for the first time in five years.",  # was "(2029)": a past span read as a future year
    "I've been vegan for three weeks now.",
    "I haven't seen her in two years.",
    "Best sleep I've had in weeks.",
    "The longest run I've done in three months.",
])
def test_durations_are_not_dates(text: str) -> None:
    assert absolutize(text, MON) == text


def test_a_date_ahead_after_a_duration_in_another_clause_is_still_resolved() -> None:
    assert absolutize("Best sleep in weeks, and we fly in three days.", MON) == \
        "Best sleep in weeks, and we fly in three days (2023-05-11)."
    assert absolutize("We move in two months.", MON) == "We move in two months (July 2023)."
