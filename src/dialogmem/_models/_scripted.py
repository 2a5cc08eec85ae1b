"""``ScriptedLLM``: a scripted fake LLM client for tests and demos — not a model."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .._errors import LLMError, LLMUnavailableError
from .._usage import UsageTracker
from ._llm import BaseLLM, ChatReply, ChatRequest, estimate_tokens, messages_tokens
from ._llm_base import ChatMessage

Script = Callable[[str, list[ChatMessage]], "str | BaseException"]


@dataclass(frozen=True)
class ScriptedCall:
    """One request the fake received, kept for assertions."""

    stage: str
    messages: list[ChatMessage]
    json_schema: dict[str, Any] | None = field(default=None)
    max_tokens: int = 0


class ScriptedLLM(BaseLLM):
    """A scripted fake, NOT a language model: it replays answers written by a test.

    Give it either a list of raw answers (strings, or exceptions to raise, used in order) or a
    callable ``(stage, messages) -> str`` that composes an answer from the request. Its answers go
    through exactly the same repair, validation, retry and usage path as the real backends, so a
    test can script near-JSON, invalid output or an ``LLMTimeoutError`` and see what a stage does
    with it. ``calls`` holds every request received; usage counts ~4 characters a token.
    """

    backend = "scripted"

    def __init__(
        self,
        responses: Iterable[str | BaseException] | Script,
        *,
        usage: UsageTracker | None = None,
        max_retries: int = 2,
        backoff_s: float = 0.0,
        max_tokens: int = 1024,
    ) -> None:
        super().__init__(usage=usage, max_retries=max_retries, backoff_s=backoff_s,
                         max_tokens=max_tokens)
        self._script: Script | None = responses if callable(responses) else None
        self._queue: list[str | BaseException] = [] if callable(responses) else list(responses)
        self._used = 0
        self._lock = threading.Lock()
        self.calls: list[ScriptedCall] = []

    @property
    def remaining(self) -> int:
        """Scripted answers not yet used (always 0 for a callable script)."""
        with self._lock:
            return len(self._queue)

    def stages(self) -> list[str]:
        """The stage of every call received, in order."""
        with self._lock:
            return [c.stage for c in self.calls]

    def _chat(self, request: ChatRequest) -> ChatReply:
        stage = request.stage
        messages = [dict(m) for m in request.messages]
        with self._lock:
            self.calls.append(ScriptedCall(stage, messages, request.json_schema, request.max_tokens))
            if self._script is None:
                if not self._queue:
                    raise LLMUnavailableError(
                        f"ScriptedLLM ran out of scripted answers after {self._used} (stage {stage!r})")
                answer: str | BaseException = self._queue.pop(0)
                self._used += 1
        if self._script is not None:  # outside the lock: concurrent calls are not serialised by the fake
            answer = self._script(stage, [dict(m) for m in messages])
        if isinstance(answer, BaseException):
            if isinstance(answer, LLMError):
                raise answer
            raise LLMError(f"scripted failure: {answer}") from answer
        return ChatReply(str(answer), messages_tokens(request.messages), estimate_tokens(str(answer)))
