"""What ``Memory.answer`` returns (``Answer``). (Version 1 of the answer prompt and its JSON reply live
on in ``benchmarks/_answer_prompt_v1.py``, the measured variant P0 of ``bench_answer_prompts.py``.)

``Memory.answer`` runs ``_hymem.HyMemAnswerer`` (plain cited short answers, light → deep). There is no
LLM-free answerer: without a model ``answer`` raises ``LLMUnavailableError`` naming the setting to
change, and callers that want the memories themselves use ``search``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


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
