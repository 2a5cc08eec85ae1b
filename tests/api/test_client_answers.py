"""What ``Client`` and ``AsyncClient`` make of answers that are not the server's own: a proxy's HTML page
or a JSON body cut short with status 200, a body of the wrong shape, a gateway's 502 / 504 page, and an
export stream cut at a line boundary (HTTP/1.0: the end of the stream is the end of the connection,
so only the closing ``{"kind": "end", "records": N}`` line tells a whole export from a cut one).

The answers come from a stand-in: a real HTTP/1.0 server on a loopback socket that sends fixed bytes
per path (the real server never sends these; a proxy in front of it or a dropped connection does)."""

from __future__ import annotations

import asyncio
import io
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dialogmem import (
    AsyncClient,
    AuthError,
    Client,
    DialogmemError,
    LLMOutputError,
    NotFoundError,
    ServerResponseError,
    ServerUnavailableError,
)
from serverkit import RawListener

HEADER = {"kind": "header", "format": "dialogmem-export", "version": 2, "users": ["alice"]}
TURN = {"kind": "turn", "turn": {"id": "t1", "user_id": "alice"}}
MEMORY = {"kind": "memory", "record": {"id": "m1", "user_id": "alice"}}
HTML = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1>nginx</body></html>"


def ndjson(*lines: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


class StandIn(RawListener):
    """An HTTP/1.0 server: each request to a path gets ``answers[path]`` = (status, content type,
    body), sent without a Content-Length, then the connection closes (where the body ends)."""

    def __init__(self, answers: dict[str, tuple[int, str, bytes]]) -> None:
        self.answers = answers
        self.requests: list[str] = []
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as rf:
            method, target, _ = rf.readline().decode().split(" ", 2)
            length = 0
            while (line := rf.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            rf.read(length)
            path = target.split("?")[0]
            self.requests.append(f"{method} {path}")
            status, kind, body = self.answers[path]
            conn.sendall(f"HTTP/1.0 {status} X\r\ncontent-type: {kind}\r\n\r\n".encode() + body)



@pytest.fixture
def stand_in() -> Iterator[Callable[[dict[str, tuple[int, str, bytes]]], StandIn]]:
    made: list[StandIn] = []

    def make(answers: dict[str, tuple[int, str, bytes]]) -> StandIn:
        made.append(StandIn(answers))
        return made[-1]
    yield make
    for s in made:
        s.close()


def both(url: str, call: Callable[[Any], Any]) -> list[BaseException]:
    """``call`` on a Client and on an AsyncClient of ``url`` (awaited); the error each raised."""
    errors: list[BaseException] = []
    with Client(url, retries=0) as c:
        try:
            call(c)
        except BaseException as exc:
            errors.append(exc)

    async def run() -> None:
        async with AsyncClient(url, retries=0) as c:
            try:
                await call(c)
            except BaseException as exc:
                errors.append(exc)
    asyncio.run(run())
    assert len(errors) == 2, errors  # neither call may succeed
    return errors


def test_an_html_page_or_a_cut_json_with_200_is_a_server_response_error(stand_in: Any) -> None:
    server = stand_in({"/v1/search": (200, "text/html", b"<html><body>Please sign in to the proxy</body></html>"),
                       "/v1/memories/m1": (200, "application/json", b'{"id": "m1", "memory": "Ana ado'),
                       "/v1/stats": (200, "application/json", b"")})
    for exc in both(server.url, lambda c: c.search("dogs", "alice")):
        assert isinstance(exc, ServerResponseError), repr(exc)
        assert "not JSON" in str(exc) and "text/html" in str(exc) and "sign in" in str(exc)
    for exc in both(server.url, lambda c: c.get("m1", "alice")):
        assert isinstance(exc, ServerResponseError) and "not JSON" in str(exc), repr(exc)
    for exc in both(server.url, lambda c: c.stats("alice")):
        assert isinstance(exc, ServerResponseError) and "empty" in str(exc), repr(exc)


def test_a_body_of_the_wrong_shape_is_a_server_response_error(stand_in: Any) -> None:
    server = stand_in({"/v1/search": (200, "application/json", b'{"query": "dogs", "hits": [{"id": 3}]}'),
                       "/v1/memories": (200, "application/json", b'[{"turn_ids": []}]'),
                       "/v1/users/alice": (200, "application/json", b'{"turns": "many"}')})
    for exc in both(server.url, lambda c: c.search("dogs", "alice")):
        assert isinstance(exc, ServerResponseError) and "expected shape" in str(exc) and "hits.0" in str(exc), repr(exc)
    for exc in both(server.url, lambda c: c.get_all("alice")):  # a list where an object is expected
        assert isinstance(exc, ServerResponseError) and "expected shape" in str(exc), repr(exc)
    for exc in both(server.url, lambda c: c.forget_user("alice")):
        assert isinstance(exc, ServerResponseError), repr(exc)


@pytest.mark.parametrize("status", [502, 504, 404, 401, 500])
def test_a_proxys_error_page_is_not_read_as_the_servers_error(stand_in: Any, status: int) -> None:
    server = stand_in({"/v1/search": (status, "text/html", HTML)})
    for exc in both(server.url, lambda c: c.search("dogs", "alice")):
        assert type(exc) is ServerResponseError, repr(exc)  # not LLMOutputError, LLMTimeoutError, NotFound...
        assert f"HTTP {status}" in str(exc) and "502 Bad Gateway" in str(exc)
    assert len(server.requests) == 2  # not retried (a 502/504 page is not "busy")


def test_the_servers_own_error_body_still_names_the_error(stand_in: Any) -> None:
    def body(name: str, detail: str) -> bytes:
        return json.dumps({"error": name, "detail": detail}).encode()
    server = stand_in({"/v1/answer": (502, "application/json", body("LLMOutputError", "the model rambled")),
                       "/v1/memories/m1": (404, "application/json", body("NotFoundError", "no memory m1")),
                       "/v1/stats": (401, "application/json", body("Unauthorized", "no key")),
                       "/v1/search": (503, "text/html", b"<html>busy</html>")})
    for exc in both(server.url, lambda c: c.answer("why?", "alice")):
        assert type(exc) is LLMOutputError and str(exc) == "the model rambled"
    for exc in both(server.url, lambda c: c.get("m1", "alice")):
        assert type(exc) is NotFoundError and str(exc) == "no memory m1"
    for exc in both(server.url, lambda c: c.stats("alice")):
        assert type(exc) is AuthError
    for exc in both(server.url, lambda c: c.search("dogs", "alice")):  # a proxy's 503: busy, whoever says it
        assert type(exc) is ServerUnavailableError and "HTTP 503" in str(exc)


@pytest.mark.parametrize(("stream", "problem"), [
    (ndjson(HEADER, TURN, MEMORY), "without its end line"),  # cut at a line boundary
    (ndjson(HEADER, TURN), "without its end line"),
    (ndjson(HEADER), "without its end line"),
    (b"", "before its header line"),
    (ndjson(HEADER, TURN, {"kind": "end", "records": 2}), "counts 2 records, the stream held 1"),
    (ndjson(HEADER, TURN, MEMORY, {"kind": "end", "records": 1}), "counts 1 records, the stream held 2"),
    (ndjson(HEADER, TURN, {"kind": "end", "records": "1"}), "no record count"),
    (ndjson(HEADER, {"kind": "end", "records": 0}, TURN), "goes on after its end line"),
    (ndjson(TURN, {"kind": "end", "records": 1}), "does not start with its header"),
    (ndjson(HEADER, TURN) + b'{"kind": "memo', "not JSON"),  # cut inside a line
])
def test_an_export_cut_short_is_an_error_and_leaves_no_file(stand_in: Any, tmp_path: Path, stream: bytes,
                                                            problem: str) -> None:
    server = stand_in({"/v1/export": (200, "application/x-ndjson", stream)})
    target = tmp_path / "out.jsonl"
    for exc in both(server.url, lambda c: c.export(target, "alice")):
        assert isinstance(exc, ServerResponseError) and isinstance(exc, DialogmemError), repr(exc)
        assert problem in str(exc), str(exc)
        if problem in ("without its end line", "before its header line") or problem.startswith("counts"):
            assert "the export was cut short" in str(exc)
    assert not target.exists() and not list(tmp_path.iterdir())  # no file, whole or partial


def test_a_whole_export_is_written_with_its_end_line(stand_in: Any, tmp_path: Path) -> None:
    stream = ndjson(HEADER, TURN, MEMORY, {"kind": "history", "entry": {}}, {"kind": "end", "records": 3})
    server = stand_in({"/v1/export": (200, "application/x-ndjson", stream)})
    with Client(server.url) as c:
        report = c.export(tmp_path / "sync.jsonl", "alice")
    assert (report.users, report.turns, report.memories, report.history) == (["alice"], 1, 1, 1)
    assert (tmp_path / "sync.jsonl").read_bytes() == stream  # the end line too: the file reads as a library export

    async def run() -> None:
        async with AsyncClient(server.url) as c:
            out = io.StringIO()
            report = await c.export(out, "alice")
            assert report.memories == 1 and out.getvalue().encode() == stream
    asyncio.run(run())


def test_an_older_servers_export_without_end_line_is_read(stand_in: Any, tmp_path: Path) -> None:
    """Format version 1 (before end lines): the client cannot tell a cut stream, and takes it as it is."""
    stream = ndjson({**HEADER, "version": 1}, TURN, MEMORY)
    server = stand_in({"/v1/export": (200, "application/x-ndjson", stream)})
    with Client(server.url) as c:
        report = c.export(tmp_path / "old.jsonl", "alice")
    assert (report.turns, report.memories) == (1, 1)

