"""Segmentation accuracy and cost on LoCoMo, plus the entropy compressor's ratio and speed.

Seed 001 (§5.4) scores topic segmentation against session boundaries: a session change is a true
boundary, and accuracy is the share of true boundaries that the segmenter finds. Here a true
boundary counts as found when a predicted one lies within ±``tolerance`` turns (default 1); we also
report precision (share of predicted boundaries near a true one). Sessions also change topic inside,
so precision is bounded well below 1 by construction; the ``chance`` line gives the precision of
boundaries placed at random with the same count.

Turns stream through a sensory buffer as in the seed: turns are appended until the next one would
pass ``--buffer`` tokens; the buffer is segmented; every segment but the last is emitted and the last
one (the residual) is carried over to the start of the next buffer. A buffer with no boundary is
emitted whole.

Usage::

    python benchmarks/bench_segment.py [--data PATH] [--segmenters attention,similarity]
        [--compress-rate 0.6] [--compress-sample 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from dialogmem._text._tokens import count_tokens
from dialogmem._write._compress import make_compressor
from dialogmem._write._segment import Segmenter, make_segmenter

DEFAULT_DATA = Path("/work/shared/data/locomo/locomo10_dev.json")


def load_conversations(path: Path) -> list[tuple[str, list[str], list[int]]]:
    """(sample_id, turn texts "Speaker: text", session number of each turn) per conversation."""
    out = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        keys = sorted((k for k, v in conv.items() if k.startswith("session_") and isinstance(v, list)),
                      key=lambda k: int(k.split("_")[1]))
        texts, sessions = [], []
        for key in keys:
            for turn in conv[key]:
                text = turn["text"]
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                texts.append(f"{turn['speaker']}: {text}")
                sessions.append(int(key.split("_")[1]))
        out.append((sample["sample_id"], texts, sessions))
    return out


def stream_boundaries(seg: Segmenter, turns: list[str], buffer_tokens: int,
                      timings: list[tuple[float, float]]) -> list[int]:
    """Global turn indices where the streaming segmenter starts a new segment."""
    lengths = [count_tokens(t) for t in turns]
    found: list[int] = []
    start = 0  # first turn of the current buffer
    nxt = 0  # next turn to append
    n = len(turns)
    while start < n:
        used = sum(lengths[start:nxt])
        while nxt < n and (nxt == start or used + lengths[nxt] <= buffer_tokens):
            used += lengths[nxt]
            nxt += 1
        buf = turns[start:nxt]
        t0, c0 = time.perf_counter(), time.process_time()
        cuts = seg.boundaries(buf)
        timings.append((time.perf_counter() - t0, time.process_time() - c0))
        found.extend(start + c for c in cuts)
        if nxt >= n:
            break
        # Carry the residual (last segment) over; without a cut, flush the whole buffer.
        start = start + cuts[-1] if cuts else nxt
    return sorted(set(found))


def score(pred: list[int], truth: list[int], tolerance: int) -> dict[str, float]:
    p, t = np.asarray(pred), np.asarray(truth)
    if t.size == 0:
        return {"recall": float("nan"), "precision": float("nan"), "n_pred": int(p.size), "n_true": 0}
    hit_t = sum(bool(p.size and np.min(np.abs(p - x)) <= tolerance) for x in t)
    hit_p = sum(bool(np.min(np.abs(t - x)) <= tolerance) for x in p) if p.size else 0
    return {"recall": hit_t / t.size, "precision": hit_p / p.size if p.size else 0.0,
            "n_pred": int(p.size), "n_true": int(t.size)}


def bench_segmenters(convs: list[Any], names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    rng = random.Random(0)
    for name in names:
        opts: dict[str, Any] = {}
        base = name
        if name == "attention-max":
            base, opts = "attention", {"peak": "max"}
        elif name == "attention-exact":
            base, opts = "attention", {"window": 0}
        elif name == "similarity-1":
            base, opts = "similarity", {"context": 1}
        seg = make_segmenter(base, **opts)
        timings: list[tuple[float, float]] = []
        tot_hit_t = tot_t = tot_hit_p = tot_p = chance_hit = 0
        for sample_id, turns, sessions in convs:
            truth = [i for i in range(1, len(turns)) if sessions[i] != sessions[i - 1]]
            pred = stream_boundaries(seg, turns, args.buffer, timings)
            s = score(pred, truth, args.tolerance)
            tot_hit_t += round(s["recall"] * s["n_true"])
            tot_t += s["n_true"]
            tot_hit_p += round(s["precision"] * s["n_pred"])
            tot_p += s["n_pred"]
            rand = sorted(rng.sample(range(1, len(turns)), min(len(pred), len(turns) - 1)))
            chance_hit += round(score(rand, truth, args.tolerance)["precision"] * len(rand))
            print(f"  {name:16s} {sample_id}: recall {s['recall']:.2f} precision {s['precision']:.2f} "
                  f"({s['n_pred']} cuts, {s['n_true']} sessions)", file=sys.stderr)
        warm = timings[1:] or timings  # the first call loads the model
        wall = [w for w, _ in warm]
        cpu = [c for _, c in warm]
        results[name] = {
            "recall": tot_hit_t / max(tot_t, 1),
            "precision": tot_hit_p / max(tot_p, 1),
            "chance_precision": chance_hit / max(tot_p, 1),
            "n_pred": tot_p, "n_true": tot_t, "buffers": len(timings),
            "wall_ms_per_buffer_median": 1000 * statistics.median(wall),
            "wall_ms_per_buffer_p90": 1000 * float(np.percentile(wall, 90)),
            "cpu_ms_per_buffer_median": 1000 * statistics.median(cpu),
            "first_call_s": timings[0][0] if timings else None,
        }
    return results


def bench_compressor(convs: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    turns = [t for _, ts, _ in convs for t in ts]
    if args.compress_sample and args.compress_sample < len(turns):
        turns = random.Random(1).sample(turns, args.compress_sample)
    comp = make_compressor("entropy", rate=args.compress_rate)
    comp.compress("warm up")
    t0, c0 = time.perf_counter(), time.process_time()
    res = comp.compress_many(turns)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    orig = sum(r.original_tokens for r in res)
    kept = sum(r.compressed_tokens for r in res)
    per_turn = [r.compressed_tokens / r.original_tokens for r in res if r.original_tokens >= 5]
    mini_before = sum(count_tokens(t) for t in turns)
    mini_after = sum(count_tokens(r.text) for r in res)
    return {
        "turns": len(turns), "sampled": len(turns) < sum(len(ts) for _, ts, _ in convs),
        "rate": args.compress_rate, "kept_ratio_lm_tokens": kept / max(orig, 1),
        "kept_ratio_per_turn_median": statistics.median(per_turn) if per_turn else None,
        "kept_ratio_minilm_tokens": mini_after / max(mini_before, 1),
        "wall_ms_per_turn": 1000 * dt / max(len(turns), 1), "total_s": dt,
        "cpu_ms_per_turn": 1000 * dc / max(len(turns), 1),
        "examples": [(t, r.text) for t, r in list(zip(turns, res, strict=True))[:3]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--segmenters", default="attention,attention-max,attention-exact,similarity",
                    help="attention (default rules), attention-max (seed 001's local maxima), "
                         "attention-exact (window 0), similarity, similarity-1 (adjacent turns only)")
    ap.add_argument("--buffer", type=int, default=512)
    ap.add_argument("--tolerance", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0, help="use only the first N conversations")
    ap.add_argument("--compress-rate", type=float, default=0.6)
    ap.add_argument("--compress-sample", type=int, default=0, help="compress N random turns (0 = all)")
    ap.add_argument("--no-compress", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    convs = load_conversations(args.data)
    if args.limit:
        convs = convs[: args.limit]
    report: dict[str, Any] = {"segmentation": bench_segmenters(convs, args.segmenters.split(","), args)}
    if not args.no_compress:
        report["compression"] = bench_compressor(convs, args)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
