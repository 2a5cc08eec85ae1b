"""Answering without a model: a clear error, not a silent empty answer.

The JSON answerer of version 1 (prompt ``benchmarks/_answer_prompt_v1.py``) is no longer in the library; the
answerer ``Memory.answer`` runs is ``_read._hymem.HyMemAnswerer`` (its branches: tests/read/test_hymem.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dialogmem import LLMUnavailableError, SearchHit
from dialogmem._models import NoLLM
from dialogmem._read._hymem import HyMemAnswerer
from dialogmem._settings import AnswerSettings

HITS = [
    SearchHit(id="m-late", memory="Anna moved to Lisbon", score=0.9, time_stamp="2023-06-02T10:00:00",
              weekday="Fri", speaker_name="Anna", source_turn_ids=["t9"]),
]
REF = datetime(2023, 7, 1, tzinfo=UTC)


def test_without_llm_answer_raises_a_clear_error() -> None:
    searched: list[str] = []

    def search(query: str, k: int) -> list[SearchHit]:
        searched.append(query)
        return HITS

    with pytest.raises(LLMUnavailableError) as info:
        HyMemAnswerer(NoLLM(), AnswerSettings()).answer("Where does Anna live?", search, lambda ids: [],
                                                        reference_time=REF)
    assert "llm.backend" in str(info.value) and "DIALOGMEM_LLM__BACKEND" in str(info.value)
    assert searched == []  # nothing is retrieved for an answer that cannot be given
