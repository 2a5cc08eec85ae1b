"""Screenshots of the memory inspector's main pages from a real run, and its page-load times.

    python scripts/ui_screenshots.py                   # docs/screenshots/*.png from the sample conversation
    python scripts/ui_screenshots.py --bulk 100000     # also time the pages over 10^5 memories

A real store (the bundled sample conversation through the write path, then a sleep with LTM
consolidation), a real uvicorn server and headless Chromium (Debian's ``chromium``). With ``--bulk``
(instead of the screenshots), that many more memories (random vectors, no embedding) go to a second
user, and the table, full-text searches and semantic searches are loaded ``--runs`` times each: the
server's time (its ``Server-Timing`` header) and the browser's (navigation start to the load event),
median and max.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the test helpers: a real server on a free port, keys

from dialogmem import Memory  # noqa: E402
from dialogmem._server import create_app  # noqa: E402
from dialogmem._transfer._conversation import sample_path  # noqa: E402
from serverkit import make_keys, serve  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
WORDS = ["garden", "hiking", "violin", "ramen", "Lisbon", "cello", "beagle", "allergy", "recital", "bakery",
         "marathon", "chess", "museum", "sourdough", "kayak", "piano", "dentist", "Berlin", "tomato", "poetry"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--bulk", type=int, default=0, help="time the pages over this many memories (no screenshots)")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "store"
        keys = make_keys(data_dir, ["demo-user", "bulk-user"])
        with Memory(data_dir=data_dir, sleep={"ltm": True}) as mem:
            mem.add_conversation(sample_path(), "demo-user")
            mem.sleep("demo-user")
            if args.bulk:
                started = time.perf_counter()
                bulk_import(mem, "bulk-user", args.bulk)
                print(f"imported {args.bulk} memories in {time.perf_counter() - started:.1f} s")
            with serve(create_app(mem, mcp=False)) as url, sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
                if args.bulk:  # timings only: a sleep would consolidate the bulk memories into the LTM graph
                    sign_in(page, url, keys["admin"])
                    time_pages(page, url, args.runs)
                else:
                    shoot(page, url, keys["admin"], mem, args.out)
                browser.close()


def sign_in(page: Page, url: str, key: str) -> None:
    page.goto(f"{url}/ui/login")
    page.fill("#api_key", key)
    page.click("button[type=submit]")
    page.wait_for_load_state()


def shoot(page: Page, url: str, admin_key: str, mem: Memory, out: Path) -> None:
    page.goto(f"{url}/ui/login")
    page.screenshot(path=str(out / "login.png"))
    sign_in(page, url, admin_key)
    base = f"{url}/ui/users/demo-user"
    first = mem.search("Maya's dog", "demo-user", limit=1).hits[0].id
    shots = {
        "memories": f"{base}/memories",
        "memories-search": f"{base}/memories?q=dog",
        "memory": f"{base}/memories/{first}",
        "search": f"{base}/search?q=What+is+the+name+of+Maya%27s+dog%3F",
        "stats": f"{base}/stats",
        "graph": f"{base}/graph",
        "quarantine": f"{base}/quarantine",
    }
    for name, target in shots.items():
        page.goto(target)
        page.screenshot(path=str(out / f"{name}.png"), full_page=name not in ("memories", "memories-search"))
        print(f"{out / (name + '.png')}")
    page.goto(f"{base}/memories/{first}/edit")
    page.fill("#text", mem.get(first, "demo-user").memory + " (a beagle)")
    page.click("#save")
    page.screenshot(path=str(out / "confirm-edit.png"))
    page.goto(f"{base}/sleep")
    page.click("#start-sleep")
    page.click("#confirm")
    page.wait_for_selector("#job-status")
    deadline = time.monotonic() + 60
    while "done" not in page.inner_text("#job-status") and time.monotonic() < deadline:
        page.wait_for_timeout(500)
        page.reload()
    page.screenshot(path=str(out / "sleep.png"), full_page=True)
    print(f"{out / 'confirm-edit.png'}\n{out / 'sleep.png'}")


def bulk_import(mem: Memory, user: str, n: int) -> None:
    rng = np.random.default_rng(7)
    dim = mem._parts.index.dim
    batch = 5000
    for start in range(0, n, batch):
        count = min(batch, n - start)
        records = []
        for i in range(start, start + count):
            words = " ".join(rng.choice(WORDS, size=4))
            day = 1 + i % 28
            month = 1 + (i // 28) % 12
            records.append({"id": str(uuid.UUID(int=rng.integers(0, 2**63) << 64 | i)), "user_id": user,
                            "memory": f"Note {i}: {words}", "time_stamp": f"2023-{month:02d}-{day:02d}T10:00:00",
                            "float_time_stamp": 1672567200.0 + i * 60, "weekday": "Mon",
                            "speaker_name": "Bulk"})
        vectors = rng.standard_normal((count, dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        mem.import_records(records, vectors=vectors)


def time_pages(page: Page, url: str, runs: int) -> None:
    base = f"{url}/ui/users/bulk-user"
    cases = {
        "table, first page (50 rows)": f"{base}/memories",
        "table, 50 rows after a cursor": None,
        "full-text search, common word": f"{base}/memories?q=beagle",
        "full-text search, absent word (every memory read by the SQL filter)": f"{base}/memories?q=zeppelin",
        "semantic search (50 hits)": f"{base}/memories?q=violin+recital&mode=semantic",
        "search playground (10 hits, plan, context)": f"{base}/search?q=violin+recital",
    }
    page.goto(cases["table, first page (50 rows)"])  # warm: the first request opens caches
    cases["table, 50 rows after a cursor"] = page.get_attribute("#next", "href") and url + str(
        page.get_attribute("#next", "href"))
    print("\n| page at 10^5 memories | server median ms | server max ms | browser median ms | browser max ms |")
    print("|---|---|---|---|---|")
    for name, target in cases.items():
        if not target:
            continue
        server, browser = [], []
        for _ in range(runs):
            response = page.goto(target)
            assert response is not None and response.status == 200, (name, response and response.status)
            server.append(float(response.headers["server-timing"].split("dur=")[1]))
            browser.append(page.evaluate("(() => { const n = performance.getEntriesByType('navigation')[0];"
                                         " return n.loadEventEnd - n.startTime; })()"))
        print(f"| {name} | {statistics.median(server):.1f} | {max(server):.1f} | "
              f"{statistics.median(browser):.1f} | {max(browser):.1f} |")


if __name__ == "__main__":
    main()
