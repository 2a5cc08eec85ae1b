"""The ``dialogmem`` command line: each command opens the store and makes one library call."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ._config import Config
from ._conversation import read_conversation, sample_path
from ._errors import DialogmemError
from ._memory import Memory

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Long-term memory for LLM agents: add conversations, search, manage memories.")
T = TypeVar("T")

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="dialogmem.toml to read")]
DataOpt = Annotated[Path | None, typer.Option("--data-dir", help="store directory (default: platformdirs)")]
UserOpt = Annotated[str, typer.Option("--user", "-u", help="user id (the scope)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"Error: {' '.join(message.split())}", err=True)  # one line, never wrapped
    return typer.Exit(1)


@contextmanager
def _memory(config: Path | None, data_dir: Path | None) -> Iterator[Memory]:
    """Open the store; library errors become a one-line ``Error: ...`` and exit code 1."""
    try:
        overrides: dict[str, Any] = {"data_dir": data_dir} if data_dir else {}
        with Memory(Config.load(config, **overrides)) as mem:
            yield mem
    except DialogmemError as exc:
        raise _fail(str(exc)) from None


def _run(config: Path | None, data_dir: Path | None, call: Callable[[Memory], T]) -> T:
    with _memory(config, data_dir) as mem:
        try:
            return call(mem)
        except DialogmemError as exc:
            raise _fail(str(exc)) from None


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")


def _hits_table(title: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=title, show_lines=False)
    for col in ("id", "time", "speaker", "memory", "sources"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["id"][:8], r["time_stamp"][:16], r["speaker_name"], r["memory"],
                      ",".join(r["source_turn_ids"]))
    return table


def _ingest(mem: Memory, path: Path, user: str, *, quiet: bool = False) -> tuple[int, int]:
    batches = read_conversation(path)
    total = sum(len(b.messages) for b in batches)
    stored = 0
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), disable=quiet, transient=True) as progress:
        task = progress.add_task(f"adding {path.name}", total=total)
        for batch in batches:
            for msg in batch.messages:  # turn by turn, as a live conversation arrives
                result = mem.add([msg], user, session_id=batch.session_id, timestamp=batch.timestamp)
                stored += len(result.memories)
                progress.advance(task)
        stored += len(mem.flush(user))
    return total, stored


@app.command()
def add(file: Annotated[Path, typer.Argument(help="JSON list of messages or a LoCoMo conversation")],
        user: UserOpt, config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Add a conversation for a user (then flush the buffers)."""
    turns, stored = _run(config, data_dir, lambda m: _ingest(m, file, user))
    typer.echo(f"added {turns} turns for {user}: {stored} memories stored")


@app.command()
def search(query: str, user: UserOpt, limit: Annotated[int, typer.Option("--limit", "-k")] = 10,
           config: ConfigOpt = None, data_dir: DataOpt = None, as_json: JsonOpt = False) -> None:
    """Search a user's memories."""
    result = _run(config, data_dir, lambda m: m.search(query, user, limit=limit))
    rows = [h.model_dump() for h in result.hits]
    if as_json:
        _print_json(rows)
    else:
        Console().print(_hits_table(f"{query!r} ({len(rows)} hits)", rows))


@app.command("list")
def list_(user: UserOpt, limit: Annotated[int, typer.Option("--limit", "-n")] = 100,
          config: ConfigOpt = None, data_dir: DataOpt = None, as_json: JsonOpt = False) -> None:
    """List a user's memories."""
    records = _run(config, data_dir, lambda m: m.get_all(user, limit=limit))
    rows = [r.model_dump(mode="json") for r in records]
    if as_json:
        _print_json(rows)
    else:
        Console().print(_hits_table(f"{user}: {len(rows)} memories", rows))


@app.command()
def update(memory_id: str, text: str, user: UserOpt, config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Replace the text of one memory."""
    rec = _run(config, data_dir, lambda m: m.update(memory_id, text, user))
    typer.echo(f"updated {rec.id} (version {rec.version})")


@app.command()
def delete(memory_id: str, user: UserOpt, config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Delete one memory."""
    _run(config, data_dir, lambda m: m.delete(memory_id, user))
    typer.echo(f"deleted {memory_id}")


@app.command("forget-user")
def forget_user(user: UserOpt, yes: Annotated[bool, typer.Option("--yes", help="do not ask")] = False,
                config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Remove every memory, vector and journal row of a user."""
    if not yes and not typer.confirm(f"Forget everything about {user!r}?", default=False):
        raise _fail("not confirmed (pass --yes)")
    counts = _run(config, data_dir, lambda m: m.forget_user(user))
    typer.echo(f"forgot {user}: {counts['memories']} memories, {counts['turns']} turns")


@app.command()
def history(memory_id: str, user: UserOpt, config: ConfigOpt = None, data_dir: DataOpt = None,
            as_json: JsonOpt = False) -> None:
    """Show the change history of one memory."""
    rows = [h.model_dump(mode="json") for h in _run(config, data_dir, lambda m: m.history(memory_id, user))]
    if as_json:
        _print_json(rows)
        return
    table = Table(title=f"history of {memory_id}")
    for col in ("event", "actor", "old", "new"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(r["event"], r["actor"], r["old_memory"] or "", r["new_memory"] or "")
    Console().print(table)


@app.command()
def sleep(user: Annotated[str | None, typer.Option("--user", "-u")] = None,
          config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Run the sleep-time update (for one user, or all)."""
    report = _run(config, data_dir, lambda m: m.sleep(user))
    _print_json(report.model_dump())


@app.command()
def stats(user: Annotated[str | None, typer.Option("--user", "-u")] = None,
          config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Token statistics, latency per stage and counts."""
    _print_json(_run(config, data_dir, lambda m: m.stats(user)))


@app.command()
def demo(user: Annotated[str, typer.Option("--user", "-u")] = "demo-user",
         config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Ingest the bundled sample conversation offline, then run a few searches."""
    queries = ("What is the name of Maya's dog?", "Where does Tom live now?",
               "What allergy does Maya have?", "When is the cello recital?")
    console = Console()

    def run(mem: Memory) -> None:
        mem.forget_user(user)  # the demo scope only: a rerun starts from the same state
        turns, stored = _ingest(mem, sample_path(), user)
        console.print(f"[bold]ingested[/bold] {turns} turns of the sample conversation -> {stored} memories")
        for q in queries:
            rows = [h.model_dump() for h in mem.search(q, user, limit=3).hits]
            console.print(_hits_table(q, rows))
        report = mem.sleep(user)
        console.print(f"[bold]sleep[/bold]: {report.model_dump()}")

    _run(config, data_dir, run)


def _mount_bench() -> None:
    try:
        from .bench import bench_app
    except ImportError as exc:  # the bench extra (nltk, matplotlib) is optional
        missing = str(exc)

        @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
        def bench() -> None:
            """Benchmarks (needs: pip install 'dialogmem[bench]')."""
            raise _fail(f"benchmarks need the bench extra: pip install 'dialogmem[bench]' ({missing})")
    else:
        app.add_typer(bench_app, name="bench", help="LoCoMo / LongMemEval benchmarks")


_mount_bench()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()
