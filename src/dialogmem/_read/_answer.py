"""The ``Answer`` model, and version 1 of the answerer: one JSON prompt over the hits (stage ``answer``).

``Memory.answer`` uses ``_hymem.HyMemAnswerer`` (plain cited short answers, light → deep). This JSON
answerer stays as the measured alternative (``benchmarks/bench_answer_prompts.py`` variant P0) and
for callers that want JSON with ids from a model that follows it well.

The LLM sees the hits as numbered lines and reports which numbers it used; only numbers among
the given hits are mapped back to memory ids, so an answer can cite nothing it was not shown.
There is no LLM-free answerer: without a model ``answer`` raises ``LLMUnavailableError`` naming
the setting to change, and callers that want the memories themselves use ``search``. Other
``LLMError``s propagate unchanged — the caller decides whether to fall back to the memories.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from .._errors import LLMUnavailableError
from .._models._llm_base import LLMClient
from .._prompts import answer as answer_prompt
from .._types import SearchHit
from .._write._tokens import count_tokens


class AnswerOutput(BaseModel):
    """The JSON the answering LLM must produce."""

    answer: str
    used_ids: list[int] = Field(default_factory=list)


class Answer(BaseModel):
    """An answer and the ids of the memories (L1) and raw turns (L2) it rests on — only ids of lines
    the model was shown."""

    text: str
    memory_ids: list[str] = Field(default_factory=list)
    turn_ids: list[str] = Field(default_factory=list)
    mode: Literal["light", "deep"] = "light"  # deep when the deep module ran
    used: Literal["light", "deep"] = "light"  # the module whose answer stands
    rounds: int = 0  # deep rounds run (0: the light answer was complete)
    context_tokens: int = 0  # context lines shown to the model over all calls (the project's token count)
    prompt_tokens: int = 0  # whole prompts sent over all calls (same count)
    garbage: int = 0  # model replies that could not be used (kept the earlier answer instead)
    light_text: str | None = None  # the light module's own answer, when it ran (equal to text without deep)


class Answerer:
    def __init__(self, llm: LLMClient) -> None:
        self.llm = llm

    def answer(self, query: str, hits: list[SearchHit], *, reference_time: datetime | None = None) -> Answer:
        if not getattr(self.llm, "available", True):
            raise LLMUnavailableError(
                "answering needs an LLM: set llm.backend in the config (or the environment variable "
                "DIALOGMEM_LLM__BACKEND=openai|llama_cpp, with llm.base_url/llm.model or llm.model_path); "
                "search() returns the memories without one")
        # Oldest first, so "prefer the most recent" is easy to see in the prompt.
        ordered = sorted(hits, key=lambda h: h.time_stamp)
        lines = [answer_prompt.format_memory(i, h.time_stamp, h.weekday, h.speaker_name, h.memory)
                 for i, h in enumerate(ordered, start=1)]
        messages = answer_prompt.build_messages(query, lines, reference_time=reference_time)
        out = self.llm.complete_json(messages, AnswerOutput, stage="answer")
        ids: list[str] = []
        for n in out.used_ids:
            if 1 <= n <= len(ordered) and ordered[n - 1].id not in ids:
                ids.append(ordered[n - 1].id)
        return Answer(text=out.answer.strip(), memory_ids=ids, context_tokens=count_tokens("\n".join(lines)))
