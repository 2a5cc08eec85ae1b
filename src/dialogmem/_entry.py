"""The ``dialogmem`` command's entry point: the CLI, or one line naming the extra it needs when the
install is the client only (``pip install dialogmem``)."""

from __future__ import annotations

import sys

from ._extras import MissingPartError, engine_missing


def main() -> None:
    try:
        from .cli import main as cli_main
    except ModuleNotFoundError as exc:
        error = engine_missing("cli", exc)
        if isinstance(error, MissingPartError):
            sys.exit(f"dialogmem: the command line {str(error).split(' ', 1)[1]}")
        raise
    cli_main()
