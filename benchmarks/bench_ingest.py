"""Ingest throughput, LLM-free, through ``Memory.add`` turn by turn (the way an assistant writes), a
session per call, or ``add_conversation``.

``--mode turn``: every LoCoMo turn of the chosen conversations is added on its own call with its
session's date, as a live chat would; ``session``: one ``add`` with the list of a session's turns;
``conversation``: one ``add_conversation`` per conversation. The clock covers the calls and the
final ``flush`` (no sleep). Each call
returns only once its turn is journaled (SQLite WAL, synchronous=FULL). The embedder comes from the
configuration (e.g. ``DIALOGMEM_EMBEDDER__QUANTIZE=int8``); the line printed per run says which one,
and how much of the time went to embedding.

Usage (old vs new: the same command with another ``PYTHONPATH``)::

    python benchmarks/bench_ingest.py [--data ../shared/data/locomo/locomo10_dev.json]
                                      [--conversations conv-26,conv-30] [--repeat 1]
                                      [--mode turn|session|conversation]
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


def add_sample(mem: Memory, sample: dict, mode: str, per_call: list[float]) -> int:
    """Add one conversation the way ``mode`` says; the turns added."""
    user = sample["sample_id"]
    turns = 0
    if mode == "conversation":
        t0 = time.perf_counter()
        mem.add_conversation(sample, user, flush=False)
        per_call.append((time.perf_counter() - t0) * 1000)
        return sum(len(msgs) for _, _, msgs in sessions(sample))
    for sid, when, msgs in sessions(sample):
        calls = [msgs] if mode == "session" else [[m] for m in msgs]
        for batch in calls:
            t0 = time.perf_counter()
            mem.add(batch, user, session_id=sid, timestamp=when)
            per_call.append((time.perf_counter() - t0) * 1000)
            turns += len(batch)
    return turns


def run_once(samples: list[dict], mode: str) -> tuple[int, float, list[float], float, str]:
    root = Path(tempfile.mkdtemp(prefix="dm-ingest-"))
    try:
        with Memory(data_dir=root / "store") as mem:
            mem.add("warm-up", user_id="warmup", flush=True)  # model load is not ingest
            turns = 0
            per_call: list[float] = []
            started = time.perf_counter()
            for sample in samples:
                turns += add_sample(mem, sample, mode, per_call)
                mem.flush(sample["sample_id"])
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
    ap.add_argument("--mode", choices=["turn", "session", "conversation"], default="turn")
    args = ap.parse_args()
    wanted = set(args.conversations.split(","))
    samples = [s for s in json.loads(args.data.read_text()) if s["sample_id"] in wanted]
    for r in range(args.repeat):
        turns, wall, per_call, embed_ms, name = run_once(samples, args.mode)
        per_call.sort()
        p50 = statistics.median(per_call)
        p95 = per_call[int(0.95 * (len(per_call) - 1))]
        print(f"{args.mode} run {r + 1}: {turns} turns in {wall:.1f} s = {turns / wall:.1f} turns/s "
              f"(call p50 {p50:.2f} ms, p95 {p95:.2f} ms; embedding {embed_ms / turns:.2f} ms/turn, "
              f"{embed_ms / 10 / wall:.0f}% of the time; {name})")


if __name__ == "__main__":
    main()
