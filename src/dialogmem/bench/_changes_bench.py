"""``dialogmem bench changes``: facts that change, scored by where the current and the stale statements rank.

Every conversation of a changes probe file (``_changes_probe``) is fed to each system (dialogmem with
its LLM-free defaults, then ``sleep()``; naive hybrid over the raw turns, the same embedder), and every
question is searched once for ``depth`` hits. A hit stands for the turns its ``source_turn_ids`` cite,
as in the retrieval bench. Per question:

* ``rank``: the rank of the first hit citing an evidence turn (None: not among the hits);
* evidence at rank 1 and recall@3: that rank is 1, at most 3; found: among the ``depth`` hits at all
  (tells a ranking failure from a retrieval one);
* stale-first (questions with superseded statements): a hit citing a superseded turn ranks above every
  hit citing the evidence (``_metrics.stale_first``), looked at over all ``depth`` hits.

The tables split the questions by state (present / past), by kind of change and by how it was said.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .._config import Config
from .._errors import InputError
from . import _metrics as m
from ._changes_probe import ChangeNote, ChangesProbe, load_changes
from ._loaders import BenchConversation
from ._markdown import table as md_table
from ._runner import BenchSpec, default_factories
from ._systems import SystemFactory

logger = logging.getLogger(__name__)

#: the systems this bench compares by default: dialogmem and the baseline a user would build
DEFAULT_SYSTEMS = ("dialogmem", "naive-hybrid")
#: hits fetched per question (recall@3 and stale-first are read from them)
DEFAULT_DEPTH = 10


class ChangesSpec(BaseModel):
    data: str | None = None  # None or "changes": the bundled probe set; else a path
    out: Path | None = None  # results.json and report.md go here when given
    systems: list[str] = Field(default_factory=lambda: list(DEFAULT_SYSTEMS), min_length=1)
    conversations: list[str] | None = None  # sample_ids; None: all
    config: Config = Field(default_factory=Config)
    sleep: bool = True
    depth: int = Field(DEFAULT_DEPTH, ge=3)


def score_question(evidence: Sequence[str], note: ChangeNote, hit_sources: Sequence[Sequence[str]]
                   ) -> dict[str, Any]:
    """One question's record fields: the evidence's rank, at1, at3, found (anywhere in the hits) and
    stale_first (None when the question has no superseded statements)."""
    rank = m.first_rank(evidence, hit_sources)
    return {"rank": rank, "at1": 1.0 if rank == 1 else 0.0, "at3": 1.0 if rank is not None and rank <= 3 else 0.0,
            "found": 0.0 if rank is None else 1.0,
            "stale_first": m.stale_first(evidence, note.superseded, hit_sources),
            "stale_rank": m.first_rank(note.superseded, hit_sources)}


def summarise_records(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean at1, at3, found and stale_first (over the questions that have one) and the count."""
    rows = list(records)
    return {"n": len(rows), "at1": m.mean(r["at1"] for r in rows), "at3": m.mean(r["at3"] for r in rows),
            "found": m.mean(r["found"] for r in rows),
            "stale_first": m.mean(r["stale_first"] for r in rows)}


