"""Answering without a model: a clear error, not a silent empty answer.

The JSON answerer of version 1 (prompt ``benchmarks/_answer_prompt_v1.py``) is no longer in the library; the
answerer ``Memory.answer`` runs is HyMem's (its branches: tests/read/test_hymem.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from dialogmem import LLMUnavailableError

REF = datetime(2023, 7, 1, tzinfo=UTC)


def test_without_llm_answer_raises_a_clear_error(make_memory: Any) -> None:
    mem = make_memory()  # the default configuration: no LLM
    mem.add([{"content": "Anna moved to Lisbon", "name": "Anna"}], "u", timestamp="2023-06-02T10:00:00", flush=True)
    (record,) = mem.get_all("u")
    with pytest.raises(LLMUnavailableError) as info:
        mem.answer("Where does Anna live?", "u", reference_time=REF)
    assert "llm.backend" in str(info.value) and "DIALOGMEM_LLM__BACKEND" in str(info.value)
    # nothing is retrieved for an answer that cannot be given: a search would count an access
    assert mem.get(record.id, "u").access_count == 0
    assert mem.search("Where does Anna live?", "u", limit=1).hits[0].id == record.id  # a search would have found it
    assert mem.get(record.id, "u").access_count == 1  # ...and been counted
