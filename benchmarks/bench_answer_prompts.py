"""Answer prompts for a small local reader on LoCoMo: F1, BLEU-1, tokens, seconds, citation accuracy.

For each LoCoMo question (categories 1-4; 5 is adversarial and left out) the context is retrieved two
ways, once, and cached: ``naive`` = hybrid (dense + BM25, RRF) top-10 raw turns (the bench's naive
baseline), ``dialogmem`` = the LLM-free ``Memory.search(limit=10)`` hits, the memory built turn by
turn with session dates (as ``dialogmem.bench``'s system does, sleep included). Then every prompt
variant of ``_answer_variants.py`` asks the reader, at temperature 0. Scores: LoCoMo's F1 (Porter
stemming; category 1 split on commas) and BLEU-1; cost: context tokens (project counter), the
model's prompt and completion tokens, seconds per question; for variants that cite, the share of
cited lines that hold an evidence turn ("cite acc"), and "ev shown", the share of questions whose
context holds any evidence turn at all (the ceiling for every prompt).

Questions are a seeded shuffle of each conversation's questions, so ``--limit 15`` is a subset of
``--limit 40``. Every answer is appended to ``answers.jsonl`` as soon as it exists: a rerun skips
what is done (``--retry-failed`` asks again where a call failed), and ``--report`` only re-scores.

Usage::

    nice -n 10 python benchmarks/bench_answer_prompts.py [--conversations conv-30,conv-41]
        [--limit 15] [--variants P0,P1,P4] [--sources naive,dialogmem] [--out bench-out/answer-prompts]
        [--model PATH.gguf] [--threads 2] [--timeout 300] [--retry-failed] [--report]
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import random
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _answer_variants import VARIANTS, Item, Outcome, Usage, run_variant

from dialogmem import Memory
from dialogmem._config import EmbedderConfig, LLMConfig
from dialogmem._models import make_embedder, make_llm
from dialogmem.bench._baselines import NaiveRAG
from dialogmem.bench._loaders import BenchConversation, BenchQuestion, load_locomo
from dialogmem.bench._metrics import bleu1, locomo_f1, mean
from dialogmem.bench._systems import _safe_id, turn_time

log = logging.getLogger("bench_answer_prompts")
DEFAULT_DATA = Path("/work/shared/data/locomo/locomo10_dev.json")
DEFAULT_MODEL = Path.home() / ".cache/dialogmem-dev/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
SOURCES = ("naive", "dialogmem")
CONTEXT_K = 10


def pick_questions(conv: BenchConversation, limit: int | None) -> list[BenchQuestion]:
    """Categories 1-4 in a seeded shuffle (the same for every run), the first ``limit`` of them."""
    qs = [q for q in conv.questions if q.category_id in (1, 2, 3, 4)]
    random.Random(conv.id).shuffle(qs)
    return qs[:limit] if limit else qs


def _naive_items(conv: BenchConversation, scratch: Path, questions: list[BenchQuestion]) -> dict[str, list[Item]]:
    turns = {t.id: t for t in conv.turns()}
    rag = NaiveRAG("hybrid", scratch / "naive", make_embedder(EmbedderConfig()))
    try:
        rag.ingest(conv)
        out = {}
        for q in questions:
            items = []
            for hit in rag.search(q, CONTEXT_K).hits:
                t = turns[hit.source_turn_ids[0]]
                when = t.time or datetime.fromtimestamp(0)
                items.append(Item(time_stamp=when.isoformat(), weekday=when.strftime("%a"), speaker=t.speaker,
                                  text=t.text, sources=list(hit.source_turn_ids)))
            out[q.id] = items
        return out
    finally:
        rag.close()


def _dialogmem_items(conv: BenchConversation, scratch: Path,
                     questions: list[BenchQuestion]) -> dict[str, list[Item]]:
    with Memory(data_dir=scratch / "dialogmem") as mem:
        for session in conv.sessions:
            for turn in session.turns:
                mem.add([{"content": turn.text, "name": turn.speaker, "id": turn.id}], conv.scope,
                        session_id=_safe_id(session.id), timestamp=turn_time(turn))
        mem.flush(conv.scope)
        mem.sleep(conv.scope)
        ref = conv.last_time()
        return {q.id: [Item(time_stamp=h.time_stamp, weekday=h.weekday, speaker=h.speaker_name, text=h.memory,
                            sources=list(h.source_turn_ids))
                       for h in mem.search(q.question, conv.scope, limit=CONTEXT_K, reference_time=ref).hits]
                for q in questions}


def retrieval(conv: BenchConversation, out_dir: Path) -> dict[str, dict[str, list[Item]]]:
    """``{source: {question id: items in rank order}}`` for all of the conversation's questions, cached."""
    cache = out_dir / f"retrieval-{conv.id}.json"
    if cache.is_file():
        raw = json.loads(cache.read_text(encoding="utf-8"))
        return {s: {q: [Item(**it) for it in items] for q, items in per_q.items()} for s, per_q in raw.items()}
    questions = pick_questions(conv, None)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-answer-") as tmp:
        got = {"naive": _naive_items(conv, Path(tmp), questions),
               "dialogmem": _dialogmem_items(conv, Path(tmp), questions)}
    log.info("%s: retrieval for %d questions in %.0fs", conv.id, len(questions), time.perf_counter() - started)
    cache.write_text(json.dumps({s: {q: [it.model_dump() for it in items] for q, items in per_q.items()}
                                 for s, per_q in got.items()}), encoding="utf-8")
    return got


