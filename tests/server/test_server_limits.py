"""Bounded work for bounded input, over a real uvicorn server: a stalled body gets 408 and loses
its connection, an idle keep-alive connection is closed, per-key rate limits answer 429 with
Retry-After, and a huge timestamp is refused at once."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from dialogmem import ServerSettings
from serverkit import answering_llm, bearer, rest_server


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def _read_until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed it."""
    start = time.monotonic()
    sock.settimeout(limit_s)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data, time.monotonic() - start
        data += chunk


def _status_and_body(raw: bytes) -> tuple[int, dict[str, str], dict[str, str]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_a_stalled_body_gets_408_and_the_connection_is_closed(tmp_path: Path) -> None:
    settings = ServerSettings(body_timeout_s=1.0)
    with rest_server(tmp_path / "s", ["alice"], settings=settings) as (url, keys, _), \
            _connect(url) as sock:
        sock.sendall(b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + keys["alice"].encode() + b"\r\nContent-Length: 100\r\n\r\n"
                     b'{"query": ')  # 10 of the 100 bytes announced, then nothing
        raw, took = _read_until_closed(sock, 10)
        status, headers, body = _status_and_body(raw)
        assert status == 408 and body["error"] == "RequestTimeout" and "body_timeout_s" in body["detail"]
        assert headers["connection"] == "close"
        assert 0.9 < took < 4, took
        with httpx.Client(base_url=url, timeout=10) as c:  # the server still serves everyone else
            assert c.post("/v1/search", json={"query": "x"}, headers=bearer(keys["alice"])).status_code == 200


def test_a_slow_but_complete_body_within_the_deadline_is_served(tmp_path: Path) -> None:
    settings = ServerSettings(body_timeout_s=3.0)
    body = json.dumps({"query": "anything at all"}).encode()
    with rest_server(tmp_path / "s", ["alice"], settings=settings) as (url, keys, _), _connect(url) as sock:
        sock.sendall(b"POST /v1/search HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json"
                     b"\r\nAuthorization: Bearer " + keys["alice"].encode() + b"\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n")
        for i in range(0, len(body), 8):  # dribbled over about a second
            sock.sendall(body[i:i + 8])
            time.sleep(0.3)
        status, _, result = _status_and_body(_read_until_closed(sock, 10)[0])
        assert status == 200 and result["hits"] == []


def test_an_idle_keep_alive_connection_is_closed_after_keep_alive_s(tmp_path: Path) -> None:
    with rest_server(tmp_path / "s", [], settings=ServerSettings(keep_alive_s=1)) as (url, _, _), \
            _connect(url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        raw, took = _read_until_closed(sock, 10)
        assert raw.startswith(b"HTTP/1.1 200") and 0.9 < took < 4, took


def test_requests_per_second_per_key(tmp_path: Path) -> None:
    settings = ServerSettings(requests_per_second=1, request_burst=2)
    with rest_server(tmp_path / "s", ["alice", "bob"], settings=settings) as (url, keys, _), \
            httpx.Client(base_url=url, timeout=10) as c:
        got = [c.get("/v1/stats", headers=bearer(keys["alice"])) for _ in range(3)]
        assert [r.status_code for r in got] == [200, 200, 429]
        refused = got[2]
        assert refused.json()["error"] == "TooManyRequests" and "requests_per_second" in refused.json()["detail"]
        assert refused.headers["retry-after"] == "1"
        assert c.get("/v1/stats", headers=bearer(keys["bob"])).status_code == 200  # bob has his own bucket
        assert c.get("/health").status_code == 200  # no key, not counted
        time.sleep(float(refused.headers["retry-after"]))
        assert c.get("/v1/stats", headers=bearer(keys["alice"])).status_code == 200


def test_concurrent_llm_calls_per_key(tmp_path: Path) -> None:
    settings = ServerSettings(llm_calls_per_key=1)
    llm = answering_llm(lambda text: 2.0 if "slowly" in text else 0.0)
    with rest_server(tmp_path / "s", ["alice", "bob"], llm=llm, settings=settings) as (url, keys, mem), \
            httpx.Client(base_url=url, timeout=30) as c:
        for user in ("alice", "bob"):
            mem.add("My dog is called Rex and lives in Lyon", user, flush=True)
        slow: list[int] = []
        thread = threading.Thread(target=lambda: slow.append(
            c.post("/v1/answer", json={"query": "answer slowly: what is my dog called?"},
                   headers=bearer(keys["alice"])).status_code))
        thread.start()
        time.sleep(0.7)  # alice's first answer is now inside its LLM call
        second = c.post("/v1/answer", json={"query": "dog?"}, headers=bearer(keys["alice"]))
        assert second.status_code == 429 and second.headers["retry-after"] == "1"
        assert "llm_calls_per_key" in second.json()["detail"]
        assert c.post("/v1/search", json={"query": "dog"}, headers=bearer(keys["alice"])).status_code == 429
        assert c.get("/v1/stats", headers=bearer(keys["alice"])).status_code == 200  # no LLM on this route
        assert c.post("/v1/answer", json={"query": "dog?"}, headers=bearer(keys["bob"])).status_code == 200
        thread.join()
        assert slow == [200]
        assert c.post("/v1/answer", json={"query": "dog?"}, headers=bearer(keys["alice"])).status_code == 200


@pytest.mark.parametrize("route, field", [("/v1/memories", "timestamp"), ("/v1/search", "reference_time")])
def test_a_480_kb_timestamp_is_refused_at_once(tmp_path: Path, route: str, field: str) -> None:
    huge = ("8 May 2023 " * 44_000)[:480_000]
    body = {"messages": "hello"} if route == "/v1/memories" else {"query": "hello"}
    with rest_server(tmp_path / "s", ["alice"]) as (url, keys, _), httpx.Client(base_url=url, timeout=30) as c:
        start = time.monotonic()
        r = c.post(route, json={**body, field: huge}, headers=bearer(keys["alice"]))
        took = time.monotonic() - start
        assert r.status_code == 422 and "at most 100" in r.json()["detail"]
        assert took < 1.0, took  # was 13 s of CPU in dateparser
        assert c.get("/v1/stats", headers=bearer(keys["alice"])).json()["counts"]["turns"] == 0


def _chunked(sock: socket.socket, head: bytes, parts: list[bytes], pause_s: float) -> None:
    sock.sendall(head)
    for part in parts:
        sock.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        time.sleep(pause_s)


def test_an_import_body_may_take_long_while_it_keeps_coming(tmp_path: Path) -> None:
    """``/v1/import`` streams up to ``server.max_import_bytes``: its body deadline is an idle one (each
    part within ``body_timeout_s`` of the previous), so a slow link finishes; a stalled one still gets 408."""
    settings = ServerSettings(body_timeout_s=1.0)
    with rest_server(tmp_path / "s", ["alice"], settings=settings) as (url, keys, mem):
        mem.add("My cat is called Miso.", "alice", flush=True)
        lines = io.StringIO()
        mem.export(lines, "alice")
        body = lines.getvalue().encode()
        parts = [body[i:i + max(1, len(body) // 6)] for i in range(0, len(body), max(1, len(body) // 6))]
        head = (b"POST /v1/import HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-ndjson\r\n"
                b"Authorization: Bearer " + keys["alice"].encode() + b"\r\nTransfer-Encoding: chunked\r\n"
                b"Connection: close\r\n\r\n")
        with _connect(url) as sock:  # 6+ parts 0.5 s apart: the whole body takes over 3 s
            started = time.monotonic()
            _chunked(sock, head, parts, 0.5)
            sock.sendall(b"0\r\n\r\n")
            raw, _ = _read_until_closed(sock, 30)
            assert time.monotonic() - started > 2.5
        status, _, report = _status_and_body(raw)
        assert status == 200 and report["skipped_memories"] == 1, raw[:500]  # the file was read whole
        with _connect(url) as sock:  # one part, then nothing: 408 after the idle limit
            _chunked(sock, head, parts[:1], 0.0)
            raw, took = _read_until_closed(sock, 10)
            status, headers, err = _status_and_body(raw)
            assert headers["connection"] == "close"
            assert status == 408 and "no part of the request body arrived for 1 s" in err["detail"]
            assert 0.9 < took < 4, took
