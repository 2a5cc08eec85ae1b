"""A superseded memory over the wire (real uvicorn server, real httpx and ``Client``): the inspector shows
it struck through with a link to its successor; REST and the Client carry its validity."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from dialogmem import Client, Memory
from serverkit import rest_server
from uikit import sign_in


@dataclass
class Env:
    url: str
    keys: dict[str, str]
    old: str
    new: str


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with rest_server(tmp_path_factory.mktemp("validity") / "store", ["carol"],
                     sleep={"updater": "rules", "supersede_rules": True}) as (url, keys, mem):
        old = _said(mem, "Things are quiet here in Denver, still snowing.", "2023-03-04T18:12:00", "s1")
        new = _said(mem, "Already left. I moved to Seattle last weekend.", "2023-07-02T10:05:00", "s3")
        assert mem.sleep("carol").superseded == 1
        yield Env(url, keys, old, new)


def _said(mem: Memory, text: str, when: str, session: str) -> str:
    added = mem.add([{"content": text, "name": "Tom"}], "carol", session_id=session, timestamp=when, flush=True)
    return added.memories[-1].id


def test_the_inspector_strikes_a_superseded_memory_through_and_links_its_successor(env: Env) -> None:
    c = sign_in(env.url, env.keys["carol"])
    try:
        page = c.get(f"/ui/users/carol/memories/{env.old}").text
        assert '<s><bdi class="text">' in page and "here in Denver" in page
        assert f'href="/ui/users/carol/memories/{env.new}" id="successor"' in page
        assert "until 2023-07-02T10:05" in page
        listing = c.get("/ui/users/carol/memories").text
        assert f'class="badge superseded" href="/ui/users/carol/memories/{env.new}"' in listing
        current = c.get(f"/ui/users/carol/memories/{env.new}").text
        assert 'id="successor"' not in current and "<s>" not in current
    finally:
        c.close()


def test_rest_and_the_client_carry_validity(env: Env) -> None:
    with Client(env.url, env.keys["carol"]) as client:
        old = client.get(env.old, "carol")
        assert old.superseded_by == env.new and (old.invalid_at or "").startswith("2023-07-02T10:05")
        assert (old.valid_from or "").startswith("2023-03-04T18:12")
        hits = client.search("Where did Tom live before?", "carol", limit=5).hits
        assert any(h.id == env.old and h.superseded_by == env.new for h in hits)
