"""``Client`` and ``AsyncClient`` beyond the shared suite: configuration, errors with the server's
message, retries through a real flaky proxy (503, 429, a cut connection) without a double write,
keys that do not reach a user, and the streaming export and import routes."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from dialogmem import (
    AsyncClient,
    AuthError,
    Client,
    ConfigError,
    InputError,
    Memory,
    NotFoundError,
    ServerUnavailableError,
    StoreError,
)
from dialogmem._settings import ServerSettings
from serverkit import RawListener, bearer, rest_server, serve

WHEN = "2023-05-08T13:56:00"


@dataclass
class Server:
    url: str
    keys: dict[str, str]
    mem: Memory


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    settings = ServerSettings(max_import_bytes=64 * 1024)
    with rest_server(tmp_path_factory.mktemp("client") / "store", ["alice", "bob"], settings=settings) as (
            url, keys, mem):
        yield Server(url, keys, mem)


# -- configuration ---------------------------------------------------------------------------------
def test_url_and_key_come_from_the_environment(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIALOGMEM_URL", server.url)
    monkeypatch.setenv("DIALOGMEM_API_KEY", server.keys["alice"])
    with Client() as c:
        assert c.url == server.url
        c.add("I keep bees on the roof.", "alice", flush=True)
        assert "bees" in c.search("bees", "alice").hits[0].memory
    monkeypatch.delenv("DIALOGMEM_URL")
    with pytest.raises(ConfigError, match="DIALOGMEM_URL"):
        Client()
    with pytest.raises(ConfigError, match="http"):
        Client("ftp://example.org")


# -- errors ----------------------------------------------------------------------------------------
def test_errors_carry_the_servers_message(server: Server) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    with Client(server.url, server.keys["alice"]) as c:
        for call, local in ((lambda m: m.get(missing, "alice"), NotFoundError),
                            (lambda m: m.add("hi", "alice", timestamp="not a time at all"), InputError),
                            (lambda m: m.get_all("alice", filters={"colour": "red"}), InputError)):
            with pytest.raises(local) as remote_exc:
                call(c)
            with pytest.raises(local) as local_exc:
                call(server.mem)
            assert type(remote_exc.value) is type(local_exc.value)
            assert str(remote_exc.value) == str(local_exc.value)
        with pytest.raises(InputError) as refused:  # refused by the request's schema: the server's own words
            c.search("dog", "alice", limit=0)
        raw = httpx.post(f"{server.url}/v1/search", json={"query": "dog", "limit": 0},
                         headers=bearer(server.keys["alice"]))
        assert raw.status_code == 422 and str(refused.value) == raw.json()["detail"]


def test_keys_that_do_not_reach_a_user_are_auth_errors(server: Server) -> None:
    with Client(server.url, "dm_000000000000_" + "x" * 43) as wrong, pytest.raises(
            AuthError, match="invalid or revoked API key"):
        wrong.search("dog", "alice")
    with Client(server.url, None) as none, pytest.raises(AuthError, match="missing API key"):
        none.stats("alice")
    with Client(server.url, server.keys["bob"]) as bob:
        for call in (lambda: bob.search("dog", "alice"), lambda: bob.graph_audit(),
                     lambda: bob.export(io.StringIO(), all_users=True), lambda: bob.graph("alice")):
            with pytest.raises(AuthError, match="does not reach"):
                call()
        assert bob.graph().nodes == [] or all(n.text for n in bob.graph().nodes)  # the public view is everyone's


def test_an_unreachable_server_is_server_unavailable() -> None:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with Client(f"http://127.0.0.1:{port}", "k", retries=2, backoff=0.01) as c, pytest.raises(
                ServerUnavailableError, match=r"could not be reached.*after 3 tries"):
            c.stats("alice")


def test_update_and_delete_refuse_a_chosen_actor(server: Server) -> None:
    with Client(server.url, server.keys["alice"]) as c:
        mid = c.add("I drive a green van.", "alice", flush=True).memories[0].id
        with pytest.raises(InputError, match="actor"):
            c.update(mid, "I drive a red van.", "alice", actor="me")
        assert c.history(mid, "alice")[-1].event == "ADD"  # nothing was sent
        new = c.update(mid, "I drive a red van.", "alice", metadata={"checked": True})
        assert new.metadata == {"checked": True} and c.history(mid, "alice")[-1].actor.startswith("key:")


# -- retries through a real proxy ------------------------------------------------------------------
@dataclass
class Flaky:
    """A proxy in front of the real server: the first ``fail`` matching requests are forwarded (so
    the server does the work) and then answered with ``status`` instead of the server's answer."""

    upstream: str
    status: int = 503
    fail: int = 1
    path: str = "/v1/memories"
    headers: dict[str, str] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with httpx.AsyncClient(base_url=self.upstream, timeout=60) as up:
            got = await up.request(request.method, request.url.path, params=request.query_params, content=body,
                                   headers=headers)
        if request.url.path == self.path:
            self.seen.append(request.method)
            if len(self.seen) <= self.fail:
                return JSONResponse({"error": "StoreError", "detail": "the journal is busy"}, status_code=self.status,
                                    headers=self.headers)
        return Response(got.content, status_code=got.status_code, media_type=got.headers.get("content-type"))


