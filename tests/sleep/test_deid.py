"""De-identification for the shared LTM (sleep/_deid.py): names, user ids, contacts; linear time."""

from __future__ import annotations

import re

import pytest

from dialogmem._sleep._deid import Deidentifier, deidentify
from timing import assert_linear

NAMES = ["Maya Okafor", "Tom", "Caroline", "Jean-Luc Picard", "Anna de la Cruz"]
USER_IDS = ["user-42", "conv_26", "maya.okafor"]
EMAILS = ["maya.okafor@example.com", "tom+news@mail.co.uk"]
PHONES = ["+1 (555) 123-4567", "555.123.4567", "020 7946 0958", "+44 20 7946 0958"]


def leaks(text: str) -> list[str]:
    """Every identifier of the store still readable in ``text`` (case-insensitive, whole words)."""
    parts = {p for n in NAMES for p in re.findall(r"\w+", n) if len(p) >= 2 and p.lower() not in {"de", "la"}}
    found = [p for p in parts if re.search(rf"(?<!\w){re.escape(p)}(?!\w)", text, re.IGNORECASE)]
    found += [u for u in USER_IDS if u.lower() in text.lower()]
    found += [e for e in EMAILS if e.split("@")[0].lower() in text.lower() or "@" in text]
    digits = re.sub(r"\D", "", text)
    found += [p for p in PHONES if re.sub(r"\D", "", p)[-7:] in digits]
    return found


@pytest.fixture(scope="module")
def deid() -> Deidentifier:
    return Deidentifier(NAMES, USER_IDS)


@pytest.mark.parametrize(("text", "expected"), [
    ("Maya adopted a dog.", "a person adopted a dog."),
    ("MAYA's dog and maya’s cat", "a person's dog and a person's cat"),
    ("Maya Okafor moved to Lisbon", "a person moved to Lisbon"),
    ("Okafor moved to Lisbon", "a person moved to Lisbon"),
    ("Jean-Luc likes tea", "a person likes tea"),
    ("Anna de la Cruz paints; Cruz is busy", "a person paints; a person is busy"),
    ("user-42 said conv_26 liked pottery", "someone said someone liked pottery"),
    ("Tommy and Tomato are not Tom", "Tommy and Tomato are not a person"),
    ("Hey Caro, Mayb later; Car keys", "Hey a person, Mayb later; a person keys"),  # capitalised prefixes
    ("the caro stays lower-case", "the caro stays lower-case"),
    ("Write to maya.okafor@example.com about the pottery class", "Write to about the pottery class"),
    ("Call +1 (555) 123-4567 for the pottery class", "Call for the pottery class"),
    ("pottery at 221 Baker Street, London", "pottery at , London"),
    ("photos at https://example.com/maya/album and www.site.org", "photos at and"),
    ("group on 2023-05-07 (2023-05-07), years 1999 2004", "group on 2023-05-07 (2023-05-07), years 1999 2004"),
    ("follow @maya_art for pottery", "follow for pottery"),
])
def test_expected_rewrites(deid: Deidentifier, text: str, expected: str) -> None:
    assert deid(text) == expected


@pytest.mark.parametrize("text", ["Maya", "Maya Okafor!", "Tom's", "maya.okafor@example.com", "user-42",
                                  "+44 20 7946 0958", "Hi Maya, thanks Tom!", ""])
def test_nothing_general_left_gives_none(deid: Deidentifier, text: str) -> None:
    assert deid(text) is None


def test_zero_leaks_over_a_mixed_corpus(deid: Deidentifier) -> None:
    corpus = []
    for n in NAMES:
        for e in EMAILS:
            for p in PHONES:
                corpus.append(f"{n} ({n.upper()}'s friend) mailed {e} and called {p} about the {n.lower()} club.")
    for u in USER_IDS:
        corpus.append(f"Account {u} / {u.upper()} booked a cooking class for {u}.")
    out = [deid(t) for t in corpus]
    assert all(o is not None for o in out)  # "friend", "club", "cooking class" stay
    assert [(t, o, leaks(o)) for t, o in zip(corpus, out, strict=True) if leaks(o or "")] == []


def test_function_form_equals_the_class() -> None:
    text = "Caroline met Tom at 12 Elm Road"
    expected = "a person met a person at"
    assert deidentify(text, names=NAMES, user_ids=USER_IDS) == Deidentifier(NAMES, USER_IDS)(text) == expected


def test_no_names_given_changes_only_contacts() -> None:
    assert deidentify("Maya mailed a@b.com", names=[], user_ids=[]) == "Maya mailed"


# (unit, repeats at full size): each input is tried at a quarter and at full size.
ADVERSARIAL = [
    ("a", 100_000),
    ("@", 100_000),
    ("a@", 50_000),
    ("1", 100_000),
    ("1 ", 50_000),
    ("1-", 50_000),
    ("(1) ", 25_000),
    ("Maya ", 20_000),
    ("maya-", 20_000),
    ("Maya's ", 14_000),
    ("Baker ", 16_000),
    ("http://", 14_000),
    ("x.", 50_000),
    ("a ", 50_000),
    ("'", 100_000),
    ("word " * 10 + "\n", 1_800),
]


@pytest.mark.parametrize(("unit", "repeats"), ADVERSARIAL, ids=lambda v: repr(v)[:12] if isinstance(v, str) else "")
def test_adversarial_inputs_run_in_linear_time(deid: Deidentifier, unit: str, repeats: int) -> None:
    prefix = "12 " if unit == "Baker " else ""
    assert_linear(deid, lambda k: prefix + unit * k, repeats)
    out = deid(prefix + unit * repeats)
    assert out is None or not leaks(out)
