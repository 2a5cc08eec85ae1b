"""The ``dialogmem`` command line: each command opens the store and makes one library call."""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import typer.main
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ._api import MemoryAPI
from ._client import Client
from ._config import Config
from ._errors import DialogmemError
from ._facade._memory import Memory
from ._server._cli import fail, keys_app, mcp, serve, ui
from ._transfer._conversation import read_conversation, sample_path

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Long-term memory for LLM agents: add conversations, search, manage memories.")
T = TypeVar("T")

ReadOnlyOpt = Annotated[bool, typer.Option("--read-only", help="read beside a running writer (no lock)")]
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="dialogmem.toml to read")]
DataOpt = Annotated[Path | None, typer.Option("--data-dir", help="store directory (default: platformdirs)")]
UserOpt = Annotated[str, typer.Option("--user", "-u", help="user id (the scope)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def _load(config: Path | None, data_dir: Path | None, **overrides: Any) -> Config:
    if data_dir:
        overrides["data_dir"] = data_dir
    return Config.load(config, **overrides)


@contextmanager
def _memory(config: Path | None, data_dir: Path | None, *, read_only: bool = False) -> Iterator[Memory]:
    """Open the store; library errors become a one-line ``Error: ...`` and exit code 1."""
    try:
        overrides: dict[str, Any] = {"read_only": True} if read_only else {}
        with Memory(_load(config, data_dir, **overrides)) as mem:
            yield mem
    except DialogmemError as exc:
        raise fail(str(exc)) from None


def _run(config: Path | None, data_dir: Path | None, call: Callable[[MemoryAPI], T], *,
         read_only: bool = False) -> T:
    """One library call on the store the command names: the server of ``--url`` (``DIALOGMEM_URL``)
    through :class:`Client`, else the local store."""
    remote = _remote()
    if remote is None:
        return _run_local(config, data_dir, call, read_only=read_only)
    if config is not None or data_dir is not None:
        raise fail("--url acts on a server: --config and --data-dir name a local store (give one or the other)")
    try:
        with Client(*remote) as client:  # a server is read over REST: --read-only locks nothing there
            return call(client)
    except DialogmemError as exc:
        raise fail(str(exc)) from None


def _run_local(config: Path | None, data_dir: Path | None, call: Callable[[Memory], T], *,
               read_only: bool = False) -> T:
    with _memory(config, data_dir, read_only=read_only) as mem:
        try:
            return call(mem)
        except DialogmemError as exc:
            raise fail(str(exc)) from None


def _remote() -> tuple[str, str | None] | None:
    """(URL, API key) of ``--url`` / ``--api-key`` (or their environment variables), if given."""
    ctx = typer.main.get_current_context(silent=True)  # typer's own click: where the callback left them
    remote = ctx.find_root().obj if ctx is not None else None
    return remote if isinstance(remote, tuple) else None


@app.callback()
def _options(ctx: typer.Context,
             url: Annotated[str | None, typer.Option(
                 "--url", envvar="DIALOGMEM_URL", help="act on a dialogmem server (dialogmem serve) instead of a "
                                                       "local store")] = None,
             api_key: Annotated[str | None, typer.Option(
                 "--api-key", envvar="DIALOGMEM_API_KEY", help="the server's API key (with --url)")] = None) -> None:
    """Long-term memory for LLM agents: add conversations, search, manage memories."""
    ctx.obj = (url, api_key) if url else None


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


def _ingest(mem: MemoryAPI, path: Path, user: str, *, quiet: bool = False) -> tuple[int, int]:
    batches = read_conversation(path)  # a bad file fails here, before any progress bar is drawn
    conversation: Any = batches if isinstance(mem, Memory) else path  # a Client sends the file itself
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), disable=quiet, transient=True) as progress:
        task = progress.add_task(f"adding {path.name}", total=None)
        result = mem.add_conversation(conversation, user, progress=lambda done, total: progress.update(
            task, completed=done, total=total))
    return len(result.turn_ids), len(result.memories)


