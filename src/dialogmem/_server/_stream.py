"""Streaming bodies of the data routes: an export written by ``Memory.export`` in a worker thread and
sent as it is written, and the user check of an import body read line by line as it arrives."""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import AsyncIterator, Callable

import anyio.to_thread

from ._auth import Forbidden

#: bytes gathered before a chunk of the export is handed to the response
CHUNK = 64 * 1024
_END = object()


class _ClientGone(Exception):
    """The client stopped reading the export: the writer gives up."""


class ExportPipe:
    """A text file for ``Memory.export`` whose writes become chunks of a streamed response.

    The export runs in its own thread (:meth:`start`); a bounded queue holds at most ``depth``
    chunks, so a slow reader slows the writer down instead of filling the memory. The first write
    (the header line, written once the arguments are checked) is handed over at once, so a refused
    export is still an error status, not a broken stream."""

    def __init__(self, depth: int = 8) -> None:
        self._q: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._buf: list[str] = []
        self._size = 0
        self._sent_first = False
        self._gone = threading.Event()

    # -- the writer's side (the export thread) ------------------------------------------------
    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, text: str) -> int:
        self._buf.append(text)
        self._size += len(text)
        if not self._sent_first or self._size >= CHUNK:
            self._push()
        return len(text)

    def flush(self) -> None:
        """Chunks go out when full; ``Memory.export`` flushes nothing that matters here."""

    def _push(self) -> None:
        data = "".join(self._buf).encode("utf-8")
        self._buf.clear()
        self._size = 0
        self._sent_first = True
        self._put(data)

    def _put(self, item: object) -> None:
        while not self._gone.is_set():
            try:
                self._q.put(item, timeout=0.5)
                return
            except queue.Full:
                continue
        raise _ClientGone

    def start(self, export: Callable[[ExportPipe], object]) -> None:
        """Run ``export(self)`` in a thread; its end (or its error) closes the stream."""
        def run() -> None:
            try:
                export(self)
                if self._buf:
                    self._push()
            except _ClientGone:
                return
            except BaseException as exc:  # handed to the reader, who raises it
                self._finish(exc)
                return
            self._finish(_END)

        threading.Thread(target=run, name="dialogmem-export", daemon=True).start()

    def _finish(self, item: object) -> None:
        with contextlib.suppress(_ClientGone):  # nobody reads any more: nothing to tell
            self._put(item)

    # -- the reader's side (the route, then the response) -----------------------------------
    def first(self) -> bytes:
        """The first chunk; the export's own error when it failed before writing anything."""
        item = self._q.get()
        if isinstance(item, BaseException):
            raise item
        return item if isinstance(item, bytes) else b""

    async def chunks(self, first: bytes) -> AsyncIterator[bytes]:
        """``first``, then every chunk as the export writes it. An error after the first chunk ends
        the stream without its last chunk: the client sees a broken transfer, never a short file."""
        try:
            if first:
                yield first
            while True:
                item = await anyio.to_thread.run_sync(self._q.get, abandon_on_cancel=True)
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                assert isinstance(item, bytes)
                yield item
        finally:
            self._gone.set()  # the writer stops at its next chunk


class LineScope:
    """Reads an NDJSON import body as it arrives and refuses a line holding another user's record
    (a user key imports its own user only). Lines that are not JSON records are left to
    ``Memory.import_``, which names them.

    Linear in the body: a line's pieces are kept in a list until its newline arrives (a 96 MB line
    in 64 KiB chunks is joined once, not once a chunk)."""

    def __init__(self, user_id: str) -> None:
        self.user_id = user_id
        self._pieces: list[bytes] = []
        self._line = 0

    def feed(self, chunk: bytes) -> None:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._pieces.append(chunk[start:end])
            self._take()
            start = end + 1
        if start < len(chunk):
            self._pieces.append(chunk[start:])

    def end(self) -> None:
        if self._pieces:
            self._take()

    def _take(self) -> None:
        raw = b"".join(self._pieces)
        self._pieces.clear()
        self._line += 1
        self._check(raw)

    def _check(self, raw: bytes) -> None:
        try:
            data = json.loads(raw) if raw.strip() else None
        except (ValueError, RecursionError):  # not a JSON record (or one nested past Python's limit)
            return
        if not isinstance(data, dict):
            return
        for user in line_users(data):
            if isinstance(user, str) and user != self.user_id:  # a missing one is import_'s to name
                raise Forbidden(f"line {self._line} holds a record of another user: this key imports "
                                f"{self.user_id!r} only")


def line_users(data: dict[str, object]) -> list[object]:
    """The user ids one line of the portable format names (a header lists its users)."""
    kind = data.get("kind")
    if kind == "header":
        users = data.get("users")
        return list(users) if isinstance(users, list) else []
    inner = {"turn": "turn", "quarantined": "turn", "memory": "record"}.get(str(kind))
    if inner is not None:
        part = data.get(inner)
        return [part.get("user_id")] if isinstance(part, dict) else []
    if kind == "history":
        return [data.get("user_id")]
    return []

