"""A server without keys (``dialogmem ui``, ``serve --no-auth``) answers this machine's programs only.

Against a real uvicorn server: requests naming another host (DNS rebinding), coming from another
site (``Origin``, ``Sec-Fetch-Site``) or carrying a body of a type a web page may send without a
CORS preflight (``text/plain``, forms, none) are refused with 403 before anything is read or
written; the same requests from a local program (no ``Origin``, JSON or NDJSON bodies) work. The
browser side (a page of another origin in Chromium) is ``tests/ui/test_ui_browser.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dialogmem import Memory
from portable import export_text, header, turn_line
from seams import create_app, journal_turns
from serverkit import RULES_ONLY, serve

VICTIM = "victim"


def _lines(user: str, text: str) -> bytes:
    return export_text([header(users=(user,)), turn_line("planted-1", user, content=text, speaker="Victim")]).encode()


@pytest.fixture(scope="module")
def keyless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Memory]]:
    root: Path = tmp_path_factory.mktemp("keyless") / "store"
    with Memory(data_dir=root, **RULES_ONLY) as mem, serve(create_app(mem, auth=False)) as url:
        mem.add([{"content": "My bank PIN is 4921", "name": "Victim"}], VICTIM, flush=True)
        yield url, mem


def _planted(mem: Memory) -> bool:
    return any("planted" in t.id for t in journal_turns(mem, VICTIM))


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8080", "127.0.0.1.evil.example", "10.0.0.1"])
def test_a_foreign_host_reads_nothing(keyless: tuple[str, Memory], host: str) -> None:
    url, _ = keyless
    for path in (f"/v1/export?user_id={VICTIM}", f"/v1/memories?user_id={VICTIM}"):
        r = httpx.get(url + path, headers={"Host": host}, timeout=30)
        assert r.status_code == 403, (host, path, r.text)
        assert "PIN" not in r.text and "Host" in r.json()["detail"]
    r = httpx.post(f"{url}/v1/search", json={"query": "PIN", "user_id": VICTIM}, headers={"Host": host}, timeout=30)
    assert r.status_code == 403 and "4921" not in r.text


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example", "Content-Type": "text/plain"},
    {"Origin": "http://evil.example", "Content-Type": "application/x-ndjson"},   # after a preflight it never gets
    {"Origin": "null", "Content-Type": "application/x-ndjson"},
    {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/x-ndjson"},
    {"Sec-Fetch-Site": "same-site", "Content-Type": "application/x-ndjson"},       # another port of localhost
    {"Content-Type": "text/plain"},                                                   # a CORS simple request
    {"Content-Type": "application/x-www-form-urlencoded"},
    {"Content-Type": "multipart/form-data; boundary=x"},
    {},                                                                               # no type at all
])
def test_cross_site_or_simple_imports_are_refused(keyless: tuple[str, Memory], headers: dict[str, str]) -> None:
    url, mem = keyless
    r = httpx.post(f"{url}/v1/import", content=_lines(VICTIM, "planted: wire the money"), headers=headers,
                   timeout=30)
    assert r.status_code == 403, (headers, r.text)
    assert not _planted(mem)


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_simple_requests_change_nothing(keyless: tuple[str, Memory], content_type: str | None) -> None:
    url, mem = keyless
    body = json.dumps({"messages": [{"content": "planted fact", "name": "Victim"}], "user_id": VICTIM,
                       "flush": True})
    headers = {"Content-Type": content_type} if content_type else {}
    for path in ("/v1/memories", "/v1/sleep", "/v1/search"):
        r = httpx.post(url + path, content=body if content_type else b"", headers=headers, timeout=30)
        assert r.status_code == 403, (path, content_type, r.text)
    assert not any("planted" in m.memory for m in mem.get_all(VICTIM))


def test_local_programs_still_work(keyless: tuple[str, Memory]) -> None:
    url, mem = keyless
    for host in ("127.0.0.1", "localhost", None):
        headers = {"Host": f"{host}:1234"} if host else {}
        r = httpx.post(f"{url}/v1/search", json={"query": "PIN", "user_id": VICTIM}, headers=headers, timeout=30)
        assert r.status_code == 200, r.text
    port = url.rsplit(":", 1)[1]
    r = httpx.post(f"{url}/v1/search", json={"query": "PIN", "user_id": VICTIM}, timeout=30,
                   headers={"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 200 and r.json()["hits"]
    r = httpx.get(f"{url}/v1/export?user_id={VICTIM}", timeout=30)
    assert r.status_code == 200 and "PIN" in r.text
    r = httpx.post(f"{url}/v1/import", content=_lines("local-user", "imported locally"),
                   headers={"Content-Type": "application/x-ndjson"}, timeout=30)
    assert r.status_code == 200, r.text
    assert [t.content for t in journal_turns(mem, "local-user")] == ["imported locally"]
    r = httpx.delete(f"{url}/v1/users/local-user", timeout=30)
    assert r.status_code in (200, 204), r.text


def test_a_server_with_keys_is_unchanged(tmp_path: Path) -> None:
    """The checks are for keyless servers: with keys, a request needs its key, not a loopback Host."""
    with Memory(data_dir=tmp_path / "s", **RULES_ONLY) as mem, serve(create_app(mem, auth=True)) as url:
        r = httpx.post(f"{url}/v1/search", json={"query": "x", "user_id": "u"}, timeout=30,
                       headers={"Host": "memory.example.com", "Content-Type": "application/json"})
        assert r.status_code == 401


def test_mcp_of_a_keyless_server_takes_the_same_checks(tmp_path: Path) -> None:
    with Memory(data_dir=tmp_path / "s", **RULES_ONLY) as mem, serve(create_app(mem, auth=False)) as url:
        call = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        accept = {"Accept": "application/json, text/event-stream"}
        for headers in ({"Host": "evil.example"}, {"Origin": "http://evil.example"},
                        {"Content-Type": "text/plain"}):
            r = httpx.post(f"{url}/mcp", content=json.dumps(call),
                           headers={"Content-Type": "application/json", **accept, **headers}, timeout=30)
            assert r.status_code == 403, (headers, r.text)
        r = httpx.post(f"{url}/mcp", json=call, headers=accept, timeout=30)
        assert r.status_code == 200, r.text
