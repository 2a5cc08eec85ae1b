"""``dialogmem bench locomo|longmemeval``: each command body is one ``run_benchmark`` call."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .._config import Config
from .._errors import DialogmemError, InputError, first_problem
from ._runner import SYSTEMS, BenchSpec, run_benchmark
from ._runner import Progress as RunProgress

bench_app = typer.Typer(help="Run the LoCoMo, LongMemEval, haystack and changes benchmarks (JSON, Markdown and PNG).",
                        no_args_is_help=True)

_DATA = typer.Option(..., "--data", help="the dataset file (original JSON format)", exists=False)
_OUT_HELP = "output directory: results.json, report.md, plots, and checkpoints in state/"
_MODE_HELP = ("llm-free: retrieval metrics, no LLM; llm-write: dialogmem writes with its LLM, retrieval "
              "metrics only; llm: also QA and judge")
_MODE = typer.Option("llm-free", "--mode", help=_MODE_HELP)
_LLM = typer.Option(None, "--llm",
                    help="reader/judge (and dialogmem) LLM: a GGUF path, 'openai:MODEL', or 'none'")
_BASE_URL = typer.Option(None, "--llm-base-url", help="base URL of an OpenAI-compatible server")
_K = typer.Option("1,5,10,20", "--k", help="comma-separated k values for recall@k")
_BUDGETS = typer.Option("256,512,1024", "--budgets",
                        help="comma-separated context-token budgets for recall at a fixed budget ('' for none)")
_BUDGET_K = typer.Option(50, "--budget-k", help="hits fetched per question to fill the budgets (at least max k)")
_SYSTEMS = typer.Option(None, "--systems", help=f"comma-separated subset of: {', '.join(SYSTEMS)}")
_CONFIG = typer.Option(None, "--config", help="dialogmem.toml for the dialogmem system")
_ANSWER_K = typer.Option(10, "--answer-k", help="hits the naive baselines give the reader")
_SLEEP = typer.Option(True, "--sleep/--no-sleep", help="run Memory.sleep() after the final flush")
_FRESH = typer.Option(False, "--fresh", help="discard the checkpoints already in --out")
_QUIET = typer.Option(False, "--quiet", help="no progress bar")
_ANSWER = typer.Option(None, "--answer", help="dialogmem's answer mode with --mode llm: light, deep or auto "
                       "(default: answer.mode of its config)")
_JUDGE = typer.Option(True, "--judge/--no-judge", help="grade answers with the LLM judge (doubles the LLM calls)")
_LLM_FREE_MEMORY = typer.Option(False, "--llm-free-memory", help=(
    "dialogmem builds and searches its memory without the LLM (rules extractor, planner, selector, "
    "updater, consolidator): the LLM is only the reader, as for the naive baselines"))
_KEEP_STORES = typer.Option(False, "--keep-stores", help=(
    "keep each finished unit's store (OUT/scratch/SYSTEM/CONVERSATION) for inspection; --fresh removes it"))


def _split(text: str | None) -> list[str] | None:
    if not text:
        return None
    items = [t.strip() for t in text.split(",") if t.strip()]
    return items or None


def _ints(text: str, option: str, *, allow_empty: bool = False) -> list[int]:
    try:
        values = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError as exc:
        raise InputError(f"{option} must be comma-separated integers, got {text!r}") from exc
    if (not values and not allow_empty) or (values and values[0] < 1):
        raise InputError(f"{option} must be positive integers, got {text!r}")
    return values


def llm_overrides(llm: str | None, base_url: str | None) -> dict[str, Any]:
    """``--llm`` as config overrides: a GGUF path, ``openai:MODEL`` or ``none``."""
    if not llm:
        return {"llm": {"base_url": base_url}} if base_url else {}
    if llm == "none":
        return {"llm": {"backend": "none"}}
    if llm.startswith("openai:"):
        return {"llm": {"backend": "openai", "model": llm.split(":", 1)[1], "base_url": base_url}}
    if llm.endswith(".gguf") or Path(llm).is_file():
        return {"llm": {"backend": "llama_cpp", "model_path": llm}}
    raise InputError(f"--llm must be a .gguf path, 'openai:MODEL' or 'none', got {llm!r}")


@contextmanager
def _one_line_errors() -> Iterator[None]:
    """A bench command's refusal: one line on stderr ("Error: ..."), exit status 1."""
    try:
        yield
    except DialogmemError as exc:
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(1) from exc
    except ValidationError as exc:
        where, what = first_problem(exc)
        typer.echo(f"Error: invalid {where}: {what}", err=True)
        raise typer.Exit(1) from exc


