"""One node under concurrent use: many threads and users at once lose nothing, and one user's slow
LLM call does not hold up another user's requests (timings checked loosely)."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from dialogmem import ScriptedLLM
from seams import journal
from serverkit import bearer, rest_server

USERS = [f"user{i}" for i in range(6)]


LINE = re.compile(r"^\[[^\]]+\] (\d+)\.([^:]+): (.*)$", re.M)


def slow_for_slowpoke(stage: str, messages: list[dict[str, Any]]) -> str:
    """A scripted fake, not a model: 3 s per call whose prompt mentions "slowpoke", else at once;
    extraction turns each transcript line into one fact, answers cite memory 1."""
    text = " ".join(str(m.get("content", "")) for m in messages)
    time.sleep(3.0 if "slowpoke" in text else 0.0)
    if stage == "add_memory":
        data = [{"source_id": int(sid), "fact": f"{who.strip()} said {said.strip()}"}
                for sid, who, said in LINE.findall(str(messages[-1]["content"]))]
        return json.dumps({"data": data})
    if stage == "answer.light":
        return "scripted answer [1]"
    raise AssertionError(f"unexpected LLM stage {stage}")


#: the slow user's call: an answer (read path) or an add whose extraction the LLM does (write path)
SLOW_CALLS = {
    "answer": ("/v1/answer", {"query": "what tea?"}),
    "add with LLM extraction": ("/v1/memories", {"messages": "slowpoke also likes oolong", "flush": True}),
}


@pytest.mark.parametrize("slow_call", list(SLOW_CALLS))
def test_slow_llm_of_one_user_does_not_delay_another(tmp_path: Path, slow_call: str) -> None:
    settings = {"write": {"extractor": "llm", "segmenter": "none"}}
    with rest_server(tmp_path / "s", ["slow", "fast"], llm=ScriptedLLM(slow_for_slowpoke), **settings) as (
            url, keys, _):
        with httpx.Client(base_url=url, timeout=60) as c:
            r = c.post("/v1/memories", json={"messages": "Quick Tom likes coffee", "flush": True},
                       headers=bearer(keys["fast"]))
            assert r.status_code == 200 and r.json()["memories"]
        slow_done = threading.Event()
        slow_took: list[float] = []

        def slow_request() -> None:
            path, body = SLOW_CALLS[slow_call]
            t0 = time.perf_counter()
            with httpx.Client(base_url=url, timeout=60) as c:
                if slow_call == "answer":  # its memory first (3 s, before the clock starts)
                    c.post("/v1/memories", json={"messages": "slowpoke likes green tea", "flush": True},
                           headers=bearer(keys["slow"]))
                    t0 = time.perf_counter()
                r = c.post(path, json=body, headers=bearer(keys["slow"]))
            slow_took.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
            slow_done.set()

        thread = threading.Thread(target=slow_request)
        thread.start()
        time.sleep(0.5 if slow_call != "answer" else 3.8)  # the slow call is now inside its 3 s LLM call
        fast: list[float] = []
        with httpx.Client(base_url=url, timeout=60, headers=bearer(keys["fast"])) as c:
            for i in range(2):
                t0 = time.perf_counter()
                assert c.post("/v1/search", json={"query": "coffee"}).status_code == 200
                assert c.post("/v1/memories", json={"messages": f"Tom drank tea {i}", "flush": True}).status_code == 200
                assert c.post("/v1/answer", json={"query": "coffee?"}).status_code == 200
                fast.append(time.perf_counter() - t0)
        served_during = not slow_done.is_set()
        thread.join()
        assert served_during, f"the fast user's requests waited for the slow call: {fast}"
        assert slow_took and slow_took[0] >= 3.0
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
                turns = {t.id for t in journal(mem).turns(user)}
                assert turns == set(acked[user])
