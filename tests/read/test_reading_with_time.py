"""Reading with time on the LLM-free defaults, no sleep (real SQLite, Qdrant Edge, MiniLM): a change said
without naming the attribute ("writing from the new Dell, the screen is so crisp") still puts the newest
statement first for a present-state question and the older one first for a past-state question, and a
line about someone else ("my brother is learning the guitar") is not the person's own newest statement."""

from __future__ import annotations

from typing import Any

from dialogmem import Memory
from dialogmem._models._embed import LocalEmbedder
from dialogmem._read._attributes import AttributeSpace
from dialogmem._read._plan import RulePlanner
from dialogmem._read._retrieve import Candidate
from dialogmem._read._state import with_affinity
from dialogmem._read._validity import validity_terms
from dialogmem._text._facts import is_hypothetical, of_someone_else, question_kinds, question_state, topic_kinds
from dialogmem._types import MemoryRecord, ScoredRecord

USER = "u"

#: (speaker, text, when): Kai's computer changes in June without the word "computer" or "laptop"
CHAT = [
    ("Kai", "My laptop is an ancient MacBook held together with tape.", "2023-01-14T19:00:00"),
    ("Lee", "Brave of you to still use it.", "2023-01-14T19:01:00"),
    ("Kai", "I made a lasagne last night and it collapsed.", "2023-01-14T19:02:00"),
    ("Lee", "Still tasty though?", "2023-01-14T19:03:00"),
    ("Kai", "We had a long walk along the river on Sunday.", "2023-03-02T18:00:00"),
    ("Lee", "The weather was lovely for it.", "2023-03-02T18:01:00"),
    ("Kai", "Writing to you from the shiny new Dell, the screen is so crisp.", "2023-06-20T20:00:00"),
    ("Lee", "Nice, finally retired the old one!", "2023-06-20T20:01:00"),
    ("Kai", "My brother is learning the guitar and practises at midnight.", "2023-06-20T20:02:00"),
    ("Kai", "Anyway, how was your week, Lee?", "2023-06-20T20:03:00"),
]


def _chat(mem: Memory, chat: list[tuple[str, str, str]] = CHAT) -> dict[str, str]:
    """Adds ``chat``, one session a day; returns each turn's text → its turn id."""
    ids: dict[str, str] = {}
    for speaker, text, when in chat:
        got = mem.add([{"content": text, "name": speaker}], USER, session_id=when[:10], timestamp=when)
        ids[text] = got.turn_ids[-1]
    mem.flush(USER)
    return ids


def _first_own(mem: Memory, question: str) -> str:
    """The turn id of the first hit's own turn."""
    hit = mem.search(question, USER, limit=5, reference_time="2023-06-21T09:00:00").hits[0]
    return hit.source_turn_ids[-1]


def test_a_change_said_without_the_attributes_name_is_the_newest_statement(make_memory: Any) -> None:
    mem = make_memory()
    ids = _chat(mem)
    dell, macbook = ids[CHAT[6][1]], ids[CHAT[0][1]]
    assert _first_own(mem, "What computer does Kai use now?") == dell
    assert _first_own(mem, "What computer did Kai use before?") == macbook


def test_question_words_name_the_attribute_asked_about() -> None:
    assert question_kinds("Which company employs Sam currently?") >= {"job"}
    assert question_kinds("What e-reader does Oscar use nowadays?") >= {"device"}
    assert question_kinds("Which animals does the family keep at the moment?") >= {"pet"}
    assert question_kinds("Who does Chloe report to these days?") >= {"manager"}
    assert question_kinds("How does Raj get around nowadays?") >= {"vehicle"}
    assert question_kinds("Where is Yusuf staying these days?") >= {"residence"}
    assert question_kinds("What did Caroline paint last week?") == frozenset()


def test_topics_are_read_loosely_and_someone_elses_sentence_is_not_the_speakers() -> None:
    assert topic_kinds("Writing from the new Dell, the screen is so crisp.", {"device"}) == {"device"}
    assert topic_kinds("The vet says the two of them get along.", {"pet", "job"}) == {"pet"}
    assert topic_kinds("We had a long walk along the river.", {"device", "pet", "residence"}) == frozenset()
    assert of_someone_else("My brother is learning the guitar.")
    assert of_someone_else("Oh, she moved to Leeds.")
    assert not of_someone_else("I moved to Leeds.")


def _record(rid: str, text: str, speaker: str, when: float) -> ScoredRecord:
    rec = MemoryRecord(id=rid, user_id=USER, memory=text, speaker_name=speaker, time_stamp="2023-01-01T00:00:00",
                       weekday="Sunday", float_time_stamp=when, created_at=when, updated_at=when)
    return ScoredRecord(record=rec, score=0.5)


