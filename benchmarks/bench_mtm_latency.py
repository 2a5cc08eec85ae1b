"""Bounded MTM latency: one user with ``--n`` memories, searched before and after ``sleep()`` bounds the
MTM to ``--capacity`` (the same store and process: B = infinity, then B = capacity).

Records are imported (``Memory.import_records``) with vectors made from the MiniLM embeddings of
LoCoMo turns plus Gaussian noise (cosine to the source turn about 0.8), so no ``--n`` embeddings are
computed; their texts are the source turns with a variant number. Queries: LoCoMo questions.
Reports search p50/p95, the process RSS, and the time ``sleep()`` took to plan and apply eviction.

Usage::

    python benchmarks/bench_mtm_latency.py [--n 10000] [--capacity 1000] [--queries 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from dialogmem import Memory
from dialogmem._models import LocalEmbedder
from dialogmem._types import MemoryRecord

USER = "heavy-user"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def search_ms(mem: Memory, questions: list[str]) -> tuple[float, float]:
    times = []
    for q in questions:
        t0 = time.perf_counter()
        mem.search(q, USER, limit=10)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data/locomo/locomo10_dev.json")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--capacity", type=int, default=1_000)
    ap.add_argument("--queries", type=int, default=100)
    args = ap.parse_args()
    data = json.loads(Path(args.data).read_text(encoding="utf-8"))
    turns = [t["text"] for c in data for k, s in c["conversation"].items()
             if k.startswith("session_") and isinstance(s, list) for t in s][:2000]
    questions = [q["question"] for c in data for q in c["qa"]][: args.queries]
    base = np.asarray(LocalEmbedder().embed(turns), dtype=np.float32)
    rng = np.random.default_rng(0)
    src = rng.integers(0, len(turns), args.n)
    vecs = base[src] + rng.normal(0, 0.04, (args.n, base.shape[1])).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    t_start = 1_600_000_000.0
    records = [MemoryRecord(id=str(uuid.UUID(int=i + 1)), user_id=USER, memory=f"{turns[s]} (variant {i})",
                            time_stamp="", float_time_stamp=t_start + 60.0 * i, weekday="Mon",
                            speaker_name="", salience=0.5, created_at=t_start + 60.0 * i,
                            updated_at=t_start + 60.0 * i)
               for i, s in enumerate(src)]
    with tempfile.TemporaryDirectory() as tmp, \
            Memory(data_dir=Path(tmp) / "s", sleep={"mtm_capacity": args.capacity, "ltm": False}) as mem:
        t0 = time.perf_counter()
        for lo in range(0, args.n, 5000):
            mem.import_records(records[lo:lo + 5000], vectors=vecs[lo:lo + 5000])
        print(f"imported {args.n} memories in {time.perf_counter() - t0:.0f}s; RSS {rss_mb():.0f} MB", flush=True)
        p50, p95 = search_ms(mem, questions)
        print(f"B=inf ({mem.stats(USER)['counts']['memories']} active): search p50 {p50:.1f} ms, p95 {p95:.1f} ms; "
              f"RSS {rss_mb():.0f} MB", flush=True)
        t0 = time.perf_counter()
        report = mem.sleep(USER)
        print(f"sleep: {report.evicted} evicted, {report.compressed} compressed in {time.perf_counter() - t0:.0f}s",
              flush=True)
        p50, p95 = search_ms(mem, questions)
        counts = mem.stats(USER)["counts"]
        print(f"B={args.capacity} ({counts['memories']} active, {counts['evicted']} evicted): search p50 {p50:.1f} ms, "
              f"p95 {p95:.1f} ms; RSS {rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
