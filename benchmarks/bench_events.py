"""HyMem's event units (``write.events``), in addition to or instead of the per-turn memories:
evidence recall at k and at equal context budgets on stores that were built with event summaries.

The stores are those a LoCoMo bench run kept (``dialogmem bench locomo ... --config <events on>
--keep-stores``): one per conversation, with the per-turn memories and the event summaries of the
model that wrote them. Every variant works on a copy of a store, with the memories the variant does
not have deleted through ``Memory.delete``:

- ``both``: what the store holds (events in addition to the memories, the setting as built);
- ``memories``: without the events (what ``write.events = "off"`` stores);
- ``events``: only the events (events instead of the memories).

Every question with evidence (adversarial ones excluded, as in the bench) is searched with the last
session's date as reference time. Turn-level recall: the share of a question's evidence turns that
the hits cite; session-level: whether a hit cites a turn of an evidence session. Budgets: hits taken
in rank order while their rendered context (``SearchResult.context()``) fits, as the bench does.
An event cites every turn of its unit, so at equal k it is credited with turns its summary may not
state; at equal budget a long unit still costs only its summary's tokens. Only answer F1 with a
reader says whether the summaries carry what a question needs (``dialogmem bench locomo --mode llm``).

Usage::

    python benchmarks/bench_events.py --stores OUT/scratch/dialogmem [--data locomo10_dev.json]
        [--conversations conv-26,conv-30] [--k 5,10,20] [--budgets 256,512,1024] [--llm GGUF --limit 25]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from dialogmem import Memory
from dialogmem._config import Config
from dialogmem._types import SearchResult
from dialogmem.bench import evidence_recall, load_locomo
from dialogmem.bench._loaders import BenchConversation
from dialogmem.bench._metrics import budget_cut, locomo_f1, locomo_session
from dialogmem.bench._systems import count_tokens, question_time

VARIANTS = {"both": lambda cls: True, "memories": lambda cls: cls != "event", "events": lambda cls: cls == "event"}


def evaluate(store: Path, conv: BenchConversation, keep: str, ks: list[int], budgets: list[int],
             config: Config, limit: int) -> dict[str, list]:
    out: dict[str, list] = {f"@{k}": [] for k in ks} | {f"s@{k}": [] for k in ks} | {
        f"{b}t": [] for b in budgets} | {"count": [], "f1": [], "tokens": []}
    with Memory(config.model_copy(update={"data_dir": store})) as mem:
        records = mem.get_all(conv.scope, limit=10_000)
        for r in records:
            if not VARIANTS[keep](r.memory_class):
                mem.delete(r.id, conv.scope, actor="bench")
        out["count"].append(sum(1 for r in records if VARIANTS[keep](r.memory_class)))
        fetch = max([*ks, 50])
        for q in conv.questions:
            if q.adversarial or not q.evidence:
                continue
            result = mem.search(q.question, conv.scope, limit=fetch, reference_time=question_time(conv, q))
            sources = [list(h.source_turn_ids) for h in result.hits]
            sessions = {locomo_session(e) for e in q.evidence}
            for k in ks:
                out[f"@{k}"].append(evidence_recall(q.evidence, sources, k))
                cited = {locomo_session(t) for s in sources[:k] for t in s}
                out[f"s@{k}"].append(1.0 if sessions & cited else 0.0)
            prefix = [count_tokens(SearchResult(query="", hits=result.hits[:n + 1]).context())
                      for n in range(len(result.hits))]
            for b in budgets:
                out[f"{b}t"].append(evidence_recall(q.evidence, sources, budget_cut(prefix, b)))
        if config.llm.backend != "none":
            for q in conv.questions[:limit]:
                reply = mem.answer(q.question, conv.scope, reference_time=question_time(conv, q))
                if not q.adversarial:
                    out["f1"].append(locomo_f1(reply.text, q.answer, q.category_id))
                    out["tokens"].append(reply.prompt_tokens)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", type=Path, required=True, help="a kept bench run's scratch/dialogmem folder")
    ap.add_argument("--data", type=Path, default=Path("../shared/data/locomo/locomo10_dev.json"))
    ap.add_argument("--conversations", default="conv-26,conv-30")
    ap.add_argument("--k", default="5,10,20")
    ap.add_argument("--budgets", default="256,512,1024")
    ap.add_argument("--llm", help="a GGUF reader: also answer the first --limit questions per conversation")
    ap.add_argument("--limit", type=int, default=25)
    args = ap.parse_args()
    config = Config()
    if args.llm:
        config = Config(llm={"backend": "llama_cpp", "model_path": args.llm})
    ks = [int(x) for x in args.k.split(",")]
    budgets = [int(x) for x in args.budgets.split(",")]
    data = load_locomo(args.data, args.conversations.split(","))
    print(f"{'variant':<9} {'memories':>8} " + " ".join(f"{c:>7}" for c in
          [*(f'@{k}' for k in ks), *(f's@{k}' for k in ks), *(f'{b}t' for b in budgets), "F1", "tokens"]))
    for keep in VARIANTS:
        rows: dict[str, list] = {}
        for conv in data.conversations:
            with tempfile.TemporaryDirectory() as tmp:
                copy = Path(tmp) / "store"
                shutil.copytree(args.stores / conv.id / "store", copy)
                for key, values in evaluate(copy, conv, keep, ks, budgets, config, args.limit).items():
                    rows.setdefault(key, []).extend(values)
        means = [sum(v) / len(v) if v else float("nan") for key, v in rows.items() if key != "count"]
        print(f"{keep:<9} {sum(rows['count']):>8} " + " ".join(f"{m:>7.3f}" for m in means))
    print(f"questions with evidence: {len(rows['@' + str(ks[0])])}; answered (non-adversarial): {len(rows['f1'])}")


if __name__ == "__main__":
    main()
