"""Version 1 of the answer prompt (JSON reply with the numbered memories used), kept for the benchmark variant P0
of bench_answer_prompts.py; the library answers with _prompts/hymem.py. (Seed 003 reconstructive synthesis,
seed 004 generators.)

Answers come only from the numbered memories; a conflict is settled in favour of the most recent
memory; relative times are turned into absolute dates using the memory's own date; and when the
memories do not hold the answer the model says so instead of guessing. The model also reports
which numbered memories it used, so the caller can cite their sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, Field

VERSION = "answer-v1"

NOT_FOUND = "The memories do not contain this information."

SYSTEM = f"""You answer questions from a user's long-term memory.

You get a question, the date it is asked, and numbered memories. Each memory starts with the date
and weekday it was recorded.

Rules:
1. Use only what the memories say. Do not add outside facts about the people involved.
2. If memories disagree, trust the most recently recorded one.
3. Give times as absolute dates. A memory saying "yesterday" on 2023-05-08 means 2023-05-07;
   write the date, not the relative phrase.
4. Answer briefly and specifically: a name, a date, a short phrase or sentence. If the question
   asks for several items, list all the memories support.
5. If the memories do not contain the answer, answer exactly: "{NOT_FOUND}"

Reply with one JSON object: {{"answer": "...", "used_ids": [numbers of the memories you relied on]}}"""


def format_memory(i: int, time_stamp: str, weekday: str, speaker: str, memory: str) -> str:
    who = f"{speaker}: " if speaker else ""
    day = f" ({weekday})" if weekday else ""
    return f"[{i}] {time_stamp}{day} {who}{memory}"


def build_messages(query: str, lines: Sequence[str], *, reference_time: datetime | None
                   ) -> list[dict[str, str]]:
    """Chat messages for one answer call; ``lines`` come from ``format_memory``."""
    when = f"Asked on: {reference_time:%Y-%m-%d (%A)}\n" if reference_time is not None else ""
    memories = "\n".join(lines) if lines else "(no memories found)"
    user = f"{when}Memories:\n{memories}\n\nQuestion: {query}"
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": user},
    ]


class AnswerOutput(BaseModel):
    """The JSON the answering LLM must produce (version 1)."""

    answer: str
    used_ids: list[int] = Field(default_factory=list)
