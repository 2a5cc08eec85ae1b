"""What the runner drives: a system that ingests one conversation, then answers its questions.

``DialogmemSystem`` wraps the ``Memory`` facade; the baselines live in ``_baselines``. A system
instance serves exactly one (system, conversation) unit in its own scratch directory, so a unit that
was interrupted is simply started again from an empty directory.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from .._config import Config
from .._errors import NotFoundError
from .._models._llm_base import LLMClient
from .._types import SearchHit, SearchResult
from ._loaders import BenchConversation, BenchQuestion, BenchTurn

_WORD_OR_MARK = re.compile(r"\w+|[^\w\s]")


class RetrievedHit(BaseModel):
    id: str
    text: str
    score: float
    source_turn_ids: list[str] = Field(default_factory=list)


class SearchOutcome(BaseModel):
    hits: list[RetrievedHit]
    latency_ms: float
    context_tokens: int


class AnswerOutcome(BaseModel):
    text: str
    latency_ms: float
    context_tokens: int = 0
    truncated: bool = False  # full-context: the conversation did not fit the reader's window
    prompt_tokens: int = 0  # whole prompts sent to the reader for this answer (all calls)
    mode: str | None = None  # dialogmem: "light" or "deep" (the module that ran last)
    rounds: int = 0  # dialogmem: deep rounds
    light_text: str | None = None  # dialogmem: the light module's answer (what --answer light would give)
    cited_turn_ids: list[str] | None = None  # dialogmem: the turns the answer says it rests on


class IngestCost(BaseModel):
    """What building the memory of one conversation cost."""

    wall_s: float = 0.0
    turns: int = 0
    memories: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embedding_calls: int = 0
    stages: dict[str, dict[str, Any]] = Field(default_factory=dict)


@runtime_checkable
class BenchSystem(Protocol):
    name: str
    retrieval: bool  # False for systems that cannot search (full-context)

    def ingest(self, conversation: BenchConversation) -> IngestCost: ...

    def search(self, question: BenchQuestion, k: int) -> SearchOutcome: ...

    def render(self, hits: Sequence[RetrievedHit]) -> str:
        """The context this system gives a reader for these hits (of its own searches), which its
        ``SearchOutcome.context_tokens`` counts; budgets are measured on it."""
        ...

    def answer(self, question: BenchQuestion) -> AnswerOutcome: ...

    def close(self) -> None: ...


#: builds the system for one unit: (conversation, empty scratch directory) -> system
SystemFactory = Callable[[BenchConversation, Path], BenchSystem]


@functools.cache
def _token_counter() -> Callable[[str], int]:
    try:
        from .._text._tokens import default_token_counter
    except ImportError:  # the write path's counter is optional here: fall back to a word count
        return lambda text: len(_WORD_OR_MARK.findall(text))
    return default_token_counter().count


def count_tokens(text: str) -> int:
    """Tokens of a context string, with the project-wide counter (the same for every system)."""
    return _token_counter()(text) if text else 0


def turn_time(turn: BenchTurn) -> str | None:
    """The time to give a turn: ISO when the loader parsed it, else the dataset's own text."""
    if turn.time is not None:
        return turn.time.isoformat()
    return turn.raw_time or None


def question_time(conversation: BenchConversation, question: BenchQuestion) -> str | None:
    """Reference time for a question: its own date (LongMemEval) or the last session's (LoCoMo)."""
    when = question.question_time or conversation.last_time()
    return when.isoformat() if when is not None else None


def usage_totals(snapshot: dict[str, Any]) -> tuple[int, int, int, dict[str, dict[str, Any]]]:
    """(calls, prompt tokens, completion tokens, per-stage) of the ``llm`` part of a usage snapshot."""
    stages = dict(snapshot.get("llm", {}))
    calls = sum(int(s.get("calls", 0)) for s in stages.values())
    prompt = sum(int(s.get("prompt_tokens", 0)) for s in stages.values())
    completion = sum(int(s.get("completion_tokens", 0)) for s in stages.values())
    return calls, prompt, completion, stages


