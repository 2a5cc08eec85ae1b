"""LoCoMo dev, LLM-free: evidence recall@k and search latency with the MTM bounded (``sleep.mtm_capacity``)
and the LTM route on or off, against the unbounded store — all variants in one run, on the same ingest.

Each conversation is ingested once (rules, no LLM, no sleep) into a base store; every variant works on
a copy of it: open with its settings, ``sleep()`` (update, eviction, LTM consolidation), then every
question is searched with the last session's date as reference time. Recall@k: the fraction of a
question's evidence turns cited by the first k hits (``bench.evidence_recall``, LTM hits cite only
the user's own supporting memories' turns).

Usage::

    python benchmarks/bench_tiers_locomo.py [--data locomo10_dev.json] [--conversations conv-26,conv-30]
        [--capacity 100] [--k 1,5,10]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from dialogmem import Memory
from dialogmem.bench import evidence_recall, load_locomo
from dialogmem.bench._loaders import BenchConversation
from dialogmem.bench._systems import _safe_id, question_time, turn_time


def ingest(conv: BenchConversation, path: Path) -> int:
    n = 0
    with Memory(data_dir=path, sleep={"ltm": False}) as mem:
        for session in conv.sessions:
            for turn in session.turns:
                msg = {"content": turn.text, "name": turn.speaker, "id": turn.id}
                if turn.role:
                    msg["role"] = turn.role
                mem.add([msg], conv.scope, session_id=_safe_id(session.id), timestamp=turn_time(turn))
                n += 1
        mem.flush(conv.scope)
    return n


def run_variant(conv: BenchConversation, base: Path, work: Path, ks: list[int], sleep: dict) -> dict:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(base, work)
    with Memory(data_dir=work, sleep=sleep) as mem:
        started = time.perf_counter()
        report = mem.sleep()
        sleep_s = time.perf_counter() - started
        recalls: dict[int, list[float]] = {k: [] for k in ks}
        latencies: list[float] = []
        off_latencies: list[float] = []  # the same store with the ltm route off, interleaved (same load)
        on_config, off_config = mem.config, mem.config.with_overrides(sleep={**sleep, "ltm": False})
        ltm_hits = 0
        for q in conv.questions:
            if not q.evidence:
                continue
            if sleep.get("ltm"):
                mem.config = off_config
                t0 = time.perf_counter()
                mem.search(q.question, conv.scope, limit=max(ks), reference_time=question_time(conv, q))
                off_latencies.append((time.perf_counter() - t0) * 1000)
                mem.config = on_config
            t0 = time.perf_counter()
            res = mem.search(q.question, conv.scope, limit=max(ks), reference_time=question_time(conv, q))
            latencies.append((time.perf_counter() - t0) * 1000)
            ltm_hits += sum(h.tier == "ltm" for h in res.hits)
            sources = [h.source_turn_ids for h in res.hits]
            for k in ks:
                r = evidence_recall(q.evidence, sources, k)
                if r is not None:
                    recalls[k].append(r)
        counts = mem.stats(conv.scope)["counts"]
    return {"recall": {k: statistics.fmean(v) for k, v in recalls.items()}, "questions": len(latencies),
            "p50_ms": statistics.median(latencies), "p95_ms": sorted(latencies)[int(0.95 * (len(latencies) - 1))],
            "p50_off_ms": statistics.median(off_latencies) if off_latencies else None,
            "ltm_hits": ltm_hits, "active": counts["memories"], "evicted": counts["evicted"],
            "ltm_nodes": counts["ltm_nodes"], "sleep_s": sleep_s,
            "ltm_s": report.ltm.seconds if report.ltm is not None else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data/locomo/locomo10_dev.json")
    ap.add_argument("--conversations", default="conv-26,conv-30")
    ap.add_argument("--capacity", type=int, default=100)
    ap.add_argument("--k", default="1,5,10")
    args = ap.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    variants = {
        "unbounded, ltm off": {"ltm": False},
        "unbounded, ltm on": {"ltm": True},
        f"B={args.capacity}, ltm off": {"ltm": False, "mtm_capacity": args.capacity},
        f"B={args.capacity}, ltm on": {"ltm": True, "mtm_capacity": args.capacity},
    }
    data = load_locomo(args.data, args.conversations.split(","))
    totals: dict[str, list[tuple[int, dict]]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for conv in data.conversations:
            base = Path(tmp) / f"{conv.scope}-base"
            started = time.perf_counter()
            turns = ingest(conv, base)
            print(f"{conv.scope}: {turns} turns ingested in {time.perf_counter() - started:.0f}s", flush=True)
            for name, sleep in variants.items():
                got = run_variant(conv, base, Path(tmp) / "work", ks, sleep)
                totals[name].append((got["questions"], got))
                rec = " ".join(f"R@{k}={got['recall'][k]:.3f}" for k in ks)
                off = f" (route off, interleaved: p50={got['p50_off_ms']:.1f}ms)" if got["p50_off_ms"] else ""
                print(f"  {name:22s} {rec} p50={got['p50_ms']:.1f}ms{off} p95={got['p95_ms']:.1f}ms "
                      f"active={got['active']} evicted={got['evicted']} ltm_nodes={got['ltm_nodes']} "
                      f"ltm_hits={got['ltm_hits']} sleep={got['sleep_s']:.1f}s (ltm {got['ltm_s']:.1f}s)",
                      flush=True)
    print("all conversations (question-weighted):")
    for name, rows in totals.items():
        n = sum(q for q, _ in rows)
        rec = " ".join(f"R@{k}={sum(q * g['recall'][k] for q, g in rows) / n:.3f}" for k in ks)
        p50 = statistics.median([g["p50_ms"] for _, g in rows])
        print(f"  {name:22s} {rec} (median of per-conversation p50: {p50:.1f}ms; {n} questions)")


if __name__ == "__main__":
    main()
