"""One long-lived user: search before and after the index's search graph is built (issue 31, item 2).

The history is ``bench_mtm_latency.build``'s: ``--n`` memories of one user (MiniLM vectors of LoCoMo
turns plus noise, one minute apart), written through the change writer. The store is opened once;
LoCoMo questions are searched (``Memory.search``, limit 10, embedding included: the query cache is
off, ``embedder.query_cache = 0``), then ``sleep()`` builds the HNSW graph of the
points the shard still scans (``store.index_min_points``), and the same questions are searched again.
Reported: RSS once the store is open (before any search), search p50/p95 before and after (p99 and
the slowest search too after), the build's seconds, the stage medians of the searches after
(``SearchResult.timings_ms``), RSS at the end with its anonymous and file-backed parts (the store's
memory-mapped files: pages the kernel may drop), and the store's size on disk. With ``--store`` the
history is built there when absent and kept (a later run reuses it: its graph is built already, so
"before" searches it).

Usage::

    python benchmarks/bench_flat_search.py [--n 100000] [--queries 200] [--store DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from bench_mtm_latency import INFINITE, USER, build, pct, proc_mb

from dialogmem import Memory


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file()) / 2**20


def timed(mem: Memory, questions: list[str], stages: dict[str, list[float]] | None = None) -> list[float]:
    times = []
    for q in questions:
        t0 = time.perf_counter()
        result = mem.search(q, USER, limit=10)
        times.append((time.perf_counter() - t0) * 1000)
        if stages is not None:
            for name, ms in result.timings_ms.items():
                stages.setdefault(name, []).append(ms)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data/locomo/locomo10_dev.json")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--store", type=Path, help="build the history here when absent, and keep it")
    args = ap.parse_args()
    data = json.loads(Path(args.data).read_text(encoding="utf-8"))
    questions = [q["question"] for c in data for q in c["qa"]][: args.queries + 20]
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or Path(tmp) / "store"
        if not store.exists():
            t0 = time.perf_counter()
            build(store, Path(args.data), args.n)
            print(f"built one user with {args.n} memories in {time.perf_counter() - t0:.0f} s", flush=True)
        with Memory(data_dir=store, sleep={"mtm_capacity": INFINITE, "ltm": False},
                    embedder={"query_cache": 0}) as mem:
            opened = proc_mb("VmRSS")
            n = mem.stats(USER)["counts"]["memories"]
            timed(mem, questions[:20])  # warm-up: model load, page cache, dateparser's first call
            before = timed(mem, questions[20:])
            t0 = time.perf_counter()
            report = mem.sleep(USER)
            build_s = time.perf_counter() - t0
            stages: dict[str, list[float]] = {}
            after = timed(mem, questions[20:], stages)
            rss, anon, mapped = proc_mb("VmRSS"), proc_mb("RssAnon"), proc_mb("RssFile")
        size = disk_mb(store)
    print(f"n={n}: RSS after open {opened:.0f} MB; "
          f"before sleep p50 {statistics.median(before):.1f} ms, p95 {pct(before, 0.95):.1f} ms; "
          f"graph built by sleep() in {build_s:.0f} s ({report.indexed} points); "
          f"after p50 {statistics.median(after):.1f} ms, p95 {pct(after, 0.95):.1f} ms, "
          f"p99 {pct(after, 0.99):.1f} ms, max {max(after):.1f} ms; "
          f"RSS {rss:.0f} MB (anonymous {anon:.0f}, file pages {mapped:.0f}); disk {size:.0f} MB")
    print("stage medians after (ms): " + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in stages.items()))


if __name__ == "__main__":
    main()
