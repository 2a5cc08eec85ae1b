"""Per-turn MTM writer (seed 000 §3.5, Algorithm 2 lines 3-7, SLM-3): one concise memory item per
interaction, written right after it arrives.

An *interaction* is the turns of one exchange (a user turn and the assistant's reply, or whatever
short run of turns the caller groups) plus up to ``context_turns`` recent turns of the same session.

- ``RuleTurnWriter`` (LLM-free): the context lines (each clipped to ``CONTEXT_WORDS`` words) then
  the interaction's turns, speaker-prefixed, relative dates made absolute against each turn's time.
  It cites every turn its text contains. An interaction made only of filler gives an empty text.
- ``LLMTurnWriter``: the ``turnwrite`` prompt; ``{"memory": ""}`` means nothing worth keeping (the
  caller stores nothing). The summary cites the interaction's turns (not the context, which it only
  reads). An ``LLMError`` falls back to the rule writer for that interaction and counts one
  fallback for stage ``turn_write``.

Redundancy and conflicts with existing items are decided by ``_reconcile.reconcile``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from .._errors import LLMError
from .._models._llm_base import LLMClient
from .._prompts.turnwrite import render_turnwrite_messages
from .._text._timenorm import absolutize
from .._text._words import clip_words, is_filler
from ._extract import CONTEXT_WORDS, BufferedTurn, resolved

logger = logging.getLogger(__name__)

STAGE = "turn_write"


class WrittenMemory(BaseModel):
    """The item for one interaction; ``text == ""`` means store nothing."""

    text: str
    source_turn_ids: list[str] = Field(default_factory=list)
    method: Literal["llm", "rule"] = "rule"


@runtime_checkable
class TurnWriter(Protocol):
    def write(self, turns: Sequence[BufferedTurn], context: Sequence[BufferedTurn] = ()) -> WrittenMemory:
        """The memory item of one interaction; ``context``: earlier turns, oldest first."""


def _same_session(turns: Sequence[BufferedTurn], context: Sequence[BufferedTurn], limit: int) -> list[BufferedTurn]:
    """The last ``limit`` context turns of the interaction's session, oldest first."""
    if not turns or limit == 0:
        return []
    session = turns[0].session_id
    out: list[BufferedTurn] = []
    for c in reversed(context):
        if c.session_id != session or len(out) == limit:
            break
        out.insert(0, c)
    return out


class RuleTurnWriter:
    """The interaction's turns, speaker-prefixed, after their recent context."""

    def __init__(self, *, context_turns: int = 1) -> None:
        if context_turns < 0:
            raise ValueError("context_turns must be >= 0")
        self.context_turns = context_turns

    def write(self, turns: Sequence[BufferedTurn], context: Sequence[BufferedTurn] = ()) -> WrittenMemory:
        if not turns or all(is_filler(t.content()) for t in turns):
            return WrittenMemory(text="", method="rule")
        ctx = _same_session(turns, context, self.context_turns)
        lines = [f"{c.speaker}: {clip_words(resolved(c), CONTEXT_WORDS)}" for c in ctx]
        lines += [f"{t.speaker}: {resolved(t)}" for t in turns]
        ids = list(dict.fromkeys(t.turn_id for t in [*ctx, *turns]))
        return WrittenMemory(text="\n".join(lines), source_turn_ids=ids, method="rule")


class TurnWriteOutput(BaseModel):
    """The JSON the turnwrite prompt asks for."""

    memory: str | None = ""


class LLMTurnWriter:
    """SLM-3 by an LLM, with the rule writer as fallback."""

    def __init__(self, llm: LLMClient, fallback: RuleTurnWriter | None = None, *, context_turns: int = 4,
                 max_tokens: int | None = 256) -> None:
        self._llm = llm
        self._fallback = fallback if fallback is not None else RuleTurnWriter()
        self.context_turns = context_turns
        self._max_tokens = max_tokens

    def write(self, turns: Sequence[BufferedTurn], context: Sequence[BufferedTurn] = ()) -> WrittenMemory:
        if not turns:
            return WrittenMemory(text="", method="llm")
        ctx = _same_session(turns, context, self.context_turns)
        messages = render_turnwrite_messages([_line(c) for c in ctx], [_line(t) for t in turns])
        try:
            out = self._llm.complete_json(messages, TurnWriteOutput, stage=STAGE, max_tokens=self._max_tokens)
        except LLMError as exc:
            logger.warning("turn writer LLM failed, using the rule writer: %s", exc)
            self._llm.usage.record("llm", STAGE, calls=0, fallbacks=1)
            return self._fallback.write(turns, context)
        text = " ".join((out.memory or "").split())
        if text.lower() in {"", "none", "null", "n/a"}:
            return WrittenMemory(text="", method="llm")
        latest = max(turns, key=lambda t: t.float_time_stamp)
        text = absolutize(text, latest.reference_time())
        return WrittenMemory(text=text, source_turn_ids=list(dict.fromkeys(t.turn_id for t in turns)),
                             method="llm")


def _line(turn: BufferedTurn) -> str:
    return f"[{turn.time_stamp}] {turn.speaker}: {resolved(turn)}"
