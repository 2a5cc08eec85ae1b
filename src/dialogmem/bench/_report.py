"""Turn saved units into numbers (``summarise``) and the numbers into files (``write_report``).

Every number in results.json, report.md and the plots comes from the units of this output
directory; nothing is carried over from elsewhere.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import _metrics as m
from ._loaders import ADVERSARIAL, LOCOMO_CATEGORIES
from ._markdown import fmt as _fmt
from ._markdown import table as _table
from ._report_retrieval import (
    OVERALL,
    budget_sections,
    legend,
    retrieval_sections,
    summarise_by_category,
    summarise_fill,
)
from ._state import atomic_write

_LOCOMO_ORDER = [LOCOMO_CATEGORIES[i] for i in (1, 2, 3, 4)]


def _r(value: float | None, nd: int = 4) -> float | None:
    return None if value is None else round(value, nd)


def _categories(dataset: str, questions: Sequence[dict[str, Any]]) -> list[str]:
    seen = sorted({q["category"] for q in questions})
    if dataset == "locomo":
        return [c for c in _LOCOMO_ORDER if c in seen] + [c for c in seen if c not in _LOCOMO_ORDER]
    return seen


def _in_overall(dataset: str, q: dict[str, Any]) -> bool:
    # LoCoMo's adversarial questions measure something else (detecting an absent fact)
    return not (dataset == "locomo" and q.get("adversarial"))


def summarise(dataset: str, ks: Sequence[int], units: Sequence[dict[str, Any]], *,
              budgets: Sequence[int] = ()) -> dict[str, Any]:
    """Per-category and overall means (recall at each k and each token budget, QA), cost and
    latency of one system's saved units."""
    questions = [q for u in units for q in u["questions"]]
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in questions:
        groups[q["category"]].append(q)
        if _in_overall(dataset, q):
            groups[OVERALL].append(q)
    order = [*_categories(dataset, questions), OVERALL]
    return {
        "units": len(units),
        "questions": len(questions),
        "categories": order,
        "retrieval": summarise_by_category(ks, groups, order, "retrieval"),
        "budget": summarise_by_category(budgets, groups, order, "budget_retrieval"),
        "budget_fill": summarise_fill(budgets, questions),
        "qa": _qa(groups, order),
        "cost": _cost(units),
        "latency": _latency(questions),
    }


