"""``dialogmem serve``, ``dialogmem mcp`` and ``dialogmem keys``.

The key commands write the journal's key table through their own connection, beside a running
server (SQLite WAL; the server looks a key up on every request, so a new or revoked key counts at
once). The server packages are imported only by the commands that need them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from .._config import Config
from .._errors import DialogmemError
from .._journal import KeyRing, open_journal
from .._sync._maintenance import StorePaths

log = logging.getLogger(__name__)
keys_app = typer.Typer(help="API keys of the REST and MCP servers: create, list, revoke.", no_args_is_help=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="dialogmem.toml to read")]
DataOpt = Annotated[Path | None, typer.Option("--data-dir", help="store directory (default: platformdirs)")]
HostOpt = Annotated[str | None, typer.Option("--host", help="listen address (default: server.host, 127.0.0.1)")]
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def fail(message: str) -> typer.Exit:
    """The exit of a command that failed: its message on one line (never wrapped) on stderr."""
    typer.echo(f"Error: {' '.join(message.split())}", err=True)
    return typer.Exit(1)


def _config(config: Path | None, data_dir: Path | None) -> Config:
    overrides: dict[str, Any] = {"data_dir": data_dir} if data_dir else {}
    try:
        return Config.load(config, **overrides)
    except DialogmemError as exc:
        raise fail(str(exc)) from None


@contextmanager
def _journal(config: Path | None, data_dir: Path | None) -> Iterator[KeyRing]:
    cfg = _config(config, data_dir)
    root = Path(cfg.data_dir).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
        journal = open_journal(cfg.journal, StorePaths(root).journal)
    except (OSError, DialogmemError) as exc:
        raise fail(str(exc)) from None
    try:
        yield journal
    except DialogmemError as exc:
        raise fail(str(exc)) from None
    finally:
        journal.close()


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ") if ts else ""


@keys_app.command("create")
def keys_create(user: Annotated[str | None, typer.Option("--user", "-u", help="the one user the key reaches")] = None,
                admin: Annotated[bool, typer.Option("--admin", help="a key that reaches every user")] = False,
                label: Annotated[str, typer.Option("--label", help="a note to recognise the key by")] = "",
                config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Make a key; the key itself is printed once, as the last line (only its hash is stored)."""
    if admin == (user is not None):
        raise fail("give exactly one of --user ID or --admin")
    from .._input import check_id

    with _journal(config, data_dir) as journal:
        row, key = journal.create_key("admin" if admin else "user", check_id("user_id", user) if user else None,
                                      label=label)
    typer.echo(f"created {row.role} key {row.key_id}" + (f" for user {row.user_id}" if row.user_id else "")
               + ": store it now, it is not shown again", err=True)
    typer.echo(key)


