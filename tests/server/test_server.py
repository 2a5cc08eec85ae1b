"""The REST server against a real uvicorn on loopback, with httpx as the client: the auth matrix
(every route x {no key, wrong user's key, own key, admin key}), isolation, limits, errors, sleep jobs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from dialogmem import ServerSettings
from serverkit import bearer, rest_server

SETTINGS = ServerSettings(max_body_bytes=64 * 1024, max_batch_messages=5, max_conversation_turns=8)


@dataclass
class Env:
    url: str
    keys: dict[str, str]
    client: httpx.Client

    def as_(self, who: str | None) -> dict[str, str]:
        return bearer(self.keys[who]) if who else {}

    def memory_of(self, user: str, text: str = "My dog is called Rex and lives in Lyon") -> str:
        r = self.client.post("/v1/memories", json={"messages": text, "user_id": user, "flush": True},
                             headers=self.as_("admin"))
        assert r.status_code == 200, r.text
        return r.json()["memories"][0]["id"]  # type: ignore[no-any-return]

    def wait_job(self, job_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job = self.client.get(f"/v1/sleep/{job_id}", headers=self.as_("admin")).json()
            if job["status"] in ("done", "failed"):
                return job  # type: ignore[no-any-return]
            time.sleep(0.05)
        raise AssertionError(f"sleep job {job_id} did not finish")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with rest_server(tmp_path_factory.mktemp("server") / "store", ["alice", "bob"], settings=SETTINGS) as (
            url, keys, _), httpx.Client(base_url=url, timeout=60) as client:
        yield Env(url, keys, client)


Request = tuple[str, str, dict[str, Any] | None]


def _sleep_job(e: Env) -> Request:
    r = e.client.post("/v1/sleep", json={"user_id": "alice"}, headers=e.as_("admin"))
    assert r.status_code == 202, r.text
    e.wait_job(r.json()["job_id"])
    return "GET", f"/v1/sleep/{r.json()['job_id']}?user_id=alice", None


#: route name -> (builds the request for user alice, status for alice's own key or an admin key)
ROUTES: dict[str, tuple[Callable[[Env], Request], int]] = {
    "add": (lambda e: ("POST", "/v1/memories", {"messages": "I play the cello", "user_id": "alice"}), 200),
    "add_conversation": (lambda e: ("POST", "/v1/conversations", {
        "conversation": [{"role": "user", "content": "We moved to Porto"}], "user_id": "alice"}), 200),
    "flush": (lambda e: ("POST", "/v1/flush", {"user_id": "alice"}), 200),
    "search": (lambda e: ("POST", "/v1/search", {"query": "dog", "user_id": "alice"}), 200),
    "answer": (lambda e: (e.memory_of("alice"), ("POST", "/v1/answer", {"query": "dog?", "user_id": "alice"}))[1],
               200),
    "list": (lambda e: ("GET", "/v1/memories?user_id=alice&limit=5", None), 200),
    "get": (lambda e: ("GET", f"/v1/memories/{e.memory_of('alice')}?user_id=alice", None), 200),
    "update": (lambda e: ("PUT", f"/v1/memories/{e.memory_of('alice')}?user_id=alice", {"text": "Rex"}), 200),
    "delete": (lambda e: ("DELETE", f"/v1/memories/{e.memory_of('alice')}?user_id=alice", None), 200),
    "history": (lambda e: ("GET", f"/v1/memories/{e.memory_of('alice')}/history?user_id=alice", None), 200),
    "sleep": (lambda e: ("POST", "/v1/sleep", {"user_id": "alice"}), 202),
    "sleep_status": (_sleep_job, 200),
    "stats": (lambda e: ("GET", "/v1/stats?user_id=alice", None), 200),
    "forget_user": (lambda e: ("DELETE", "/v1/users/alice", None), 200),
}
CALLERS = {"no key": (None, 401), "wrong user's key": ("bob", 403), "own key": ("alice", None),
           "admin key": ("admin", None)}


@pytest.mark.parametrize("caller", list(CALLERS))
@pytest.mark.parametrize("route", list(ROUTES))
def test_auth_matrix(env: Env, route: str, caller: str) -> None:
    build, allowed = ROUTES[route]
    method, path, body = build(env)
    who, refused = CALLERS[caller]
    r = env.client.request(method, path, json=body, headers=env.as_(who))
    assert r.status_code == (refused or allowed), r.text
    assert r.headers["content-type"].startswith("application/json")
    if refused == 403:
        assert r.json() == {"error": "Forbidden", "detail": "this key does not reach that user"}
    if refused == 401:
        assert r.headers["www-authenticate"] == "Bearer"
    if route == "sleep" and r.status_code == 202:
        assert env.wait_job(r.json()["job_id"])["status"] == "done"


def test_health_and_openapi_need_no_key(env: Env) -> None:
    assert env.client.get("/health").json()["status"] == "ok"
    doc = env.client.get("/openapi.json").json()
    for path in ("/v1/memories", "/v1/search", "/v1/answer", "/v1/memories/{memory_id}", "/v1/sleep/{job_id}",
                 "/v1/users/{user_id}", "/v1/stats", "/v1/conversations"):
        assert path in doc["paths"]


def test_key_forms(env: Env) -> None:
    alice = env.keys["alice"]
    ok = {"query": "dog"}
    assert env.client.post("/v1/search", json=ok, headers={"X-API-Key": alice}).status_code == 200
    assert env.client.post("/v1/search", json=ok, headers={"authorization": f"bearer {alice}"}).status_code == 200
    for bad in (alice[:-1] + ("A" if alice[-1] != "A" else "B"), "dm_000000000000_" + "x" * 43, "nonsense", ""):
        r = env.client.post("/v1/search", json=ok, headers={"X-API-Key": bad} if bad else {})
        assert r.status_code == 401, bad
        assert r.json()["error"] == "Unauthorized"


def test_revoked_key_stops_at_once(tmp_path_factory: pytest.TempPathFactory) -> None:
    from serverkit import make_keys, revoke_key  # `dialogmem keys create` / `revoke` beside the running server

    with rest_server(tmp_path_factory.mktemp("revoke") / "s", ["carol"]) as (url, keys, mem):
        c = httpx.Client(base_url=url, timeout=30)
        assert c.post("/v1/search", json={"query": "x"}, headers=bearer(keys["carol"])).status_code == 200
        more = make_keys(mem.data_dir, ["dave"])
        assert c.post("/v1/search", json={"query": "x"}, headers=bearer(more["dave"])).status_code == 200
        key_id = keys["carol"].split("_")[1]
        revoke_key(mem.data_dir, key_id)
        assert c.post("/v1/search", json={"query": "x"}, headers=bearer(keys["carol"])).status_code == 401


def test_isolation(env: Env) -> None:
    mid = env.memory_of("bob", "Bob's secret is the blue door")
    # bob's memory id with alice's own key and her own user id reads as not found, never as forbidden
    for method, path, body in (("GET", f"/v1/memories/{mid}", None), ("PUT", f"/v1/memories/{mid}", {"text": "x"}),
                               ("DELETE", f"/v1/memories/{mid}", None), ("GET", f"/v1/memories/{mid}/history", None)):
        r = env.client.request(method, path, json=body, headers=env.as_("alice"))
        assert r.status_code == 404, (method, r.text)
        assert r.json()["error"] == "NotFoundError"
    # a user key implies its user: alice's search never sees bob's memory
    hits = env.client.post("/v1/search", json={"query": "blue door secret"}, headers=env.as_("alice")).json()["hits"]
    assert mid not in [h["id"] for h in hits]
    # the same 403 for a user that exists and one that does not
    a = env.client.get("/v1/memories?user_id=bob", headers=env.as_("alice"))
    b = env.client.get("/v1/memories?user_id=nobody-at-all", headers=env.as_("alice"))
    assert a.status_code == b.status_code == 403 and a.json() == b.json()
    # an admin key must name the user
    r = env.client.post("/v1/search", json={"query": "door"}, headers=env.as_("admin"))
    assert r.status_code == 422 and "user_id is required" in r.json()["detail"]


def test_bob_cannot_see_alices_sleep_job(env: Env) -> None:
    r = env.client.post("/v1/sleep", json={}, headers=env.as_("alice"))
    job = r.json()
    assert r.status_code == 202 and job["user_id"] == "alice"
    assert env.client.get(f"/v1/sleep/{job['job_id']}", headers=env.as_("bob")).status_code == 404
    done = env.wait_job(job["job_id"])
    assert done["status"] == "done" and done["report"]["seconds"] >= 0
    assert env.client.get(f"/v1/sleep/{job['job_id']}", headers=env.as_("alice")).json()["status"] == "done"


def test_pagination(env: Env) -> None:
    for i in range(5):
        env.client.post("/v1/memories", json={"messages": f"Fact number {i} about cameras", "flush": True},
                        headers=env.as_("bob"))
    seen: list[str] = []
    offset: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"offset": offset} if offset else {})}
        page = env.client.get("/v1/memories", params=params, headers=env.as_("bob")).json()
        seen += [m["id"] for m in page["memories"]]
        assert all(m["user_id"] == "bob" for m in page["memories"])
        offset = page["next_offset"]
        if offset is None:
            break
    assert len(seen) == len(set(seen)) >= 5 and seen == sorted(seen)
    # a number as offset skips that many (SQL style): the same pages
    for skip in range(len(seen) + 2):
        page = env.client.get("/v1/memories", params={"limit": 2, "offset": str(skip)}, headers=env.as_("bob")).json()
        assert [m["id"] for m in page["memories"]] == seen[skip:skip + 2]


def test_limits(env: Env) -> None:
    big = {"messages": "x" * (70 * 1024), "user_id": "alice"}
    r = env.client.post("/v1/memories", json=big, headers=env.as_("alice"))
    assert r.status_code == 413 and "max_body_bytes" in r.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit still holds
        yield b'{"messages": "'
        for _ in range(70):
            yield b"y" * 1024
        yield b'"}'
    headers = {**env.as_("alice"), "content-type": "application/json"}
    r = env.client.post("/v1/memories", content=chunks(), headers=headers)
    assert r.status_code == 413
    r = env.client.post("/v1/memories", json={"messages": ["a"] * 6}, headers=env.as_("alice"))
    assert r.status_code == 422 and "max_batch_messages" in r.json()["detail"]
    conv = [{"role": "user", "content": f"turn {i}"} for i in range(9)]
    r = env.client.post("/v1/conversations", json={"conversation": conv}, headers=env.as_("alice"))
    assert r.status_code == 422 and "max_conversation_turns" in r.json()["detail"]
    # under the limits all is well
    r = env.client.post("/v1/memories", json={"messages": ["a b c"] * 5}, headers=env.as_("alice"))
    assert r.status_code == 200


@pytest.mark.parametrize(("method", "path", "body", "status", "error"), [
    ("POST", "/v1/search", {"query": ""}, 422, "InputError"),
    ("POST", "/v1/search", {"query": "x", "limit": 0}, 422, "InputError"),
    ("POST", "/v1/search", {"query": "x", "bogus": 1}, 422, "InputError"),
    ("POST", "/v1/memories", {"messages": {"content": "hi", "colour": "red"}}, 422, "InputError"),
    ("POST", "/v1/memories", {"messages": [], "user_id": "alice"}, 422, "InputError"),
    ("GET", "/v1/memories/no-such-id", None, 404, "NotFoundError"),
    ("GET", "/v1/memories?limit=0", None, 422, "InputError"),
    ("GET", "/v1/sleep/0000", None, 404, "NotFoundError"),
    ("GET", "/v1/no-such-route", None, 404, "HTTPError"),
])
def test_errors_are_one_line_json(env: Env, method: str, path: str, body: Any, status: int, error: str) -> None:
    r = env.client.request(method, path, json=body, headers=env.as_("alice"))
    assert r.status_code == status, r.text
    data = r.json()
    assert set(data) == {"error", "detail"} and data["error"] == error
    assert "\n" not in data["detail"] and data["detail"]


def test_malformed_json_body(env: Env) -> None:
    r = env.client.post("/v1/search", content=b"{not json", headers={**env.as_("alice"),
                                                                      "content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"] == "InputError"


def test_answer_without_llm_is_503(tmp_path_factory: pytest.TempPathFactory) -> None:
    from dialogmem import Memory
    from seams import create_app
    from serverkit import RULES_ONLY, make_keys, serve

    root = tmp_path_factory.mktemp("nollm") / "s"
    keys = make_keys(root, ["erin"])
    with Memory(data_dir=root, **RULES_ONLY) as mem, serve(create_app(mem)) as url:
        r = httpx.post(f"{url}/v1/answer", json={"query": "anything"}, headers=bearer(keys["erin"]), timeout=30)
        assert r.status_code == 503 and r.json()["error"] == "LLMUnavailableError"


def test_no_auth_acts_as_admin(tmp_path_factory: pytest.TempPathFactory) -> None:
    with rest_server(tmp_path_factory.mktemp("noauth") / "s", [], auth=False) as (url, _, _mem):
        assert httpx.get(f"{url}/health").json()["auth"] is False
        r = httpx.post(f"{url}/v1/search", json={"query": "x", "user_id": "anyone"}, timeout=30)
        assert r.status_code == 200
