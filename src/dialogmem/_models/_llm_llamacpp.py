"""A GGUF model run in-process through ``llama-cpp-python``, with schema-constrained decoding."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from .._errors import ConfigError, LLMError, LLMTimeoutError, LLMUnavailableError
from .._usage import UsageTracker
from ._llm import BaseLLM, ChatReply, ChatRequest, looping, schema_instruction, with_system_note

log = logging.getLogger(__name__)

_LOOP_CHECK_EVERY = 16  # tokens between two looks for a repetition loop
INSTALL_HINT = "pip install llama-cpp-python  (or: pip install 'dialogmem[llama]')"


class LlamaCppLLM(BaseLLM):
    """Runs a local GGUF file. The model loads on first use, once; calls are serialised.

    ``complete_json`` hands the JSON schema to llama.cpp, which turns it into a grammar, so the
    model can only emit tokens that keep the output valid. A call that runs past ``timeout_s``
    is stopped between two tokens and raises ``LLMTimeoutError`` (llama.cpp cannot be
    interrupted mid-token, so the bound is one token late at worst). A model that repeats one
    block of text (``looping``: small models loop on one item of a JSON list) is stopped too, and
    its reply is flagged ``looped``: ``complete_json`` fails it at once (asked again, with or without
    a correction, the reference 1.5B model looped the same way every time), so the stage's LLM-free
    backend takes over within seconds instead of after minutes of repetition and two retries.
    """

    backend = "llama_cpp"

    def __init__(
        self,
        *,
        model_path: str | os.PathLike[str],
        usage: UsageTracker | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 2,
        backoff_s: float = 0.0,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        repeat_penalty: float = 1.1,
    ) -> None:
        super().__init__(usage=usage, max_retries=max_retries, backoff_s=backoff_s,
                         temperature=temperature, max_tokens=max_tokens, timeout_s=timeout_s)
        self.model_path = Path(model_path).expanduser()
        if not self.model_path.is_file():
            raise ConfigError(f"llm.model_path does not name a GGUF file: {self.model_path}")
        self.n_ctx = n_ctx
        # small local models loop on one line of a long JSON list without a mild penalty
        self.repeat_penalty = repeat_penalty
        self.n_threads = n_threads or max(1, min(os.cpu_count() or 1, 8))
        self._llama: Any = None
        # llama.cpp contexts are not thread-safe: one lock covers loading and every call.
        self._lock = threading.Lock()

    def _model(self) -> Any:
        if self._llama is None:
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise ConfigError(f"the llama_cpp backend needs llama-cpp-python: {INSTALL_HINT}") from exc
            started = time.perf_counter()
            try:
                self._llama = Llama(model_path=str(self.model_path), n_ctx=self.n_ctx,
                                    n_threads=self.n_threads, verbose=False)
            except (ValueError, RuntimeError, OSError) as exc:
                raise LLMUnavailableError(f"llama.cpp could not load {self.model_path}: {exc}") from exc
            log.info("loaded %s in %.1fs", self.model_path.name, time.perf_counter() - started)
        return self._llama

    def _chat(self, request: ChatRequest) -> ChatReply:
        kwargs: dict[str, Any] = {"repeat_penalty": self.repeat_penalty}
        messages = request.messages
        if request.json_schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": request.json_schema}
            # The grammar fixes the shape; the note tells the model what the fields mean.
            messages = with_system_note(messages, schema_instruction(request.json_schema))
        with self._lock:
            llama = self._model()
            deadline = time.monotonic() + self.timeout_s
            pieces: list[str] = []
            chunks = 0
            finish = None
            looped = False
            try:
                # Streaming lets the call stop at the deadline between two tokens; llama.cpp's
                # chat API takes no stopping criteria.
                stream = llama.create_chat_completion(
                    messages=messages, max_tokens=request.max_tokens, temperature=request.temperature,
                    stream=True, **kwargs,
                )
                for chunk in stream:
                    delta = chunk["choices"][0].get("delta") or {}
                    if delta.get("content"):
                        pieces.append(delta["content"])
                        chunks += 1
                    finish = chunk["choices"][0].get("finish_reason") or finish
                    if time.monotonic() > deadline:
                        stream.close()
                        raise LLMTimeoutError(f"llama.cpp did not finish within {self.timeout_s:g}s")
                    if chunks % _LOOP_CHECK_EVERY == 0 and looping("".join(pieces)):
                        stream.close()
                        looped = True
                        log.info("stage %s: the model repeats itself; stopped after %d tokens", request.stage, chunks)
                        break
            except ValueError as exc:  # prompt longer than the context, bad schema
                raise LLMError(f"llama.cpp rejected the request: {exc}") from exc
            prompt = "\n".join(m.get("content", "") for m in messages)
            prompt_tokens = len(llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=False))
        # The stream reports no usage: prompt tokens are counted without the chat template's few
        # markers, completion tokens are the streamed pieces (one token each).
        return ChatReply("".join(pieces), prompt_tokens + 4 * len(messages), chunks, cut_off=finish == "length",
                         looped=looped)
