"""The llama.cpp backend stops a model that repeats itself instead of letting it run to max_tokens.

The stream comes from a fake ``Llama`` object (labelled as such: a real small model cannot be made to
loop on demand); everything around it — the stop, the reply's flags, the corrective retry, the usage —
is the real backend and the real JSON path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from dialogmem import LLMOutputError
from dialogmem._models._llm import LOOP_BLOCK, looping
from dialogmem._models._llm_llamacpp import LlamaCppLLM
from dialogmem._usage import UsageTracker

ITEM = '{"source_id": 10, "fact": "Melanie ran a charity race for mental health on Saturday 20 May 2023."}, '


class Facts(BaseModel):
    data: list[dict[str, Any]]


class FakeLlama:
    """A fake ``llama_cpp.Llama`` (NOT a model): streams scripted token pieces, forever if asked."""

    def __init__(self, answers: list[str | None]) -> None:
        self.answers = answers  # None: a loop of ITEM without end
        self.streamed: list[int] = []
        self.closed = 0

    def create_chat_completion(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        answer = self.answers.pop(0)
        return self._stream(answer, kwargs["max_tokens"])

    def _stream(self, answer: str | None, max_tokens: int) -> Iterator[dict[str, Any]]:
        pieces = ['{"data": [', *([ITEM] * max_tokens)] if answer is None else [answer]
        sent = [0]
        try:
            for piece in pieces[:max_tokens]:
                sent[0] += 1
                yield {"choices": [{"delta": {"content": piece}, "finish_reason": None}]}
            yield {"choices": [{"delta": {}, "finish_reason": "length" if answer is None else "stop"}]}
        finally:
            self.streamed.append(sent[0])
            self.closed += 1

    def tokenize(self, data: bytes, **_: Any) -> list[int]:
        return list(range(len(data) // 4))


def make(tmp_path: Path, answers: list[str | None], usage: UsageTracker) -> tuple[LlamaCppLLM, FakeLlama]:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    llm = LlamaCppLLM(model_path=gguf, usage=usage, max_tokens=2000, max_retries=1)
    fake = FakeLlama(answers)
    llm._llama = fake  # the model "loaded": a fake stream instead of llama.cpp
    return llm, fake


def test_looping_detector() -> None:
    assert looping(ITEM * 10) and not looping(ITEM * 2)
    facts = "".join(f'{{"source_id": {i}, "fact": "Fact number {i} is about a different thing entirely."}}, '
                    for i in range(200))
    assert not looping(facts)  # many items sharing their shape are not a loop
    assert not looping("x" * (LOOP_BLOCK * 3 - 1))  # too short to judge


def test_a_looping_model_is_stopped_early_and_not_asked_again(tmp_path: Path) -> None:
    usage = UsageTracker()
    llm, fake = make(tmp_path, [None, None], usage)
    with pytest.raises(LLMOutputError, match="repeated the same text"):
        llm.complete_json([{"role": "user", "content": "facts please"}], Facts, stage="add_memory")
    assert fake.streamed == [16] and fake.closed == 1  # stopped after a few repeats, not at max_tokens=2000
    stats = usage.get("llm", "add_memory")
    assert stats.calls == 1 and stats.failures == 1


def test_a_complete_answer_is_not_a_loop(tmp_path: Path) -> None:
    good = '{"data": [{"source_id": 10, "fact": "Melanie ran a charity race on 20 May 2023."}]}'
    llm, fake = make(tmp_path, [good], UsageTracker())
    got = llm.complete_json([{"role": "user", "content": "facts please"}], Facts, stage="add_memory")
    assert got.data == [{"source_id": 10, "fact": "Melanie ran a charity race on 20 May 2023."}]
    assert fake.streamed == [1] and fake.closed == 1  # streamed to its end