def test_the_newest_own_statement_gains_and_older_and_other_peoples_lose() -> None:
    cands = [
        _record("a", "Kai: Pottery class on Thursdays is my happy place.", "Kai", 1.0e9),
        _record("b", "Kai: Quit pottery, I do bouldering at the climbing wall now.", "Kai", 1.1e9),
        _record("c", "Kai: My brother is learning the guitar and practises at midnight.", "Kai", 1.2e9),
        _record("d", "Lee: Anyway, lovely weather.", "Lee", 1.2e9),
    ]
    now = validity_terms("What hobby is Kai into these days?", cands, "present")
    assert now[1] > 0 > now[0] and now[2] <= 0 and now[3] == 0
    before = validity_terms("What hobby did Kai have before?", cands, "past")
    assert before[0] > 0 > before[1] and before[3] == 0


def test_a_past_question_can_say_its_time_as_the_start_of_a_period() -> None:
    assert question_state("Which car did Marcus own at the beginning of 2023?", explicit=True) == "past"
    assert question_state("Where did Priya live at the start of the year?", explicit=True) == "past"
    assert question_state("What did Caroline paint at the weekend?", explicit=True) is None


#: (speaker, text, when): Mia's favourite band changes in June, said against the old one and without the
#: word "favourite"; Jo's later line about a drink mentions food but states no diet
BAND_CHAT = [
    ("Mia", "Honestly no band comes close to Fleetwood Mac, I've had Rumours on since school.", "2023-01-10T19:00:00"),
    ("Jo", "A classic, fair enough.", "2023-01-10T19:01:00"),
    ("Mia", "The bakery near me started doing sourdough on Saturdays.", "2023-01-10T19:02:00"),
    ("Jo", "Dangerous news for my waistline.", "2023-01-10T19:03:00"),
    ("Mia", "We had a long walk along the river on Sunday.", "2023-03-02T18:00:00"),
    ("Jo", "The weather was lovely for it.", "2023-03-02T18:01:00"),
    ("Mia", "Khruangbin have knocked Fleetwood Mac off the top spot, I play them every single day.",
     "2023-06-20T20:00:00"),
    ("Jo", "Never heard of them, send me a song.", "2023-06-20T20:01:00"),
    ("Mia", "I'm trying to drink more water but I keep forgetting.", "2023-06-20T20:02:00"),
    ("Jo", "Get a bottle with the hours marked on it.", "2023-06-20T20:03:00"),
]


def test_a_change_said_against_the_old_value_is_the_newest_statement(make_memory: Any) -> None:
    mem = make_memory()
    ids = _chat(mem, BAND_CHAT)
    new, old = ids[BAND_CHAT[6][1]], ids[BAND_CHAT[0][1]]
    assert _first_own(mem, "Which band does Mia love most these days?") == new
    assert _first_own(mem, "Which band did Mia love most before?") == old


def test_a_line_sharing_only_a_common_word_with_the_statement_is_not_linked_to_it() -> None:
    """A later line of the same person that shares "finally" with the move ("I finally cleaned out the kitchen
    cupboards") is small talk, not the newest statement of where they live; one that names the same thing
    ("Leeds") is."""
    moved = _record("a", "Priya: Finally unpacked the last box, my new bedroom in Leeds is lovely.", "Priya", 1.0e9)
    chores = _record("b", "Priya: I finally cleaned out the kitchen cupboards this weekend.", "Priya", 1.1e9)
    now = validity_terms("Which city is Priya living in at the moment?", [moved, chores], "present")
    assert now[0] > 0 and now[1] <= 0
    named = _record("c", "Priya: The canal walks around Leeds are lovely in the evenings.", "Priya", 1.1e9)
    assert validity_terms("Which city is Priya living in at the moment?", [moved, named], "present")[1] > 0


def _candidate(rid: str, text: str, speaker: str, when: float) -> Candidate:
    rec = _record(rid, text, speaker, when).record
    return Candidate(record=rec, score=0.5)


