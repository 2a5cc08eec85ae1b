"""Where an export goes: a path (written beside itself, renamed once complete: a broken write leaves
no file behind) or an open text file. Shared by ``Memory.export`` and ``Client.export``."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ._errors import StoreError

#: a path, or an open text file
Destination = str | Path | IO[str]


@contextmanager
def writing(destination: Destination) -> Iterator[IO[str]]:
    """An open text file for ``destination``; a path is written whole or not at all."""
    if not isinstance(destination, str | Path):
        yield destination
        return
    path = Path(destination)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
