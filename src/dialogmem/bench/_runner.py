"""Run a benchmark: every (system, conversation) unit once, checkpointed, then the report.

Per unit: build the system in an empty scratch directory, feed the conversation turn by turn,
search every question (retrieval metrics need no LLM), answer and judge it when an LLM is
configured, save the unit atomically. A killed run starts again at the first unsaved unit; its
questions answered before the kill (saved one by one) are not asked again: the unit's system is
built again and only the remaining questions run (the unit's cost then covers that attempt).
"""

from __future__ import annotations

import logging
import platform
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from .._config import Config, LLMConfig
from .._errors import ConfigError, InputError, LLMError
from .._models import LLMClient
from .._prompts import answer_v2 as answer_prompt
from .._prompts import judge as judge_prompts
from . import _metrics as m
from ._loaders import LOCOMO_CATEGORIES, BenchConversation, BenchDataset, BenchQuestion, load_locomo, load_longmemeval
from ._report import write_report
from ._retrieval import DEFAULT_BUDGET_K, DEFAULT_BUDGETS, has_target, search_question
from ._state import STATE_VERSION, RunState
from ._systems import AnswerOutcome, BenchSystem, SystemFactory

logger = logging.getLogger(__name__)

SYSTEMS = ("dialogmem", "naive-dense", "naive-bm25", "naive-hybrid", "naive-convex", "full-context",
           "dialogmem-postgres")
#: what a run without --systems compares (dialogmem-postgres needs --pg-url, so it is asked for by name)
RETRIEVAL_SYSTEMS = tuple(s for s in SYSTEMS if s not in ("full-context", "dialogmem-postgres"))
DEFAULT_SYSTEMS = (*RETRIEVAL_SYSTEMS, "full-context")