@contextmanager
def flaky(server: Server, **options: Any) -> Iterator[tuple[str, Flaky]]:
    proxy = Flaky(server.url, **options)
    app = Starlette(routes=[Route("/{path:path}", proxy.handle, methods=["GET", "POST", "PUT", "DELETE"])])
    with serve(app) as url:
        yield url, proxy


def test_a_503_is_retried_and_the_add_written_once(server: Server) -> None:
    with flaky(server, fail=2) as (url, proxy), Client(url, server.keys["alice"], backoff=0.01) as c:
        before = server.mem.stats("alice")["counts"]["turns"]
        got = c.add(["Carmen teaches salsa on Fridays.", "Carmen lives in Seville."], "alice", flush=True)
        assert proxy.seen == ["POST", "POST", "POST"]  # the server received the add three times
        assert server.mem.stats("alice")["counts"]["turns"] == before + 2  # and journaled it once
        carmen = [r for r in server.mem.get_all("alice", limit=1000) if "Carmen" in r.memory]
        assert len(got.turn_ids) == 2 and len(carmen) == 2
        assert set(got.turn_ids) <= {t for r in carmen for t in r.source_turn_ids}


def test_503s_past_the_retries_raise_the_servers_error(server: Server) -> None:
    with flaky(server, fail=100) as (url, proxy), Client(url, server.keys["alice"], retries=2, backoff=0.01) as c:
        with pytest.raises(StoreError, match="the journal is busy"):
            c.add("Dario collects stamps.", "alice")
        assert len(proxy.seen) == 3


def test_a_429_waits_for_retry_after(server: Server) -> None:
    with flaky(server, status=429, headers={"Retry-After": "1"}) as (url, proxy), \
            Client(url, server.keys["alice"], backoff=0.01) as c:
        started = time.monotonic()
        c.add("Elif sails on Lake Geneva.", "alice")
        assert time.monotonic() - started >= 1.0 and len(proxy.seen) == 2


