"""The caller's side of export and import: a destination written whole or not at all, and a source
that can be sent again from its start when a try is retried."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .._api import Conversation, Destination
from .._errors import InputError

CHUNK = 64 * 1024


class Resendable:
    """An import source read from its start on every try: a path is opened again, a seekable file
    rewound, and anything else (a pipe) copied to a temporary file first."""

    def __init__(self, source: Destination) -> None:
        self._path: Path | None = None
        self._file: IO[str] | None = None
        self._copy: IO[str] | None = None
        if isinstance(source, str | Path):
            self._path = Path(source)
            if not self._path.is_file():
                raise InputError(f"cannot read {self._path}: no such file")
        elif source.seekable():
            self._file = source
            self._start = source.tell()
        else:
            self._copy = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - closed by close()
            for text in source:
                self._copy.write(text)
            self._file, self._start = self._copy, 0

    def chunks(self) -> Iterator[bytes]:
        """The source's bytes from its start, a chunk at a time."""
        if self._path is not None:
            try:
                f = self._path.open("rb")
            except OSError as exc:
                raise InputError(f"cannot read {self._path}: {exc.strerror}") from None
            with f:
                while block := f.read(CHUNK):
                    yield block
            return
        assert self._file is not None
        self._file.seek(self._start)
        while text := self._file.read(CHUNK):
            yield text.encode("utf-8") if isinstance(text, str) else text

    def close(self) -> None:
        if self._copy is not None:
            self._copy.close()


def left_after_break(destination: Destination) -> str:
    """What a broken export stream left at ``destination``."""
    if isinstance(destination, str | Path):
        return f"{destination} was not written"
    return "the lines before the break were written to the file object"


def load_conversation(conversation: Conversation) -> Any:
    """A conversation file read and parsed on the caller's machine; parsed data as it is."""
    if not isinstance(conversation, str | Path):
        return conversation
    path = Path(conversation)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not valid UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