def _qa(groups: dict[str, list[dict[str, Any]]], order: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for cat in order:
        answered = [q for q in groups.get(cat, []) if "prediction" in q]
        if not answered:
            continue
        out[cat] = {
            "n": len(answered),
            "f1": _r(m.mean(q.get("f1") for q in answered)),
            "bleu1": _r(m.mean(q.get("bleu1") for q in answered)),
            "judge": _r(m.mean(q.get("judge") for q in answered)),
            "judged": sum(1 for q in answered if q.get("judge") is not None),
            "judge_failures": sum(1 for q in answered if q.get("judge_error")),
            "answer_failures": sum(1 for q in answered if q.get("answer_error")),
            "reader_tokens": _r(m.mean(q.get("answer_prompt_tokens") for q in answered), 1),
            "deep_ratio": _r(m.mean(1.0 if q.get("answer_mode") == "deep" else 0.0 for q in answered)
                             if any(q.get("answer_mode") for q in answered) else None),
            "rounds": _r(m.mean(q.get("answer_rounds") for q in answered)
                         if any(q.get("answer_mode") for q in answered) else None, 2),
            "answer_s": _r(m.mean(q["answer_ms"] / 1000 for q in answered if "answer_ms" in q), 2),
            "f1_light": _r(m.mean(q.get("f1_light") for q in answered)),
            "cited": _r(m.mean((1.0 if q["cited_turns"] else 0.0) for q in answered if "cited_turns" in q)),
            "cite_precision": _r(m.mean(q.get("cite_precision") for q in answered)),
            "cite_hit": _r(m.mean(q.get("cite_hit") for q in answered)),
        }
    return out


def _cost(units: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(units)
    costs = [u["header"]["cost"] for u in units]
    total = {key: sum(c.get(key, 0) for c in costs)
             for key in ("wall_s", "turns", "memories", "llm_calls", "prompt_tokens", "completion_tokens",
                         "embedding_calls")}
    stages: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for c in costs:
        for stage, vals in c.get("stages", {}).items():
            for key in ("calls", "prompt_tokens", "completion_tokens", "latency_ms", "failures", "fallbacks"):
                stages[stage][key] += vals.get(key, 0) or 0
    query: dict[str, int] = defaultdict(int)
    judge: dict[str, int] = defaultdict(int)
    for u in units:
        for key, val in (u["header"].get("query_llm") or {}).items():
            query[key] += val
        for key, val in (u["header"].get("judge_llm") or {}).items():
            judge[key] += val
    return {
        "conversations": n,
        "total": {k: _r(v, 3) for k, v in total.items()},
        "per_conversation": {k: _r(v / n, 3) if n else None for k, v in total.items()},
        "stages": {s: dict(v) for s, v in stages.items()},
        "query_llm": dict(query),
        "judge_llm": dict(judge),
        "unit_wall_s": _r(sum(u["header"].get("unit_wall_s", 0) for u in units), 3),
    }


def _latency(questions: Sequence[dict[str, Any]]) -> dict[str, Any]:
    search = [q["search_ms"] for q in questions if "search_ms" in q]
    ctx = [q["context_tokens"] for q in questions if "context_tokens" in q]
    answer = [q["answer_ms"] for q in questions if "answer_ms" in q]
    actx = [q["answer_context_tokens"] for q in questions if "answer_context_tokens" in q]
    truncated = [1.0 if q.get("truncated") else 0.0 for q in questions if "prediction" in q]
    ks = sorted({k for q in questions for k in q.get("context_tokens_at", {})}, key=int)
    tokens_at = {k: _r(m.mean([q["context_tokens_at"][k] for q in questions if k in q.get("context_tokens_at", {})]), 1)
                 for k in ks}
    return {
        "context_tokens_at": tokens_at,
        "searches": len(search),
        "search_p50_ms": _r(m.percentile(search, 50), 3),
        "search_p95_ms": _r(m.percentile(search, 95), 3),
        "context_tokens_mean": _r(m.mean(ctx), 1),
        "answers": len(answer),
        "answer_p50_ms": _r(m.percentile(answer, 50), 3),
        "answer_p95_ms": _r(m.percentile(answer, 95), 3),
        "answer_context_tokens_mean": _r(m.mean(actx), 1),
        "truncated_fraction": _r(m.mean(truncated)),
    }


# -- files -----------------------------------------------------------------------------------------


def write_report(results: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write results.json, report.md and the PNG plots into ``out``; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"results": out / "results.json", "report": out / "report.md"}
    from ._plots import plot_cost, plot_recall, plot_recall_vs_tokens

    plots = {"recall": plot_recall(results, out / "recall_at_k.png"),
             "recall vs context tokens": plot_recall_vs_tokens(results, out / "recall_vs_tokens.png"),
             "cost": plot_cost(results, out / "cost.png")}
    paths.update({k: v for k, v in plots.items() if v is not None})
    atomic_write(paths["results"], json.dumps(results, indent=2, sort_keys=False, default=str) + "\n")
    atomic_write(paths["report"], render_markdown(results, {k: v.name for k, v in plots.items() if v}))
    return paths


def primary_k(ks: Sequence[int]) -> int:
    """The k the per-category tables show: 10 when measured, else the largest k."""
    return 10 if 10 in ks else max(ks)


def _column_order(results: dict[str, Any]) -> list[str]:
    cats: list[str] = []
    for s in results["systems"].values():
        for c in s["categories"]:
            if c not in cats and c != OVERALL:
                cats.append(c)
    main = [c for c in cats if c != ADVERSARIAL]
    return [*main, OVERALL] + ([ADVERSARIAL] if ADVERSARIAL in cats else [])


def _selection(selection: dict[str, Any]) -> str:
    """How the questions were chosen, as a phrase after the count ("" for all of them)."""
    parts = []
    if selection.get("categories"):
        parts.append(f"categories {', '.join(map(str, selection['categories']))}")
    if selection.get("limit") is not None:
        parts.append(f"the first {selection['limit']} of each conversation")
    if selection.get("sample") is not None:
        parts.append(f"a seeded random {selection['sample']} of each conversation")
    return f" ({'; '.join(parts)})" if parts else ""


def render_markdown(results: dict[str, Any], plots: dict[str, str]) -> str:
    run = results["run"]
    ks = run["ks"]
    k0 = primary_k(ks)
    systems = results["systems"]
    cols = _column_order(results)
    lines = [f"# dialogmem benchmark: {run['dataset']}", ""]
    lines += [
        f"- data: `{run['data']}` (sha256 {run['data_sha256'][:12]}…), {len(run['conversations'])} "
        f"conversations, {run['questions']} questions{_selection(run.get('selection') or {})}",
        f"- mode: {run['mode']}; k: {', '.join(map(str, ks))}; context budgets: "
        f"{', '.join(map(str, run.get('budgets') or [])) or 'none'} tokens; sleep after ingest: {run['sleep']}"
        + (f"; answer prompt {run['answer_prompt']}" if run.get("answer_prompt") else ""),
        f"- machine: {run['machine']['platform']}, Python {run['machine']['python']}",
        f"- generated {run['generated_at']}; this invocation took {_fmt(run.get('invocation_wall_s'), 1)} s"
        + (" (resumed from checkpoints)" if run.get("resumed") else "")
        + f"; all units together: {_fmt(sum(s['cost']['unit_wall_s'] or 0 for s in systems.values()), 1)} s",
        "",
    ]
    if run["dataset"] == "locomo":
        lines += ["Overall excludes category 5 (adversarial), which is reported in its own column.", ""]
    ev = results["evidence"]
    lines += [f"Evidence entries: {ev['entries']}; normalised: {ev['normalised']}; malformed and skipped: "
              f"{ev['malformed']}; questions without usable evidence (left out of recall): "
              f"{ev['questions_without_evidence']}.", ""]
    if ev.get("examples"):
        lines += ["Skipped entries: " + ", ".join(f"`{e}`" for e in ev["examples"][:20]), ""]

    lines += legend(systems)
    lines += retrieval_sections(results, cols, k0)
    lines += budget_sections(results, cols)

    if any(s["qa"] for s in systems.values()):
        lines += _qa_section(results, cols)

    lines += ["## Construction cost per conversation", ""]
    rows = []
    for name, s in systems.items():
        pc = s["cost"]["per_conversation"]
        n = s["cost"]["conversations"] or 1
        query = s["cost"].get("query_llm") or {}
        rows.append([name, s["cost"]["conversations"], _fmt(pc.get("wall_s"), 2),
                     *[_fmt(pc.get(key), 1) for key in ("llm_calls", "prompt_tokens", "completion_tokens",
                                                        "memories", "turns")],
                     _fmt(query.get("calls", 0) / n, 1),
                     _fmt((query.get("prompt_tokens", 0) + query.get("completion_tokens", 0)) / n, 1)])
    lines += _table(["system", "conversations", "ingest s", "LLM calls", "prompt tokens", "completion tokens",
                     "memories", "turns", "query-time LLM calls", "query-time LLM tokens"], rows)
    lines += ["Ingest covers feeding every turn, the final flush and (when enabled) sleep; query-time LLM "
              "use is the reader's (and dialogmem's planner/answerer's), never the judge's.", ""]
    stage_rows = [[name, stage, v.get("calls"), v.get("prompt_tokens"), v.get("completion_tokens"),
                   v.get("failures"), v.get("fallbacks")]
                  for name, s in systems.items() for stage, v in sorted(s["cost"]["stages"].items())]
    if stage_rows:
        lines += ["LLM use by stage (totals over all conversations):", ""]
        lines += _table(["system", "stage", "calls", "prompt tokens", "completion tokens", "failures",
                         "fallbacks"], stage_rows)

    lines += ["## Latency and context", ""]
    ref_k = 10 if 10 in ks else max(ks)
    rows = [[name, s["latency"]["searches"], s["latency"]["search_p50_ms"], s["latency"]["search_p95_ms"],
             *(s["latency"].get("context_tokens_at", {}).get(str(k)) for k in ks)]
            for name, s in systems.items()]
    lines += [f"Search latency is of the k={ref_k} search; context tokens are the mean size of the rendered "
              "context at each k (the write path's MiniLM token count).", ""]
    lines += _table(["system", "searches", f"search p50 ms (k={ref_k})", f"search p95 ms (k={ref_k})",
                     *(f"context tokens @{k}" for k in ks)], rows)
    if any(s["latency"]["answers"] for s in systems.values()):
        rows = [[name, s["latency"]["answers"], s["latency"]["answer_p50_ms"], s["latency"]["answer_p95_ms"],
                 s["latency"]["answer_context_tokens_mean"], s["latency"]["truncated_fraction"]]
                for name, s in systems.items()]
        lines += _table(["system", "answers", "answer p50 ms", "answer p95 ms", "reader context tokens",
                         "truncated fraction"], rows)

    if plots:
        lines += ["## Plots", ""] + [f"![{k}]({v})" for k, v in plots.items()] + [""]
    if results.get("judge_templates"):
        lines += _judge_section(results)
    return "\n".join(lines)


def _qa_section(results: dict[str, Any], cols: list[str]) -> list[str]:
    systems = results["systems"]
    lines: list[str] = []
    names = [("judge", "LLM judge accuracy")]
    if results["run"]["dataset"] == "locomo":
        names = [("f1", "F1"), ("bleu1", "BLEU-1"), *names]
        lines += ["Category 5 (adversarial) is scored as detection of \"not mentioned\": F1 is LoCoMo's "
                  "string rule, the judge uses the not-mentioned template.", ""]
    for key, title in names:
        lines += [f"## QA: {title} by category", ""]
        header = ["system", *cols]
        rows = [[name, *[s["qa"].get(c, {}).get(key) for c in cols]]
                for name, s in systems.items() if s["qa"]]
        lines += _table(header, rows)
    lines += ["## QA: reader cost and depth (overall)", "",
              "Reader tokens: the whole prompts sent to the reader per question, every call counted (the "
              "write path's MiniLM token count); deep ratio: share of questions where dialogmem ran its "
              "deep module; rounds: deep rounds per question; s/question: answer wall time; F1 of its light "
              "answers: dialogmem's light-module answer of the same run scored alone (what --answer light "
              "gives, at temperature 0); cited: share of answers that cite turns; cite precision / cite hit: "
              "of the answers that cite turns and have evidence, the share of cited turns that are evidence "
              "turns, and the share that cite at least one.", ""]
    rows = [[name, s["qa"][OVERALL]["n"], s["qa"][OVERALL]["f1"], s["qa"][OVERALL].get("f1_light"),
             s["qa"][OVERALL].get("reader_tokens"),
             s["qa"][OVERALL].get("deep_ratio"), s["qa"][OVERALL].get("rounds"), s["qa"][OVERALL].get("answer_s"),
             s["qa"][OVERALL].get("answer_failures"), s["qa"][OVERALL].get("cited"),
             s["qa"][OVERALL].get("cite_precision"), s["qa"][OVERALL].get("cite_hit")]
            for name, s in systems.items() if OVERALL in s["qa"]]
    lines += _table(["system", "questions", "F1", "F1 of its light answers", "reader tokens/question",
                     "deep ratio", "rounds", "s/question", "failed answers", "cited", "cite precision",
                     "cite hit"], rows)
    failures = {name: sum(c.get("judge_failures", 0) for cat, c in s["qa"].items() if cat != OVERALL)
                for name, s in systems.items()}
    if any(failures.values()):
        lines += ["Judge failures (left out of judge accuracy): "
                  + ", ".join(f"{k}: {v}" for k, v in failures.items()), ""]
    return lines


def _judge_section(results: dict[str, Any]) -> list[str]:
    lines = [f"## Judge prompts ({results['judge_system']})", ""]
    for name, text in results["judge_templates"].items():
        lines += [f"### {name}", "", "```text", text, "```", ""]
    return lines
