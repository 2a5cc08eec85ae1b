"""Calendar words shared by every date reader: message timestamps, relative dates in turns, and
time windows in questions (pure tables, no I/O)."""

from __future__ import annotations

import re
from collections.abc import Iterable

WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
WEEKDAY_ABBREVIATIONS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
WEEKDAYS = {name: i for i, name in enumerate(WEEKDAY_NAMES)}

MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
               "october", "november", "december")
#: month name or common abbreviation -> month number
MONTHS = {
    **{name: i for i, name in enumerate(MONTH_NAMES, start=1)},
    **{name[:3]: i for i, name in enumerate(MONTH_NAMES, start=1)},
    "sept": 9,
}

#: number words that name an exact count ("two weeks ago", "a couple of days")
NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
    "thirty": 30, "a couple of": 2, "a couple": 2, "couple of": 2,
}
#: vague counts: good enough to bound a search window, never written into a stored date
VAGUE_NUMBER_WORDS = {"a few": 3, "few": 3, "several": 3}


def alternation(words: Iterable[str]) -> str:
    """A regex alternation of ``words``, longest first (so "a couple of" wins over "a")."""
    return "|".join(sorted((re.escape(w) for w in words), key=len, reverse=True))
