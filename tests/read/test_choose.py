"""The fitted chooser of a present- or past-state question's candidates (``_choose``): what it reads and how
it orders the asked person's own statements, with words that no rule knows ("the grandkids clubbed together
for a Paperwhite" says nothing of a device); and that any other question keeps the rules' terms as they are."""

from __future__ import annotations

from dialogmem._models._embed import LocalEmbedder
from dialogmem._read._attributes import AttributeSpace
from dialogmem._read._choose import WEIGHTS, features, state_terms
from dialogmem._read._plan import RulePlanner
from dialogmem._read._retrieve import Candidate
from dialogmem._read._state import with_affinity
from dialogmem._types import MemoryRecord

USER = "u"


def _candidate(rid: str, text: str, speaker: str, when: float, topicality: float | None = None) -> Candidate:
    rec = MemoryRecord(id=rid, user_id=USER, memory=text, speaker_name=speaker, time_stamp="2023-01-01T00:00:00",
                       weekday="Sunday", float_time_stamp=when, created_at=when, updated_at=when)
    return Candidate(record=rec, score=0.5, topicality=topicality)


def _three() -> list[Candidate]:
    """Anselm's old statement, his newer one (both as close to the question) and Pippa's reply."""
    return [
        _candidate("a", "Anselm: my ancient tablet takes a full minute to load the headlines", "Anselm", 1.0e9, 0.30),
        _candidate("b", "Anselm: the grandkids clubbed together for a Paperwhite, the old one is a doorstop",
                   "Anselm", 1.1e9, 0.28),
        _candidate("c", "Pippa: ha, spoilt rotten, the lot of you", "Pippa", 1.2e9),
    ]


def test_a_present_question_puts_the_persons_newest_statement_first_and_a_past_one_the_older() -> None:
    cands = _three()
    now = state_terms("present", cands, [0.0, 0.0, 0.0])
    assert now[1] > now[0] > now[2] == 0.0
    before = state_terms("past", cands, [0.0, 0.0, 0.0])
    assert before[0] > before[1] > before[2] == 0.0


def test_features_are_relative_to_the_persons_statements_and_zero_for_anyone_else() -> None:
    rows = features(_three(), [0.1, 0.0, -0.3])
    # val, own, gap, lead, recency, newest, replaced
    assert rows[0] == [0.1, 1.0, 0.0, 0.0, 0.5, 0.0, 1.0]  # the best cosine; a later statement is as close
    assert rows[1][1] == 1.0 and abs(rows[1][2] + 0.02) < 1e-6  # 0.02 below the best cosine
    assert rows[1][4:] == [1.0, 1.0, 0.0]  # the newest, on topic, nothing later
    assert rows[2] == [-0.3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # not the person's statement: the rules' verdict only


def test_a_question_not_about_a_state_keeps_the_rules_terms() -> None:
    validity = [0.0, 0.25, -0.3]
    assert state_terms(None, _three(), validity) == validity
    assert set(WEIGHTS) == {"present", "past"}


def test_the_persons_statements_get_their_cosine_to_the_question_even_when_no_attribute_is_named() -> None:
    """``_state`` embeds the asked person's own statements for any state question (attribute named or not) and
    keeps each one's cosine to the question; a short reply or another person's turn gets none."""
    embedder = LocalEmbedder(quantize="int8")
    question = "What did Kai get up to before the trip?"
    plan = RulePlanner().plan(question, reference_time=None)
    assert plan.state == "past"
    cands = [_candidate("a", "Lee: How was the week?\nKai: I spent every evening restoring an old rowing boat.",
                        "Kai", 1.0e9),
             _candidate("b", "Kai: Ha, sure.", "Kai", 1.0e9),
             _candidate("c", "Lee: I spent the week painting the fence in the rain.", "Lee", 1.0e9)]
    qv = embedder.embed_query(question)
    got = with_affinity(None, USER, plan, qv, cands, AttributeSpace(embedder), embedder)  # type: ignore[arg-type]
    line = embedder.embed(["I spent every evening restoring an old rowing boat."])[0]
    expected = float(line @ qv / ((line @ line) ** 0.5 * (qv @ qv) ** 0.5))
    assert got[0].topicality is not None and abs(got[0].topicality - expected) < 1e-4
    assert got[1].topicality is None and got[2].topicality is None


def test_the_rule_selector_puts_the_persons_newest_statement_first_for_a_present_question() -> None:
    """Before the chooser the selector ranked by retrieval here (no rule knows a Paperwhite or a doorstop): the
    other person's reply first, then the old tablet. Now the asked person's newest statement comes first for
    "these days", and the older one for "before"; a question not about a state keeps the retrieval order."""
    from dialogmem._read._select import RuleSelector

    planner, selector = RulePlanner(), RuleSelector()

    def first(question: str) -> str:
        plan = planner.plan(question, reference_time=None)
        cands = _three()
        for c, score in zip(cands, (0.9, 0.5, 1.0), strict=True):
            c.score = score
        return selector.select(question, plan, list(cands), 3)[0].record.id

    assert first("What does Anselm read the news on these days?") == "b"
    assert first("What did Anselm read the news on before?") == "a"
    assert first("What did Pippa say about the grandkids?") == "c"
