"""Baselines measured in the same run: naive RAG over raw turns, and the whole conversation.

Naive RAG stores every raw turn as one record (``source_turn_ids=[turn id]``) in a Qdrant Edge
shard, with the same embedder as dialogmem, and searches it dense-only, BM25-only or hybrid (RRF).
Full-context gives the reader the whole conversation, cut to the reader's window from the oldest
end; it has no retrieval, so only QA numbers exist for it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Literal, get_args

from .._errors import ConfigError
from .._models import Embedder, LLMClient
from .._prompts import answer_v2 as plain_prompt
from .._prompts.answer_v2 import ContextLine
from .._prompts.judge import reader_messages
from .._settings import DENSE_WEIGHT
from .._store import EdgeIndex, IndexPoint
from .._types import MemoryRecord, ScoredRecord
from ._loaders import BenchConversation, BenchQuestion, BenchTurn
from ._systems import AnswerOutcome, IngestCost, RetrievedHit, SearchOutcome, count_tokens

NaiveMode = Literal["dense", "bm25", "hybrid", "convex"]
_NS = uuid.UUID("0f3c7d52-8a1e-4b6f-9d2c-5e7a1b3c9f40")
_EMBED_BATCH = 256
# room kept free in the reader's window for the instructions, the question and the answer
_PROMPT_RESERVE = 256


def turn_line(turn: BenchTurn) -> str:
    """How a raw turn reads in a context: ``[time] speaker: text``."""
    when = turn.time.strftime("%Y-%m-%d %H:%M (%a)") if turn.time else turn.raw_time
    return f"[{when}] {turn.speaker}: {turn.text}" if when else f"{turn.speaker}: {turn.text}"


def _record(conversation: BenchConversation, turn: BenchTurn, now: float) -> MemoryRecord:
    when = turn.time or datetime.fromtimestamp(0)
    return MemoryRecord(
        id=str(uuid.uuid5(_NS, f"{conversation.scope}\x1f{turn.id}")), user_id=conversation.scope,
        session_id=turn.session_id, level="L2", memory=f"{turn.speaker}: {turn.text}",
        original_memory=turn.text, time_stamp=when.isoformat(), float_time_stamp=when.timestamp(),
        weekday=when.strftime("%a"), speaker_name=turn.speaker, source_turn_ids=[turn.id],
        created_at=now, updated_at=now, metadata={"line": turn_line(turn), "text": turn.text,
                                                  "when": turn.time.isoformat() if turn.time else None})


class NaiveRAG:
    """Raw turns in one Edge shard; ``mode`` picks dense, BM25, hybrid (RRF, the fusion a user gets
    from a vector database's hybrid query) or convex (dialogmem's own fusion, ``read.dense_weight``:
    the baseline with the read path's fusion gain, so that the gain is not counted as dialogmem's)."""

    retrieval = True

    def __init__(self, mode: NaiveMode, scratch: Path, embedder: Embedder, *,
                 reader: LLMClient | None = None, answer_k: int = 10,
                 reference_time: datetime | None = None) -> None:
        if mode not in get_args(NaiveMode):
            raise ConfigError(f"unknown naive RAG mode {mode!r}: use {', '.join(get_args(NaiveMode))}")
        self.name = f"naive-{mode}"
        self.mode = mode
        self._embedder = embedder
        self._reader = reader
        self._answer_k = answer_k
        self._reference_time = reference_time
        self._index = EdgeIndex(scratch / "index", dim=embedder.dim)
        self._conv: BenchConversation | None = None

    def ingest(self, conversation: BenchConversation) -> IngestCost:
        self._conv = conversation
        started = time.perf_counter()
        turns = conversation.turns()
        now = time.time()
        for i in range(0, len(turns), _EMBED_BATCH):
            batch = turns[i:i + _EMBED_BATCH]
            records = [_record(conversation, t, now) for t in batch]
            vectors = self._embedder.embed([r.memory for r in records])
            points = [IndexPoint(record=r, vector=v) for r, v in zip(records, vectors, strict=True)]
            self._index.upsert(points)
        self._index.flush()
        return IngestCost(wall_s=time.perf_counter() - started, turns=len(turns),
                          memories=self._index.count(conversation.scope),
                          embedding_calls=-(-len(turns) // _EMBED_BATCH))

    def _found(self, text: str, k: int) -> list[ScoredRecord]:
        assert self._conv is not None, "ingest() first"
        scope = self._conv.scope
        if self.mode == "bm25":
            return self._index.lexical_search(scope, text, limit=k)
        vector = self._embedder.embed_query(text)
        if self.mode == "dense":
            return self._index.dense_search(scope, vector, limit=k)
        return self._index.hybrid_search(scope, vector, text, limit=k,
                                         dense_weight=DENSE_WEIGHT if self.mode == "convex" else None)

    def _search(self, text: str, k: int) -> list[RetrievedHit]:
        return [RetrievedHit(id=s.record.id, text=str(s.record.metadata.get("line", s.record.memory)),
                             score=s.score, source_turn_ids=list(s.record.source_turn_ids))
                for s in self._found(text, k)]

    def search(self, question: BenchQuestion, k: int) -> SearchOutcome:
        started = time.perf_counter()
        hits = self._search(question.question, k)
        latency = (time.perf_counter() - started) * 1000
        return SearchOutcome(hits=hits, latency_ms=latency, context_tokens=count_tokens(self.render(hits)))

    def render(self, hits: Sequence[RetrievedHit]) -> str:
        """The reader's context: the hits' ``[time] speaker: text`` lines in time order."""
        return _context(hits)

    def answer(self, question: BenchQuestion) -> AnswerOutcome:
        if self._reader is None:
            raise ConfigError(f"{self.name}: answering needs a reader LLM (--mode llm)")
        started = time.perf_counter()
        lines = plain_lines(self._found(question.question, self._answer_k))
        messages = plain_prompt.build_short_answer_messages(
            question.question, lines, reference_time=question.question_time or self._reference_time,
            abstain=True, numbered=False)
        text = self._reader.complete(messages, stage="reader", max_tokens=48)
        return AnswerOutcome(text=plain_prompt.clean_short_answer(text),
                             latency_ms=(time.perf_counter() - started) * 1000,
                             context_tokens=count_tokens("\n".join(plain_prompt.render_lines(lines, numbered=False))),
                             prompt_tokens=sum(count_tokens(m["content"]) for m in messages))

    def close(self) -> None:
        self._index.close()


def plain_lines(found: Sequence[ScoredRecord]) -> list[ContextLine]:
    """Raw turns as the plain short-answer prompt shows them, oldest first: what a user of a small
    reader would write around naive RAG (``answer_v2``'s plain prompt, not the project's answerer)."""
    def when(r: ScoredRecord) -> datetime | None:
        raw = r.record.metadata.get("when")
        return datetime.fromisoformat(raw) if isinstance(raw, str) else None

    ordered = sorted(found, key=lambda r: r.record.float_time_stamp)
    return [ContextLine(when=when(r), speaker=r.record.speaker_name,
                        text=str(r.record.metadata.get("text", r.record.memory))) for r in ordered]


def _context(hits: Sequence[RetrievedHit]) -> str:
    # hits carry "[time] speaker: text" lines; sorting them puts the notes in time order
    return "\n".join(sorted(h.text for h in hits))


class FullContext:
    """The reader sees the whole conversation (the most recent part, when it does not fit)."""

    name = "full-context"
    retrieval = False

    def __init__(self, reader: LLMClient | None, *, window_tokens: int, answer_tokens: int = 64) -> None:
        self._reader = reader
        self._budget = max(256, window_tokens - answer_tokens - _PROMPT_RESERVE)
        self._lines: list[str] = []
        self._tokens: list[int] = []

    def ingest(self, conversation: BenchConversation) -> IngestCost:
        started = time.perf_counter()
        self._lines = [turn_line(t) for t in conversation.turns()]
        self._tokens = [count_tokens(line) + 1 for line in self._lines]
        return IngestCost(wall_s=time.perf_counter() - started, turns=len(self._lines),
                          memories=len(self._lines))

    def context(self) -> tuple[str, bool]:
        """The newest lines that fit the budget, in order; True when older lines were cut."""
        kept, used = 0, 0
        for n in reversed(self._tokens):
            if used + n > self._budget:
                break
            used += n
            kept += 1
        start = len(self._lines) - kept
        return "\n".join(self._lines[start:]), start > 0

    def search(self, question: BenchQuestion, k: int) -> SearchOutcome:
        raise ConfigError("full-context has no retrieval step")

    def render(self, hits: Sequence[RetrievedHit]) -> str:
        raise ConfigError("full-context has no retrieval step")

    def answer(self, question: BenchQuestion) -> AnswerOutcome:
        if self._reader is None:
            raise ConfigError("full-context: answering needs a reader LLM (--mode llm)")
        started = time.perf_counter()
        context, truncated = self.context()
        text = self._reader.complete(reader_messages(context, question.question), stage="reader")
        return AnswerOutcome(text=text.strip(), latency_ms=(time.perf_counter() - started) * 1000,
                             context_tokens=count_tokens(context), truncated=truncated)

    def close(self) -> None:
        self._lines = []