def load_rows(path: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The last row written for each (question, variant, source)."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                rows[(row["qid"], row["variant"], row["source"])] = row
    return rows


def score_row(q: BenchQuestion, conv_id: str, variant: str, source: str, items: list[Item],
              out: Outcome) -> dict[str, Any]:
    evidence = set(q.evidence)
    cites = None
    if out.cited is not None:
        cites = {"n": len(out.cited), "good": sum(1 for src in out.cited if evidence & set(src))}
    return {"qid": q.id, "conv": conv_id, "category": q.category_id, "variant": variant, "source": source,
            "question": q.question, "gold": q.answer, **out.model_dump(exclude={"cited"}), "cites": cites,
            "ev_shown": bool(evidence & {s for it in items[:VARIANTS[variant].k] for s in it.sources}),
            "f1": locomo_f1(out.answer, q.answer, q.category_id), "bleu1": bleu1(out.answer, q.answer)}


def schedule(convs: list[BenchConversation], limit: int | None) -> list[tuple[BenchConversation, BenchQuestion]]:
    """Questions taken from the conversations in turn, so a partial run covers all of them evenly."""
    lists = [[(c, q) for q in pick_questions(c, limit)] for c in convs]
    return [pair for group in itertools.zip_longest(*lists) for pair in group if pair is not None]


def run(args: argparse.Namespace, convs: list[BenchConversation], answers: Path) -> None:
    """Question by question, every source and variant: a stopped run still compares like with like."""
    ctx = {c.id: retrieval(c, args.out) for c in convs}
    llm = make_llm(LLMConfig(backend="llama_cpp", model_path=str(args.model), n_threads=args.threads,
                             timeout_s=args.timeout, temperature=0.0))
    usage = Usage(llm)
    done = load_rows(answers)
    todo = schedule(convs, args.limit)
    with answers.open("a", encoding="utf-8") as fh:
        for i, (conv, q) in enumerate(todo, start=1):
            for source in args.sources:
                items = ctx[conv.id][source][q.id]
                for name in args.variants:
                    old = done.get((q.id, name, source))
                    if old is not None and not (args.retry_failed and old.get("error")):
                        continue
                    variant = VARIANTS[name]
                    base_row = done.get((q.id, "P1", source)) if variant.mode == "cite_call" else None
                    base = Outcome(**{k: base_row[k] for k in Outcome.model_fields if k in base_row}) \
                        if base_row else None
                    out = run_variant(llm, usage, variant, q.question, items, conv.last_time(), base)
                    row = score_row(q, conv.id, name, source, items, out)
                    done[(q.id, name, source)] = row
                    fh.write(json.dumps(row) + "\n")
                    fh.flush()
                    log.info("%d/%d %s %-9s %-7s f1=%.2f %5.1fs %r%s", i, len(todo), q.id, source, name,
                             row["f1"], out.seconds, out.answer[:50], f" ERROR {out.error}" if out.error else "")


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def report(rows: list[dict[str, Any]], variants: list[str], sources: list[str]) -> str:
    """Markdown table: variant × source → F1 per category and overall, BLEU-1, cost, citations."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["variant"], r["source"])].append(r)
    head = ("| variant | source | n | F1 multi-hop | F1 temporal | F1 open | F1 single-hop | F1 all | BLEU-1 "
            "| ctx tok | compl tok | s/q | cite acc | no cite | ev shown | failed |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name in variants:
        for source in sources:
            g = groups.get((name, source), [])
            if not g:
                continue
            ok = [r for r in g if not r["error"]]
            cats = [_fmt(mean(r["f1"] for r in g if r["category"] == c)) for c in (1, 2, 3, 4)]
            cited = [r["cites"] for r in ok if r["cites"] is not None]
            n_cites = sum(c["n"] for c in cited)
            acc = sum(c["good"] for c in cited) / n_cites if n_cites else None
            no_cite = sum(1 for c in cited if c["n"] == 0) / len(cited) if cited else None
            lines.append(
                f"| {name} | {source} | {len(g)} | {' | '.join(cats)} | {_fmt(mean(r['f1'] for r in g))} "
                f"| {_fmt(mean(r['bleu1'] for r in g))} | {_fmt(mean(r['context_tokens'] for r in ok), 0)} "
                f"| {_fmt(mean(r['completion_tokens'] for r in ok), 1)} | {_fmt(mean(r['seconds'] for r in ok), 1)} "
                f"| {_fmt(acc)} | {_fmt(no_cite, 2)} | {_fmt(mean(float(r['ev_shown']) for r in g), 2)} "
                f"| {len(g) - len(ok)} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--conversations", default="conv-30,conv-41")
    ap.add_argument("--limit", type=int, default=None, help="questions per conversation (default: all)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"from {', '.join(VARIANTS)}")
    ap.add_argument("--sources", default=",".join(SOURCES))
    ap.add_argument("--out", type=Path, default=Path("bench-out/answer-prompts"))
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds before one call counts as failed")
    ap.add_argument("--retry-failed", action="store_true")
    ap.add_argument("--report", action="store_true", help="only print the table from answers.jsonl")
    args = ap.parse_args()
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    args.sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS] + [s for s in args.sources if s not in SOURCES]
    if unknown:
        ap.error(f"unknown variant or source: {', '.join(unknown)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    args.out.mkdir(parents=True, exist_ok=True)
    answers = args.out / "answers.jsonl"
    convs = load_locomo(args.data, [c.strip() for c in args.conversations.split(",")]).conversations
    if not args.report:
        run(args, convs, answers)
    wanted = {q.id for c in convs for q in pick_questions(c, args.limit)}
    rows = [r for r in load_rows(answers).values() if r["qid"] in wanted]
    table = report(rows, args.variants, args.sources)
    (args.out / "report.md").write_text(table + "\n", encoding="utf-8")
    print(table)


if __name__ == "__main__":
    main()
