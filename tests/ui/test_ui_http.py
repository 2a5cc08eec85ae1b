"""The inspector over HTTP: a real uvicorn server with httpx as the browser. The contract (sign-in,
list with ``q``, one memory with sources and history, 404 for another user), the session cookie,
CSRF and the confirmation step of every change, the security headers, isolation."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from dialogmem import Memory, NotFoundError, ScriptedLLM
from dialogmem._server import create_app
from dialogmem._write._extract import RuleExtractor
from dialogmem.cli import app as cli_app
from serverkit import RULES_ONLY, rest_server, serve
from uikit import csrf_of, remember, sign_in

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
       "base-uri 'none'; frame-ancestors 'none'; form-action 'self'")


@dataclass
class Env:
    url: str
    keys: dict[str, str]
    mem: Memory
    dog: str  # alice's memory about her dog
    chess: str  # bob's memory

    def client(self, who: str) -> httpx.Client:
        return sign_in(self.url, self.keys[who])


def citing_llm() -> ScriptedLLM:
    """A scripted fake, not a model: every light answer repeats the line about Lisbon (an answer
    cites the lines its text matches)."""
    def script(stage: str, messages: list[dict[str, Any]]) -> str:
        assert stage == "answer.light", stage
        return "scripted answer: Alice's sister lives in Lisbon"
    return ScriptedLLM(script)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with rest_server(tmp_path_factory.mktemp("ui") / "store", ["alice", "bob"], llm=citing_llm()) as (url, keys, mem):
        dog = remember(mem, "alice", "Alice adopted a dog named Rex in May 2023",
                       turns=["We went to the shelter on Saturday.", "Then we took him home."])
        remember(mem, "alice", "Alice's sister lives in Lisbon")
        chess = remember(mem, "bob", "Bob plays chess every Tuesday at the Blue Bishop club", speaker="Bob")
        yield Env(url, keys, mem, dog, chess)


def test_without_a_session_the_start_page_leads_to_sign_in(env: Env) -> None:
    with httpx.Client(base_url=env.url, follow_redirects=False) as c:
        r = c.get("/ui/")
        assert r.status_code in (302, 303, 307) and r.headers["location"] == "/ui/login"
        assert c.get(f"/ui/users/alice/memories/{env.dog}").headers["location"] == "/ui/login"
        assert "Rex" not in c.get("/ui/users/alice/memories?q=Rex").text
        page = c.get("/ui/login")
        assert page.status_code == 200 and 'name="api_key"' in page.text


def test_sign_in_sets_an_httponly_strict_cookie_that_is_not_the_key(env: Env) -> None:
    with httpx.Client(base_url=env.url, follow_redirects=False) as c:
        r = c.post("/ui/login", data={"api_key": env.keys["alice"]})
        assert r.status_code == 303 and r.headers["location"] == "/ui/"
        cookie = r.headers["set-cookie"]
        parts = [p.strip().lower() for p in cookie.split(";")]
        assert "httponly" in parts and "samesite=strict" in parts and "path=/ui" in parts
        value = cookie.split(";")[0].split("=", 1)[1]
        secret = env.keys["alice"].rsplit("_", 1)[1]
        assert len(value) >= 40 and secret not in value and env.keys["alice"] not in cookie
        assert c.get("/ui/").headers["location"] == "/ui/users/alice/memories"  # a user key lands on its user


def test_a_wrong_key_gets_no_session(env: Env) -> None:
    with httpx.Client(base_url=env.url, follow_redirects=False) as c:
        for bad in ("", "dm_000000000000_" + "A" * 43, env.keys["alice"][:-1] + "x"):
            r = c.post("/ui/login", data={"api_key": bad})
            assert r.status_code == 401 and "set-cookie" not in r.headers and "Invalid" in r.text
        assert c.get("/ui/").headers["location"] == "/ui/login"


@pytest.mark.parametrize("headers", [{"Origin": "https://evil.example"}, {"Origin": "null"},
                                     {"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "cross-site"}],
                         ids=["foreign origin", "null origin", "sibling site", "cross site"])
def test_sign_in_posted_from_another_site_is_refused(env: Env, headers: dict[str, str]) -> None:
    # the same rule as a keyless server's (_origin.cross_site): a sibling subdomain is another site too
    with httpx.Client(base_url=env.url, follow_redirects=False) as c:
        r = c.post("/ui/login", data={"api_key": env.keys["alice"]}, headers=headers)
        assert r.status_code == 403 and "set-cookie" not in r.headers
        r = c.post("/ui/login", data={"api_key": env.keys["alice"]}, headers={"Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 303 and "set-cookie" in r.headers


def test_every_ui_response_carries_the_security_headers(env: Env) -> None:
    c = env.client("alice")
    pages = [c.get("/ui/login"), c.get("/ui/users/alice/memories"), c.get(f"/ui/users/alice/memories/{env.dog}"),
             c.get("/ui/users/bob/memories"), c.get("/ui/static/ui.css"), c.get("/ui/"),
             c.post(f"/ui/users/alice/memories/{env.dog}/delete", data={})]
    for r in pages:
        assert r.headers["content-security-policy"] == CSP, r.url
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "same-origin"
    for r in pages[1:3]:  # nothing the policy would block: no script, no inline style or handler
        assert "<script" not in r.text and not re.search(r"\s(style|on[a-z]+)\s*=", r.text), r.url
    assert "content-security-policy" not in httpx.get(f"{env.url}/health").headers  # the REST API is not the UI


def test_the_table_lists_the_users_memories_matching_q(env: Env) -> None:
    c = env.client("alice")
    r = c.get("/ui/users/alice/memories", params={"q": "rex"})
    assert r.status_code == 200 and "Alice adopted a dog named Rex" in r.text and "Lisbon" not in r.text
    every = c.get("/ui/users/alice/memories").text
    assert "Rex" in every and "Lisbon" in every and "chess" not in every
    semantic = c.get("/ui/users/alice/memories", params={"q": "pet animal", "mode": "semantic"})
    assert semantic.status_code == 200 and "Rex" in semantic.text and "Search plan" in semantic.text
    assert c.get("/ui/users/alice/memories", params={"q": "rex", "time_from": "2024-01-01"}).text.count(
        "adopted a dog") == 0
    assert "adopted a dog" in c.get("/ui/users/alice/memories", params={"speaker": "Alice", "tier": "mtm"}).text
    bad = c.get("/ui/users/alice/memories", params={"time_from": "not a date"})
    assert bad.status_code == 422 and "time_from: invalid timestamp" in bad.text


def test_one_memory_shows_its_sources_in_their_conversation_and_its_history(env: Env) -> None:
    c = env.client("alice")
    r = c.get(f"/ui/users/alice/memories/{env.dog}")
    assert r.status_code == 200
    html = r.text
    assert "Alice adopted a dog named Rex in May 2023" in html
    sources = html.split('id="sources"')[1].split("</ol>")[0]
    assert "We went to the shelter on Saturday." in sources  # the neighbouring turn
    assert 'class="source"' in sources and 'class="context"' in sources
    history = html.split('id="history"')[1].split("</ol>")[0]
    assert "ADD" in history


def test_another_users_id_or_memory_is_404_and_shows_nothing_of_it(env: Env) -> None:
    c = env.client("alice")
    for path in ("/ui/users/bob/memories", f"/ui/users/bob/memories/{env.chess}",
                 f"/ui/users/alice/memories/{env.chess}", "/ui/users/bob/search?q=chess",
                 "/ui/users/bob/stats", "/ui/users/nobody/memories", "/ui/users/alice/memories/not-an-id",
                 f"/ui/users/bob/memories/{env.chess}/edit"):
        r = c.get(path)
        assert r.status_code == 404, path
        assert "chess" not in r.text and "Blue Bishop" not in r.text and env.chess not in r.text, path
    token = csrf_of(c.get("/ui/users/alice/memories").text)
    for path in (f"/ui/users/alice/memories/{env.chess}/delete", f"/ui/users/bob/memories/{env.chess}/delete"):
        r = c.post(path, data={"csrf": token, "confirmed": "yes"})
        assert r.status_code == 404 and "chess" not in r.text
    assert env.mem.get(env.chess, "bob").memory.startswith("Bob plays chess")


def test_an_admin_key_reaches_every_user(env: Env) -> None:
    c = env.client("admin")
    start = c.get("/ui/")
    assert start.status_code == 200 and 'name="user_id"' in start.text
    assert c.get("/ui/", params={"user_id": "bob"}).headers["location"] == "/ui/users/bob/memories"
    assert "Blue Bishop" in c.get("/ui/users/bob/memories").text
    assert "Rex" in c.get("/ui/users/alice/memories").text


def test_a_change_without_the_sessions_csrf_token_is_refused(env: Env) -> None:
    alice, other = env.client("alice"), env.client("alice")
    foreign = csrf_of(other.get("/ui/users/alice/memories").text)  # a token of another session
    for data in ({"text": "hijacked", "confirmed": "yes"}, {"text": "hijacked", "confirmed": "yes", "csrf": "0" * 64},
                 {"text": "hijacked", "confirmed": "yes", "csrf": foreign}):
        r = alice.post(f"/ui/users/alice/memories/{env.dog}/edit", data=data)
        assert r.status_code == 403 and "hijacked" not in r.text
        r = alice.post(f"/ui/users/alice/memories/{env.dog}/delete", data={**data, "text": ""})
        assert r.status_code == 403
    assert env.mem.get(env.dog, "alice").memory == "Alice adopted a dog named Rex in May 2023"


def test_edit_and_delete_ask_for_confirmation_first(env: Env) -> None:
    c = env.client("alice")
    target = remember(env.mem, "alice", "Alice's favourite colour is green")
    token = csrf_of(c.get(f"/ui/users/alice/memories/{target}/edit").text)
    ask = c.post(f"/ui/users/alice/memories/{target}/edit",
                 data={"csrf": token, "text": "Alice's favourite colour is blue"})
    assert ask.status_code == 200 and 'name="confirmed" value="yes"' in ask.text and "<ins>blue</ins>" in ask.text
    assert env.mem.get(target, "alice").memory == "Alice's favourite colour is green"  # nothing changed yet
    done = c.post(f"/ui/users/alice/memories/{target}/edit",
                  data={"csrf": token, "text": "Alice's favourite colour is blue", "confirmed": "yes"})
    assert done.status_code == 303
    assert env.mem.get(target, "alice").memory == "Alice's favourite colour is blue"
    page = c.get(done.headers["location"]).text
    history = page.split('id="history"')[1]
    assert "UPDATE" in history and "<del>green</del>" in history and "<ins>blue</ins>" in history
    ask = c.post(f"/ui/users/alice/memories/{target}/delete", data={"csrf": token})
    assert 'name="confirmed" value="yes"' in ask.text and env.mem.get(target, "alice")
    c.post(f"/ui/users/alice/memories/{target}/delete", data={"csrf": token, "confirmed": "yes"})
    with pytest.raises(NotFoundError):
        env.mem.get(target, "alice")
    assert c.get(f"/ui/users/alice/memories/{target}").status_code == 404


def test_sign_out_ends_the_session(env: Env) -> None:
    c = env.client("alice")
    token = csrf_of(c.get("/ui/users/alice/memories").text)
    cookie = c.cookies.get("dialogmem_ui")
    r = c.post("/ui/logout", data={"csrf": token})
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    assert 'dialogmem_ui=""' in r.headers["set-cookie"] or "max-age=0" in r.headers["set-cookie"].lower()
    with httpx.Client(base_url=env.url, follow_redirects=False, cookies={"dialogmem_ui": cookie or ""}) as old:
        assert old.get("/ui/users/alice/memories").headers["location"] == "/ui/login"


def test_a_revoked_key_ends_its_sessions(tmp_path: Path) -> None:
    with rest_server(tmp_path / "s", ["carol"]) as (url, keys, mem):
        c = sign_in(url, keys["carol"])
        assert c.get("/ui/users/carol/memories").status_code == 200
        key_id = keys["carol"].split("_")[1]
        mem._parts.journal.revoke_key(key_id)  # as `dialogmem keys revoke` does, through the journal
        assert c.get("/ui/users/carol/memories").headers["location"] == "/ui/login"


def test_quarantine_sleep_stats_and_graph_pages(env: Env) -> None:
    c = env.client("alice")
    token = csrf_of(c.get("/ui/users/alice/quarantine").text)
    ask = c.post("/ui/users/alice/sleep", data={"csrf": token})
    assert ask.status_code == 200 and 'name="confirmed" value="yes"' in ask.text
    started = c.post("/ui/users/alice/sleep", data={"csrf": token, "confirmed": "yes"})
    assert started.status_code == 303 and "/ui/users/alice/sleep/" in started.headers["location"]
    deadline = time.monotonic() + 60
    while True:
        job = c.get(started.headers["location"])
        if 'id="job-status">done' in job.text or time.monotonic() > deadline:
            break
        assert 'http-equiv="refresh"' in job.text
        time.sleep(0.1)
    assert 'id="job-status">done' in job.text and "Report" in job.text
    assert c.get(started.headers["location"].replace("/alice/", "/bob/")).status_code == 404
    c.get("/ui/users/alice/memories")
    stats = c.get("/ui/users/alice/stats")
    assert stats.status_code == 200 and "<svg" in stats.text and "Memories per month" in stats.text
    assert "page memories" in stats.text  # the page timings so far, with percentiles
    search = c.get("/ui/users/alice/search", params={"q": "Where does the sister live?", "at": "2023-06-01",
                                                      "answer": "1"})
    assert search.status_code == 200 and "Lisbon" in search.text and 'id="plan"' in search.text
    assert "scripted answer" in search.text, re.findall(r'(?s)<p class="error".*?</p>', search.text)
    assert '<tr class="cited">' in search.text  # the lines it cited
    assert 'id="context"' in search.text and "Stage timings" in search.text
    assert c.get("/ui/users/alice/graph", params={"q": "dog"}).status_code == 200
    assert c.get("/ui/users/alice/quarantine").status_code == 200


def poison_extract(self: RuleExtractor, batch: Any, *, previous: Any = ()) -> Any:
    """Test stand-in for an extractor bug: it crashes on any turn that says "poison"."""
    if any("poison" in t.text for seg in batch for t in seg):
        raise RuntimeError("extractor bug")
    return ORIGINAL_EXTRACT(self, batch, previous=previous)


ORIGINAL_EXTRACT = RuleExtractor.extract


def test_quarantined_turns_are_listed_retried_and_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RuleExtractor, "extract", poison_extract)
    with rest_server(tmp_path / "s", ["dan"]) as (url, keys, mem):
        mem.add([{"content": "This is poison one.", "id": "p1"}], "dan", flush=True)
        mem.add([{"content": "This is poison two.", "id": "p2"}], "dan", flush=True)
        c = sign_in(url, keys["dan"])
        page = c.get("/ui/users/dan/quarantine").text
        assert "This is poison one." in page and "extractor bug" in page
        token = csrf_of(page)
        ask = c.post("/ui/users/dan/quarantine/drop", data={"csrf": token, "turn_id": ["p2"]})
        assert 'name="confirmed" value="yes"' in ask.text and len(mem.quarantined("dan")) == 2
        done = c.post("/ui/users/dan/quarantine/drop", data={"csrf": token, "turn_id": ["p2"], "confirmed": "yes"})
        assert "Dropped 1 turn" in done.text and [q.turn.id for q in mem.quarantined("dan")] == ["p1"]
        monkeypatch.setattr(RuleExtractor, "extract", ORIGINAL_EXTRACT)  # the bug is fixed
        done = c.post("/ui/users/dan/quarantine/retry", data={"csrf": token, "turn_id": ["p1"], "confirmed": "yes"})
        assert "1 memories stored" in done.text and mem.quarantined("dan") == []
        assert c.post("/ui/users/dan/quarantine/retry", data={"turn_id": ["p1"], "confirmed": "yes"}).status_code == 403


def test_the_keyless_inspector_signs_in_by_itself_and_answers_loopback_names_only(tmp_path: Path) -> None:
    with Memory(data_dir=tmp_path / "s", **RULES_ONLY) as mem, \
            serve(create_app(mem, auth=False, mcp=False, ui=True)) as url:
        remember(mem, "erin", "Erin collects stamps")
        with httpx.Client(base_url=url, follow_redirects=True) as c:
            assert c.get("/ui/").url.path == "/ui/"  # via /ui/login, which opened a session
            r = c.get("/ui/users/erin/memories")
            assert r.status_code == 200 and "Erin collects stamps" in r.text
            assert 'name="csrf"' in r.text  # changes still carry a token tied to the session
            rebound = c.get("/ui/users/erin/memories", headers={"Host": f"evil.example:{url.rsplit(':', 1)[1]}"})
            assert rebound.status_code == 403 and "stamps" not in rebound.text


def test_the_ui_command_refuses_another_host() -> None:
    result = CliRunner().invoke(cli_app, ["ui", "--host", "0.0.0.0"])
    assert result.exit_code == 1 and "127.0.0.1 only" in result.output
