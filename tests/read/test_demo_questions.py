"""The demo's own questions on the bundled sample (``dialogmem demo``): each one's evidence turn is in
the first hit (among the turns it cites, as the benchmarks count it; for "Where does Tom live now?" the
move itself is the hit's own turn), as a new user sees it: the conversation added the way the demo adds
it, no sleep."""

from __future__ import annotations

from typing import Any

import pytest

from dialogmem import Memory
from dialogmem.cli import DEMO_QUESTIONS

EVIDENCE = {  # the turn that answers each question
    "What is the name of Maya's dog?": "His name is Biscuit.",
    "Where does Tom live now?": "I moved to Seattle last weekend",
    "What allergy does Maya have?": "I'm the one in the house with a peanut allergy",
    "When is the cello recital?": "student recital on December 9th",
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, sample_data: dict[str, Any]) -> Any:
    mem = Memory(data_dir=tmp_path_factory.mktemp("demo"), sleep={"supersede_rules": True})
    mem.add_conversation(sample_data, "demo-user")
    yield mem
    mem.close()


def test_the_demo_asks_these_questions() -> None:
    assert set(DEMO_QUESTIONS) == set(EVIDENCE)


@pytest.mark.parametrize("question", list(EVIDENCE))
def test_each_demo_question_gets_its_evidence_turn_first(demo: Memory, question: str) -> None:
    first = demo.search(question, "demo-user", limit=3, expand=True).hits[0]
    assert first.sources, question
    assert any(EVIDENCE[question] in t.text for t in first.sources), (question, first.memory)
    if question == "Where does Tom live now?":  # not the Denver-era turns nor one that quotes the move
        assert EVIDENCE[question] in first.sources[-1].text and first.speaker_name == "Tom"


def test_after_sleep_the_move_supersedes_denver_and_stays_first(demo: Memory) -> None:
    report = demo.sleep("demo-user")
    assert report.superseded >= 1 and report.deleted == 0
    hits = demo.search("Where does Tom live now?", "demo-user", limit=3, expand=True).hits
    assert "I moved to Seattle last weekend" in (hits[0].sources or [])[-1].text
    denver = [r for r in demo.get_all("demo-user", limit=200) if "here in Denver" in r.memory.splitlines()[-1]]
    assert denver and all(r.superseded_by == hits[0].id for r in denver)
