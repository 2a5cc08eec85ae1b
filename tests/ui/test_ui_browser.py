"""The inspector in a real browser: headless Chromium (Debian's ``chromium``, driven by Playwright).

Hostile memory text is stored through the write path and shown on the table, the memory page, the
search playground and the confirmation page: no dialog opens, no global is set, no element it
describes exists, no CSP violation is reported, and the text reads literally. Then the flow a person
follows: sign in, search, open a memory and its sources, edit it, see the history, delete one, and
try another user's memory with a user key (404, nothing of it shown). Chromium missing is a failure,
not a skip: ``scripts/test`` installs it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from dialogmem import Memory
from serverkit import rest_server
from uikit import remember

#: Debian's chromium, or the browser DIALOGMEM_TEST_CHROMIUM names
CHROMIUM = os.environ.get("DIALOGMEM_TEST_CHROMIUM", "/usr/bin/chromium")
PAYLOADS = {
    "script": "<script>window.__xss='script';alert('script')</script> note one",
    "img": "<img src=x onerror=\"window.__xss='img';alert('img')\"> note two",
    "link": "<a href=\"javascript:window.__xss='link'\" id=\"evil\">click</a> javascript:alert('link') note three",
    "svg": "\"><svg onload=\"window.__xss='svg';alert('svg')\"> note four",
    "rtl": "invoice for user \u202egnp.exe paid note five",
    "zero-width": "pass\u200bword is not a pass\u200dword note six",
}


@dataclass
class Env:
    url: str
    keys: dict[str, str]
    mem: Memory
    browser: Browser
    ids: dict[str, str]
    bob_memory: str
    events: list[str] = field(default_factory=list)

    def page(self, who: str = "alice") -> Page:
        """A fresh browser context signed in through the form; dialogs and CSP reports are recorded."""
        page = self.browser.new_context().new_page()
        page.on("dialog", lambda d: (self.events.append(f"dialog: {d.message}"), d.dismiss()))
        page.on("console", lambda m: self.events.append(f"console: {m.text}") if "Content Security Policy"
                in m.text or "Refused" in m.text else None)
        page.goto(f"{self.url}/ui/")
        assert page.url.endswith("/ui/login")
        page.fill("#api_key", self.keys[who])
        page.click("button[type=submit]")
        page.wait_for_load_state()
        return page


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with rest_server(tmp_path_factory.mktemp("browser") / "store", ["alice", "bob"]) as (url, keys, mem), \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        ids = {name: remember(mem, "alice", text, turns=[f"{text} (said)"]) for name, text in PAYLOADS.items()}
        ids["dog"] = remember(mem, "alice", "Alice adopted a dog named Rex in May 2023",
                              turns=["We went to the shelter on Saturday.", "Then we took him home."])
        bob = remember(mem, "bob", "Bob keeps his spare key under the blue flowerpot", speaker="Bob")
        try:
            yield Env(url, keys, mem, browser, ids, bob)
        finally:
            browser.close()


def assert_inert(env: Env, page: Page) -> None:
    assert env.events == [], env.events
    assert page.evaluate("window.__xss === undefined")
    assert page.evaluate("document.scripts.length") == 0
    assert page.evaluate("document.querySelectorAll('img, svg[onload], a#evil, [onerror], [onload]').length") == 0


def test_hostile_memory_text_is_shown_literally_and_never_runs(env: Env) -> None:
    page = env.page()
    page.goto(f"{env.url}/ui/users/alice/memories")
    table = page.inner_text("table.memories")
    for text in PAYLOADS.values():
        assert text in table, text
    assert_inert(env, page)
    for name, text in PAYLOADS.items():
        page.goto(f"{env.url}/ui/users/alice/memories/{env.ids[name]}")
        assert page.inner_text("#memory-text bdi.text") == text
        assert f"{text} (said)" in page.inner_text("#sources")
        if name in ("rtl", "zero-width"):  # the page says the text holds characters one cannot see
            assert "hidden characters: U+" in page.inner_text("#memory-text")
        assert page.locator("h2", has_text="History").count() == 1  # the rest of the page still renders
        assert_inert(env, page)
    page.goto(f"{env.url}/ui/users/alice/search?q=note+one+two+three+four")
    assert PAYLOADS["script"] in page.inner_text("#hits") and PAYLOADS["script"] in page.inner_text("#context")
    assert_inert(env, page)
    page.goto(f"{env.url}/ui/users/alice/memories/{env.ids['svg']}/edit")
    page.fill("#text", PAYLOADS["img"])
    page.click("#save")
    inserted = "".join(page.locator("p.diff ins").all_inner_texts())
    assert "<img" in inserted and "onerror" in inserted  # the confirmation page shows the change as text
    assert_inert(env, page)
    assert env.mem.get(env.ids["svg"], "alice").memory == PAYLOADS["svg"]  # not confirmed: unchanged


def test_sign_in_search_open_edit_history_delete_and_isolation(env: Env) -> None:
    page = env.page()
    assert page.url.endswith("/ui/users/alice/memories")
    page.fill("input[name=q]", "rex")
    page.click("form.filters button[type=submit]")
    assert "/memories?q=rex" in page.url
    rows = page.locator("table.memories tbody tr")
    assert rows.count() == 1 and "Alice adopted a dog named Rex" in rows.inner_text()
    page.click("a.memory")
    assert page.url.endswith(f"/memories/{env.ids['dog']}")
    sources = page.inner_text("#sources")
    assert "We went to the shelter on Saturday." in sources and "source" in sources
    page.click("#edit")
    page.fill("#text", "Alice adopted a beagle named Rex in May 2023")
    page.click("#save")
    assert page.locator("del", has_text="dog").count() == 1 and page.locator("ins", has_text="beagle").count() == 1
    page.click("#confirm")
    assert "The memory was updated." in page.inner_text("main")
    assert page.inner_text("#memory-text bdi.text") == "Alice adopted a beagle named Rex in May 2023"
    history = page.inner_text("#history")
    assert "UPDATE" in history and page.locator("#history del", has_text="dog").count() == 1
    page.click("#delete")
    assert "Delete this memory" in page.inner_text("h1")
    page.click("#confirm")
    assert "The memory was deleted." in page.inner_text("main")
    page.goto(f"{env.url}/ui/users/alice/memories?q=rex")
    assert "No memories match." in page.inner_text("table.memories")
    for path in (f"/ui/users/alice/memories/{env.bob_memory}", f"/ui/users/bob/memories/{env.bob_memory}",
                 "/ui/users/bob/memories"):
        response = page.goto(f"{env.url}{path}")
        assert response is not None and response.status == 404
        body = page.inner_text("body")
        assert "Not found." in body and "flowerpot" not in body and env.bob_memory not in page.content()
    assert env.mem.get(env.bob_memory, "bob")  # untouched
    assert_inert(env, page)


def test_chromium_is_the_one_scripts_test_installs() -> None:
    assert Path(CHROMIUM).exists(), "install Debian's chromium (scripts/test does: apt-get install -y chromium)"
