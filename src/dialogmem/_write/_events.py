"""HyMem's event units (seed 004 §3.1): a topic segment summarised by an LLM into one Level-1 memory
that says who, what, when and where, linked to the Level-2 turns it was written from.

A *unit* is a run of whole topic segments of a batch, at most ``max_turns`` turns (a longer topic is
cut in pieces), preceded by the last ``overlap`` turns before it in the same session — from the segment
before it, or from the previous batch — so neighbouring units overlap, as HyMem's do. The summary
cites every turn the model was shown.

Event units come *in addition to* the batch's memories from the extractor, never instead of them
(``write.events``; the measurement is in the README): the per-turn memories keep every turn findable
in its own words, the summary adds a unit that answers "what happened with whom, when" in one hit.
Without an LLM there are no event units: the LLM-free memories are the L1 units. A unit whose call
fails or answers unusable output gets no summary (its turns keep their memories) and counts one
fallback for stage ``event_write``; a unit of filler only gets no call.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from pydantic import BaseModel

from .._backends import with_fallback
from .._models._llm_base import LLMClient
from .._prompts.events import render_event_messages
from .._text._words import is_filler
from ._extract import Batch, BufferedTurn, ExtractedFact, model_fact, resolved

STAGE = "event_write"
EVENT_CLASS = "event"  # MemoryRecord.memory_class of an event unit ("fact" for the others)
_EMPTY = {"", "none", "null", "n/a", '""'}


def event_units(batch: Batch, previous: Sequence[BufferedTurn] = (), *, max_turns: int = 10,
                overlap: int = 2) -> list[list[BufferedTurn]]:
    """The units of ``batch`` (pure): consecutive topic segments of one session packed together while
    they fit in ``max_turns`` turns (the segmenter cuts finer than an event: most of its segments are
    a few turns), a longer segment cut in pieces of ``max_turns``; each unit after the last
    ``overlap`` turns before it of the same session (``previous``: the turns before the batch)."""
    if max_turns < 1 or overlap < 0:
        raise ValueError("max_turns must be >= 1 and overlap >= 0")
    pieces = [list(segment[i:i + max_turns]) for segment in batch for i in range(0, len(segment), max_turns)]
    packed: list[list[BufferedTurn]] = []
    for piece in pieces:
        last = packed[-1] if packed else None
        if last and last[-1].session_id == piece[0].session_id and len(last) + len(piece) <= max_turns:
            last += piece
        else:
            packed.append(piece)
    seen = list(previous)
    units: list[list[BufferedTurn]] = []
    for piece in packed:
        before: list[BufferedTurn] = []
        for t in reversed(seen):
            if len(before) == overlap or t.session_id != piece[0].session_id:
                break
            before.insert(0, t)
        units.append(before + piece)
        seen += piece
    return units


class EventOutput(BaseModel):
    """The JSON the events prompt asks for."""

    summary: str | None = ""


def event_line(turn: BufferedTurn) -> str:
    """``[date, weekday] Speaker: text`` with relative dates resolved against the turn's time."""
    return f"[{turn.time_stamp[:10]}, {turn.weekday[:3]}] {turn.speaker}: {resolved(turn)}"


class LLMEventWriter:
    """One LLM summary per event unit of a batch."""

    def __init__(self, llm: LLMClient, *, max_turns: int = 10, overlap: int = 2,
                 max_tokens: int | None = 200) -> None:
        self._llm = llm
        self.max_turns = max_turns
        self.overlap = overlap
        self._max_tokens = max_tokens

    def summarize(self, batch: Batch, previous: Sequence[BufferedTurn] = ()) -> list[ExtractedFact]:
        """The event memories of ``batch``, in unit order."""
        out: list[ExtractedFact] = []
        for unit in event_units(batch, previous, max_turns=self.max_turns, overlap=self.overlap):
            if all(is_filler(t.content()) for t in unit):
                continue
            out.extend(with_fallback(self._llm, STAGE, partial(self._summary, unit), list,
                                     what=f"{len(unit)} turns"))
        return out

    def _summary(self, unit: list[BufferedTurn]) -> list[ExtractedFact]:
        reply = self._llm.complete_json(render_event_messages([event_line(t) for t in unit]), EventOutput,
                                        stage=STAGE, max_tokens=self._max_tokens)
        text = " ".join((reply.summary or "").split())
        if text.casefold() in _EMPTY:
            return []
        return [model_fact(text, unit).model_copy(update={"memory_class": EVENT_CLASS})]
