"""Helpers of the inspector tests: a signed-in httpx client, the CSRF token of a page, a store
with two users' memories whose text is exactly what a test gives."""

from __future__ import annotations

import re

import httpx

from dialogmem import Memory


def sign_in(url: str, key: str) -> httpx.Client:
    """A client of the inspector holding a session (its cookie jar), not following redirects."""
    client = httpx.Client(base_url=url, timeout=60, follow_redirects=False)
    r = client.post("/ui/login", data={"api_key": key})
    assert r.status_code == 303, r.text
    return client


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([0-9a-f]{64})"', html)
    assert m, "no CSRF token on the page"
    return m.group(1)


def remember(mem: Memory, user: str, text: str, *, speaker: str = "Alice", turns: list[str] | None = None) -> str:
    """A memory of ``user`` whose text is exactly ``text``, made from real turns (``turns``, or
    ``text`` itself) through the write path; returns its id."""
    added = mem.add([{"role": "user", "name": speaker, "content": t} for t in (turns or [text])], user,
                    session_id="s1", timestamp="2023-05-08T14:00:00", flush=True)
    assert added.memories, added
    memory_id = added.memories[0].id
    if mem.get(memory_id, user).memory != text:
        mem.update(memory_id, text, user, actor="test")
    return memory_id
