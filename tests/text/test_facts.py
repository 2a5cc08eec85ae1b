"""The LLM-free change detector's reading of one line (``_text._facts``): what replaces what, and,
as much, what must not (a wrong supersession hides a true fact)."""

from __future__ import annotations

import pytest

from dialogmem._text._facts import any_supersedes, claims, question_state, record_claims


def replaces(older: tuple[str, str], newer: tuple[str, str]) -> bool:
    return any_supersedes(claims(newer[1], newer[0]), claims(older[1], older[0]))


CHANGES = [
    # (kind, how said): older, newer
    ("residence, explicit", ("Tom", "Things are quiet here in Denver."), ("Tom", "I moved to Seattle last weekend.")),
    ("residence, explicit", ("Ana", "I live in Leeds with two flatmates."), ("Ana", "We relocated to York in May.")),
    ("job, explicit", ("Ana", "I work at a bakery on Mill Road."),
     ("Ana", "I quit my job at the bakery and started at the library.")),
    ("job, implicit", ("Ana", "I work as a paralegal."),
     ("Ana", "First week at the new office in Leeds, I'm exhausted.")),
    ("relationship, explicit", ("Sam", "I'm dating a violinist called Rhea."), ("Sam", "Rhea and I broke up.")),
    ("relationship, negation", ("Sam", "I'm married."), ("Sam", "I'm not married anymore.")),
    ("pet, explicit", ("Lu", "I have a cat called Miso."), ("Lu", "We adopted a greyhound puppy.")),
    ("vehicle, explicit", ("Lu", "I drive an old Honda."), ("Lu", "I sold the Honda and bought a Tesla.")),
    ("diet, negation", ("Kim", "I'm vegan."), ("Kim", "I'm not vegan anymore.")),
    ("diet, explicit", ("Kim", "I'm vegetarian these days."), ("Kim", "I switched to a keto diet.")),
    ("favourite", ("Kim", "My favourite band is Wire."), ("Kim", "My new favourite band is Low.")),
    ("plan, correction", ("Tom", "The wedding is in Porto in June."),
     ("Tom", "Actually the wedding moved to October.")),
    ("plan, postponed", ("Tom", "The trip to Oslo is on 3 May."), ("Tom", "The trip got postponed to August.")),
    ("device", ("Jo", "My phone is an old Pixel."), ("Jo", "I upgraded to a new iPhone.")),
    ("manager", ("Jo", "My manager is Dana."), ("Jo", "I have a new manager, Priyanka.")),
    ("coach", ("Jo", "My coach is Mike."), ("Jo", "I switched to a new coach called Ellen.")),
    ("doctor", ("Jo", "My doctor is Dr Hale."), ("Jo", "I changed doctors, I see Dr Osei now.")),
    ("school", ("Jo", "I'm studying law at Leeds."), ("Jo", "I transferred to a course in Bristol.")),
    ("gym", ("Jo", "I go to the gym on King Street."), ("Jo", "I joined a new climbing gym downtown.")),
    ("hobby", ("Jo", "I'm taking pottery lessons."), ("Jo", "I gave up pottery and took up fencing.")),
]


@pytest.mark.parametrize(("what", "older", "newer"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_change_of_the_same_holders_attribute_supersedes(what: str, older: tuple[str, str],
                                                          newer: tuple[str, str]) -> None:
    assert replaces(older, newer), what


NON_CHANGES = [
    ("two different people", ("Ana", "I live in Leeds."), ("Ben", "I moved to York.")),
    ("a relative, not the speaker", ("Ana", "I live in Leeds."), ("Ana", "My sister moved to York.")),
    ("another person named", ("Ana", "I live in Leeds."), ("Ana", "Elena moved to York.")),
    ("a pronoun of someone else", ("Ana", "I live in Leeds."), ("Ana", "She moved to York last week.")),
    ("a different attribute", ("Ana", "I live in Leeds."), ("Ana", "I bought a new car.")),
    ("someone else's plan", ("Ana", "My sister is planning a trip to Rome."), ("Ana", "I booked a trip to Oslo.")),
    ("a different event", ("Ana", "The wedding is in June."), ("Ana", "Actually the concert moved to May.")),
    ("a hypothetical", ("Ana", "I live in Leeds."), ("Ana", "If I moved to York I'd be happier.")),
    ("a wish", ("Ana", "I live in Leeds."), ("Ana", "I wish I could move to Lisbon.")),
    ("thinking about it", ("Ana", "I drive a Honda."), ("Ana", "I'm thinking about switching to an e-bike.")),
    ("a question", ("Ana", "I live in Leeds."), ("Ana", "Did you move to York?")),
    ("a question without its mark", ("Ana", "I live in Leeds."), ("Ana", "Have you moved to York yet")),
    ("a continuation", ("Ana", "I live in Leeds."), ("Ana", "I still live in Leeds, no change.")),
    ("the same value again", ("Ana", "I work at the library."),
     ("Ana", "I started a new shift pattern at the library.")),
    ("no change said", ("Ana", "I live in Leeds."), ("Ana", "I live in a flat above a bakery.")),
    ("a childhood place", ("Ana", "I live in Leeds."), ("Ana", "I grew up in Cork, we moved a lot.")),
]


@pytest.mark.parametrize(("what", "older", "newer"), NON_CHANGES, ids=[c[0] for c in NON_CHANGES])
def test_what_is_not_a_change_supersedes_nothing(what: str, older: tuple[str, str], newer: tuple[str, str]) -> None:
    assert not replaces(older, newer), what


def test_a_stored_memory_is_read_by_its_own_line_and_speaker() -> None:
    memory = "Maya: Seattle? So you're leaving Denver?\nTom: Already left. I moved to Seattle last weekend."
    [claim] = record_claims(memory, "Tom")
    assert claim.holder == "tom" and "residence" in claim.kinds and "seattle" in claim.values and claim.change
    assert record_claims(memory, "Tom", memory_class="event") == []  # an event summary holds many statements
    assert record_claims(memory, "Tom", tier="ltm") == []


@pytest.mark.parametrize(("question", "state"), [
    ("Where does Tom live now?", "present"),
    ("What car does Lu drive these days?", "present"),
    ("Is Kim still vegan?", "present"),
    ("Who is Jo's current manager?", "present"),
    ("What has Mo been cooking lately?", "present"),
    ("Where does Tom live?", "present"),  # present tense about a mutable attribute
    ("Where did Tom live before he moved?", "past"),
    ("What was Ana's first job?", "past"),
    ("Which car did Lu use to drive?", "past"),
    ("What allergy does Maya have?", None),
    ("When did Tom run the half marathon?", None),
])
def test_question_state(question: str, state: str | None) -> None:
    assert question_state(question) == state
    assert question_state("Where does Tom live?", explicit=True) is None


def test_lately_says_a_question_is_about_the_present() -> None:
    """A cue said in words, so the planner's explicit reading has it too (no LoCoMo dev question says it)."""
    assert question_state("Which gym does Ravi go to lately?", explicit=True) == "present"


def test_one_more_of_a_thing_and_a_change_of_another_kind_replace_nothing() -> None:
    """Seen on natural dialogue: "adopted another puppy" adds a pet; "started agility classes with my
    pups" starts a class, it says nothing new about the pets."""
    dogs = ("Audrey", "My dogs love meeting new people.")
    assert not replaces(dogs, ("Audrey", "We adopted another puppy called Pixie."))
    assert not replaces(dogs, ("Audrey", "I just started agility classes with my pups at a dog park."))
