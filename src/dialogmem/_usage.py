"""Per-stage accounting of LLM and embedding calls (seed 002's token statistics shape)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

UsageSink = Callable[[str, str, "StageUsage"], None]


@dataclass
class StageUsage:
    """Counters for one stage of one kind (``llm`` or ``embedding``)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    failures: int = 0
    fallbacks: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: StageUsage) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.latency_ms += other.latency_ms
        self.failures += other.failures
        self.fallbacks += other.fallbacks

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "latency_ms": round(self.latency_ms, 3),
            "failures": self.failures,
            "fallbacks": self.fallbacks,
        }


@dataclass
class UsageTracker:
    """Thread-safe counters keyed by (kind, stage); an optional sink persists every record."""

    sink: UsageSink | None = None
    _data: dict[tuple[str, str], StageUsage] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(
        self,
        kind: str,
        stage: str,
        *,
        calls: int = 1,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        latency_ms: float = 0.0,
        failures: int = 0,
        fallbacks: int = 0,
    ) -> None:
        delta = StageUsage(calls, prompt_tokens, completion_tokens, latency_ms, failures, fallbacks)
        with self._lock:
            self._data.setdefault((kind, stage), StageUsage()).add(delta)
        if self.sink is not None:
            self.sink(kind, stage, delta)

    def load(self, rows: dict[tuple[str, str], StageUsage]) -> None:
        """Seed the counters with totals read back from the journal."""
        with self._lock:
            for key, usage in rows.items():
                self._data.setdefault(key, StageUsage()).add(usage)

    def get(self, kind: str, stage: str) -> StageUsage:
        with self._lock:
            got = self._data.get((kind, stage), StageUsage())
            return StageUsage(**{k: getattr(got, k) for k in StageUsage.__dataclass_fields__})

    def snapshot(self) -> dict[str, Any]:
        """Totals in seed 002's shape: ``summary`` plus per-stage ``llm`` and ``embedding``."""
        with self._lock:
            items = list(self._data.items())
        out: dict[str, Any] = {"llm": {}, "embedding": {}, "latency": {}}
        llm_calls = llm_tokens = emb_calls = 0
        for (kind, stage), u in sorted(items):
            out.setdefault(kind, {})[stage] = u.as_dict()
            if kind == "llm":
                llm_calls += u.calls
                llm_tokens += u.total_tokens
            elif kind == "embedding":
                emb_calls += u.calls
        out["summary"] = {
            "total_llm_calls": llm_calls,
            "total_llm_tokens": llm_tokens,
            "total_embedding_calls": emb_calls,
            "total_embedding_tokens": None,
        }
        return out


class PendingUsage:
    """Counters recorded since they were last written to the journal; the change writer drains
    them into its next commit (so recording usage costs no transaction of its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], StageUsage] = {}

    def add(self, kind: str, stage: str, delta: StageUsage) -> None:
        with self._lock:
            self._pending.setdefault((kind, stage), StageUsage()).add(delta)

    def drain(self) -> dict[tuple[str, str], StageUsage]:
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending

    def restore(self, drained: dict[tuple[str, str], StageUsage]) -> None:
        """Put back counters whose write failed."""
        with self._lock:
            for key, delta in drained.items():
                self._pending.setdefault(key, StageUsage()).add(delta)


def answer_summary(answer_usage: dict[str, Any]) -> dict[str, Any]:
    """``answer()`` calls (store-wide), the share that ran the deep module, and prompt tokens per answer."""
    light = answer_usage.get("light", {})
    deep = answer_usage.get("deep", {})
    n = int(light.get("calls", 0)) + int(deep.get("calls", 0))
    tokens = int(light.get("prompt_tokens", 0)) + int(deep.get("prompt_tokens", 0))
    return {"answers": n, "deep": int(deep.get("calls", 0)),
            "deep_rate": round(int(deep.get("calls", 0)) / n, 4) if n else None,
            "prompt_tokens_per_answer": round(tokens / n, 1) if n else None}
