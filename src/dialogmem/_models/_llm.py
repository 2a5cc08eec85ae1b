"""The shared LLM client logic: repair, validation, retries, backoff and usage accounting.

Backends subclass ``BaseLLM`` and implement only ``_chat`` (one request, no retries). Everything
a stage relies on — near-JSON repair, schema validation, the corrective retry, exponential
backoff on transport errors, per-stage usage — lives here once, so the OpenAI-compatible client,
the in-process llama.cpp client and the scripted fake behave the same way.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from .._errors import LLMError, LLMOutputError, LLMUnavailableError
from .._usage import UsageTracker
from ._json_repair import JSONRepairError, extract_json
from ._llm_base import ChatMessage, M

log = logging.getLogger(__name__)

JsonMode = Literal["json_schema", "json_object", "prompt"]
_MAX_BACKOFF_S = 30.0
_ERROR_PREVIEW = 400


class TransientLLMError(LLMError):
    """A transport failure worth retrying: rate limit, 5xx, dropped connection, timeout.

    Backends raise it from ``_chat``; ``final`` is the error to raise once retries run out.
    """

    def __init__(self, message: str, *, final: LLMError) -> None:
        super().__init__(message)
        self.final = final


@dataclass(frozen=True)
class ChatRequest:
    """One request as a backend sees it."""

    messages: list[ChatMessage]
    max_tokens: int
    temperature: float
    json_schema: dict[str, Any] | None = None  # set for complete_json
    schema_name: str = "output"
    stage: str = ""


@dataclass(frozen=True)
class ChatReply:
    """The text a backend got back; token counts are ``None`` when the server gave none."""

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cut_off: bool = False  # the model stopped at max_tokens, not because it had finished
    looped: bool = False  # the backend stopped the model repeating itself (``looping``)


#: a model looping on one line of a list: the last ``LOOP_BLOCK`` characters seen ``LOOP_TIMES`` times
LOOP_BLOCK = 160
LOOP_TIMES = 3


def looping(text: str) -> bool:
    """Whether ``text`` ends in a block that it already holds ``LOOP_TIMES - 1`` times before: a
    small model repeating one item of a JSON list until ``max_tokens`` (minutes of generation for
    nothing usable). No two facts of one answer share 160 characters verbatim."""
    if len(text) < LOOP_BLOCK * LOOP_TIMES:
        return False
    return text.count(text[-LOOP_BLOCK:]) >= LOOP_TIMES


def estimate_tokens(text: str) -> int:
    """Rough count (4 characters a token) for servers and fakes that report no usage."""
    return (len(text) + 3) // 4


def messages_tokens(messages: list[ChatMessage]) -> int:
    return sum(estimate_tokens(m.get("content", "")) + 4 for m in messages)


def schema_instruction(json_schema: dict[str, Any]) -> str:
    """The system-message text used when the backend cannot enforce the schema itself."""
    return (
        "Reply with one JSON value only, no prose and no code fences. "
        "It must validate against this JSON schema:\n" + json.dumps(json_schema, separators=(",", ":"))
    )


def with_system_note(messages: list[ChatMessage], note: str) -> list[ChatMessage]:
    """Append ``note`` to the system message (or add one) without touching the caller's list."""
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0].get('content', '')}\n\n{note}".strip()
    else:
        out.insert(0, {"role": "system", "content": note})
    return out


def parse_output(raw: str, schema: type[M]) -> M:
    """Repair and validate one model answer; raises ``JSONRepairError`` or ``ValidationError``."""
    value = extract_json(raw, expect="object")
    value = _fit_shape(value, schema)
    return schema.model_validate(value)


def _fit_shape(value: Any, schema: type[BaseModel]) -> Any:
    """A bare list where the schema wants ``{"field": [...]}`` with one required field is wrapped.

    Small models often answer the list of facts itself instead of the object around it; the
    content is the same, so rejecting it would only cost a retry.
    """
    if not isinstance(value, list):
        return value
    required = [name for name, f in schema.model_fields.items() if f.is_required()]
    if len(required) == 1:
        return {required[0]: value}
    return value


