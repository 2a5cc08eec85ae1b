"""Bounded MTM latency: one user with ``--n`` memories, B = infinity against B = ``--capacity``.

The history is generated, not ingested: ``--n`` records whose vectors are the MiniLM embeddings of
LoCoMo turns plus Gaussian noise (cosine to the source turn about 0.8), texts the source turn with a
variant number, one minute apart. They are written through the change writer (one ``ChangeSet`` of
``MemoryWrite`` with the vectors given and ``sleep_pending=False``: no embedding and no sleep-time
update of 10**5 imports, so ``sleep()`` measures the eviction only). Queries: LoCoMo questions.

Two worker processes, one per configuration, each open their own copy of the same store
(``B = inf``: ``sleep.mtm_capacity`` 10**9; bounded: ``--capacity``). Both run ``sleep()`` (the
bounded one evicts), then the parent sends the queries to the two in turn (alternating which goes
first), so load from other processes falls on both alike. Reported per configuration: search
p50/p95, the worker's RSS (VmRSS) and peak (VmHWM), ``sleep()`` seconds; and the ratios.

Usage::

    python benchmarks/bench_mtm_latency.py [--n 100000] [--capacity 10000] [--queries 200]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import statistics
import tempfile
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from dialogmem import Memory
from dialogmem._changes import ChangeSet, MemoryWrite
from dialogmem._models import LocalEmbedder
from dialogmem._types import Event, MemoryRecord

USER = "heavy-user"
INFINITE = 10**9


def proc_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build(path: Path, data: Path, n: int) -> None:
    rows = json.loads(data.read_text(encoding="utf-8"))
    turns = [t["text"] for c in rows for k, s in c["conversation"].items()
             if k.startswith("session_") and isinstance(s, list) for t in s][:2000]
    base = np.asarray(LocalEmbedder().embed(turns), dtype=np.float32)
    rng = np.random.default_rng(0)
    src = rng.integers(0, len(turns), n)
    vecs = base[src] + rng.normal(0, 0.04, (n, base.shape[1])).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    t_start = 1_600_000_000.0
    with Memory(data_dir=path, sleep={"mtm_capacity": INFINITE, "ltm": False}) as mem:
        for lo in range(0, n, 5000):
            cs = ChangeSet(USER)
            for i in range(lo, min(n, lo + 5000)):
                t = t_start + 60.0 * i
                record = MemoryRecord(id=str(uuid.UUID(int=i + 1)), user_id=USER,
                                      memory=f"{turns[src[i]]} (variant {i})", time_stamp="", float_time_stamp=t,
                                      weekday="Mon", speaker_name="", salience=0.5, created_at=t, updated_at=t)
                cs.writes.append(MemoryWrite(record=record, event=Event.ADD, actor="bench", sleep_pending=False,
                                             vector=vecs[i]))
            mem._parts.writer.apply(cs)  # the one change writer, vectors given


def worker(path: str, capacity: int, conn: Connection) -> None:
    with Memory(data_dir=path, sleep={"mtm_capacity": capacity, "ltm": False}) as mem:
        t0 = time.perf_counter()
        report = mem.sleep(USER)
        counts = mem.stats(USER)["counts"]
        conn.send({"sleep_s": time.perf_counter() - t0, "evicted": report.evicted, "compressed": report.compressed,
                   "active": counts["memories"], "rss_after_sleep_mb": proc_mb("VmRSS"),
                   "peak_mb": proc_mb("VmHWM")})
        while True:
            query = conn.recv()
            if query is None:
                break
            t0 = time.perf_counter()
            mem.search(query, USER, limit=10)
            conn.send((time.perf_counter() - t0) * 1000)
        conn.send({"rss_mb": proc_mb("VmRSS"), "peak_mb": proc_mb("VmHWM")})


def pct(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[int(q * (len(ordered) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data/locomo/locomo10_dev.json")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--capacity", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    data = json.loads(Path(args.data).read_text(encoding="utf-8"))
    questions = [q["question"] for c in data for q in c["qa"]][: args.queries + args.warmup]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        build(Path(tmp) / "inf", Path(args.data), args.n)
        shutil.copytree(Path(tmp) / "inf", Path(tmp) / "bounded")
        print(f"built one user with {args.n} memories in {time.perf_counter() - t0:.0f}s", flush=True)
        ctx = mp.get_context("spawn")
        workers = {}
        for name, cap in (("inf", INFINITE), ("bounded", args.capacity)):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=worker, args=(str(Path(tmp) / name), cap, there))
            proc.start()
            workers[name] = (proc, here)
        info = {name: conn.recv() for name, (_, conn) in workers.items()}  # both have slept
        times: dict[str, list[float]] = {name: [] for name in workers}
        for i, q in enumerate(questions):
            order = ["inf", "bounded"] if i % 2 == 0 else ["bounded", "inf"]
            for name in order:
                workers[name][1].send(q)
                ms = workers[name][1].recv()
                if i >= args.warmup:
                    times[name].append(ms)
        for name, (proc, conn) in workers.items():
            conn.send(None)
            info[name].update(conn.recv())
            proc.join()
    for name in workers:
        i = info[name]
        label = "B=inf" if name == "inf" else f"B={args.capacity}"
        print(f"{label}: {i['active']} active, sleep {i['sleep_s']:.1f}s ({i['evicted']} evicted, "
              f"{i['compressed']} compressed); search p50 {statistics.median(times[name]):.1f} ms, "
              f"p95 {pct(times[name], 0.95):.1f} ms; RSS {i['rss_mb']:.0f} MB, peak {i['peak_mb']:.0f} MB")
    b, f = times["bounded"], times["inf"]
    print(f"ratio bounded/inf: p50 {statistics.median(b) / statistics.median(f):.2f}, "
          f"p95 {pct(b, 0.95) / pct(f, 0.95):.2f}, RSS {info['bounded']['rss_mb'] / info['inf']['rss_mb']:.2f}")


if __name__ == "__main__":
    main()
