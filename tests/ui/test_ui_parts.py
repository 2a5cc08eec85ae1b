"""The inspector's pure parts: word differences, percentiles, hidden characters, the table's query."""

from __future__ import annotations

import pytest

from dialogmem import InputError
from dialogmem._server._ui._diff import word_diff
from dialogmem._server._ui._listing import parse_query
from dialogmem._server._ui._timings import Timings, percentile
from dialogmem._server._ui._web import hidden_chars


def test_word_diff_keeps_both_texts() -> None:
    diff = word_diff("Alice has a dog named Rex", "Alice has a beagle named Rex now")
    assert diff == [("same", "Alice has a "), ("removed", "dog"), ("added", "beagle"), ("same", " named Rex"),
                    ("added", " now")]
    assert "".join(t for op, t in diff if op != "removed") == "Alice has a beagle named Rex now"
    assert "".join(t for op, t in diff if op != "added") == "Alice has a dog named Rex"
    assert word_diff("", "new text") == [("added", "new text")]


def test_percentiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5) and percentile(values, 95) == pytest.approx(95.05)
    assert percentile([7.0], 99) == 7.0
    timings = Timings(window=3)
    for ms in (100.0, 1.0, 2.0, 3.0):  # the window keeps the latest three
        timings.add("page", ms)
    assert timings.summary() == [("page", 3, 2.0, pytest.approx(2.9), pytest.approx(2.98))]


def test_hidden_characters_are_named() -> None:
    assert hidden_chars("user \u202egnp.exe and pass\u200bword\u200b") == ["U+200B", "U+202E"]
    assert hidden_chars("plain text, café") == []


def test_the_table_query_refuses_bad_parameters_by_name() -> None:
    assert parse_query({}).size == 50
    q = parse_query({"q": " rex ", "mode": "semantic", "time_to": "2023-05-08", "evicted": "1", "size": "20"})
    assert q.q == "rex" and q.evicted and q.index_filter() is not None
    assert q.params(after="abc") == {"q": "rex", "mode": "semantic", "time_to": "2023-05-08", "evicted": "1",
                                     "size": "20", "after": "abc"}
    for params, name in (({"mode": "fuzzy"}, "mode"), ({"sort": "x"}, "sort"), ({"size": "7"}, "size"),
                         ({"tier": "stm"}, "tier"), ({"time_from": "yesterday-ish"}, "time_from")):
        with pytest.raises(InputError, match=name):
            parse_query(params)