def _run(dataset: str, **kw: Any) -> None:
    quiet = kw.pop("quiet")
    try:
        with _one_line_errors():
            config = Config.load(kw.pop("config"), **llm_overrides(kw.pop("llm"), kw.pop("llm_base_url")))
            spec = BenchSpec(dataset=dataset, ks=_ints(kw.pop("k"), "--k"),
                             budgets=_ints(kw.pop("budgets"), "--budgets", allow_empty=True),
                             conversations=_split(kw.pop("conversations")),
                             categories=(_ints(chosen, "--categories")
                                         if (chosen := kw.pop("categories", None)) else None),
                             systems=_split(kw.pop("systems")), config=config, **kw)
            if quiet:
                results = run_benchmark(spec)
            else:
                with _ProgressBar() as bar:
                    results = run_benchmark(spec, progress=bar.update)
    except KeyboardInterrupt as exc:
        typer.echo("Interrupted: run the same command again to continue where it stopped.", err=True)
        raise typer.Exit(130) from exc
    typer.echo(f"Wrote {spec.out / 'report.md'} and {spec.out / 'results.json'} "
               f"({results['run']['questions']} questions, {len(results['systems'])} systems)")


class _ProgressBar:
    """Two rich bars: units done, and questions of the unit being run.

    The bars appear with the first event, so an error in the options prints nothing but itself.
    """

    def __init__(self) -> None:
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=Console(stderr=True))
        self._started = False
        self._units: Any = None
        self._questions: Any = None

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._progress.stop()

    def update(self, event: RunProgress) -> None:
        p = self._progress
        if not self._started:
            p.start()
            self._started = True
            self._units = p.add_task("units", total=event.units_total)
            self._questions = p.add_task("questions", total=None)
        p.update(self._units, total=event.units_total, completed=event.units_done,
                 description=f"units ({event.system} / {event.conversation})")
        if event.stage == "ingest":
            p.update(self._questions, total=event.questions_total, completed=0, description="ingesting")
        elif event.stage == "questions":
            p.update(self._questions, total=event.questions_total, completed=event.questions_done,
                     description="questions")


@bench_app.command("locomo")
def locomo(
    data: Path = _DATA,
    out: Path = typer.Option(Path("bench-out/locomo"), "--out", help=_OUT_HELP),
    conversations: str = typer.Option(None, "--conversations",
                                      help="comma-separated sample_ids, e.g. conv-26"),
    mode: str = _MODE, llm: str = _LLM, llm_base_url: str = _BASE_URL, k: str = _K, systems: str = _SYSTEMS,
    config: Path = _CONFIG, answer_k: int = _ANSWER_K, sleep: bool = _SLEEP, fresh: bool = _FRESH,
    quiet: bool = _QUIET, budgets: str = _BUDGETS, budget_k: int = _BUDGET_K,
    limit: int = typer.Option(None, "--limit", help="only the first N questions of each conversation"),
    categories: str = typer.Option(None, "--categories", help=(
        "only these category ids, e.g. 1,2,3,4 (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, "
        "5 adversarial)")),
    sample: int = typer.Option(None, "--sample", help=(
        "a random N of each conversation's questions (after --categories), the same in every run; LoCoMo "
        "lists its questions roughly by category, so the first N (--limit) are not a fair mix")),
    answer: str = _ANSWER, judge: bool = _JUDGE, llm_free_memory: bool = _LLM_FREE_MEMORY,
    keep_stores: bool = _KEEP_STORES,
    pg_url: str = typer.Option(None, "--pg-url", help=(
        "PostgreSQL with pgvector for the dialogmem-postgres system (store.backend = 'postgres'; a schema "
        "per unit)")),
) -> None:
    """LoCoMo: turn- and session-level recall@k and at context budgets per category; with an LLM, F1,
    BLEU-1, judge accuracy, reader tokens, dialogmem's deep ratio and rounds."""
    logging.basicConfig(level=logging.WARNING)
    _run("locomo", data=data, out=out, conversations=conversations, limit=limit, sample=sample,
         categories=categories, mode=mode, llm=llm,
         llm_base_url=llm_base_url, k=k, systems=systems, config=config, answer_k=answer_k, sleep=sleep,
         fresh=fresh, quiet=quiet, budgets=budgets, budget_k=budget_k, answer=answer, judge=judge,
         llm_free_memory=llm_free_memory, keep_stores=keep_stores, pg_url=pg_url)


@bench_app.command("longmemeval")
def longmemeval(
    data: Path = _DATA,
    out: Path = typer.Option(Path("bench-out/longmemeval"), "--out", help=_OUT_HELP),
    questions: str = typer.Option(None, "--questions", help="comma-separated question_ids"),
    limit: int = typer.Option(None, "--limit", help="only the first N questions"),
    mode: str = _MODE, llm: str = _LLM, llm_base_url: str = _BASE_URL, k: str = _K, systems: str = _SYSTEMS,
    config: Path = _CONFIG, answer_k: int = _ANSWER_K, sleep: bool = _SLEEP, fresh: bool = _FRESH,
    quiet: bool = _QUIET, budgets: str = _BUDGETS, budget_k: int = _BUDGET_K,
    answer: str = _ANSWER, judge: bool = _JUDGE, llm_free_memory: bool = _LLM_FREE_MEMORY,
    keep_stores: bool = _KEEP_STORES,
) -> None:
    """LongMemEval: recall_any/all per session and turn, at k and at context budgets; with an LLM,
    per-type judge accuracy."""
    logging.basicConfig(level=logging.WARNING)
    _run("longmemeval", data=data, out=out, conversations=questions, limit=limit, mode=mode, llm=llm,
         llm_base_url=llm_base_url, k=k, systems=systems, config=config, answer_k=answer_k, sleep=sleep,
         fresh=fresh, quiet=quiet, budgets=budgets, budget_k=budget_k, answer=answer, judge=judge,
         llm_free_memory=llm_free_memory, keep_stores=keep_stores)