@keys_app.command("list")
def keys_list(revoked: Annotated[bool, typer.Option("--revoked", help="include revoked keys")] = False,
              config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Key ids, roles, users and dates (never the keys)."""
    with _journal(config, data_dir) as journal:
        rows = journal.list_keys(include_revoked=revoked)
    typer.echo("key_id\trole\tuser\tcreated\trevoked\tlabel")
    for r in rows:
        typer.echo(f"{r.key_id}\t{r.role}\t{r.user_id or '*'}\t{_when(r.created_at)}\t{_when(r.revoked_at)}\t{r.label}")


@keys_app.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(help="the key id (see `dialogmem keys list`)")],
                config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Revoke a key: it stops working at the next request."""
    with _journal(config, data_dir) as journal:
        row = journal.revoke_key(key_id)
    typer.echo(f"revoked {row.key_id}")


def _server_extra() -> None:
    try:
        import fastapi  # noqa: F401
        import mcp  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise fail(f"the server needs the server extra: pip install 'dialogmem[server]' ({exc})") from None


def serve(host: HostOpt = None, port: Annotated[int | None, typer.Option("--port", help="default: 8420")] = None,
          config: ConfigOpt = None, data_dir: DataOpt = None,
          no_auth: Annotated[bool, typer.Option("--no-auth", help="NO keys: anyone on this machine is admin; "
                                                "loopback only")] = False) -> None:
    """Serve the REST API (OpenAPI at /docs and /openapi.json) and the MCP tools at /mcp."""
    _server_extra()
    cfg = _config(config, data_dir)
    host = _host(host, cfg, no_auth)
    if not no_auth:
        with _journal(config, data_dir) as journal:
            if not journal.list_keys():
                log.warning("no API keys yet: every /v1 request will get 401. Create one with "
                            "`dialogmem keys create --admin` (or --user ID)")
    import uvicorn

    from .._facade._memory import Memory
    from ._app import create_app
    from ._limits import uvicorn_options

    try:
        with Memory(cfg) as memory:
            app = create_app(memory, cfg.server, auth=not no_auth, host=host)
            uvicorn.run(app, host=host, port=port or cfg.server.port, log_level="info",
                        **uvicorn_options(cfg.server))
    except DialogmemError as exc:
        raise fail(str(exc)) from None


def _host(host: str | None, cfg: Config, no_auth: bool) -> str:
    if not no_auth:
        return host or cfg.server.host
    if host is not None and host not in LOOPBACK:
        raise fail("--no-auth serves 127.0.0.1 only: drop --host (or use keys)")
    typer.secho("WARNING: --no-auth: no API keys are checked; every request acts as an ADMIN over every user. "
                "Listening on 127.0.0.1 only. Never use this on a shared machine.", fg="red", bold=True, err=True)
    return "127.0.0.1"


def mcp(user: Annotated[str | None, typer.Option("--user", "-u", help="the user the tools act for")] = None,
        http: Annotated[bool, typer.Option("--http", help="streamable HTTP at /mcp behind API keys "
                                           "(default: stdio)")] = False,
        host: HostOpt = None, port: Annotated[int | None, typer.Option("--port", help="default: 8421")] = None,
        config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Serve the memory tools over MCP (stdio for a local agent; --http for remote ones)."""
    _server_extra()
    cfg = _config(config, data_dir)
    user = user or cfg.server.mcp_user
    if not http and not user:
        raise fail("stdio MCP needs the user it acts for: --user ID (or server.mcp_user)")
    from .._facade._memory import Memory
    from ._limits import uvicorn_options
    from ._mcp import build_mcp, fixed_user, mcp_http_app

    try:
        with Memory(cfg) as memory:
            if http:
                import uvicorn

                bind = host or cfg.server.host
                app = mcp_http_app(memory, cfg.server, default_user=user, host=bind)
                uvicorn.run(app, host=bind, port=port or cfg.server.port + 1, log_level="info",
                            **uvicorn_options(cfg.server))
            else:
                logging.getLogger().handlers[:] = [logging.StreamHandler(sys.stderr)]  # stdout carries MCP
                build_mcp(memory, fixed_user(user)).run("stdio")
    except DialogmemError as exc:
        raise fail(str(exc)) from None


def ui(port: Annotated[int | None, typer.Option("--port", help="default: server.port (8420)")] = None,
       host: Annotated[str | None, typer.Option("--host", help="127.0.0.1 only (refused otherwise)")] = None,
       config: ConfigOpt = None, data_dir: DataOpt = None) -> None:
    """Open the memory inspector on a local store, without keys, at http://127.0.0.1:PORT/ui/."""
    if host is not None and host not in ("127.0.0.1", "localhost"):
        raise fail("dialogmem ui serves 127.0.0.1 only, without keys: use `dialogmem serve` (with keys) "
                   "to reach the inspector from elsewhere")
    _server_extra()
    cfg = _config(config, data_dir)
    import uvicorn

    from .._facade._memory import Memory
    from ._app import create_app
    from ._limits import uvicorn_options

    bind_port = port or cfg.server.port
    try:
        with Memory(cfg) as memory:
            app = create_app(memory, cfg.server, auth=False, mcp=False, host="127.0.0.1", ui=True)
            typer.secho("No keys: anyone on this machine can read and change this store while it runs "
                        "(the REST API at /v1 too).", fg="yellow", err=True)
            typer.echo(f"dialogmem inspector: http://127.0.0.1:{bind_port}/ui/")
            uvicorn.run(app, host="127.0.0.1", port=bind_port, log_level="warning", **uvicorn_options(cfg.server))
    except DialogmemError as exc:
        raise fail(str(exc)) from None
