"""One node under concurrent use: many threads and users at once lose nothing, and one user's slow
LLM call does not hold up another user's requests (timings checked loosely)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from serverkit import answering_llm, bearer, rest_server

USERS = [f"user{i}" for i in range(6)]


def test_slow_llm_of_one_user_does_not_delay_another(tmp_path: Path) -> None:
    llm = answering_llm(delay_for=lambda text: 3.0 if "slowpoke" in text else 0.0)
    with rest_server(tmp_path / "s", ["slow", "fast"], llm=llm) as (url, keys, _):
        with httpx.Client(base_url=url, timeout=60) as c:
            for user, text in (("slow", "slowpoke likes green tea"), ("fast", "Quick Tom likes coffee")):
                r = c.post("/v1/memories", json={"messages": text, "flush": True}, headers=bearer(keys[user]))
                assert r.status_code == 200
        slow_done = threading.Event()
        slow_took: list[float] = []

        def slow_answer() -> None:
            t0 = time.perf_counter()
            with httpx.Client(base_url=url, timeout=60) as c:
                r = c.post("/v1/answer", json={"query": "what tea?"}, headers=bearer(keys["slow"]))
            slow_took.append(time.perf_counter() - t0)
            assert r.status_code == 200
            slow_done.set()

        thread = threading.Thread(target=slow_answer)
        thread.start()
        time.sleep(0.5)  # the slow answer is now inside its 3 s LLM call
        fast: list[float] = []
        with httpx.Client(base_url=url, timeout=60) as c:
            for _ in range(3):
                t0 = time.perf_counter()
                assert c.post("/v1/search", json={"query": "coffee"}, headers=bearer(keys["fast"])).status_code == 200
                r = c.post("/v1/answer", json={"query": "coffee?"}, headers=bearer(keys["fast"]))
                assert r.status_code == 200
                fast.append(time.perf_counter() - t0)
        served_during = not slow_done.is_set()
        thread.join()
        assert served_during, f"fast user's requests waited for the slow call: {fast}"
        assert slow_took[0] >= 3.0
        assert max(fast) < 2.5, fast


def test_many_threads_many_users_lose_nothing(tmp_path: Path) -> None:
    with rest_server(tmp_path / "s", USERS) as (url, keys, mem):
        acked: dict[str, list[str]] = {u: [] for u in USERS}
        errors: list[str] = []
        lock = threading.Lock()

        def client(user: str, n: int) -> None:
            with httpx.Client(base_url=url, timeout=60, headers=bearer(keys[user])) as c:
                for i in range(8):
                    r = c.post("/v1/memories", json={"messages": f"{user} note {n}-{i}: I bought item {i}"})
                    s = c.post("/v1/search", json={"query": f"item {i}"})
                    with lock:
                        if r.status_code == 200:
                            acked[user] += r.json()["turn_ids"]
                        errors.extend(f"{x.status_code} {x.text}" for x in (r, s) if x.status_code != 200)

        with ThreadPoolExecutor(max_workers=12) as pool:
            for f in [pool.submit(client, u, n) for u in USERS for n in range(2)]:
                f.result()
        assert errors == []
        with httpx.Client(base_url=url, timeout=60) as c:
            for user in USERS:
                counts = c.get("/v1/stats", headers=bearer(keys[user])).json()["counts"]
                assert counts["turns"] == len(acked[user]) == 16
                turns = {t.id for t in mem._parts.journal.turns(user)}
                assert turns == set(acked[user])