class BenchSpec(BaseModel):
    """Everything that defines a run (what the CLI options fill in)."""

    dataset: Literal["locomo", "longmemeval"]
    data: Path
    out: Path
    conversations: list[str] | None = None  # LoCoMo sample_ids / LongMemEval question_ids
    limit: int | None = None  # LongMemEval: the first N questions; LoCoMo: per conversation
    # LoCoMo: only these category ids (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial)
    categories: list[int] | None = Field(None, min_length=1)
    # LoCoMo: a seeded random N of each conversation's questions (after ``categories``), in dataset order
    sample: int | None = Field(None, ge=1)
    # llm-free: no LLM anywhere; llm-write: dialogmem writes with its LLM, retrieval metrics only;
    # llm: also QA (reader) and judge
    mode: Literal["llm-free", "llm-write", "llm"] = "llm-free"
    ks: list[int] = Field(default_factory=lambda: [1, 5, 10, 20])
    systems: list[str] | None = None  # None: all that the mode supports
    answer_k: int = 10  # hits the naive reader sees
    budgets: list[int] = Field(default_factory=lambda: list(DEFAULT_BUDGETS))  # context tokens; [] for none
    budget_k: int = DEFAULT_BUDGET_K  # hits fetched per question to fill the budgets (at least max(ks))
    config: Config = Field(default_factory=Config)  # dialogmem's own config (its llm is the reader's)
    sleep: bool = True  # run Memory.sleep() after the final flush
    fresh: bool = False  # discard earlier checkpoints in ``out``
    answer: Literal["auto", "light", "deep"] | None = None  # dialogmem's answer mode (None: its config's)
    judge: bool = True  # grade answers with the LLM judge (--no-judge: F1 and BLEU-1 only)
    llm_free_memory: bool = False  # dialogmem builds and searches its memory without the LLM (it only reads)
    answer_retries: int = Field(1, ge=0, le=5)  # a failed answer call is tried again this often, then recorded
    keep_stores: bool = False  # leave each unit's store in out/scratch/SYSTEM/CONVERSATION after it finishes
    # dialogmem-postgres: the PostgreSQL (with pgvector) that holds its journal and index, a schema per unit
    pg_url: str | None = None

    @field_validator("categories")
    @classmethod
    def _known_categories(cls, value: list[int] | None) -> list[int] | None:
        """An id LoCoMo does not use would choose nothing, silently."""
        unknown = sorted(set(value or ()) - LOCOMO_CATEGORIES.keys())
        if unknown:
            raise ValueError(f"unknown LoCoMo category ids {unknown}; known: {sorted(LOCOMO_CATEGORIES)}")
        return value

    def chosen_systems(self) -> list[str]:
        if self.systems:
            unknown = [s for s in self.systems if s not in SYSTEMS]
            if unknown:
                raise InputError(f"unknown system {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
            chosen = list(dict.fromkeys(self.systems))
        else:
            chosen = list(DEFAULT_SYSTEMS if self.mode == "llm" else RETRIEVAL_SYSTEMS)
        if "dialogmem-postgres" in chosen and not self.pg_url:
            raise InputError("dialogmem-postgres runs dialogmem with store.backend = 'postgres': pass --pg-url "
                             "postgresql://… (a database with pgvector; each unit gets a schema of its own)")
        if self.mode != "llm" and "full-context" in chosen:
            raise InputError("full-context is a QA-only baseline: it needs --mode llm")
        return chosen

    def fetch_k(self) -> int:
        """Hits one search fetches to fill the budgets: ``budget_k``, or the largest k when larger."""
        return max([self.budget_k, *self.ks])

    def settings(self, dataset: BenchDataset) -> dict[str, Any]:
        """What must be equal for checkpoints of two invocations to be combined."""
        llm = self.config.llm
        chosen = {"limit": self.limit, "categories": self.categories, "sample": self.sample}
        # the question selection, only when one is made (a run directory written before it was recorded
        # resumes as it did); units saved for other questions must not be mixed into a run
        selection = {"questions": chosen} if any(v is not None for v in chosen.values()) else {}
        # answers written with another answer prompt are not comparable (LLM runs only, so that
        # retrieval-only run directories written before this was recorded still resume)
        prompt = {"answer_prompt": answer_prompt.VERSION} if self.mode == "llm" else {}
        return {**selection, **prompt,
            "dataset": self.dataset, "data_sha256": dataset.sha256, "mode": self.mode,
            "ks": sorted(self.ks), "answer_k": self.answer_k, "sleep": self.sleep,
            "budgets": sorted(self.budgets), "budget_k": self.fetch_k() if self.budgets else None,
            "state_version": STATE_VERSION,
            "llm": llm.model_dump(exclude={"api_key", "timeout_s", "max_retries", "backoff_s"})
            if self.mode != "llm-free" else None,
            "dialogmem": self.dialogmem_config().model_dump(
                mode="json", include={"embedder", "write", "read", "sleep", "answer"}),
            "answer": self.answer, "judge": self.judge,
        }

    def dialogmem_config(self) -> Config:
        """dialogmem's config for this run: with ``llm_free_memory`` every role but the answerer is
        set to its LLM-free backend, so the LLM is only the reader (as the naive baselines use it)."""
        cfg = self.config
        if self.answer is not None:
            cfg = cfg.model_copy(update={"answer": cfg.answer.model_copy(update={"mode": self.answer})})
        if not self.llm_free_memory:
            return cfg
        synthesis = "rules" if cfg.write.synthesis in ("auto", "llm") else cfg.write.synthesis
        rules = {"write": cfg.write.model_copy(update={"extractor": "rules", "turn_writer": "rules", "events": "off",
                                                       "synthesis": synthesis}),
                 "read": cfg.read.model_copy(update={"planner": "rules", "selector": "rules"}),
                 "sleep": cfg.sleep.model_copy(update={"updater": "rules", "consolidator": "rules"})}
        return cfg.model_copy(update=rules)


@dataclass
class Progress:
    """One progress report: which unit, what stage, how far."""

    units_done: int
    units_total: int
    system: str
    conversation: str
    stage: Literal["ingest", "questions", "saved", "skipped"]
    questions_done: int = 0
    questions_total: int = 0


ProgressCallback = Callable[[Progress], None]


def load_dataset(spec: BenchSpec) -> BenchDataset:
    if spec.limit is not None and spec.sample is not None:
        raise InputError("--limit and --sample both choose questions: give one of them")
    if spec.dataset != "locomo" and (spec.categories is not None or spec.sample is not None):
        raise InputError("--categories and --sample are LoCoMo options")
    if spec.dataset == "locomo":
        dataset = load_locomo(spec.data, spec.conversations)
        for conv in dataset.conversations:  # a smaller QA run: the whole conversation is still ingested
            conv.questions = chosen_questions(conv, spec)
        return dataset
    return load_longmemeval(spec.data, spec.conversations, limit=spec.limit)


def default_factories(spec: BenchSpec, reader: LLMClient | None) -> dict[str, SystemFactory]:
    """The real systems: dialogmem through the facade, and the baselines on one shared embedder."""
    from .._models import make_embedder
    from ._baselines import FullContext, NaiveMode, NaiveRAG
    from ._systems import DialogmemSystem

    embedder = make_embedder(spec.config.embedder)
    cfg = spec.dialogmem_config()
    if spec.mode == "llm-free":
        cfg = cfg.model_copy(update={"llm": LLMConfig(backend="none")})
    elif cfg.llm.backend == "none":
        raise ConfigError(f"--mode {spec.mode} needs an LLM for dialogmem: pass --llm or configure [llm]")

    def naive(mode: NaiveMode) -> SystemFactory:
        return lambda conv, scratch: NaiveRAG(mode, scratch, embedder, reader=reader, answer_k=spec.answer_k,
                                              reference_time=conv.last_time())

    return {
        "dialogmem": lambda conv, scratch: DialogmemSystem(cfg, scratch, run_sleep=spec.sleep),
        "dialogmem-postgres": lambda conv, scratch: DialogmemSystem(_on_postgres(cfg, spec.pg_url, scratch), scratch,
                                                                    run_sleep=spec.sleep),
        "naive-dense": naive("dense"),
        "naive-bm25": naive("bm25"),
        "naive-hybrid": naive("hybrid"),
        "naive-convex": naive("convex"),
        "full-context": lambda conv, scratch: FullContext(reader, window_tokens=cfg.llm.n_ctx,
                                                          answer_tokens=min(cfg.llm.max_tokens, 128)),
    }


def _on_postgres(cfg: Config, url: str | None, scratch: Path) -> Config:
    """``cfg`` with journal and index in PostgreSQL, in a schema named after the unit's scratch
    directory, emptied first (a unit starts from nothing, as its scratch directory does)."""
    import hashlib

    import psycopg

    if not url:
        raise InputError("dialogmem-postgres needs --pg-url")
    schema = "bench_" + hashlib.sha256(str(scratch.resolve()).encode()).hexdigest()[:16]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return cfg.with_overrides(journal={"url": url, "schema_name": schema}, store={"backend": "postgres"})


def chosen_questions(conv: BenchConversation, spec: BenchSpec) -> list[BenchQuestion]:
    """The questions of ``conv`` that a LoCoMo run asks: those of ``spec.categories``, then the first
    ``spec.limit`` or a random ``spec.sample`` of them. The sample is seeded by the conversation id, so
    every run (every system, every config) asks the same questions, and keeps the dataset's order.
    LoCoMo lists questions roughly by category, so the first N are not a fair mix: a sample is."""
    qs = list(conv.questions)
    if spec.categories is not None:
        qs = [q for q in qs if q.category_id in spec.categories]
    if spec.limit is not None:
        return qs[:spec.limit]
    if spec.sample is not None and spec.sample < len(qs):
        keep = set(random.Random(conv.id).sample(range(len(qs)), spec.sample))
        return [q for i, q in enumerate(qs) if i in keep]
    return qs


def run_benchmark(spec: BenchSpec, *, progress: ProgressCallback | None = None,
                  factories: Mapping[str, SystemFactory] | None = None,
                  reader: LLMClient | None = None, judge: LLMClient | None = None) -> dict[str, Any]:
    """Run (or resume) the benchmark ``spec`` describes; writes results.json, report.md, plots.

    ``reader`` answers for the baselines and ``judge`` grades answers; both default to a client
    built from ``spec.config.llm`` in ``llm`` mode. ``factories`` replaces the built-in systems.
    """
    if not spec.ks or min(spec.ks) < 1:
        raise InputError("--k needs positive integers, e.g. 1,5,10,20")
    if spec.budgets and min(spec.budgets) < 1:
        raise InputError("--budgets needs positive token counts, e.g. 256,512,1024")
    if spec.budget_k < 1:
        raise InputError("--budget-k needs a positive number of hits")
    systems = spec.chosen_systems()
    dataset = load_dataset(spec)
    if not dataset.conversations:
        raise InputError(f"{spec.data}: no conversations selected")
    state = RunState(spec.out)
    state.acquire()
    try:
        return _run(spec, dataset, systems, state, progress, factories, reader, judge)
    finally:
        state.release()


def _run(spec: BenchSpec, dataset: BenchDataset, systems: list[str], state: RunState,
         progress: ProgressCallback | None, factories: Mapping[str, SystemFactory] | None,
         reader: LLMClient | None, judge: LLMClient | None) -> dict[str, Any]:
    if spec.fresh:
        state.discard()
    resumed = state.check_settings(spec.settings(dataset))
    if spec.mode == "llm" and (reader is None or judge is None):
        if spec.config.llm.backend == "none":
            raise ConfigError("--mode llm needs an LLM: pass --llm or configure [llm] in dialogmem.toml")
        from .._models import make_llm

        shared = make_llm(spec.config.llm)
        reader = reader or shared
        judge = judge or shared
    if not spec.judge:
        judge = None
    chosen = factories if factories is not None else default_factories(spec, reader)
    missing = [s for s in systems if s not in chosen]
    if missing:
        raise ConfigError(f"no implementation for system {', '.join(missing)}")

    started = time.perf_counter()
    units = [(conv, name) for conv in dataset.conversations for name in systems]
    done = 0
    for conv, name in units:
        if state.load_unit(name, conv.id) is not None:
            done += 1
            _report(progress, Progress(done, len(units), name, conv.id, "skipped"))
            continue
        _run_unit(spec, dataset, conv, name, chosen[name], state, reader, judge,
                  lambda p: _report(progress, p), done, len(units))
        done += 1
        _report(progress, Progress(done, len(units), name, conv.id, "saved"))
    results = collect_results(spec, dataset, systems, state)
    results["run"]["invocation_wall_s"] = round(time.perf_counter() - started, 3)
    results["run"]["resumed"] = resumed
    write_report(results, spec.out)
    return results


def _report(progress: ProgressCallback | None, event: Progress) -> None:
    if progress is not None:
        progress(event)


def _run_unit(spec: BenchSpec, dataset: BenchDataset, conv: BenchConversation, name: str,
              factory: SystemFactory, state: RunState, reader: LLMClient | None, judge: LLMClient | None,
              progress: ProgressCallback, done: int, total: int) -> None:
    scratch = state.fresh_scratch(name, conv.id)
    unit_started = time.perf_counter()
    system = factory(conv, scratch)
    try:
        progress(Progress(done, total, name, conv.id, "ingest", 0, len(conv.questions)))
        cost = system.ingest(conv)
        reader_before, judge_before = _llm_snapshot(reader), _llm_snapshot(judge)
        records = []
        saved = state.load_partial(name, conv.id)  # questions answered before an interruption
        for i, q in enumerate(conv.questions):
            rec = saved.get(q.id)
            if rec is None:
                rec = _question(spec, dataset.name, system, q, judge)
                state.append_partial(name, conv.id, rec)
            records.append(rec)
            progress(Progress(done, total, name, conv.id, "questions", i + 1, len(conv.questions)))
        # query-time LLM use: the system's own counters when it keeps them (dialogmem), else the
        # shared reader's "reader" stage; the judge's calls are never counted as the system's cost
        own = getattr(system, "query_usage", None)
        query_llm = own() if callable(own) else _usage_delta(reader_before, _llm_snapshot(reader), "reader")
        judge_llm = _usage_delta(judge_before, _llm_snapshot(judge), "judge")
    finally:
        system.close()
    header = {
        "system": name, "conversation": conv.id, "cost": cost.model_dump(),
        "unit_wall_s": round(time.perf_counter() - unit_started, 3),
        "query_llm": query_llm, "judge_llm": judge_llm,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    state.save_unit(header, records)
    state.drop_partial(name, conv.id)
    if not spec.keep_stores:
        state.remove_scratch(scratch)


def _question(spec: BenchSpec, dataset: str, system: BenchSystem, q: BenchQuestion,
              judge: LLMClient | None) -> dict[str, Any]:
    rec: dict[str, Any] = {"qid": q.id, "category": q.category, "adversarial": q.adversarial,
                           "abstention": q.abstention}
    if system.retrieval and has_target(q):
        rec.update(search_question(system, dataset, q, spec.ks, spec.budgets, spec.fetch_k()))
    if spec.mode == "llm":
        ans, error = _answer(system, q, spec.answer_retries)
        rec.update(prediction=ans.text, answer_ms=round(ans.latency_ms, 3),
                   answer_context_tokens=ans.context_tokens, truncated=ans.truncated,
                   answer_prompt_tokens=ans.prompt_tokens, answer_mode=ans.mode, answer_rounds=ans.rounds)
        if error:
            rec["answer_error"] = error
        rec.update(qa_scores(dataset, q, ans.text, judge))
        if ans.cited_turn_ids is not None:
            rec.update(citation_scores(ans.cited_turn_ids, q.evidence))
        if ans.light_text is not None and dataset == "locomo":  # light-only F1 of the same run, no extra call
            rec.update(light_prediction=ans.light_text,
                       f1_light=m.locomo_f1(ans.light_text, q.answer, q.category_id))
    return rec


def citation_scores(cited: list[str], evidence: list[str]) -> dict[str, Any]:
    """How well an answer's cited turns match the question's evidence turns: ``cited_turns`` always;
    with evidence and at least one citation, ``cite_precision`` (share of the cited turns that are
    evidence) and ``cite_hit`` (1.0 when any is)."""
    out: dict[str, Any] = {"cited_turns": list(cited)}
    if cited and evidence:
        right = len(set(cited) & set(evidence))
        out.update(cite_precision=right / len(set(cited)), cite_hit=1.0 if right else 0.0)
    return out


def _answer(system: BenchSystem, q: BenchQuestion, retries: int) -> tuple[AnswerOutcome, str | None]:
    """The system's answer; an ``LLMError`` is tried again ``retries`` times, then recorded as a
    failed question (an empty answer, scored as such) instead of ending the run."""
    started = time.perf_counter()
    for attempt in range(retries + 1):
        try:
            return system.answer(q), None
        except LLMError as exc:
            logger.warning("question %s: answer failed (attempt %d): %s", q.id, attempt + 1, exc)
            error = f"{type(exc).__name__}: {exc}"
    return AnswerOutcome(text="", latency_ms=(time.perf_counter() - started) * 1000), error


def qa_scores(dataset: str, q: BenchQuestion, prediction: str, judge: LLMClient | None) -> dict[str, Any]:
    """F1 and BLEU-1 (LoCoMo) and the LLM judge's verdict for one answer."""
    out: dict[str, Any] = {}
    if dataset == "locomo":
        out["f1"] = m.locomo_f1(prediction, q.answer, q.category_id)
        # category 5 has no reference text to overlap with: only detection is scored
        out["bleu1"] = None if q.adversarial else m.bleu1(prediction, q.answer)
    template = judge_prompts.template_for(dataset, q.category, adversarial=q.adversarial,
                                          abstention=q.abstention)
    out["judge_template"] = template
    out["judge"] = None
    if judge is not None:
        try:
            messages = judge_prompts.judge_messages(template, q.question, q.answer, prediction)
            verdict = judge.complete_json(messages, judge_prompts.Verdict, stage="judge")
            out["judge"] = 1.0 if verdict.verdict == "yes" else 0.0
        except LLMError as exc:
            # counted as a judge failure in the report, never as a wrong or right answer
            out["judge_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _llm_snapshot(client: LLMClient | None) -> dict[str, Any] | None:
    usage = getattr(client, "usage", None)
    return usage.snapshot() if usage is not None else None


def _usage_delta(before: dict[str, Any] | None, after: dict[str, Any] | None, stage: str
                 ) -> dict[str, int] | None:
    """LLM calls and tokens of one stage between two usage snapshots."""
    if before is None or after is None:
        return None
    b = before.get("llm", {}).get(stage, {})
    a = after.get("llm", {}).get(stage, {})
    keys = ("calls", "prompt_tokens", "completion_tokens")
    return {key: int(a.get(key, 0)) - int(b.get(key, 0)) for key in keys}


def collect_results(spec: BenchSpec, dataset: BenchDataset, systems: list[str], state: RunState
                    ) -> dict[str, Any]:
    """Everything the report needs, read back from the saved units of the selected run."""
    from ._report import summarise

    units: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for conv in dataset.conversations:
        for name in systems:
            unit = state.load_unit(name, conv.id)
            if unit is not None:
                units[name].append(unit)
    return {
        "run": {
            "dataset": spec.dataset, "data": str(spec.data), "data_sha256": dataset.sha256,
            "mode": spec.mode, "ks": sorted(spec.ks), "answer_k": spec.answer_k, "sleep": spec.sleep,
            "budgets": sorted(spec.budgets), "budget_k": spec.fetch_k() if spec.budgets else None,
            "answer": spec.answer, "judge": spec.judge, "llm_free_memory": spec.llm_free_memory,
            "answer_prompt": answer_prompt.VERSION if spec.mode == "llm" else None,
            "selection": {"limit": spec.limit, "categories": spec.categories, "sample": spec.sample},
            "conversations": [c.id for c in dataset.conversations],
            "questions": sum(len(c.questions) for c in dataset.conversations),
            "systems": systems,
            "llm": spec.config.llm.model_dump(exclude={"api_key"}) if spec.mode != "llm-free" else None,
            "machine": {"python": platform.python_version(), "platform": platform.platform(),
                        "processor": platform.processor() or platform.machine()},
            "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        "evidence": dataset.evidence.model_dump(),
        "judge_templates": judge_prompts.TEMPLATES if spec.mode == "llm" else {},
        "judge_system": judge_prompts.VERSION,
        "systems": {name: summarise(dataset.name, spec.ks, us, budgets=sorted(spec.budgets))
                    for name, us in units.items()},
    }
