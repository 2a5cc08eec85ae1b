"""The retrieval part of a report: recall@k and recall at fixed context budgets, summarised per
category (``summarise_by_category``, ``summarise_fill``) and rendered as Markdown sections."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _metrics as m
from ._markdown import fmt, table
from ._retrieval import METRIC_LABELS, METRICS

OVERALL = "overall"


def _r(value: float | None, nd: int = 4) -> float | None:
    return None if value is None else round(value, nd)


def _ordered(names: set[str]) -> list[str]:
    return [n for n in METRICS if n in names] + sorted(names - set(METRICS))


def summarise_by_category(keys: Sequence[int], groups: dict[str, list[dict[str, Any]]], order: list[str],
                          field: str) -> dict[str, dict[str, dict[str, Any]]]:
    """``{metric: {category: {str(key): mean, "n": questions scored}}}`` of the per-question
    ``q[field][metric][str(key)]`` values (keys are ks for ``retrieval``, budgets for ``budget_retrieval``)."""
    metrics = _ordered({name for qs in groups.values() for q in qs for name in q.get(field, {})})
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for metric in metrics:
        out[metric] = {}
        for cat in order:
            rows = [q[field][metric] for q in groups.get(cat, []) if metric in q.get(field, {})]
            cell: dict[str, Any] = {str(k): _r(m.mean(r.get(str(k)) for r in rows)) for k in keys}
            cell["n"] = sum(1 for r in rows if keys and r.get(str(keys[0])) is not None)
            out[metric][cat] = cell
    return out


def summarise_fill(budgets: Sequence[int], questions: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per budget, over every question searched: mean hits kept and tokens used, and how often the
    walk ended at the budget, because the system had no more hits, or at the fetch limit."""
    out: dict[str, dict[str, Any]] = {}
    for budget in map(str, budgets):
        cells = [q["budget_fill"][budget] for q in questions if budget in q.get("budget_fill", {})]
        out[budget] = {
            "searches": len(cells),
            "hits_mean": _r(m.mean(c["hits"] for c in cells), 2),
            "tokens_mean": _r(m.mean(c["tokens"] for c in cells), 1),
            **{f"ended_{why}": sum(1 for c in cells if c["ended"] == why) for why in ("budget", "hits", "fetch")},
        }
    return out


# -- Markdown --------------------------------------------------------------------------------------


def _n(systems: dict[str, Any], part: str, metric: str, cat: str) -> Any:
    for s in systems.values():
        cell = s.get(part, {}).get(metric, {}).get(cat)
        if cell:
            return cell["n"]
    return 0


def _metrics_of(systems: dict[str, Any], part: str) -> list[str]:
    return _ordered({name for s in systems.values() for name in s.get(part, {})})


def legend(systems: dict[str, Any]) -> list[str]:
    names = _metrics_of(systems, "retrieval")
    if not names:
        return []
    lines = ["Retrieval metrics (a hit counts for the turns it cites in `source_turn_ids`, and for the "
             "sessions of those turns; questions without evidence are left out):", ""]
    lines += [f"- `{n}`: {METRIC_LABELS.get(n, n)}" for n in names]
    return [*lines, ""]


def retrieval_sections(results: dict[str, Any], cols: list[str], k0: int) -> list[str]:
    """Recall@k0 by category for every metric, then every metric at every k, overall."""
    systems = results["systems"]
    ks = results["run"]["ks"]
    metrics = _metrics_of(systems, "retrieval")
    lines: list[str] = []
    for metric in metrics:
        lines += [f"## Retrieval: {metric} recall@{k0} by category", "", f"{METRIC_LABELS.get(metric, metric)}.", ""]
        header = ["system", *[f"{c} (n={_n(systems, 'retrieval', metric, c)})" for c in cols]]
        rows = [[name, *[s["retrieval"][metric].get(c, {}).get(str(k0)) for c in cols]]
                for name, s in systems.items() if metric in s["retrieval"]]
        lines += table(header, rows)
    if metrics:
        lines += ["## Retrieval: recall@k, overall", ""]
        rows = [[name, metric, *[s["retrieval"][metric].get(OVERALL, {}).get(str(k)) for k in ks]]
                for metric in metrics for name, s in systems.items() if metric in s["retrieval"]]
        lines += table(["system", "metric", *[f"@{k}" for k in ks]], rows)
    return lines


def budget_sections(results: dict[str, Any], cols: list[str]) -> list[str]:
    """Recall at each context budget, overall and by category, and how the budgets were filled."""
    systems = results["systems"]
    budgets = results["run"].get("budgets") or []
    metrics = _metrics_of(systems, "budget")
    if not budgets or not metrics:
        return []
    lines = ["## Retrieval at a fixed context budget", "",
             f"One search per question fetches {results['run'].get('budget_k')} hits; at a budget of B tokens "
             "the hits are taken in rank order while the system's own rendering of the hits taken so far "
             "(the context it gives a reader) stays within B tokens, with the same token counter for every "
             "system. The first hit that would overflow ends the walk: lower-ranked hits are not tried "
             "(stop, not skip-and-continue), so a budget smaller than the first hit keeps no hits.", ""]
    rows = [[name, metric, *[s["budget"][metric].get(OVERALL, {}).get(str(b)) for b in budgets]]
            for metric in metrics for name, s in systems.items() if metric in s.get("budget", {})]
    lines += table(["system", "metric", *[f"≤{b} tokens" for b in budgets]], rows)
    for metric in metrics:
        lines += [f"### Budget: {metric} recall by category", ""]
        header = ["system", "budget", *[f"{c} (n={_n(systems, 'budget', metric, c)})" for c in cols]]
        rows = [[name, b, *[s["budget"][metric].get(c, {}).get(str(b)) for c in cols]]
                for name, s in systems.items() if metric in s.get("budget", {}) for b in budgets]
        lines += table(header, rows)
    lines += ["### How the budgets were filled", "",
              "Searches whose walk ended at the fetch limit had every fetched hit fit: their recall at that "
              "budget is a lower bound (raise `--budget-k`).", ""]
    rows = [[name, b, f.get("searches"), fmt(f.get("hits_mean"), 2), fmt(f.get("tokens_mean"), 1),
             f.get("ended_budget"), f.get("ended_hits"), f.get("ended_fetch")]
            for name, s in systems.items() for b, f in s.get("budget_fill", {}).items()]
    lines += table(["system", "budget", "searches", "hits kept (mean)", "context tokens (mean)",
                    "ended at budget", "system ran out of hits", "ended at fetch limit"], rows)
    return lines


def primary_metric(results: dict[str, Any]) -> str:
    return "evidence" if results["run"]["dataset"] == "locomo" else "session_all"