def group_summaries(records: Sequence[Mapping[str, Any]], key: Callable[[Mapping[str, Any]], str]
                    ) -> dict[str, dict[str, Any]]:
    """``summarise_records`` per value of ``key``, in sorted order of the values."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(key(r), []).append(r)
    return {k: summarise_records(groups[k]) for k in sorted(groups)}


def _by_state(r: Mapping[str, Any]) -> str:
    return str(r["state"])


def _by_kind(r: Mapping[str, Any]) -> str:
    return f"{r['state']} · {r['change_kind']}"


def _by_said(r: Mapping[str, Any]) -> str:
    return f"{r['state']} · {r['said']}"


GROUPINGS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "state": _by_state, "kind of change": _by_kind, "how the change was said": _by_said,
}


def summarise_run(records: Sequence[Mapping[str, Any]], systems: Sequence[str]) -> dict[str, Any]:
    """``{grouping: {group: {system: summary}}}`` over every question record."""
    out: dict[str, Any] = {}
    for title, key in GROUPINGS.items():
        table: dict[str, dict[str, Any]] = {}
        for system in systems:
            mine = [r for r in records if r["system"] == system]
            for group, summary in group_summaries(mine, key).items():
                table.setdefault(group, {})[system] = summary
        out[title] = table
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def render_tables(summary: Mapping[str, Any], systems: Sequence[str], depth: int = DEFAULT_DEPTH) -> str:
    """The summary as Markdown: one table per grouping, each system's rank 1, recall@3, found among the
    ``depth`` hits and stale-first."""
    parts = []
    for title, table in summary.items():
        header = ["questions", "n"]
        for s in systems:
            header += [f"{s} rank 1", f"{s} recall@3", f"{s} recall@{depth}", f"{s} stale-first"]
        rows = []
        for group, by_system in table.items():
            n = next(iter(by_system.values()))["n"]
            row = [group, str(n)]
            for s in systems:
                got = by_system.get(s, {})
                row += [_pct(got.get("at1")), _pct(got.get("at3")), _pct(got.get("found")),
                        _pct(got.get("stale_first"))]
            rows.append(row)
        parts.append(f"### By {title}\n\n" + "\n".join(md_table(header, rows)))
    return "\n\n".join(parts) + "\n"


ProgressLine = Callable[[str], None]


def run_changes(spec: ChangesSpec, *, progress: ProgressLine | None = None,
                factories: Mapping[str, SystemFactory] | None = None) -> dict[str, Any]:
    """Run every chosen system over the probe set; returns the records, the summary and the Markdown,
    and writes ``results.json`` and ``report.md`` to ``spec.out`` when it is set."""
    probe = load_changes(spec.data)
    convs = _chosen(probe, spec.conversations)
    bench = BenchSpec(dataset="locomo", data=Path(probe.dataset.path), out=spec.out or Path("."),
                      mode="llm-free", systems=spec.systems, config=spec.config, sleep=spec.sleep, budgets=[])
    bench.chosen_systems()  # an unknown name, or full-context (no retrieval), is an error before anything runs
    chosen = factories if factories is not None else default_factories(bench, None)
    records: list[dict[str, Any]] = []
    scratch_root = Path(tempfile.mkdtemp(prefix="dialogmem-changes-"))
    try:
        for conv in convs:
            for name in spec.systems:
                if progress is not None:
                    progress(f"{name} / {conv.id}: {len(conv.turns())} turns, {len(conv.questions)} questions")
                records.extend(_run_unit(conv, name, chosen[name], scratch_root / name / conv.id, probe.notes,
                                         spec.depth))
    finally:
        shutil.rmtree(scratch_root, ignore_errors=True)
    summary = summarise_run(records, spec.systems)
    markdown = render_tables(summary, spec.systems, spec.depth)
    results = {"run": {"data": probe.dataset.path, "data_sha256": probe.dataset.sha256,
                       "conversations": [c.id for c in convs], "questions": sum(len(c.questions) for c in convs),
                       "turns": sum(len(c.turns()) for c in convs), "systems": list(spec.systems),
                       "depth": spec.depth, "sleep": spec.sleep,
                       "generated_at": datetime.now(UTC).isoformat(timespec="seconds")},
               "summary": summary, "records": records, "markdown": markdown}
    if spec.out is not None:
        _write(spec.out, results)
    return results


def _chosen(probe: ChangesProbe, ids: Sequence[str] | None) -> list[BenchConversation]:
    convs = probe.dataset.conversations
    if not ids:
        return list(convs)
    missing = sorted(set(ids) - {c.id for c in convs})
    if missing:
        raise InputError(f"{probe.dataset.path}: no conversation {', '.join(missing)}")
    return [c for c in convs if c.id in set(ids)]


def _run_unit(conv: BenchConversation, name: str, factory: SystemFactory, scratch: Path,
              notes: Mapping[str, ChangeNote], depth: int) -> list[dict[str, Any]]:
    scratch.mkdir(parents=True)
    system = factory(conv, scratch)
    out = []
    try:
        system.ingest(conv)
        for q in conv.questions:
            note = notes[q.id]
            hits = system.search(q, depth).hits
            sources = [h.source_turn_ids for h in hits]
            out.append({"system": name, "qid": q.id, "question": q.question, "state": note.state,
                        "change_kind": note.change_kind, "said": note.said, "evidence": q.evidence,
                        "superseded": note.superseded, "first_hit": sources[0] if sources else [],
                        **score_question(q.evidence, note, sources)})
    finally:
        system.close()
    return out


def _write(out: Path, results: Mapping[str, Any]) -> None:
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    run = results["run"]
    head = (f"# Changes probe: {run['questions']} questions over {len(run['conversations'])} conversations "
            f"({run['turns']} turns)\n\nData: `{run['data']}` (sha256 {run['data_sha256'][:12]}); LLM-free; "
            f"sleep: {run['sleep']}; {run['depth']} hits per question.\n\n")
    (out / "report.md").write_text(head + str(results["markdown"]), encoding="utf-8")