@app.command()
def add(file: Annotated[Path, typer.Argument(help="JSON list of messages or a LoCoMo conversation")],
        user: UserOpt, config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Add a conversation for a user (then flush the buffers)."""
    turns, stored = _run(config, data_dir, lambda m: _ingest(m, file, user))
    typer.echo(f"added {turns} turns for {user}: {stored} memories stored")


@app.command()
def search(query: str, user: UserOpt, limit: Annotated[int, typer.Option("--limit", "-k")] = 10,
           config: ConfigOpt = None, data_dir: DataOpt = None, as_json: JsonOpt = False,
           read_only: ReadOnlyOpt = False) -> None:
    """Search a user's memories."""
    result = _run(config, data_dir, lambda m: m.search(query, user, limit=limit), read_only=read_only)
    rows = [h.model_dump() for h in result.hits]
    if as_json:
        _print_json(rows)
    else:
        Console().print(_hits_table(f"{query!r} ({len(rows)} hits)", rows))


@app.command("list")
def list_(user: UserOpt, limit: Annotated[int, typer.Option("--limit", "-n")] = 100,
          config: ConfigOpt = None, data_dir: DataOpt = None, as_json: JsonOpt = False,
          read_only: ReadOnlyOpt = False,
          evicted: Annotated[bool, typer.Option("--evicted", help="include items evicted from MTM")] = False) -> None:
    """List a user's memories."""
    records = _run(config, data_dir, lambda m: m.get_all(user, limit=limit, include_evicted=evicted),
                   read_only=read_only)
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
        raise fail("not confirmed (pass --yes)")
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
def graph(user: Annotated[str | None, typer.Option("--user", "-u", help="what this user supports")] = None,
          query: Annotated[str | None, typer.Option("--query", "-q", help="matching nodes + neighbours")] = None,
          limit: Annotated[int, typer.Option("--limit", "-n")] = 100,
          fmt: Annotated[str, typer.Option("--format", "-f", help="table, json or graphml")] = "table",
          out: Annotated[Path | None, typer.Option("--out", "-o", help="write to this file")] = None,
          audit: Annotated[bool, typer.Option(
              "--audit", help="admin view: every node and edge, its supporting users and why it is visible")] = False,
          config: ConfigOpt = None, data_dir: DataOpt = None, read_only: ReadOnlyOpt = False) -> None:
    """Print the shared LTM knowledge graph (or write it as JSON or GraphML). Without --user it shows
    what every user may see (supported by at least sleep.ltm_min_users users)."""
    if fmt not in ("table", "json", "graphml"):
        raise fail(f"--format must be table, json or graphml, not {fmt!r}")
    if audit:
        _graph_audit(config, data_dir, read_only, fmt=fmt, out=out, other=user is not None or query is not None)
        return
    g = _run(config, data_dir, lambda m: m.graph(user, query=query, limit=limit), read_only=read_only)
    if fmt == "table" and out is None:
        texts = {n.id: n.text for n in g.nodes}
        table = Table(title=f"LTM graph: {len(g.nodes)} nodes, {len(g.edges)} edges")
        for col in ("type", "text", "evidence", "confidence"):
            table.add_column(col)
        for n in g.nodes:
            table.add_row(n.type, n.text, str(n.evidence), f"{n.confidence:.3f}")
        for e in g.edges:
            table.add_row(e.type, f"{texts[e.source]} -> {texts[e.target]}", str(e.evidence), f"{e.confidence:.3f}")
        Console().print(table)
        return
    text = g.to_graphml() if fmt == "graphml" else g.model_dump_json(indent=2)
    if out is None:
        typer.echo(text)
    else:
        out.write_text(text + "\n", encoding="utf-8")


def _graph_audit(config: Path | None, data_dir: Path | None, read_only: bool, *, fmt: str, out: Path | None,
                 other: bool) -> None:
    if other:
        raise fail("--audit lists the whole graph: it takes no --user or --query")
    if fmt == "graphml":
        raise fail("--audit writes a table or JSON, not graphml")
    report = _run(config, data_dir, lambda m: m.graph_audit(), read_only=read_only)
    if fmt == "json" or out is not None:
        text = report.model_dump_json(indent=2)
        if out is None:
            typer.echo(text)
        else:
            out.write_text(text + "\n", encoding="utf-8")
        return
    public = sum(r.visible_to == "everyone" for r in report.rows)
    table = Table(title=f"LTM graph audit: {len(report.rows)} rows, {public} visible to everyone "
                        f"(sleep.ltm_min_users = {report.min_users})")
    for col in ("kind", "type", "text", "supporters", "visible to", "why"):
        table.add_column(col, overflow="fold")
    for r in report.rows:
        table.add_row(r.kind, r.type, r.text, str(r.supporters), r.visible_to, r.reason)
    Console().print(table)


@app.command()
def stats(user: Annotated[str | None, typer.Option("--user", "-u")] = None,
          config: ConfigOpt = None, data_dir: DataOpt = None, read_only: ReadOnlyOpt = False) -> None:
    """Token statistics, latency per stage and counts."""
    _print_json(_run(config, data_dir, lambda m: m.stats(user), read_only=read_only))


@app.command()
def repair(config: ConfigOpt = None, data_dir: DataOpt = None,
           from_index: Annotated[bool, typer.Option(
               "--from-index", help="the journal is lost: rebuild its memories from the index")] = False) -> None:
    """Rebuild the vector index from the journal (the old index is moved aside, never deleted)."""
    try:
        report = Memory.repair(_load(config, data_dir), from_index=from_index)
    except DialogmemError as exc:
        raise fail(str(exc)) from None
    _print_json(report.model_dump())


@app.command()
def export(output: Annotated[str, typer.Option("--output", "-o", help="JSON Lines file to write ('-': stdout)")],
           user: Annotated[str | None, typer.Option("--user", "-u", help="the user to export")] = None,
           all_users: Annotated[bool, typer.Option("--all", help="every user of the store")] = False,
           vectors: Annotated[bool, typer.Option("--vectors/--no-vectors",
                                                 help="carry the vectors (else computed on import)")] = True,
           config: ConfigOpt = None, data_dir: DataOpt = None, read_only: ReadOnlyOpt = False) -> None:
    """Write a user's (or every user's) turns, memories and history as dialogmem's JSON Lines format."""
    if (user is None) == (not all_users):
        raise fail("give --user U or --all")
    target: Any = sys.stdout if output == "-" else Path(output)
    report = _run(config, data_dir, lambda m: m.export(target, user, all_users=all_users, vectors=vectors),
                  read_only=read_only)
    typer.echo(f"exported {report.turns} turns, {report.quarantined} quarantined, {report.memories} memories, "
               f"{report.history} history rows of {len(report.users)} users", err=output == "-")


@app.command("import")
def import_(file: Annotated[str, typer.Argument(help="a dialogmem export (JSON Lines; '-': stdin)")],
            source_format: Annotated[str, typer.Option(
                "--from", help="dialogmem (an export), mem0 (get_all output), openai (messages lists)")
            ] = "dialogmem",
            user: Annotated[str | None, typer.Option("--user", "-u", help="the user (--from mem0/openai)")] = None,
            history: Annotated[Path | None, typer.Option("--history", help="--from mem0: JSON object memory id -> "
                                                          "mem0 history rows")] = None,
            config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Add the records of an export file (a bad line imports nothing; records already held are kept), or
    another layer's data."""
    if source_format not in ("dialogmem", "mem0", "openai"):
        raise fail(f"--from takes dialogmem, mem0 or openai, not {source_format!r}")
    if (user is None) != (source_format == "dialogmem"):
        raise fail("--user goes with --from mem0 or openai (a dialogmem export names its users)")
    if source_format == "dialogmem":
        source: Any = sys.stdin if file == "-" else Path(file)
        _print_json(_run(config, data_dir, lambda m: m.import_(source)).model_dump())
        return
    assert user is not None
    if _remote() is not None:
        raise fail(f"--from {source_format} reads the files on this machine into a local store; convert them "
                   "there, then `dialogmem export` and `dialogmem import --url ...` the result")
    if source_format == "openai":
        got = _run_local(config, data_dir, lambda m: m.import_chats(Path(file), user))
        typer.echo(f"added {len(got.turn_ids)} turns for {user}: {len(got.memories)} memories stored")
        return
    try:
        data = json.loads(Path(file).read_text(encoding="utf-8"))
        rows = json.loads(history.read_text(encoding="utf-8")) if history is not None else None
    except (OSError, ValueError) as exc:
        raise fail(f"cannot read mem0 data: {exc}") from None
    _print_json(_run_local(config, data_dir, lambda m: m.import_mem0(data, user, history=rows)).model_dump())


@app.command()
def migrate(to: Annotated[str, typer.Option("--to", help="postgresql://... : the PostgreSQL database (with "
                                             "pgvector) that is to hold the store")],
            schema: Annotated[str, typer.Option("--schema", help="the schema in it (one store per schema)")
                              ] = "dialogmem",
            config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Move an embedded store (SQLite journal, Edge index) into PostgreSQL alone (journal and pgvector
    index, ``store.backend = "postgres"``): every user's turns, memories of every status, history and
    vectors (nothing embedded again), then a count check of both sides. The embedded store is only read."""
    if _remote() is not None:
        raise fail("migrate reads a store on this machine: drop --url")
    source = _load(config, data_dir)
    if source.journal.url is not None:
        raise fail("this store's journal is already in PostgreSQL: migrate moves an embedded (SQLite) store")
    try:
        target = source.with_overrides(journal={"url": to, "schema_name": schema}, store={"backend": "postgres"})
    except DialogmemError as exc:
        raise fail(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="dialogmem-migrate-") as tmp:
        dump = Path(tmp) / "store.jsonl"
        with _memory(config, data_dir, read_only=True) as old:
            sent = old.export(dump, all_users=True, vectors=True)
        try:
            with Memory(target) as new:
                got = new.import_(dump)
                held = _counts(new, sent.users, Path(tmp) / "check.jsonl")
        except DialogmemError as exc:
            raise fail(str(exc)) from None
    expected = {"turns": sent.turns, "quarantined": sent.quarantined, "memories": sent.memories,
                "history": sent.history}
    if held != expected:
        raise fail(f"counts differ after the move: the embedded store exported {expected}, PostgreSQL holds "
                   f"{held} for those users (did the schema hold rows of them already?)")
    typer.echo(f"moved {len(sent.users)} users: {sent.turns} turns, {sent.quarantined} quarantined, "
               f"{sent.memories} memories ({got.embedded} embedded again), {sent.history} history rows; "
               f"counts checked on both sides")


def _counts(mem: Memory, users: list[str], scratch: Path) -> dict[str, int]:
    """What ``mem`` holds of ``users``, counted as an export counts it."""
    total = {"turns": 0, "quarantined": 0, "memories": 0, "history": 0}
    for uid in users:
        report = mem.export(scratch, uid, vectors=False)
        for kind in total:
            total[kind] += getattr(report, kind)
    return total


quarantine_app = typer.Typer(help="Accepted turns whose processing failed: list, retry or drop them.",
                             no_args_is_help=True)
app.add_typer(quarantine_app, name="quarantine")


@quarantine_app.command("list")
def quarantine_list(user: Annotated[str | None, typer.Option("--user", "-u")] = None,
                    config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Quarantined turns with the reason."""
    rows = _run(config, data_dir, lambda m: m.quarantined(user), read_only=True)
    _print_json([{"user_id": q.turn.user_id, "turn_id": q.turn.id, "speaker": q.turn.speaker,
                  "content": q.turn.content[:200], "error": q.error} for q in rows])


@quarantine_app.command("retry")
def quarantine_retry(user: UserOpt, turn: Annotated[list[str] | None, typer.Option(
        "--turn", help="a turn id (repeatable); default: all of the user's")] = None,
                     config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Process quarantined turns again."""
    result = _run(config, data_dir, lambda m: m.retry_quarantined(user, turn))
    typer.echo(f"retried: {len(result.memories)} memories stored, {len(result.quarantined)} turns still quarantined")


@quarantine_app.command("drop")
def quarantine_drop(user: UserOpt, turn: Annotated[list[str], typer.Option("--turn", help="a turn id (repeatable)")],
                    config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Give up on quarantined turns (their raw text stays journaled)."""
    n = _run(config, data_dir, lambda m: m.drop_quarantined(user, turn))
    typer.echo(f"dropped {n} turns")


#: the demo's questions over the bundled sample conversation (each one's evidence turn comes first: tested)
DEMO_QUESTIONS = ("What is the name of Maya's dog?", "Where does Tom live now?",
                  "What allergy does Maya have?", "When is the cello recital?")


@app.command()
def demo(user: Annotated[str, typer.Option("--user", "-u")] = "demo-user",
         config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Ingest the bundled sample conversation offline, then run a few searches."""
    console = Console()

    def run(mem: MemoryAPI) -> None:
        mem.forget_user(user)  # the demo scope only: a rerun starts from the same state
        turns, stored = _ingest(mem, sample_path(), user)
        console.print(f"[bold]ingested[/bold] {turns} turns of the sample conversation -> {stored} memories")
        for q in DEMO_QUESTIONS:
            rows = [h.model_dump() for h in mem.search(q, user, limit=3).hits]
            console.print(_hits_table(q, rows))
        report = mem.sleep(user)
        console.print(f"[bold]sleep[/bold]: {report.model_dump()}")

    _run(config, data_dir, run)


app.add_typer(keys_app, name="keys")  # the server's commands (their packages load only when they run)
app.command("serve")(serve)
app.command("mcp")(mcp)
app.command("ui")(ui)


def _mount_bench() -> None:
    try:
        from .bench import bench_app
    except ImportError as exc:  # the bench extra (nltk, matplotlib) is optional
        missing = str(exc)

        @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
        def bench() -> None:
            """Benchmarks (needs: pip install 'dialogmem[bench]')."""
            raise fail(f"benchmarks need the bench extra: pip install 'dialogmem[bench]' ({missing})")
    else:
        app.add_typer(bench_app, name="bench", help="LoCoMo / LongMemEval benchmarks")


_mount_bench()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()
