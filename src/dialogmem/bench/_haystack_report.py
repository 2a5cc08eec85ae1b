"""The haystack's numbers: one system's units of one H summed up (``aggregate``), and report.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._markdown import fmt, table
from ._report import summarise
from ._report_retrieval import OVERALL


def _overall(summary: dict[str, Any], part: str, metric: str, key: int) -> float | None:
    value = summary[part].get(metric, {}).get(OVERALL, {}).get(str(key))
    return float(value) if value is not None else None


def aggregate(units: Sequence[dict[str, Any]], ks: Sequence[int], budgets: Sequence[int]) -> dict[str, Any]:
    """Recall (``bench locomo``'s overall: every scored question but the adversarial ones, pooled over
    the needles), search latency percentiles over all those searches, and the cost of the units."""
    summary = summarise("locomo", ks, [{"header": {"cost": {}}, "questions": u["questions"]} for u in units],
                        budgets=budgets)
    builds = [u["build"] for u in units]
    queries = [u["query"] for u in units]
    hay_turns = sum(b["haystack_turns"] for b in builds)
    hay_s = sum(b["haystack_s"] for b in builds)
    needle_turns = sum(b["needle_turns"] for b in builds)
    needle_s = sum(b["needle_s"] for b in builds)
    return {
        "needles": [u["conversation"] for u in units],
        "questions": summary["questions"],
        "scored": summary["retrieval"].get("evidence", {}).get(OVERALL, {}).get("n", 0),
        "recall": {"turn": {str(k): _overall(summary, "retrieval", "evidence", k) for k in ks},
                   "session": {str(k): _overall(summary, "retrieval", "session_any", k) for k in ks}},
        "recall_at_budget": {"turn": {str(b): _overall(summary, "budget", "evidence", b) for b in budgets},
                             "session": {str(b): _overall(summary, "budget", "session_any", b) for b in budgets}},
        "search_p50_ms": summary["latency"]["search_p50_ms"],
        "search_p95_ms": summary["latency"]["search_p95_ms"],
        "searches": summary["latency"]["searches"],
        "haystack_path": sorted({b["haystack_path"] for b in builds}),
        "embedders": sorted({b["embedder"] for b in builds if b.get("embedder")}),
        "haystack_turns": hay_turns,
        "haystack_s": round(hay_s, 3),
        "haystack_turns_per_s": _rate(hay_turns, hay_s),
        "needle_turns_per_s": _rate(needle_turns, needle_s),
        "embedded_on_import": sum(b.get("embedded_on_import", 0) for b in builds),
        # dialogmem's cache fill through the write path, when this run did it (None: the export was cached)
        "write_turns_per_s": _rate(sum(b.get("write_turns", 0) for b in builds),
                                   sum(b.get("write_s", 0) for b in builds)),
        "indexed": sum(b.get("indexed", 0) for b in builds),  # points put in the search graph by the build
        "memories": sum(b["memories"] for b in builds),
        "rss_after_open_mb": max(q["rss_after_open_mb"] for q in queries) if queries else None,
        "rss_peak_search_mb": max(q["rss_peak_search_mb"] for q in queries) if queries else None,
        "rss_peak_build_mb": max(b["rss_peak_build_mb"] for b in builds) if builds else None,
        "disk_mb": max(b["disk_mb"] for b in builds) if builds else None,
        "query_cache": sorted({q["query_cache"] for q in queries}),
        "wall_s": round(sum(u["wall_s"] for u in units), 1),
    }


def _rate(n: int, seconds: float) -> float | None:
    return round(n / seconds, 1) if seconds > 0 else None


def render_haystack(results: dict[str, Any]) -> str:
    run = results["run"]
    ks, budgets = run["ks"], run["budgets"]
    lines = [
        "# Haystack benchmark", "",
        f"Needles: {', '.join(run['needles'])} ({run['questions']} questions; recall over the scored, "
        f"non-adversarial ones). Distractor recipe `{run['recipe']}`, seed {run['seed']}, sessions spread over "
        f"{run['years_before']:g} years before the needle's first session and up to its last. Both systems "
        "LLM-free, query-vector cache off (every timed search embeds its query). "
        f"Embedder: {run['embedder'].get('backend')} / quantize {run['embedder'].get('quantize')}.", "",
    ]
    header = ["H", "system"]
    header += [f"turn recall@{k}" for k in ks] + [f"session recall@{k}" for k in ks]
    header += [f"turn recall @{b} tok" for b in budgets] + [f"session recall @{b} tok" for b in budgets]
    header += ["search p50 ms", "p95 ms", "haystack ingest turns/s (path)", "write path turns/s (cache fill)",
               "graph points", "RSS after open MB", "RSS peak search MB", "disk MB", "unit wall s"]
    rows = []
    for size in results["sizes"]:
        for name, s in size["systems"].items():
            row: list[Any] = [f"{size['h']:,}", name]
            row += [s["recall"]["turn"][str(k)] for k in ks] + [s["recall"]["session"][str(k)] for k in ks]
            row += [s["recall_at_budget"]["turn"][str(b)] for b in budgets]
            row += [s["recall_at_budget"]["session"][str(b)] for b in budgets]
            rate = s["haystack_turns_per_s"]
            row += [s["search_p50_ms"], s["search_p95_ms"],
                    f"{fmt(rate, 1)} ({', '.join(s['haystack_path'])})" if rate is not None else "–",
                    fmt(s.get("write_turns_per_s"), 1), f"{s.get('indexed', 0):,}",
                    fmt(s["rss_after_open_mb"], 0), fmt(s["rss_peak_search_mb"], 0), fmt(s["disk_mb"], 1),
                    fmt(s["wall_s"], 1)]
            rows.append(row)
    lines += table(header, rows)
    embedders = {name: sorted({e for size in results["sizes"]
                               for e in size["systems"].get(name, {}).get("embedders", [])})
                 for name in run["systems"]}
    lines += ["Embedders (as each store resolved them): "
              + "; ".join(f"{name} {', '.join(e) or '–'}" for name, e in embedders.items()) + ".", ""]
    lines += _ratios(results, ks, budgets)
    lines += ["Wall time and load of each H (load average: 1, 5, 15 min, at its start and end):", ""]
    lines += table(["H", "wall s", "load at start", "load at end"],
                   [[f"{s['h']:,}", fmt(s["wall_s"], 1), " / ".join(map(str, s["load_avg"]["start"])),
                     " / ".join(map(str, s["load_avg"]["end"]))] for s in results["sizes"]])
    lines += _recipes(results)
    return "\n".join(lines)


def _ratios(results: dict[str, Any], ks: Sequence[int], budgets: Sequence[int]) -> list[str]:
    """How recall holds as H grows (÷ its value at the smallest H) and the gap to naive hybrid."""
    sizes = results["sizes"]
    if not sizes or "dialogmem" not in sizes[0]["systems"]:
        return []
    k = 10 if 10 in ks else max(ks)
    base = sizes[0]["systems"]["dialogmem"]["recall"]["turn"][str(k)]
    header = ["H", f"dialogmem turn recall@{k} ÷ at H={sizes[0]['h']:,}"]
    both = "naive-hybrid" in sizes[0]["systems"]
    if both:
        header += [f"dialogmem ÷ naive hybrid, turn recall@{k}"]
        header += [f"dialogmem ÷ naive hybrid, turn recall @{b} tok" for b in budgets]
    rows = []
    for size in sizes:
        d = size["systems"]["dialogmem"]
        row: list[Any] = [f"{size['h']:,}", _div(d["recall"]["turn"][str(k)], base)]
        if both:
            n = size["systems"]["naive-hybrid"]
            row.append(_div(d["recall"]["turn"][str(k)], n["recall"]["turn"][str(k)]))
            row += [_div(d["recall_at_budget"]["turn"][str(b)], n["recall_at_budget"]["turn"][str(b)])
                    for b in budgets]
        rows.append(row)
    return table(header, rows)


def _div(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _recipes(results: dict[str, Any]) -> list[str]:
    rows = []
    for size in results["sizes"]:
        for needle, r in size["recipes"].items():
            rows.append([f"{size['h']:,}", needle, r["turns"], r["copied_turns"], r["generated_turns"], r["copies"],
                         r["chat_threads"], r["dropped_answer"], r["dropped_name"],
                         f"{r['answers_checked']} ({r['answers_too_short']} too short)",
                         f"{str(r['first_time'])[:10]} – {str(r['last_time'])[:10]}"])
    if not rows:
        return []
    return ["Distractors (dropped: turns the filter removed for holding a needle answer or a needle "
            "speaker's name; none of the turns used holds either):", "",
            *table(["H", "needle", "turns", "copied", "generated", "copies", "chat threads", "dropped (answer)",
                    "dropped (name)", "answers checked", "sessions from – to"], rows)]
