"""Fact extraction from STM batches (seed 001 stage 3, seed 002's prompt format, seed 003's
context and time normalisation).

A batch is a list of topic segments, each a list of ``BufferedTurn``. Two backends:

- ``RuleExtractor`` (LLM-free): one fact per turn, ``"Speaker: compressed text"`` with relative
  dates made absolute; entities and keywords by simple lexical rules. Nothing is skipped.
- ``LLMExtractor``: the batch rendered as ``--- Topic N ---`` blocks of numbered lines, facts mapped
  back through a batch-local ``source_id -> turn`` table (so any speaker sequence works). Turns with
  content that got no fact are covered by the rule backend; an ``LLMError`` sends the whole call
  through the rule backend and is counted as a fallback for stage ``add_memory``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field, field_validator

from .._backends import with_fallback
from .._models._llm_base import LLMClient
from .._prompts.extract import render_extraction_messages
from .._text._timenorm import absolutize
from .._text._tokens import count_tokens
from .._text._words import clip_words, content_tokens, entities, is_filler, memory_keywords, missing_words
from .._types import Turn

logger = logging.getLogger(__name__)

STAGE = "add_memory"
CONTEXT_WORDS = 40  # of each context turn a rule memory carries
FILLER_SALIENCE = 0.1
DEFAULT_SALIENCE = 0.5


class BufferedTurn(BaseModel):
    """A turn on its way through the write path, with its provenance; ``text`` is the original
    (caption already appended), ``compressed`` what pre-compression kept of it."""

    turn_id: str
    speaker: str
    text: str
    compressed: str = ""
    time_stamp: str
    float_time_stamp: float
    weekday: str
    session_id: str | None = None
    topic_id: int = -1
    seq: int = 0  # the journal's order; 0 for a turn not journaled yet
    agent_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_turn(cls, t: Turn) -> BufferedTurn:
        return cls(turn_id=t.id, speaker=t.speaker, text=t.content, compressed=t.content,
                   time_stamp=t.time_stamp, float_time_stamp=t.float_time_stamp, weekday=t.weekday,
                   session_id=t.session_id, seq=t.seq, agent_id=t.agent_id, metadata=t.metadata)

    def content(self) -> str:
        """What extraction reads: the compressed text, or the original when compression emptied it."""
        return self.compressed if self.compressed.strip() else self.text

    def reference_time(self) -> datetime:
        """When the turn was said, as the anchor for relative dates."""
        try:
            return datetime.fromisoformat(self.time_stamp)
        except ValueError:
            return datetime.fromtimestamp(self.float_time_stamp, UTC).replace(tzinfo=None)


class ExtractedFact(BaseModel):
    """One memory fact with its provenance; time fields are those of its latest source turn."""

    fact: str
    source_turn_ids: list[str] = Field(min_length=1)
    speaker_name: str
    time_stamp: str
    float_time_stamp: float
    weekday: str
    topic_id: int
    original: str
    compressed: str
    entities: list[str] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)
    session_id: str | None = None
    salience: float = DEFAULT_SALIENCE
    method: Literal["llm", "rule"] = "rule"
    memory_class: str = "fact"  # "event": an event unit's summary (write.events)
    agent_id: str | None = None  # provenance of the turn the fact belongs to (its latest source)
    metadata: dict[str, Any] = Field(default_factory=dict)
    # write.vectors = "turns": the texts whose vectors make this fact's vector, its own turn's last
    # (a rule memory: each cited turn's full line); empty: the vector is the fact's text's
    parts: list[str] = Field(default_factory=list)


Batch = Sequence[Sequence[BufferedTurn]]


@runtime_checkable
class Extractor(Protocol):
    def extract(self, batch: Batch, *, previous: Sequence[BufferedTurn] = ()) -> list[ExtractedFact]:
        """Facts for every informative turn of ``batch`` (a list of topic segments); ``previous``
        are the turns extracted just before it, oldest first, for context."""


def fact_from_turns(text: str, turns: Sequence[BufferedTurn], *, method: Literal["llm", "rule"],
                    salience: float = DEFAULT_SALIENCE) -> ExtractedFact:
    """An ``ExtractedFact`` whose provenance and time come from ``turns`` (in batch order)."""
    latest = max(turns, key=lambda t: t.float_time_stamp)  # max keeps the first of equal times
    for t in turns:
        if t.float_time_stamp == latest.float_time_stamp:
            latest = t  # of equal times, the later turn in the batch
    return ExtractedFact(
        fact=text,
        source_turn_ids=list(dict.fromkeys(t.turn_id for t in turns)),
        speaker_name=turns[0].speaker,
        time_stamp=latest.time_stamp,
        float_time_stamp=latest.float_time_stamp,
        weekday=latest.weekday,
        topic_id=latest.topic_id,
        original="\n".join(t.text for t in turns),
        compressed="\n".join(t.compressed for t in turns),
        entities=entities(text),
        keywords=memory_keywords(text),
        session_id=latest.session_id,
        salience=salience,
        method=method,
        agent_id=latest.agent_id,
        metadata=dict(latest.metadata),
    )


def model_fact(text: str, turns: Sequence[BufferedTurn]) -> ExtractedFact:
    """A statement a model wrote about ``turns``, relative dates in it made absolute against the
    latest of them."""
    latest = max(turns, key=lambda t: t.float_time_stamp)
    return fact_from_turns(absolutize(text, latest.reference_time()), turns, method="llm")


class RuleExtractor:
    """LLM-free extraction: every turn becomes one speaker-prefixed, time-normalised memory.

    Without an LLM there is no coreference resolution, and a reply ("His name is Biscuit.") says
    little on its own. So, as in SimpleMem's sliding window, a memory also carries the
    ``context_turns`` turns before it in the same session (at most ``CONTEXT_WORDS`` words each) and
    cites them too: its text contains them, so the citation is honest. ``previous`` gives the turns
    extracted just before this batch, so buffering never cuts a turn from its context. Topic
    segments are not a limit: on LoCoMo, cutting context at the segmenter's boundaries lost more
    evidence than it saved. ``0`` stores each turn alone.
    """

    def __init__(self, *, context_turns: int = 0) -> None:
        if context_turns < 0:
            raise ValueError("context_turns must be >= 0")
        self.context_turns = context_turns

    def extract(self, batch: Batch, *, previous: Sequence[BufferedTurn] = ()) -> list[ExtractedFact]:
        turns = [t for segment in batch for t in segment]
        context = list(previous)[-self.context_turns:] if self.context_turns else []
        flat = [*context, *turns]
        offset = len(flat) - len(turns)
        return [self._extract(flat, offset + i) for i in range(len(turns))]

    def _extract(self, flat: Sequence[BufferedTurn], i: int) -> ExtractedFact:
        turn = flat[i]
        context: list[BufferedTurn] = []
        for prev in reversed(flat[max(0, i - self.context_turns):i]):
            if prev.session_id != turn.session_id:
                break
            context.insert(0, prev)
        said = [_normalised(c) for c in context]
        lines = [f"{c.speaker}: {clip_words(text, CONTEXT_WORDS)}" for c, text in zip(context, said, strict=True)]
        lines.append(f"{turn.speaker}: {_normalised(turn)}")
        salience = FILLER_SALIENCE if is_filler(turn.text) else DEFAULT_SALIENCE
        fact = fact_from_turns("\n".join(lines), [*context, turn], method="rule", salience=salience)
        # the memory's own lines, context clipped as in its text: composing the whole lines of long
        # context turns gave them more weight than they have in the text, and LoCoMo dev evidence
        # recall at 512 tokens fell 0.768 -> 0.760; a context turn that is not clipped is the same
        # text (and cached vector) as when it was a memory's own
        update: dict[str, Any] = {"parts": lines}
        if context:  # the memory is the turn's: its speaker, its time and topic, not the context's
            update |= {"speaker_name": turn.speaker, "topic_id": turn.topic_id}
        return fact.model_copy(update=update)


FactCiter = Callable[["_FactItem", str], Sequence[int]]


def facts_in_turn_order(out: ExtractionOutput, turns: Sequence[BufferedTurn], cite: FactCiter,
                        fill: Callable[[list[int]], list[tuple[int, ExtractedFact]]], *,
                        what: str, enrich: bool = False) -> list[ExtractedFact]:
    """The model's facts on ``turns`` (positions from ``cite``; a fact citing none is dropped, a
    repeat of the same fact on the same turns is one memory), dates made absolute against the
    latest cited turn, and rule facts from ``fill``; all in turn order, the model's order within a
    turn.

    ``enrich=False``: each fact is a memory, and ``fill`` gives rule facts for every informative turn
    no fact covered. ``enrich=True`` (``write.llm_facts = "enrich"``): every turn has its rule fact,
    the memory the LLM-free path writes, and a model fact adds its words to the keywords (the
    lexical view) of the rule facts of the turns it cites; a fact none of whose turns got a rule
    fact stays a memory of its own, so nothing the model said is lost.
    """
    found: list[tuple[tuple[int, ...], int, ExtractedFact]] = []
    seen: set[tuple[tuple[int, ...], str]] = set()
    for order, item in enumerate(out.data):
        text = " ".join(item.fact.split())
        if not text:
            continue
        ids = tuple(cite(item, text))
        if not ids:
            logger.info("%s: dropped a fact citing no usable turn: %r", what, text[:120])
            continue
        if (ids, text.casefold()) in seen:  # small models loop; a repeated fact is the same memory
            continue
        seen.add((ids, text.casefold()))
        found.append((ids, order, model_fact(text, [turns[i] for i in ids])))
    if enrich:  # every turn, as LLM-free: filler too (with a low salience)
        missing = list(range(len(turns)))
    else:
        covered = {i for ids, _, _ in found for i in ids}
        missing = [i for i, t in enumerate(turns) if i not in covered and not is_filler(t.text)]
    rules = dict(fill(missing)) if missing else {}
    if missing and not enrich:
        logger.info("%s: %d informative turns got no LLM fact; rule facts added", what, len(missing))
    ranked: list[tuple[int, int, ExtractedFact]] = []
    for ids, order, fact in found:
        targets = [i for i in ids if i in rules] if enrich else []
        for i in targets:
            rules[i] = with_words(rules[i], fact.fact)
        if not targets:
            ranked.append((ids[0], order, fact))
    ranked += [(i, -1, fact) for i, fact in rules.items()]
    ranked.sort(key=lambda r: (r[0], r[1]))
    return [f for _, _, f in ranked]


def with_words(fact: ExtractedFact, text: str) -> ExtractedFact:
    """``fact`` with the content words of ``text`` it lacks added to its keywords (the lexical view)."""
    extra = missing_words(text, " ".join([fact.fact, *fact.keywords]))
    return fact.model_copy(update={"keywords": [*fact.keywords, *extra]}) if extra else fact


def _normalised(turn: BufferedTurn) -> str:
    return absolutize(turn.content(), turn.reference_time())


class _FactItem(BaseModel):
    source_id: int | list[int]
    fact: str

    @field_validator("source_id", mode="before")
    @classmethod
    def _numbers(cls, v: object) -> object:
        # Models often quote the id or prefix it ("3", "id 3"); the number is what counts.
        if isinstance(v, str):
            digits = "".join(ch for ch in v if ch.isdigit())
            return int(digits) if digits else -1
        return v

    def ids(self) -> list[int]:
        return self.source_id if isinstance(self.source_id, list) else [self.source_id]


class ExtractionOutput(BaseModel):
    """The JSON the extraction prompt asks for."""

    data: list[_FactItem]


def resolved(turn: BufferedTurn) -> str:
    """The turn's text for a prompt line: relative dates resolved against its time (so even a small
    model can copy them), whitespace collapsed."""
    return " ".join(absolutize(turn.content(), turn.reference_time()).split())


def render_line(source_id: int, turn: BufferedTurn) -> str:
    """One transcript line of the extraction prompt."""
    return f"[{turn.time_stamp}, {turn.weekday}] {source_id}.{turn.speaker}: {resolved(turn)}"


class LLMExtractor:
    """Facts from an LLM, with every informative turn guaranteed to be represented.

    A batch larger than ``max_prompt_tokens`` (transcript part only) is sent in several calls cut at
    topic boundaries (and inside a topic only when one topic alone is too large).
    """

    def __init__(self, llm: LLMClient, fallback: RuleExtractor | None = None, *,
                 max_prompt_tokens: int = 3000, max_tokens: int | None = None, enrich: bool = False) -> None:
        self._llm = llm
        self._fallback = fallback if fallback is not None else RuleExtractor()
        self._max_prompt_tokens = max_prompt_tokens
        self._max_tokens = max_tokens
        self._enrich = enrich

    def extract(self, batch: Batch, *, previous: Sequence[BufferedTurn] = ()) -> list[ExtractedFact]:
        facts: list[ExtractedFact] = []
        for chunk in self._chunks(batch):
            facts.extend(self._extract_chunk(chunk, previous))
            previous = [t for _, block in chunk for t in block]
        return facts

    def _chunks(self, batch: Batch) -> list[list[tuple[int, list[BufferedTurn]]]]:
        """Split into calls of ``(topic_number, turns)`` blocks within the token budget."""
        chunks: list[list[tuple[int, list[BufferedTurn]]]] = []
        current: list[tuple[int, list[BufferedTurn]]] = []
        used = 0
        for topic_no, segment in enumerate(batch, start=1):
            block: list[BufferedTurn] = []
            for turn in segment:
                cost = count_tokens(turn.content()) + 12  # + the line prefix
                if (current or block) and used + cost > self._max_prompt_tokens:
                    if block:
                        current.append((topic_no, block))
                    chunks.append(current)
                    current, block, used = [], [], 0
                block.append(turn)
                used += cost
            if block:
                current.append((topic_no, block))
        if current:
            chunks.append(current)
        return chunks

    def _extract_chunk(self, blocks: list[tuple[int, list[BufferedTurn]]],
                       previous: Sequence[BufferedTurn]) -> list[ExtractedFact]:
        turns = [t for _, block in blocks for t in block]
        lines: list[tuple[int, list[str]]] = []
        sid = 0
        for topic_no, block in blocks:
            rendered = []
            for t in block:
                rendered.append(render_line(sid, t))
                sid += 1
            lines.append((topic_no, rendered))
        def attempt() -> list[ExtractedFact]:
            out = self._llm.complete_json(render_extraction_messages(lines), ExtractionOutput,
                                          stage=STAGE, max_tokens=self._max_tokens)
            return self._map_facts(out, turns, previous)

        return with_fallback(self._llm, STAGE, attempt, lambda: self._fallback.extract([turns], previous=previous),
                             what=f"{len(turns)} turns")

    def _map_facts(self, out: ExtractionOutput, turns: list[BufferedTurn],
                   previous: Sequence[BufferedTurn] = ()) -> list[ExtractedFact]:
        def fill(missing: list[int]) -> list[tuple[int, ExtractedFact]]:
            rules = self._fallback.extract([turns], previous=previous)  # one per turn, with its context
            return [(i, rules[i]) for i in missing]

        return facts_in_turn_order(out, turns, lambda item, text: self._attribute(item, text, turns), fill,
                                   what="extraction", enrich=self._enrich)

    @staticmethod
    def _attribute(item: _FactItem, text: str, turns: list[BufferedTurn]) -> list[int]:
        """Valid batch positions for a fact; an unknown id is dropped, and a fact left with no
        id is grounded on the turn it shares most content words with (if any)."""
        ids = sorted({i for i in item.ids() if 0 <= i < len(turns)})
        if ids:
            return ids
        words = set(content_tokens(text))
        best, best_overlap = -1, 0
        for i, t in enumerate(turns):
            overlap = len(words & set(content_tokens(t.text)))
            if overlap > best_overlap:
                best, best_overlap = i, overlap
        return [best] if best >= 0 else []
