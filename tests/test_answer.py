"""Answer generation: cites only the memories it was given; no LLM → a clear error.

The LLM here is ``ScriptedLLM``, a scripted fake (not a model) that goes through the real
repair/validate/retry path of the LLM client.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from dialogmem._errors import LLMOutputError, LLMUnavailableError
from dialogmem._models import NoLLM, ScriptedLLM
from dialogmem._read import Answer, Answerer
from dialogmem._types import SearchHit

HITS = [
    SearchHit(id="m-late", memory="Anna moved to Lisbon", score=0.9, time_stamp="2023-06-02T10:00:00",
              weekday="Fri", speaker_name="Anna", source_turn_ids=["t9"]),
    SearchHit(id="m-early", memory="Anna lives in Porto", score=0.8, time_stamp="2023-01-05T10:00:00",
              weekday="Thu", speaker_name="Anna", source_turn_ids=["t1"]),
    SearchHit(id="m-other", memory="Ben likes chess", score=0.3, time_stamp="2023-03-01T10:00:00",
              weekday="Wed", speaker_name="Ben", source_turn_ids=["t5"]),
]
REF = datetime(2023, 7, 1, tzinfo=UTC)


def test_answer_maps_numbers_back_to_ids_and_drops_the_rest() -> None:
    llm = ScriptedLLM([json.dumps({"answer": " Lisbon ", "used_ids": [3, 1, 3, 17, 0]})])
    got = Answerer(llm).answer("Where does Anna live?", HITS, reference_time=REF)
    assert isinstance(got, Answer)
    assert got.text == "Lisbon"
    # the memories are numbered oldest first: 1 = m-early, 2 = m-other, 3 = m-late
    assert got.memory_ids == ["m-late", "m-early"]
    prompt = llm.calls[0].messages[-1]["content"]
    assert "Asked on: 2023-07-01" in prompt
    assert prompt.index("Anna lives in Porto") < prompt.index("Anna moved to Lisbon")
    assert "[3] 2023-06-02T10:00:00 (Fri) Anna: Anna moved to Lisbon" in prompt
    assert "most recent" in llm.calls[0].messages[0]["content"]
    assert llm.stages() == ["answer"]


def test_answer_with_no_hits_still_asks_and_cites_nothing() -> None:
    llm = ScriptedLLM([json.dumps({"answer": "The memories do not contain this information.",
                                   "used_ids": [1]})])
    got = Answerer(llm).answer("Where does Zed live?", [], reference_time=None)
    assert got.memory_ids == []
    assert "(no memories found)" in llm.calls[0].messages[-1]["content"]


def test_without_llm_answer_raises_a_clear_error() -> None:
    with pytest.raises(LLMUnavailableError) as info:
        Answerer(NoLLM()).answer("Where does Anna live?", HITS, reference_time=REF)
    assert "llm.backend" in str(info.value) and "DIALOGMEM_LLM__BACKEND" in str(info.value)


def test_unusable_answer_output_is_an_error_not_a_silent_empty_answer() -> None:
    llm = ScriptedLLM(["nope"] * 3, max_retries=2)
    with pytest.raises(LLMOutputError):
        Answerer(llm).answer("Where does Anna live?", HITS, reference_time=REF)
