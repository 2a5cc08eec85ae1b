"""Dry run of online semantic synthesis over the LLM-free memories of one LoCoMo conversation.

Builds the memories as the library does today (``Memory(data_dir=tmp)``, LLM-free defaults, turn
by turn with the session dates), embeds them with MiniLM, then replays each session's memories in
time order through the rule decision (``plan_batch`` + ``decide_synthesis``, merged memories
re-embedded) and reports how many would merge at each ``min_cosine``. Nothing is written back.

Today's LLM-free memory carries the turn before it (``write.context_turns = 1``), so two consecutive
memories share a whole line; ``own line`` rows replay the same memories reduced to their own turn
(the last line, re-embedded), as memories look once the window's context is not copied into them.

Usage::

    python benchmarks/synthesis_dryrun.py [--data PATH] [--conv conv-26]
        [--thresholds 0.95,0.9,0.85,0.8,0.75] [--examples 0.85]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from dialogmem import Memory
from dialogmem._models import LocalEmbedder
from dialogmem._transfer._conversation import parse_conversation
from dialogmem._types import MemoryRecord
from dialogmem._write._synthesize import Fragment, RuleConfig, plan_batch, rule_decider

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10_dev.json"


def build_memories(sample: dict, user: str) -> list[MemoryRecord]:
    with tempfile.TemporaryDirectory() as tmp, Memory(data_dir=tmp) as mem:
        for batch in parse_conversation(sample):
            for msg in batch.messages:
                mem.add([msg], user, session_id=batch.session_id, timestamp=batch.timestamp)
        mem.flush(user)
        return mem.get_all(user, limit=10_000)


def own_line(records: list[MemoryRecord]) -> list[MemoryRecord]:
    return [r.model_copy(update={"memory": r.memory.splitlines()[-1]}) for r in records]


def run(records: list[MemoryRecord], vectors: dict[str, np.ndarray], embed: LocalEmbedder,
        config: RuleConfig) -> tuple[Counter[str], list]:
    sessions: dict[str | None, list[MemoryRecord]] = defaultdict(list)
    for r in records:
        sessions[r.session_id].append(r)
    stats: Counter[str] = Counter()
    merges = []
    for recs in sessions.values():
        recs.sort(key=lambda r: (r.float_time_stamp, r.id))
        frags = [Fragment.of(r, vectors[r.id]) for r in recs]
        plan = plan_batch(frags, [], rule_decider(config), embed.embed)
        stats["memories"] += len(frags)
        stats["kept"] += len(plan.stored)
        stats["merge_decisions"] += len(plan.merges)
        stats.update(m.reason for m in plan.merges)
        merges += plan.merges
    return stats, merges


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--conv", default="conv-26")
    ap.add_argument("--thresholds", default="0.95,0.9,0.85,0.8,0.75")
    ap.add_argument("--examples", type=float, default=0.85)
    args = ap.parse_args()
    sample = next(s for s in json.loads(args.data.read_text()) if s["sample_id"] == args.conv)
    started = time.perf_counter()
    records = build_memories(sample, "u1")
    embed = LocalEmbedder()
    speakers = (sample["conversation"]["speaker_a"], sample["conversation"]["speaker_b"])
    print(f"{args.conv}: {len(records)} LLM-free memories in "
          f"{len({r.session_id for r in records})} sessions (built in {time.perf_counter() - started:.0f} s)")
    print("\n| memories | min_cosine | merge decisions | near-dup | shared entity | memories after "
          "| reduction | max lines | max words |")
    print("|---|---|---|---|---|---|---|---|---|")
    examples = []
    for label, recs in (("as stored", records), ("own line", own_line(records))):
        vectors = dict(zip([r.id for r in recs], embed.embed([r.memory for r in recs]), strict=True))
        for th in (float(x) for x in args.thresholds.split(",")):
            config = RuleConfig(min_cosine=th, ignore_entities=speakers)
            stats, merges = run(recs, vectors, embed, config)
            lines = max((len(m.text.splitlines()) for m in merges), default=0)
            words = max((len(m.text.split()) for m in merges), default=0)
            print(f"| {label} | {th} | {stats['merge_decisions']} | {stats['near_duplicate']} | "
                  f"{stats['shared_entity']} | {stats['kept']} | "
                  f"{1 - stats['kept'] / stats['memories']:.1%} | {lines} | {words} |")
            if th == args.examples:
                examples += [(label, m) for m in merges[:3]]
    for label, m in examples:
        print(f"\n--- {label}: {m.reason}, cosine {max(m.cosines.values()):.3f}, "
              f"{len(m.absorbed_ids)} absorbed\n{m.text}")


if __name__ == "__main__":
    main()
