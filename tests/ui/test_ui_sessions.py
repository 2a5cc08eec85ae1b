"""The inspector's sign-in under abuse, and user ids that do not fit a URL path as they are.

One key signing in a thousand times evicts only its own sessions; sign-in attempts are limited per
client address and per key (429 with Retry-After, wrong keys counted too); user ids holding ``/``,
equal to ``.`` or ``..``, or starting with ``~`` are reached through their encoded path segment."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from dialogmem import ServerSettings
from dialogmem._server._ui._session import Sessions
from dialogmem._server._ui._signin import SignInLimits
from dialogmem._server._ui._web import from_segment, segment
from serverkit import rest_server
from uikit import remember, sign_in


def test_one_key_signing_in_a_thousand_times_evicts_only_its_own_sessions() -> None:
    sessions = Sessions(max_sessions=50, max_per_key=20)
    admin = sessions.open("admin-key")
    others = [sessions.open(f"key-{n}") for n in range(10)]
    bob = [sessions.open("bob-key") for _ in range(1001)]
    assert sessions.find(admin.token) is not None
    assert all(sessions.find(s.token) is not None for s in others)
    assert sessions.count("bob-key") == 20 and sessions.find(bob[-1].token) is not None
    assert sessions.find(bob[0].token) is None
    # a full table makes room from the key holding the most sessions
    crowd = [sessions.open(f"crowd-{n}") for n in range(30)]
    assert sessions.count() == 50 and sessions.count("bob-key") == 9
    assert all(sessions.find(s.token) is not None for s in [admin, *others, *crowd])


def test_sign_in_attempts_are_limited_per_client_and_per_key() -> None:
    limits = SignInLimits(burst=3, per_minute=6.0)
    assert [limits.wait("10.0.0.1", f"guess-{n}", 0.0) for n in range(3)] == [0.0, 0.0, 0.0]
    assert limits.wait("10.0.0.1", "guess-3", 0.0) > 0  # the client's bucket is empty
    assert limits.wait("10.0.0.2", "bob", 0.0) == 0.0
    assert [limits.wait(f"10.0.1.{n}", "bob", 0.0) for n in range(2)] == [0.0, 0.0]
    assert limits.wait("10.0.1.9", "bob", 0.0) > 0  # the key's bucket is empty, whatever the address
    assert limits.wait("10.0.0.1", "guess-4", 10.0) == 0.0  # one attempt back after 10 s at 6 a minute


def test_wrong_sign_ins_get_429_over_http(tmp_path: Path) -> None:
    settings = ServerSettings(ui_signin_burst=5, ui_signins_per_minute=1.0)
    with rest_server(tmp_path / "s", ["bob"], settings=settings) as (url, keys, _mem):
        statuses = []
        for n in range(8):
            r = httpx.post(f"{url}/ui/login", data={"api_key": f"dm_wrong_{n}"}, timeout=30)
            statuses.append(r.status_code)
        assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}
        r = httpx.post(f"{url}/ui/login", data={"api_key": keys["bob"]}, timeout=30)
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1 and "Too many" in r.text


@pytest.mark.parametrize("user_id", ["a/b", "..", ".", "~tilde", "50%", "a\\b", "%2e%2e", "dot.dot/../x"])
def test_segments_round_trip(user_id: str) -> None:
    seg = segment(user_id)
    assert "/" not in seg and seg not in (".", "..") and from_segment(seg) == user_id


def test_user_ids_with_slashes_and_dots_are_reachable(tmp_path: Path) -> None:
    odd = ["team/alice", "..", ".", "~sam", "50% off"]
    with rest_server(tmp_path / "s", [], settings=ServerSettings(ui_signin_burst=100)) as (url, keys, mem):
        ids = {user: remember(mem, user, f"{user} keeps a note about tulips") for user in odd}
        client = sign_in(url, keys["admin"])
        for user in odd:
            r = client.get("/ui/", params={"user_id": user})
            assert r.status_code == 303, (user, r.text)
            page = client.get(r.headers["location"])
            assert page.status_code == 200, (user, r.headers["location"], page.text[:300])
            assert f"{user} keeps a note about tulips".replace("%", "%") in page.text.replace("&#34;", '"')
            link = re.search(r'href="([^"]*/memories/' + ids[user] + ')"', page.text)
            assert link, user
            one = client.get(link.group(1).replace("&amp;", "&"))
            assert one.status_code == 200 and "tulips" in one.text, user
