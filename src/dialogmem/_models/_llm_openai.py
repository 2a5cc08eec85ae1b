"""Any OpenAI-compatible chat-completions server (OpenAI, DeepSeek, Ollama, vLLM, llama.cpp server)."""

from __future__ import annotations

import logging
from typing import Any

from .._errors import ConfigError, LLMError, LLMTimeoutError, LLMUnavailableError
from .._usage import UsageTracker
from ._llm import BaseLLM, ChatReply, ChatRequest, JsonMode, TransientLLMError, schema_instruction
from ._llm import with_system_note as _with_note

log = logging.getLogger(__name__)

# Servers differ in what structured output they accept; each is tried once, best first.
_MODES: tuple[JsonMode, ...] = ("json_schema", "json_object", "prompt")


class OpenAICompatibleLLM(BaseLLM):
    """Chat completions through the ``openai`` SDK against ``base_url``.

    ``complete_json`` asks for ``response_format={"type": "json_schema"}``; a server that rejects
    it with 400/422 is asked again with ``json_object``, then with the schema in the system
    message only. The mode that worked is remembered for the life of the client.
    """

    backend = "openai"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        usage: UsageTracker | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        temperature: float = 0.0,
        max_tokens: int = 1024,
    ) -> None:
        super().__init__(usage=usage, max_retries=max_retries, backoff_s=backoff_s,
                         temperature=temperature, max_tokens=max_tokens, timeout_s=timeout_s)
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - openai is a core dependency
            raise ConfigError("the openai backend needs the openai package: pip install openai") from exc
        if not model:
            raise ConfigError("llm.model is required for the openai backend (e.g. gpt-4o-mini)")
        self.model = model
        self.base_url = base_url
        self._openai = openai
        # The SDK's own retries are off: ours count attempts per stage and back off the same
        # way for every backend.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed",
                                     timeout=timeout_s, max_retries=0)
        self._mode: JsonMode = "json_schema"

    @property
    def json_mode(self) -> JsonMode:
        """The structured-output mode this server accepted last (``json_schema`` until refused)."""
        with self._state_lock:
            return self._mode

    def close(self) -> None:
        self._client.close()

    def _chat(self, request: ChatRequest) -> ChatReply:
        if request.json_schema is None:
            try:
                return self._send_once(request, None)
            except (self._openai.BadRequestError, self._openai.UnprocessableEntityError) as exc:
                raise LLMError(f"{self._where()} rejected the request: {_status_text(exc)}") from exc
        while True:
            mode = self.json_mode
            try:
                return self._send_once(request, mode)
            except self._openai.UnprocessableEntityError as exc:
                self._downgrade(mode, exc)
            except self._openai.BadRequestError as exc:
                self._downgrade(mode, exc)

    def _downgrade(self, mode: JsonMode, exc: Exception) -> None:
        index = _MODES.index(mode)
        if index + 1 >= len(_MODES) or _too_long(exc):
            raise LLMError(f"{self._where()} rejected the request: {_status_text(exc)}") from exc
        with self._state_lock:
            if self._mode == mode:
                self._mode = _MODES[index + 1]
                log.info("%s rejected response_format %s (%s); using %s from now on",
                         self._where(), mode, _status_text(exc), self._mode)

    def _send_once(self, request: ChatRequest, mode: JsonMode | None) -> ChatReply:
        messages = request.messages
        kwargs: dict[str, Any] = {}
        if mode == "json_schema" and request.json_schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": _schema_name(request.schema_name),
                                "schema": request.json_schema, "strict": False},
            }
        elif mode is not None and request.json_schema is not None:
            # json_object needs the word JSON in the prompt, and the prompt mode has nothing else.
            messages = _with_note(messages, schema_instruction(request.json_schema))
            if mode == "json_object":
                kwargs["response_format"] = {"type": "json_object"}
        oa = self._openai
        try:
            resp = self._client.chat.completions.create(
                model=self.model, messages=messages,  # type: ignore[arg-type]
                max_tokens=request.max_tokens, temperature=request.temperature, **kwargs,
            )
        except oa.APITimeoutError as exc:
            raise TransientLLMError(
                "timeout", final=LLMTimeoutError(
                    f"{self._where()} did not answer within {self.timeout_s:g}s on any attempt")) from exc
        except oa.APIConnectionError as exc:
            raise TransientLLMError(
                f"connection failed: {exc}", final=LLMUnavailableError(
                    f"cannot reach the LLM server at {self._where()}: {exc}")) from exc
        except (oa.AuthenticationError, oa.PermissionDeniedError) as exc:
            raise LLMUnavailableError(
                f"{self._where()} refused the credentials (check llm.api_key): {_status_text(exc)}") from exc
        except oa.NotFoundError as exc:
            raise LLMUnavailableError(
                f"{self._where()} has no model {self.model!r} or no chat endpoint: {_status_text(exc)}"
            ) from exc
        except oa.RateLimitError as exc:
            raise TransientLLMError("rate limited", final=LLMError(
                f"{self._where()} kept rate-limiting: {_status_text(exc)}")) from exc
        except oa.InternalServerError as exc:
            raise TransientLLMError(f"server error {_status_text(exc)}", final=LLMError(
                f"{self._where()} kept failing: {_status_text(exc)}")) from exc
        except (oa.BadRequestError, oa.UnprocessableEntityError):
            raise
        except oa.APIStatusError as exc:
            raise LLMError(f"{self._where()} answered {_status_text(exc)}") from exc
        except oa.APIError as exc:  # e.g. a body that is not a chat completion
            raise TransientLLMError(f"bad response: {exc}", final=LLMError(
                f"{self._where()} sent an unusable response: {exc}")) from exc
        if not resp.choices:
            raise TransientLLMError("no choices", final=LLMError(f"{self._where()} returned no choices"))
        text = resp.choices[0].message.content or ""
        usage = resp.usage
        return ChatReply(text,
                         usage.prompt_tokens if usage is not None else None,
                         usage.completion_tokens if usage is not None else None,
                         cut_off=resp.choices[0].finish_reason == "length")

    def _where(self) -> str:
        return self.base_url or "api.openai.com"


def _schema_name(name: str) -> str:
    clean = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)
    return (clean or "output")[:64]


def _too_long(exc: Exception) -> bool:
    """A 400 about the prompt's length is not about response_format: no point downgrading."""
    text = (getattr(exc, "message", None) or str(exc)).lower()
    return "context length" in text or "context window" in text or "too long" in text \
        or "maximum context" in text


def _status_text(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    message = getattr(exc, "message", None) or str(exc)
    return f"HTTP {status}: {message}"[:300] if status else str(message)[:300]
