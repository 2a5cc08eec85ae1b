"""Keeping the vector index a faithful copy of the journal: checks at open, rebuild, repair.

The journal is the source of truth; the index is derived from it and can always be rebuilt. At
open the facade asks :func:`check_index` what to do, given what is on disk:

* the journal is missing while an index holds data → refuse (``StoreError`` naming
  ``dialogmem repair --from-index``): opening would otherwise start an empty store next to it;
* the index was written for another store (its marker names another ``store_id``) → refuse;
* the index cannot be loaded (damaged files) → refuse, naming ``dialogmem repair``;
* the index is missing, or older than the journal's index generation, or holds a different number
  of points than the journal has active memories → rebuild it from the journal (it is only a copy).

Nothing here deletes data: a damaged or replaced index directory is moved aside, never removed.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from .._errors import StoreError

log = logging.getLogger(__name__)

MARKER = "dialogmem-index.json"
JOURNAL_FILE = "journal.sqlite3"
INDEX_DIR = "index"


class IndexMarker(BaseModel):
    """Written into an Edge index directory: which store it copies, and which rebuild of it."""

    store_id: str
    generation: int


@dataclass(frozen=True)
class StorePaths:
    root: Path

    @property
    def journal(self) -> Path:
        return self.root / JOURNAL_FILE

    @property
    def index(self) -> Path:
        return self.root / INDEX_DIR

    def index_has_data(self) -> bool:
        return (self.index / "segments").exists() or (self.index / "edge_config.json").exists()

    def read_marker(self) -> IndexMarker | None:
        path = self.index / MARKER
        if not path.is_file():
            return None
        try:
            return IndexMarker.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("ignoring an unreadable index marker %s: %s", path, exc)
            return None

    def write_marker(self, marker: IndexMarker) -> None:
        path = self.index / MARKER
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(marker.model_dump()), encoding="utf-8")
        tmp.replace(path)

    def move_index_aside(self, why: str) -> Path | None:
        """Rename the index directory (kept, never deleted) so a fresh one can be built."""
        if not self.index.exists():
            return None
        target = self.root / f"{INDEX_DIR}.{why}-{time.strftime('%Y%m%dT%H%M%S')}"
        n = 1
        while target.exists():
            target = target.with_name(f"{target.name}-{n}")
            n += 1
        shutil.move(str(self.index), str(target))
        log.warning("moved the vector index %s aside to %s (%s)", self.index, target, why)
        return target


def refuse_missing_journal(paths: StorePaths) -> None:
    """A store whose journal is gone must not open as an empty store beside its index."""
    if not paths.journal.exists() and paths.index_has_data():
        raise StoreError(
            f"the journal {paths.journal} is missing but the vector index {paths.index} holds data: restore "
            "the journal from a backup, or run `dialogmem repair --from-index` to rebuild the journal's "
            "memories from the index (raw turns cannot be recovered from it)")


def check_marker(paths: StorePaths, store_id: str) -> IndexMarker | None:
    """The index's marker; ``StoreError`` when it belongs to another store."""
    marker = paths.read_marker()
    if marker is not None and marker.store_id != store_id:
        raise StoreError(
            f"the vector index {paths.index} belongs to another store ({marker.store_id}, this journal is "
            f"{store_id}): run `dialogmem repair` to rebuild the index from this journal")
    return marker


def damaged_index(paths: StorePaths, exc: BaseException) -> StoreError:
    return StoreError(f"the vector index {paths.index} cannot be opened ({type(exc).__name__}: {exc}); the "
                      "journal is intact: run `dialogmem repair` to rebuild the index from it")
