"""``dialogmem bench haystack``: does recall survive a long history, and what does the history cost?

For each size H and each needle conversation, every system gets a fresh store for one user holding
H distractor turns (``_distractors``), then the needle conversation, then the needle's questions,
asked at the conversation's reference time. Recall uses ``bench locomo``'s definitions and code
(``search_question``, ``summarise``); search latency includes the query embedding, with the
embedder's query cache off. Each unit is built and queried in fresh processes (``_haystack_units``).

The distractor turns and the vectors made for them are cached under ``cache_dir``, keyed by the
recipe version, the data file, the needle, H and the seed (and, for vectors, by the embedder), so a
second run of an H embeds nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from importlib import metadata
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from .._config import Config, LLMConfig
from .._errors import InputError
from ._distractors import RECIPE_VERSION, DistractorRecipe, RecipeReport
from ._haystack_report import aggregate, render_haystack
from ._haystack_units import UnitJob, build_unit, query_unit, slug
from ._loaders import BenchConversation, BenchDataset, load_locomo
from ._retrieval import DEFAULT_BUDGET_K
from ._state import atomic_write

logger = logging.getLogger(__name__)

HAYSTACK_SYSTEMS = ("dialogmem", "naive-hybrid")


class HaystackSpec(BaseModel):
    """A haystack run, as the CLI options give it."""

    data: Path
    out: Path
    cache_dir: Path
    conversations: list[str] | None = None  # needle sample_ids; None: every conversation of the file
    haystack: list[int] = Field(default_factory=lambda: [0, 10_000, 100_000, 1_000_000], min_length=1)
    systems: list[str] = Field(default_factory=lambda: list(HAYSTACK_SYSTEMS), min_length=1)
    ks: list[int] = Field(default_factory=lambda: [10], min_length=1)
    budgets: list[int] = Field(default_factory=lambda: [512])
    budget_k: int = Field(DEFAULT_BUDGET_K, ge=1)
    seed: int = 0
    years_before: float = Field(4.0, gt=0, le=50)
    config: Config = Field(default_factory=Config)
    sleep: bool = False  # run Memory.sleep() after the needle (dialogmem)
    rebuild: bool = False  # write dialogmem's haystack through the write path even when an export is cached
    keep_stores: bool = False

    @field_validator("haystack")
    @classmethod
    def _sizes(cls, value: list[int]) -> list[int]:
        if min(value) < 0:
            raise ValueError("haystack sizes are turn counts, 0 or more")
        return sorted(set(value))

    @field_validator("ks", "budgets")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if value and min(value) < 1:
            raise ValueError("must be positive")
        return sorted(set(value))

    @field_validator("systems")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [s for s in value if s not in HAYSTACK_SYSTEMS]
        if unknown:
            raise ValueError(f"unknown system {', '.join(unknown)}; choose from {', '.join(HAYSTACK_SYSTEMS)}")
        return list(dict.fromkeys(value))

    def fetch_k(self) -> int:
        return max([self.budget_k, *self.ks])

    def system_config(self) -> Config:
        """Both systems' config: no LLM anywhere (the rules write path), and no query-vector cache,
        so every timed search embeds its query."""
        cfg = self.config
        return cfg.model_copy(update={"llm": LLMConfig(backend="none"),
                                      "embedder": cfg.embedder.model_copy(update={"query_cache": 0})})

    def write_key(self) -> str:
        """What a cached dialogmem export depends on besides its embedder: the write settings and the version."""
        try:
            version = metadata.version("dialogmem")
        except metadata.PackageNotFoundError:
            version = "unknown"
        cfg = self.system_config()
        text = json.dumps({"write": cfg.write.model_dump(mode="json"), "version": version}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


ProgressLine = Callable[[str], None]


def run_haystack(spec: HaystackSpec, *, progress: ProgressLine | None = None) -> dict[str, Any]:
    """Run every (H, needle, system) unit; writes results.json and report.md into ``spec.out`` after
    each H, and returns the results."""
    say = progress or logger.info
    dataset = load_locomo(spec.data)
    needles = _needles(dataset, spec.conversations)
    spec.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"run": _run_info(spec, dataset, needles), "sizes": []}
    for h in spec.haystack:
        started = time.perf_counter()
        load_start = os.getloadavg()
        units: list[dict[str, Any]] = []
        recipes: dict[str, Any] = {}
        for needle in needles:
            turns_file, cache, recipe = _distractors(spec, dataset, needle, h, say)
            if recipe is not None:
                recipes[needle.id] = recipe.model_dump(mode="json")
            for system in spec.systems:
                say(f"H={h:,} {needle.id} {system}: building")
                units.append(_unit(spec, needle, system, h, turns_file, cache))
                u = units[-1]
                say(f"H={h:,} {needle.id} {system}: haystack {u['build']['haystack_path']} "
                    f"{u['build']['haystack_s']} s, {len(u['questions'])} questions searched")
        size = {"h": h, "wall_s": round(time.perf_counter() - started, 1),
                "load_avg": {"start": [round(v, 2) for v in load_start],
                             "end": [round(v, 2) for v in os.getloadavg()]},
                "recipes": recipes,
                "systems": {s: aggregate([u for u in units if u["system"] == s], spec.ks, spec.budgets)
                            for s in spec.systems},
                "units": [{k: v for k, v in u.items() if k != "questions"} for u in units]}
        results["sizes"].append(size)
        _write(spec.out, results, units, h)
        say(f"H={h:,} done in {size['wall_s']} s")
    return results


def _needles(dataset: BenchDataset, wanted: Sequence[str] | None) -> list[BenchConversation]:
    if not wanted:
        return list(dataset.conversations)
    known = {c.id for c in dataset.conversations}
    missing = [w for w in wanted if w not in known]
    if missing:
        raise InputError(f"{dataset.path}: no conversation {', '.join(missing)}")
    return [c for c in dataset.conversations if c.id in set(wanted)]


def _distractors(spec: HaystackSpec, dataset: BenchDataset, needle: BenchConversation, h: int,
                 say: ProgressLine) -> tuple[Path | None, Path | None, RecipeReport | None]:
    """The needle's H distractor turns as JSON Lines in the cache (written once), and the recipe's report."""
    if h == 0:
        return None, None, None
    cache = spec.cache_dir / RECIPE_VERSION / slug(f"{dataset.sha256[:12]}-{needle.id}-h{h}-s{spec.seed}"
                                                   f"-y{spec.years_before:g}")
    turns_file, report_file = cache / "turns.jsonl", cache / "recipe.json"
    if turns_file.exists() and report_file.exists():
        return turns_file, cache, RecipeReport.model_validate_json(report_file.read_text(encoding="utf-8"))
    say(f"H={h:,} {needle.id}: writing distractors to {cache}")
    cache.mkdir(parents=True, exist_ok=True)
    recipe = DistractorRecipe(needle, dataset.conversations, seed=spec.seed, years_before=spec.years_before)
    report = recipe.plan(h)
    partial = turns_file.with_suffix(".partial")
    with partial.open("w", encoding="utf-8") as f:
        for turn in recipe.turns():
            f.write(turn.model_dump_json() + "\n")
    os.replace(partial, turns_file)
    atomic_write(report_file, report.model_dump_json(indent=2))
    return turns_file, cache, report


def _in_child(fn: Callable[[UnitJob], dict[str, Any]], job: UnitJob) -> dict[str, Any]:
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, job).result()


def _unit(spec: HaystackSpec, needle: BenchConversation, system: str, h: int, turns_file: Path | None,
          cache: Path | None) -> dict[str, Any]:
    scratch = spec.out / "scratch" / f"h{h}" / slug(needle.id) / system
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    job = UnitJob(system=system, scratch=scratch, config=spec.system_config(), needle=needle, h=h,
                  turns_file=turns_file, cache=cache, write_key=spec.write_key(), rebuild=spec.rebuild,
                  sleep=spec.sleep, ks=spec.ks, budgets=spec.budgets, fetch_k=spec.fetch_k())
    started = time.perf_counter()
    build = _in_child(build_unit, job)
    query = _in_child(query_unit, job)
    if not spec.keep_stores:
        shutil.rmtree(scratch, ignore_errors=True)
    questions = query.pop("records")
    return {"system": system, "conversation": needle.id, "h": h, "build": build, "query": query,
            "wall_s": round(time.perf_counter() - started, 1), "questions": questions}


def _run_info(spec: HaystackSpec, dataset: BenchDataset, needles: Sequence[BenchConversation]) -> dict[str, Any]:
    cfg = spec.system_config()
    return {
        "benchmark": "haystack", "recipe": RECIPE_VERSION, "data": str(spec.data), "data_sha256": dataset.sha256,
        "needles": [c.id for c in needles], "questions": sum(len(c.questions) for c in needles),
        "haystack": spec.haystack, "systems": spec.systems, "ks": spec.ks, "budgets": spec.budgets,
        "budget_k": spec.fetch_k(), "seed": spec.seed, "years_before": spec.years_before, "sleep": spec.sleep,
        "cache_dir": str(spec.cache_dir), "write_key": spec.write_key(),
        "embedder": cfg.embedder.model_dump(mode="json"), "cpus": os.cpu_count(),
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine()},
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _write(out: Path, results: dict[str, Any], units: list[dict[str, Any]], h: int) -> None:
    atomic_write(out / "results.json", json.dumps(results, indent=2, default=str) + "\n")
    atomic_write(out / "report.md", render_haystack(results))
    # per-question records of this H, for a closer look
    atomic_write(out / f"questions-h{h}.json", json.dumps(
        [{"system": u["system"], "conversation": u["conversation"], "questions": u["questions"]} for u in units],
        default=str) + "\n")