def test_a_state_questions_candidates_are_read_by_their_own_turns_vector() -> None:
    """Each candidate's own turn is embedded and read against the attribute prototypes, not its window: the
    turn "I returned the car and cycle to work on a folding bike now" under a context line about a holiday
    leads for vehicles; a short reply, or a turn of someone else than the person asked about, is not read at all;
    the turn before it in the window does not count."""
    embedder = LocalEmbedder(quantize="int8")
    space = AttributeSpace(embedder)
    question = "How does Raj get around nowadays?"
    plan = RulePlanner().plan(question, reference_time=None)
    bike = _candidate("a", "Lee: We spent the whole holiday on the beach.\n"
                           "Raj: I sold the car and cycle to work on a folding bike now.", "Raj", 1.0e9)
    short = _candidate("b", "Lee: I bought a new car.\nRaj: Nice one!", "Raj", 1.0e9)
    other = _candidate("c", "Lee: I drive an electric hatchback to the office every day.", "Lee", 1.0e9)
    got = with_affinity(None, USER, plan, embedder.embed_query(question), [bike, short, other],  # type: ignore[arg-type]
                        space, embedder)
    alone = space.affinity(embedder.embed(["I sold the car and cycle to work on a folding bike now."]), {"vehicle"})
    assert got[0].line_affinity and abs(float(got[0].affinity or 0) - float(alone[0])) < 1e-5
    assert got[0].affinity is not None and got[0].affinity > 0
    assert got[1].affinity is None and not got[1].line_affinity
    assert got[2].affinity is None  # not the person asked about: not read


def test_a_turns_own_vector_puts_it_on_topic_whatever_its_context_or_another_kinds_word() -> None:
    """With the own turn's affinity, a statement joins the asked attribute even when a context line of its
    window is on topic (a window's vector could be that line's) and even when it names another kind's word
    ("doctor's orders" for a drink): the newest such statement comes first."""
    old = _candidate("a", "Leo: Coffee is life, a flat white every single morning.", "Leo", 1.0e9)
    new = _candidate("b", "Leo: What's your favourite drink these days?\n"
                          "Leo: I don't drink coffee anymore, doctor's orders. Matcha instead.", "Leo", 1.2e9)
    new.affinity, new.line_affinity = 0.1, True
    now = validity_terms("What's Leo's favourite hot drink these days?", [old, new], "present")
    assert now[1] > 0 and now[1] > now[0]


def test_a_sentence_doing_wonders_is_not_a_hypothetical() -> None:
    assert not is_hypothetical("The sea air in Brighton is doing wonders, I can hear gulls from my kitchen.")
    assert not is_hypothetical("What a wonderful little flat.")
    assert is_hypothetical("I wonder whether we should move.")
    assert is_hypothetical("I was wondering about Leeds.")


def test_a_state_question_is_selected_from_a_wider_pool(make_memory: Any) -> None:
    """A question that says "now" about a mutable attribute draws 2 x 40 candidates (the newest statement is
    often worded like small talk and ranks low); a state question naming no attribute, 2 x 20 as before; any
    other question, 2K."""
    mem = make_memory()
    chat = [("Kai" if i % 2 else "Lee", f"Small talk number {i} about the weather and the {i}th biscuit.",
             f"2023-01-{1 + i // 10:02d}T10:{i % 60:02d}:00") for i in range(100)]
    _chat(mem, chat)
    pipeline = mem._parts.search.pipeline  # the read pipeline: its own count of candidates
    assert pipeline.search("Where does Kai live now?", USER, limit=10).candidates > 40
    assert pipeline.search("What did Kai say about biscuits?", USER, limit=10).candidates <= 20
    # "before" without an attribute: no attribute's history is read, the pool stays 2 x 20
    assert 20 < pipeline.search("What did Kai say before the biscuits?", USER, limit=10).candidates <= 40



MOVE = [
    ("Kai", "I live in a small flat in Denver, close to the park.", "2023-01-14T19:00:00"),
    ("Lee", "Sounds lovely.", "2023-01-14T19:01:00"),
    ("Kai", "We had a long walk along the river on Sunday.", "2023-03-02T18:00:00"),
    ("Lee", "The weather was lovely for it.", "2023-03-02T18:01:00"),
    ("Kai", "I moved to Seattle last weekend, the boxes are everywhere.", "2023-06-20T20:00:00"),
    ("Lee", "Big change!", "2023-06-20T20:01:00"),
]


def test_a_question_without_a_cue_word_is_a_state_question_once_a_change_was_found(make_memory: Any) -> None:
    """"Where does Kai live?" says no "now": read by its grammar it is a present-state question, but only once
    sleep found a change of Kai's among its candidates (here by the rule updater, ``supersede_rules``); before
    that it stays an ordinary question (on LoCoMo, present-tense questions are mostly about facts that never
    changed)."""
    mem = make_memory(sleep={"supersede_rules": True})
    ids = _chat(mem, MOVE)
    pipeline = mem._parts.search.pipeline
    question = "Where does Kai live?"
    assert pipeline.search(question, USER, limit=5, known_speakers=["Kai", "Lee"]).plan.state is None
    mem.sleep(USER)
    assert pipeline.search(question, USER, limit=5, known_speakers=["Kai", "Lee"]).plan.state == "present"
    assert _first_own(mem, question) == ids[MOVE[4][1]]
