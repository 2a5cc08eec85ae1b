"""Which optional part of dialogmem a missing module belongs to, and the one command that installs it.

``pip install dialogmem`` is the client only (``Client``, ``AsyncClient``, the public types: pydantic
and httpx). The embedded store and everything that runs it (``Memory``, the CLI, the server) need
the ``local`` extra; the server adds the ``server`` extra on top.
"""

from __future__ import annotations

from ._errors import ConfigError

#: the extra that brings each top-level module of the engine and the server
_EXTRA_OF: dict[str, str] = {
    **dict.fromkeys(("numpy", "onnxruntime", "onnx", "tokenizers", "qdrant_edge", "qdrant_client", "dateparser",
                     "openai", "typer", "rich"), "local"),
    **dict.fromkeys(("fastapi", "uvicorn", "starlette", "mcp", "jinja2", "multipart", "python_multipart"), "server"),
    **dict.fromkeys(("psycopg", "psycopg_pool"), "postgres"),
    "langgraph": "langgraph",
    "llama_cpp": "llama",
}


class MissingPartError(ConfigError, ImportError):
    """A part of dialogmem that is not installed was asked for; the message names the command that
    installs it. Also an ``ImportError``, so ``from dialogmem import Memory`` fails as imports do."""


def install_command(extra: str) -> str:
    return f"pip install 'dialogmem[{extra}]'"


def engine_missing(name: str, exc: ModuleNotFoundError) -> Exception:
    """The error for ``dialogmem.<name>`` whose import failed on ``exc``: a :class:`MissingPartError`
    naming the extra when the missing module is one of an extra's, else ``exc`` itself (a bug)."""
    top = (exc.name or "").split(".")[0]
    extra = _EXTRA_OF.get(top)
    if extra is None:
        return exc
    return MissingPartError(f"dialogmem.{name} needs the {top} package, part of the {extra!r} extra, which is not "
                            f"installed: {install_command(extra)}")