@bench_app.command("changes")
def changes(
    data: str = typer.Option("changes", "--data", help=(
        "'changes' (the probe set shipped with dialogmem) or a file in its format: LoCoMo JSON whose qa "
        "items add state, change_kind, said and superseded")),
    out: Path = typer.Option(Path("bench-out/changes"), "--out", help="output directory: results.json, report.md"),
    systems: str = typer.Option("dialogmem,naive-hybrid", "--systems",
                                help="comma-separated retrieval systems (see `bench locomo --systems`)"),
    conversations: str = typer.Option(None, "--conversations", help="comma-separated sample_ids (default: all)"),
    depth: int = typer.Option(10, "--depth", help="hits fetched per question (stale-first looks at all of them)"),
    config: Path = _CONFIG, sleep: bool = _SLEEP, quiet: bool = _QUIET,
) -> None:
    """Facts that change: for present-state questions, is the newest statement the first hit and does a
    superseded one rank above it; for past-state ones, is the older statement found. LLM-free; rank 1,
    recall@3 and stale-first by state, kind of change and how it was said, dialogmem beside naive hybrid."""
    from ._changes_bench import ChangesSpec, run_changes

    logging.basicConfig(level=logging.WARNING)
    with _one_line_errors():
        spec = ChangesSpec(data=data, out=out, systems=_split(systems) or [], conversations=_split(conversations),
                           config=Config.load(config), sleep=sleep, depth=depth)
        results = run_changes(spec, progress=None if quiet else (lambda line: typer.echo(line, err=True)))
    typer.echo(results["markdown"])
    typer.echo(f"Wrote {out / 'report.md'} and {out / 'results.json'} ({results['run']['questions']} questions)")


@bench_app.command("haystack")
def haystack(
    data: Path = _DATA,
    out: Path = typer.Option(Path("bench-out/haystack"), "--out", help="output directory: results.json, report.md"),
    conversations: str = typer.Option(None, "--conversations",
                                      help="needle sample_ids, e.g. conv-26,conv-30 (default: all)"),
    sizes: str = typer.Option("0,10000,100000,1000000", "--haystack", help="comma-separated H values (turns)"),
    systems: str = typer.Option("dialogmem,naive-hybrid", "--systems", help="dialogmem and/or naive-hybrid"),
    k: str = typer.Option("10", "--k", help="comma-separated k values for recall@k"),
    budgets: str = typer.Option("512", "--budgets", help="comma-separated context-token budgets ('' for none)"),
    budget_k: int = _BUDGET_K,
    cache_dir: Path = typer.Option(Path("bench-out/haystack-cache"), "--cache-dir",
                                   help="distractor turns, their vectors and dialogmem's exports, for later runs"),
    seed: int = typer.Option(0, "--seed", help="seed of the distractor recipe"),
    config: Path = _CONFIG,
    sleep: bool = typer.Option(False, "--sleep/--no-sleep", help="run Memory.sleep() after the needle"),
    rebuild: bool = typer.Option(False, "--rebuild", help=(
        "write dialogmem's haystack through the write path (and embed naive's) even when the cache holds it")),
    keep_stores: bool = _KEEP_STORES,
) -> None:
    """One user's long history: H distractor turns, then a LoCoMo conversation and its questions; recall,
    search latency, ingest rate, RSS and disk per H, dialogmem beside naive hybrid."""
    from ._haystack import HaystackSpec, run_haystack

    logging.basicConfig(level=logging.WARNING)
    with _one_line_errors():
        spec = HaystackSpec(data=data, out=out, cache_dir=cache_dir, conversations=_split(conversations),
                            haystack=_sizes(sizes), systems=_split(systems) or [], ks=_ints(k, "--k"),
                            budgets=_ints(budgets, "--budgets", allow_empty=True), budget_k=budget_k, seed=seed,
                            config=Config.load(config), sleep=sleep, rebuild=rebuild, keep_stores=keep_stores)
        run_haystack(spec, progress=lambda line: typer.echo(line, err=True))
    typer.echo(f"Wrote {out / 'report.md'} and {out / 'results.json'}")


def _sizes(text: str) -> list[int]:
    try:
        values = sorted({int(t.replace("_", "")) for t in text.split(",") if t.strip()})
    except ValueError as exc:
        raise InputError(f"--haystack must be comma-separated turn counts, got {text!r}") from exc
    if not values or values[0] < 0:
        raise InputError(f"--haystack must be turn counts of 0 or more, got {text!r}")
    return values