class CutProxy(RawListener):
    """A TCP proxy that forwards each request to the server, and for the first ``cut`` requests to
    ``path`` closes the connection instead of answering (the answer is lost after the work is done)."""

    def __init__(self, upstream: str, path: str, cut: int = 1) -> None:
        self.upstream, self.path, self.cut = upstream, path, cut
        self.seen: list[str] = []
        super().__init__()

    def handle(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as rf, httpx.Client(base_url=self.upstream, timeout=60) as up:
            while line := rf.readline():
                method, target, _ = line.decode().split(" ", 2)
                headers = {}
                while (h := rf.readline()) not in (b"\r\n", b""):
                    name, _, value = h.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = rf.read(int(headers.get("content-length", "0")))
                sent = {k: v for k, v in headers.items() if k not in ("host", "content-length", "connection")}
                got = up.request(method, target, content=body, headers=sent)
                if target.split("?")[0].startswith(self.path):
                    self.seen.append(method)
                    if len(self.seen) <= self.cut:
                        return  # the work is done; the answer never arrives
                head = f"HTTP/1.1 {got.status_code} X\r\ncontent-length: {len(got.content)}\r\ncontent-type: " \
                       f"{got.headers.get('content-type', 'application/json')}\r\n\r\n"
                conn.sendall(head.encode() + got.content)



def test_a_lost_answer_is_resent_for_add_but_not_for_update(server: Server) -> None:
    proxy = CutProxy(server.url, "/v1/memories")
    try:
        with Client(proxy.url, server.keys["alice"], backoff=0.01) as c:
            before = server.mem.stats("alice")["counts"]["turns"]
            got = c.add("Farid plays the oud.", "alice", flush=True)  # cut once, sent again: written once
            assert proxy.seen == ["POST", "POST"] and server.mem.stats("alice")["counts"]["turns"] == before + 1
            mid = server.mem.search("oud", "alice").hits[0].id
            assert [m.id for m in got.memories] == [mid]  # the retry answers as the lost first answer did
            assert set(got.turn_ids) <= set(server.mem.get(mid, "alice").source_turn_ids)
            proxy.cut = 3  # the next update's answer is lost: it may have been applied, so it is not resent
            with pytest.raises(ServerUnavailableError, match="broke off"):
                c.update(mid, "Farid plays the oud and the ney.", "alice")
            assert proxy.seen[2:] == ["PUT"] and server.mem.get(mid, "alice").version == 2  # applied once
    finally:
        proxy.close()


def test_a_repeated_add_answers_as_the_first_did(server: Server) -> None:
    messages = [{"content": "Quentin keeps bees on the roof.", "id": "bees-1"},
                {"content": "Quentin sells the honey at the market.", "id": "bees-2"}]
    first = server.mem.add(messages, "bob", flush=True, timestamp=WHEN)
    made = sorted(m.id for m in first.memories)
    assert made and server.mem.stats("bob")["counts"]["memories"] >= len(made)
    again = server.mem.add(messages, "bob", flush=True, timestamp=WHEN)
    assert sorted(m.id for m in again.memories) == made and again.turn_ids == first.turn_ids
    with Client(server.url, server.keys["bob"]) as c:  # and over REST, as a client's retry arrives
        assert sorted(m.id for m in c.add(messages, "bob", flush=True, timestamp=WHEN).memories) == made


# -- streaming export and import -------------------------------------------------------------------
def test_export_streams_ndjson_of_the_keys_own_user(server: Server, tmp_path: Path) -> None:
    server.mem.add("Gina repairs clocks.", "bob", flush=True, timestamp=WHEN)
    with httpx.stream("GET", f"{server.url}/v1/export", headers=bearer(server.keys["bob"])) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        assert r.headers.get("transfer-encoding") == "chunked"
        lines = [json.loads(line) for line in r.iter_lines()]
    assert lines[0]["kind"] == "header" and lines[0]["users"] == ["bob"]
    assert {t["turn"]["user_id"] for t in lines if t["kind"] == "turn"} == {"bob"}
    with Client(server.url, server.keys["admin"]) as admin:
        both = admin.export(tmp_path / "all.jsonl", all_users=True, vectors=False)
        assert both.users == ["alice", "bob"] and both.vectors is False
        assert not any(json.loads(x).get("vector") for x in (tmp_path / "all.jsonl").read_text().splitlines())


def test_import_checks_every_line_before_writing(server: Server, tmp_path: Path) -> None:
    with Client(server.url, server.keys["admin"]) as admin:
        admin.add("Hugo brews cider.", "bob", flush=True, timestamp=WHEN)
        path = tmp_path / "bob.jsonl"
        admin.export(path, "bob")
    lines = path.read_text().splitlines()
    with Client(server.url, server.keys["alice"]) as alice:
        with pytest.raises(AuthError, match="line 1 holds a record of another user"):
            alice.import_(path)  # bob's lines with alice's key
        mine = [json.dumps({**json.loads(lines[0]), "users": ["alice"]})]
        bad = tmp_path / "bad.jsonl"
        bad.write_text("\n".join([*mine, '{"kind": "turn", "turn": {"id": "x"}}']) + "\n")
        before = server.mem.stats("alice")["counts"]
        with pytest.raises(InputError, match="line 2"):
            alice.import_(bad)
        assert server.mem.stats("alice")["counts"] == before  # nothing of the file was written
        big = tmp_path / "big.jsonl"
        big.write_text(mine[0] + "\n" + " " * (70 * 1024) + "\n")
        with pytest.raises(InputError, match="max_import_bytes"):
            alice.import_(big)


def test_async_client_sleeps_as_a_job_and_streams(server: Server, tmp_path: Path) -> None:
    async def run() -> None:
        async with AsyncClient(server.url, server.keys["alice"]) as c:
            for _ in range(2):
                await c.add("Ines rows at dawn on the Douro.", "alice", flush=True, timestamp=WHEN)
            report = await c.sleep()  # a user key: its own user
            assert report.users == 1 and report.new_entries >= 2
            exported = await c.export(tmp_path / "a.jsonl")
            assert exported.users == ["alice"] and exported.memories > 0
            again = await c.import_(io.StringIO((tmp_path / "a.jsonl").read_text()))
            assert again.memories == 0 and again.skipped_memories == exported.memories
    asyncio.run(run())


# -- the decisions, without I/O --------------------------------------------------------------------
def test_retry_decisions() -> None:
    from dialogmem._client._policy import RetryPolicy, error_for

    policy = RetryPolicy(retries=3, backoff=0.1, max_wait=0.3)
    assert [policy.wait(n, jitter=1.0) for n in range(4)] == [0.1, 0.2, 0.3, 0.3]
    lost = httpx.ReadError("gone")
    refused = httpx.ConnectError("refused")
    assert policy.after_failure(0, refused, safe=False, jitter=0.0) == 0.05  # never sent: always again
    assert policy.after_failure(0, lost, safe=False, jitter=0.0) is None  # maybe applied: not again
    assert policy.after_failure(0, lost, safe=True, jitter=0.0) == 0.05
    assert policy.after_failure(3, refused, safe=True, jitter=0.0) is None  # out of tries
    assert policy.after_status(0, 429, b"{}", "2", jitter=0.0) == 2.0  # Retry-After wins
    assert policy.after_status(0, 429, b"{}", "600", jitter=0.0) is None  # longer than max_retry_after
    assert policy.after_status(0, 503, b'{"error": "StoreError", "detail": "x"}', None, jitter=0.0) == 0.05
    assert policy.after_status(0, 503, b'{"error": "LLMUnavailableError", "detail": "x"}', None, jitter=0.0) is None
    assert policy.after_status(0, 404, b"{}", None, jitter=0.0) is None
    for status, name, cls in ((404, "NotFoundError", NotFoundError), (422, "InputError", InputError),
                              (401, "Unauthorized", AuthError), (403, "Forbidden", AuthError),
                              (503, "StoreError", StoreError), (413, "HTTPError", InputError)):
        err = error_for(status, json.dumps({"error": name, "detail": "why"}).encode())
        assert type(err) is cls and str(err) == "why"
    assert type(error_for(502, b"not json")).__name__ == "ServerResponseError"  # a gateway's page, not the LLM
