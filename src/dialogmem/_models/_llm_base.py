"""The LLM client protocol every stage uses (one client for all stages)."""

from __future__ import annotations

from typing import Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel

from .._usage import UsageTracker

M = TypeVar("M", bound=BaseModel)
ChatMessage = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": str}


@runtime_checkable
class LLMClient(Protocol):
    """Plain and schema-constrained completion, with usage recorded per ``stage``.

    ``complete_json`` repairs near-JSON, validates against ``schema`` and retries; when the output is
    still unusable it raises ``LLMOutputError`` (``LLMTimeoutError`` / ``LLMUnavailableError`` for the
    other failures). Callers catch ``LLMError`` and fall back to their LLM-free backend.
    """

    usage: UsageTracker
    available: bool  # False for the "none" backend: every call raises LLMUnavailableError

    def complete(self, messages: list[ChatMessage], *, stage: str, max_tokens: int | None = None) -> str: ...

    def complete_json(self, messages: list[ChatMessage], schema: type[M], *, stage: str,
                      max_tokens: int | None = None) -> M: ...
