"""PNG plots of a run: recall@k curves per system, and construction cost bars.

Figures are built with matplotlib's object API on an Agg canvas, so no global backend or pyplot
state is touched.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._errors import ConfigError
from ._report_retrieval import OVERALL, primary_metric

_INSTALL = "the benchmark plots need matplotlib: pip install 'dialogmem[bench]'"


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ConfigError(_INSTALL) from exc
    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def plot_recall(results: dict[str, Any], path: Path) -> Path | None:
    """Overall recall@k for every system with retrieval; None when no system has any."""
    ks = results["run"]["ks"]
    return _plot_curves(results, path, lambda s: [float(k) for k in ks], "k (hits)", "recall@k", xticks=ks)


def plot_recall_vs_tokens(results: dict[str, Any], path: Path) -> Path | None:
    """Recall@k against the context tokens the k hits cost: the comparison at equal budget, since
    systems whose hits are longer buy recall with tokens."""
    ks = [str(k) for k in results["run"]["ks"]]

    def tokens(s: dict[str, Any]) -> list[float]:
        at = s["latency"].get("context_tokens_at", {})
        return [at.get(k) if at.get(k) is not None else float("nan") for k in ks]

    return _plot_curves(results, path, tokens, "context tokens per query (mean)", "recall vs context size")


def _plot_curves(results: dict[str, Any], path: Path, x_of: Callable[[dict[str, Any]], list[float]],
                 xlabel: str, title: str, *, xticks: list[int] | None = None) -> Path | None:
    metric = primary_metric(results)
    ks = results["run"]["ks"]
    curves = {}
    for name, s in results["systems"].items():
        overall = s["retrieval"].get(metric, {}).get(OVERALL)
        if overall and any(overall.get(str(k)) is not None for k in ks):
            curves[name] = (x_of(s), [overall.get(str(k)) for k in ks])
    if not curves:
        return None
    fig = _figure(6.0, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    for name, (xs, values) in curves.items():
        ax.plot(xs, [v if v is not None else float("nan") for v in values], marker="o", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{metric} recall (overall)")
    ax.set_title(f"{results['run']['dataset']}: {title}")
    ax.set_ylim(0.0, 1.0)
    if xticks:
        ax.set_xticks(xticks)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_cost(results: dict[str, Any], path: Path) -> Path | None:
    """Ingest seconds and LLM calls per conversation, one bar per system."""
    systems = results["systems"]
    names = [n for n, s in systems.items() if s["cost"]["conversations"]]
    if not names:
        return None
    wall = [systems[n]["cost"]["per_conversation"].get("wall_s") or 0.0 for n in names]
    calls = [systems[n]["cost"]["per_conversation"].get("llm_calls") or 0.0 for n in names]
    second = (calls, "LLM calls / conversation")
    if not any(calls):  # an LLM-free run: show what was stored instead of a row of zeros
        second = ([systems[n]["cost"]["per_conversation"].get("memories") or 0.0 for n in names],
                  "stored memories / conversation")
    fig = _figure(9.0, 3.8)
    for i, (values, label) in enumerate([(wall, "ingest seconds / conversation"), second]):
        ax = fig.add_subplot(1, 2, i + 1)
        bars = ax.bar(range(len(names)), values, color="tab:blue" if i == 0 else "tab:orange")
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.set_ylim(0, max(values) * 1.15 if max(values) > 0 else 1.0)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    return path
