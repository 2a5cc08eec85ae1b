"""``POST /v1/import`` with hostile bodies and a user key, against a real server: a non-finite number
is a 422 naming the line and the field and leaves every user's work as it was; a line nested past
Python's recursion limit is a 422, not a 500; the per-line user check is linear in a line's length."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dialogmem import Memory
from dialogmem._server._auth import Forbidden
from dialogmem._server._stream import LineScope
from portable import export_text, header
from serverkit import bearer, rest_server
from timing import assert_linear

NOW = 1_683_554_400.0


def _memory_line(user: str, **record: object) -> dict[str, object]:
    return {"kind": "memory", "status": "active", "record": {
        "id": "00000000-0000-4000-8000-000000000042", "user_id": user, "memory": "Alice owns 3 bicycles.",
        "time_stamp": "2023-05-08T14:00:00", "float_time_stamp": NOW, "weekday": "Mon", "created_at": NOW,
        "updated_at": NOW, **record}}


def _body(*lines: dict[str, object], user: str = "alice") -> bytes:
    return export_text([header(users=(user,)), *lines]).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], Memory]]:
    with rest_server(tmp_path_factory.mktemp("import") / "s", ["alice", "bob"]) as (url, keys, mem):
        for user in ("alice", "bob"):
            mem.add([{"content": f"{user} moved to Lisbon and adopted a cat named Pixel.", "name": user}], user,
                    flush=True)
        yield url, keys, mem


def _post(url: str, key: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{url}/v1/import", content=body, timeout=120,
                      headers={**bearer(key), "Content-Type": "application/x-ndjson"})


@pytest.mark.parametrize(("field", "value"), [("salience", math.nan), ("created_at", math.inf),
                                              ("confidence", -math.inf), ("float_time_stamp", math.nan),
                                              ("access_count", 10**30)])
def test_a_non_finite_number_is_a_422_naming_line_and_field(server: tuple[str, dict[str, str], Memory],
                                                            field: str, value: float) -> None:
    url, keys, mem = server
    r = _post(url, keys["alice"], _body(_memory_line("alice", **{field: value})))
    assert r.status_code == 422, r.text
    assert "line 2" in r.json()["detail"] and field in r.json()["detail"]
    for user in ("alice", "bob"):  # everyone's reads, sleep and export work as before
        assert httpx.post(f"{url}/v1/search", json={"query": "Where does the cat live?", "user_id": user},
                          headers=bearer(keys["admin"]), timeout=60).status_code == 200
        assert httpx.get(f"{url}/v1/memories", params={"user_id": user}, headers=bearer(keys[user]),
                         timeout=60).status_code == 200
    assert httpx.post(f"{url}/v1/sleep", json={"user_id": "bob"}, headers=bearer(keys["bob"]),
                      timeout=60).status_code == 202
    export = httpx.get(f"{url}/v1/export", params={"all_users": "true"}, headers=bearer(keys["admin"]), timeout=60)
    assert export.status_code == 200 and json.loads(export.text.splitlines()[-1])["kind"] == "end"
    assert len(mem.get_all("alice")) == 1


def test_a_line_nested_past_the_recursion_limit_is_a_422(server: tuple[str, dict[str, str], Memory]) -> None:
    url, keys, _ = server
    deep = b"[" * 100_000 + b"]" * 100_000
    for key in (keys["alice"], keys["admin"]):
        r = _post(url, key, json.dumps(header()).encode() + b"\n" + deep + b"\n")
        assert r.status_code == 422, r.text
        assert "line 2" in r.json()["detail"]


def test_the_user_check_of_a_long_line_is_linear() -> None:
    """A 96 MB line cost 16 s of CPU with a user key (each 64 KiB chunk copied the line so far)."""
    def feed(body: bytes) -> None:
        scope = LineScope("alice")
        for lo in range(0, len(body), 65536):
            scope.feed(body[lo:lo + 65536])
        scope.end()

    def make(n: int) -> bytes:
        return json.dumps(_memory_line("alice", memory="x" * n)).encode() + b"\n"

    assert_linear(feed, make, 4_000_000)


def test_the_user_check_still_refuses_another_users_line_split_over_chunks() -> None:
    body = _body(_memory_line("bob"), user="alice")
    scope = LineScope("alice")
    with pytest.raises(Forbidden, match="line 2 holds a record of another user"):  # fed a byte at a time
        for b in body:
            scope.feed(bytes([b]))
        scope.end()


def test_a_user_key_imports_its_own_lines(server: tuple[str, dict[str, str], Memory], tmp_path: Path) -> None:
    url, keys, mem = server
    line = _memory_line("alice", id="00000000-0000-4000-8000-000000000043", memory="Alice bakes sourdough.")
    r = _post(url, keys["alice"], _body(line))
    assert r.status_code == 200 and r.json()["memories"] == 1, r.text
    assert any(m.memory == "Alice bakes sourdough." for m in mem.get_all("alice"))