class DialogmemSystem:
    """The ``Memory`` facade, fed turn by turn, one scope per conversation."""

    name = "dialogmem"
    retrieval = True

    def __init__(self, config: Config, scratch: Path, *, run_sleep: bool = True,
                 llm_client: LLMClient | None = None) -> None:
        from .._facade._memory import Memory

        cfg = config.model_copy(update={"data_dir": scratch / "store"})
        self._mem = Memory(cfg, llm_client=llm_client)
        self._sleep = run_sleep
        self._conv: BenchConversation | None = None
        self._after_ingest: dict[str, Any] = {}
        self._seen: dict[str, SearchHit] = {}  # every hit searched so far, by id, for render()

    def ingest(self, conversation: BenchConversation) -> IngestCost:
        self._conv = conversation
        started = time.perf_counter()
        n = 0
        for session in conversation.sessions:
            for turn in session.turns:
                msg: dict[str, Any] = {"content": turn.text, "name": turn.speaker, "id": turn.id}
                if turn.role:
                    msg["role"] = turn.role
                self._mem.add([msg], conversation.scope, session_id=_safe_id(session.id),
                              timestamp=turn_time(turn))
                n += 1
        self._mem.flush(conversation.scope)
        if self._sleep:
            self._mem.sleep(conversation.scope)
        wall = time.perf_counter() - started
        stats = self._mem.stats(conversation.scope)
        self._after_ingest = stats
        calls, prompt, completion, stages = usage_totals(stats)
        emb_calls = sum(int(s.get("calls", 0)) for s in stats.get("embedding", {}).values())
        return IngestCost(wall_s=wall, turns=n, memories=int(stats.get("counts", {}).get("memories", 0)),
                          llm_calls=calls, prompt_tokens=prompt, completion_tokens=completion,
                          embedding_calls=emb_calls, stages=stages)

    def search(self, question: BenchQuestion, k: int) -> SearchOutcome:
        assert self._conv is not None, "ingest() first"
        started = time.perf_counter()
        result = self._mem.search(question.question, self._conv.scope, limit=k,
                                  reference_time=question_time(self._conv, question))
        latency = (time.perf_counter() - started) * 1000
        self._seen.update((h.id, h) for h in result.hits)
        hits = [RetrievedHit(id=h.id, text=h.memory, score=h.score, source_turn_ids=list(h.source_turn_ids))
                for h in result.hits]
        return SearchOutcome(hits=hits, latency_ms=latency, context_tokens=count_tokens(result.context()))

    def render(self, hits: Sequence[RetrievedHit]) -> str:
        """``SearchResult.context()`` of these hits: what ``Memory.answer`` and callers give an LLM."""
        missing = [h.id for h in hits if h.id not in self._seen]
        if missing:
            raise NotFoundError(f"hits {', '.join(missing)} did not come from this system's searches")
        return SearchResult(query="", hits=[self._seen[h.id] for h in hits]).context()

    def answer(self, question: BenchQuestion) -> AnswerOutcome:
        assert self._conv is not None, "ingest() first"
        started = time.perf_counter()
        reply = self._mem.answer(question.question, self._conv.scope,
                                 reference_time=question_time(self._conv, question))
        latency = (time.perf_counter() - started) * 1000
        return AnswerOutcome(text=str(reply.text), latency_ms=latency, context_tokens=reply.context_tokens,
                             prompt_tokens=reply.prompt_tokens, mode=reply.mode, rounds=reply.rounds,
                             light_text=reply.light_text, cited_turn_ids=list(reply.turn_ids))

    def query_usage(self) -> dict[str, int]:
        """LLM calls and tokens spent since ingest ended (planning, selection, answering)."""
        before = usage_totals(self._after_ingest)
        after = usage_totals(self._mem.stats())
        return {"calls": after[0] - before[0], "prompt_tokens": after[1] - before[1],
                "completion_tokens": after[2] - before[2]}

    def close(self) -> None:
        self._mem.close()


def _safe_id(value: str) -> str:
    """Session ids from a dataset, kept readable but limited to characters every id check accepts."""
    return re.sub(r"[^A-Za-z0-9._:-]", "_", value)[:128] or "session"