class BaseLLM:
    """Shared client behaviour. Subclasses implement ``_chat``; see the module docstring."""

    available: bool = True
    backend: str = "base"

    def __init__(
        self,
        *,
        usage: UsageTracker | None = None,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        timeout_s: float = 120.0,
    ) -> None:
        self.usage = usage if usage is not None else UsageTracker()
        self.max_retries = max(0, int(max_retries))
        self.backoff_s = max(0.0, float(backoff_s))
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self._state_lock = threading.Lock()

    # -- backend hook -------------------------------------------------------------------
    def _chat(self, request: ChatRequest) -> ChatReply:
        """Send one request. Raise ``TransientLLMError`` for retryable transport failures and
        ``LLMError`` subclasses for the others."""
        raise NotImplementedError

    # -- public API ---------------------------------------------------------------------
    def complete(self, messages: list[ChatMessage], *, stage: str, max_tokens: int | None = None) -> str:
        """Plain text completion."""
        request = ChatRequest(list(messages), max_tokens or self.max_tokens, self.temperature,
                              stage=stage)
        return self._send(request, stage).text

    def complete_json(self, messages: list[ChatMessage], schema: type[M], *, stage: str,
                      max_tokens: int | None = None) -> M:
        """Completion validated against ``schema``; repaired, then retried with a correction.

        Up to ``max_retries`` corrective rounds; each round's request has its own transport
        retries, so a flaky server and a sloppy model are handled independently. A reply the backend
        stopped for looping (``ChatReply.looped``) fails at once: ``LLMOutputError``.
        """
        json_schema = schema.model_json_schema()
        conversation = list(messages)
        raw = ""
        problem = ""
        for attempt in range(self.max_retries + 1):
            request = ChatRequest(conversation, max_tokens or self.max_tokens, self.temperature,
                                  json_schema=json_schema, schema_name=schema.__name__, stage=stage)
            reply = self._send(request, stage)
            raw = reply.text
            if reply.looped:  # asked again (with the loop in view, or not) a model repeats it: no retry
                self.usage.record("llm", stage, calls=0, failures=1)
                log.warning("stage %s: the model repeated itself and was stopped; no retry", stage)
                raise LLMOutputError(f"stage {stage}: the answer repeated the same text over and over",
                                     raw=raw, stage=stage)
            try:
                if reply.cut_off:  # even if the text happens to parse, the answer is incomplete
                    raise JSONRepairError(f"the answer was cut off at max_tokens={request.max_tokens}")
                return parse_output(raw, schema)
            except (JSONRepairError, ValidationError) as exc:
                problem = _describe(exc)
                self.usage.record("llm", stage, calls=0, failures=1)
                log.warning("stage %s: unusable LLM output (attempt %d/%d): %s",
                            stage, attempt + 1, self.max_retries + 1, problem)
                conversation = [*messages, {"role": "assistant", "content": raw},
                                {"role": "user", "content": _correction(problem)}]
        raise LLMOutputError(
            f"stage {stage}: no valid {schema.__name__} after {self.max_retries + 1} attempts: {problem}",
            raw=raw, stage=stage,
        )

    # -- internals ----------------------------------------------------------------------
    def _send(self, request: ChatRequest, stage: str) -> ChatReply:
        """One logical call: transport retries with exponential backoff, usage per attempt."""
        last: TransientLLMError | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                delay = min(self.backoff_s * 2 ** (attempt - 1), _MAX_BACKOFF_S)
                log.info("stage %s: retrying in %.2fs after %s", stage, delay, last)
                time.sleep(delay)
            started = time.perf_counter()
            try:
                reply = self._chat(request)
            except TransientLLMError as exc:
                self._record_failure(stage, started)
                last = exc
                continue
            except LLMError:
                self._record_failure(stage, started)
                raise
            latency_ms = (time.perf_counter() - started) * 1000.0
            prompt = reply.prompt_tokens
            completion = reply.completion_tokens
            self.usage.record(
                "llm", stage,
                prompt_tokens=prompt if prompt is not None else messages_tokens(request.messages),
                completion_tokens=completion if completion is not None else estimate_tokens(reply.text),
                latency_ms=latency_ms,
            )
            if "\x00" in reply.text:  # no journal stores NUL in text: a model's stray NUL is dropped here, once
                reply = replace(reply, text=reply.text.replace("\x00", ""))
            return reply
        assert last is not None
        raise last.final from last

    def _record_failure(self, stage: str, started: float) -> None:
        self.usage.record("llm", stage, failures=1,
                          latency_ms=(time.perf_counter() - started) * 1000.0)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err["loc"]) or "(root)"
            parts.append(f"{where}: {err['msg']}")
        text = "; ".join(parts)
    else:
        text = str(exc)
    return text[:_ERROR_PREVIEW]


def _correction(problem: str) -> str:
    return ("That reply could not be used: " + problem +
            "\nAnswer again with only the JSON value the schema asks for, nothing else.")


class NoLLM:
    """The ``none`` backend: no model configured. Every call raises ``LLMUnavailableError``."""

    available = False
    backend = "none"

    def __init__(self, usage: UsageTracker | None = None) -> None:
        self.usage = usage if usage is not None else UsageTracker()

    def _unavailable(self, stage: str) -> LLMUnavailableError:
        return LLMUnavailableError(
            f"no LLM configured for stage {stage!r}: set llm.backend "
            "(DIALOGMEM_LLM__BACKEND=openai|llama_cpp) with llm.base_url/llm.model or llm.model_path"
        )

    def complete(self, messages: list[ChatMessage], *, stage: str, max_tokens: int | None = None) -> str:
        raise self._unavailable(stage)

    def complete_json(self, messages: list[ChatMessage], schema: type[M], *, stage: str,
                      max_tokens: int | None = None) -> M:
        raise self._unavailable(stage)

