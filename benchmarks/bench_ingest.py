"""Ingest throughput, LLM-free, turn by turn through ``Memory.add`` (the way an assistant writes).

Every LoCoMo turn of the chosen conversations is added on its own call with its session's date, as
a live chat would; the clock covers the ``add`` calls and the final ``flush`` (no sleep). Each call
returns only once its turn is journaled (SQLite WAL, synchronous=FULL). The embedder comes from the
configuration (e.g. ``DIALOGMEM_EMBEDDER__QUANTIZE=int8``); the line printed per run says which one,
and how much of the time went to embedding.

Usage (old vs new: the same command with another ``PYTHONPATH``)::

    python benchmarks/bench_ingest.py [--data ../shared/data/locomo/locomo10_dev.json]
                                      [--conversations conv-26,conv-30] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from dialogmem import Memory

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10_dev.json"


def sessions(sample: dict) -> list[tuple[str, str, list[dict]]]:
    conv = sample["conversation"]
    out = []
    n = 1
    while f"session_{n}" in conv:
        msgs = [{"content": t["text"], "name": t["speaker"], "id": t["dia_id"]} for t in conv[f"session_{n}"]]
        out.append((f"session_{n}", conv[f"session_{n}_date_time"], msgs))
        n += 1
    return out


def run_once(samples: list[dict]) -> tuple[int, float, list[float], float, str]:
    root = Path(tempfile.mkdtemp(prefix="dm-ingest-"))
    try:
        with Memory(data_dir=root / "store") as mem:
            mem.add("warm-up", user_id="warmup", flush=True)  # model load is not ingest
            turns = 0
            per_call: list[float] = []
            started = time.perf_counter()
            for sample in samples:
                user = sample["sample_id"]
                for sid, when, msgs in sessions(sample):
                    for msg in msgs:
                        t0 = time.perf_counter()
                        mem.add([msg], user, session_id=sid, timestamp=when)
                        per_call.append((time.perf_counter() - t0) * 1000)
                        turns += 1
                mem.flush(user)
            wall = time.perf_counter() - started
            embed_ms = sum(u["latency_ms"] for u in mem.stats()["embedding"].values())
            embedder = mem._parts.embedder
            name = getattr(embedder, "identity", type(embedder).__name__)
        return turns, wall, per_call, embed_ms, name
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--conversations", default="conv-26,conv-30")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    wanted = set(args.conversations.split(","))
    samples = [s for s in json.loads(args.data.read_text()) if s["sample_id"] in wanted]
    for r in range(args.repeat):
        turns, wall, per_call, embed_ms, name = run_once(samples)
        per_call.sort()
        p50 = statistics.median(per_call)
        p95 = per_call[int(0.95 * (len(per_call) - 1))]
        print(f"run {r + 1}: {turns} turns in {wall:.1f} s = {turns / wall:.1f} turns/s "
              f"(add p50 {p50:.2f} ms, p95 {p95:.2f} ms; embedding {embed_ms / turns:.2f} ms/turn, "
              f"{embed_ms / 10 / wall:.0f}% of the time; {name})")


if __name__ == "__main__":
    main()
