"""Table-driven tests of the pure near-JSON repair (dialogmem._models._json_repair)."""

from __future__ import annotations

from typing import Any

import pytest

from dialogmem._models import JSONRepairError, extract_json

CASES: list[tuple[str, str, Any]] = [
    ("plain object", '{"a": 1}', {"a": 1}),
    ("plain array", "[1, 2, 3]", [1, 2, 3]),
    ("json fence", '```json\n{"a": 1}\n```', {"a": 1}),
    ("bare fence", '```\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
    ("prose before and after", 'Here you go: {"a": "b"} -- done.', {"a": "b"}),
    ("trailing comma in object", '{"a": 1, "b": 2,}', {"a": 1, "b": 2}),
    ("trailing comma in array", '{"a": [1, 2, ],}', {"a": [1, 2]}),
    ("single quotes", "{'a': 'it\\'s', 'b': \"x\"}", {"a": "it's", "b": "x"}),
    ("double quotes inside single", "{'say': 'he said \"hi\"'}", {"say": 'he said "hi"'}),
    ("python literals", "{'ok': True, 'bad': False, 'none': None}", {"ok": True, "bad": False, "none": None}),
    ("unquoted keys", '{answer: "Paris", confidence: 0.5}', {"answer": "Paris", "confidence": 0.5}),
    ("extra closing brackets", '{"a": {"b": 1}}}]', {"a": {"b": 1}}),
    ("mismatched closer", '{"a": [1, 2}', {"a": [1, 2]}),
    ("first of two objects", '{"a": 1} {"a": 2}', {"a": 1}),
    ("brackets in prose skipped", 'Use [the notes] carefully: {"a": 1}', {"a": 1}),
    ("braces inside strings", '{"t": "a } b { c ]"}', {"t": "a } b { c ]"}),
    ("escapes kept", '{"t": "line\\nnext \\u00e9"}', {"t": "line\nnext é"}),
    ("raw newline in string", '{"t": "two\nlines"}', {"t": "two\nlines"}),
    ("comments dropped", '{\n  // the answer\n  "a": 1 /* sure */\n}', {"a": 1}),
    ("number spellings", "{'a': +1, 'b': .5, 'c': -2e3}", {"a": 1.0, "b": 0.5, "c": -2000.0}),
    ("unicode kept", '{"name": "Zoë 日本"}', {"name": "Zoë 日本"}),
    ("nested list of objects", '[{"id": 1, "fact": "x",}, {"id": 2, "fact": "y"},]',
     [{"id": 1, "fact": "x"}, {"id": 2, "fact": "y"}]),
]


@pytest.mark.parametrize(("text", "expected"), [(t, e) for _, t, e in CASES], ids=[c[0] for c in CASES])
def test_repairs(text: str, expected: Any) -> None:
    assert extract_json(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "   ", "The capital of France is Paris.", "no brackets at all: true", "}}}]]]"],
    ids=["empty", "blank", "prose", "bare literal", "only closers"],
)
def test_unrecoverable_text_raises(text: str) -> None:
    with pytest.raises(JSONRepairError) as info:
        extract_json(text)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "text",
    ['{"data": [{"source_id": 0, "fact": "Ivy has locker 4', '{"facts": ["a", "b"', '{"a": 1, "b":',
     '{"a": 1, "b', '{"a": {"b": [1, {"c": 2', '```json\n{"answer": "Par'],
    ids=["mid fact", "open list", "after key", "inside key", "nested", "fenced"],
)
def test_output_cut_off_is_never_completed(text: str) -> None:
    # Completing a cut-off value invents its end ("locker 4" where the turn said 418).
    with pytest.raises(JSONRepairError, match="cut off"):
        extract_json(text)


def test_a_complete_value_after_a_stray_opener_is_still_found() -> None:
    assert extract_json('Here is { the answer: {"a": 1}', expect="object") == {"a": 1}


def test_expected_kind_is_preferred() -> None:
    text = 'Based on [1] and [2], the answer is {"answer": "Paris"}'
    assert extract_json(text) == [1]
    assert extract_json(text, expect="object") == {"answer": "Paris"}
    assert extract_json("[1, 2]", expect="object") == [1, 2]  # the other kind if it is all there is
    assert extract_json('{"a": 1} then [3]', expect="array") == [3]


def test_long_prose_with_many_brackets_is_bounded() -> None:
    text = "[x y] " * 10_000 + '{"a": 1}'
    # Only the first starts are tried, so a pathological text fails fast instead of looping.
    with pytest.raises(JSONRepairError):
        extract_json(text, expect="object")
