"""A state question without a cue word: its grammar says it (``_text._facts.question_tense``,
``_read._state.implied_state``). "What does Ana drive?" asks about the present as much as "What does Ana drive
now?"; "Which phone did Lee have in the summer?" about the past as much as "... before?". A question in the
perfect ("What has Ana painted?"), one asking *when*, one naming nobody, or one about no mutable attribute
stays an ordinary question."""

from __future__ import annotations

from datetime import datetime

import pytest

from dialogmem._models._embed import LocalEmbedder
from dialogmem._read._attributes import AttributeSpace
from dialogmem._read._plan import RulePlanner
from dialogmem._read._state import implied_state
from dialogmem._text._facts import question_tense, says_season


@pytest.mark.parametrize(("question", "tense"), [
    ("What does Ana drive?", "present"),
    ("Who is Lee's manager?", "present"),
    ("What car is Kit driving?", "present"),
    ("What's Yev's favourite lunch?", "present"),
    ("Which animal lives with Ilse?", "present"),
    ("Who trains the running group?", "present"),
    ("Does Marisol eat meat?", "present"),
    ("Which phone did Lee have in the summer?", "past"),
    ("Who was Rafe's partner in January?", "past"),
    ("Which physician looked after Rosa?", "past"),
    ("What books has Melanie read?", None),  # the perfect: a history, and "books" is no verb
    ("What martial arts has John done?", None),
    ("Where will they live?", None),
])
def test_the_tense_of_a_question_is_read_from_its_grammar(question: str, tense: str | None) -> None:
    assert question_tense(question) == tense


def test_a_season_is_a_time() -> None:
    assert says_season("What did Ana ride over the summer?") and says_season("in the spring")
    assert not says_season("What is Ana's favourite season?")


@pytest.fixture(scope="module")
def space_and_embedder() -> tuple[AttributeSpace, LocalEmbedder]:
    embedder = LocalEmbedder(quantize="int8")
    return AttributeSpace(embedder), embedder


@pytest.mark.parametrize(("question", "state"), [
    ("What does Kai drive?", "present"),
    ("Who is Kai's manager?", "present"),
    ("Which animal lives with Kai?", "present"),
    ("Which phone did Kai have in June?", "past"),
    ("What did Kai ride over the summer?", "past"),
    ("When did Kai buy a phone in June?", None),  # asks when, not what was true
    ("What books has Kai read?", None),  # the perfect
    ("What does the weather do in June?", None),  # names nobody
    ("Which phone did Kai have?", None),  # past without a time: could be any time, not a state
    ("What does Kai do now?", "present"),  # a cue word: the planner's own, kept
])
def test_a_question_is_a_state_question_by_its_grammar(question: str, state: str | None,
                                                       space_and_embedder: tuple[AttributeSpace, LocalEmbedder]
                                                       ) -> None:
    space, embedder = space_and_embedder
    plan = RulePlanner().plan(question, reference_time=datetime(2023, 9, 1), known_speakers=["Kai", "Lee"])
    got = implied_state(plan, embedder.embed_query(question), space)
    assert got.state == state
    if state is not None and plan.state is None:
        assert got.expansions  # the change words of the attribute go to the lexical search as for "now"
        assert got.query == plan.query and got.k == plan.k

