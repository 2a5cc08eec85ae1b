"""What one unit of work changes, as plain data (no I/O).

Every writer of the store — ``add`` and ``flush``, ``update`` and ``delete``, sleep-time update,
eviction, consolidation, imports — describes its work as one ``ChangeSet``. The change writer
(``_sync._writer.ChangeWriter``) performs it: it embeds what has no vector yet, commits the whole set to
the journal in one transaction (turns, memory rows, history, sleep queue, turn status), then
applies it to the vector index. The journal is the source of truth; the index is derived from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from ._types import Event, MemoryRecord, Turn

if TYPE_CHECKING:
    from ._graph import GraphDelta

RemovalStatus = Literal["deleted", "evicted"]


@dataclass
class MemoryWrite:
    """A memory added or rewritten. ``vector`` is ``None`` when the writer must embed ``record.memory``."""

    record: MemoryRecord
    event: Event
    actor: str
    old: MemoryRecord | None = None  # the version replaced (kept in the history row)
    sleep_pending: bool = True  # queue it for the next sleep-time update
    vector: np.ndarray | None = None


@dataclass
class MemoryRemoval:
    """A memory leaving the index: deleted, or evicted from MTM (still readable from the journal)."""

    record: MemoryRecord
    actor: str
    status: RemovalStatus = "deleted"

    @property
    def event(self) -> Event:
        return Event.DELETE if self.status == "deleted" else Event.EVICT


@dataclass
class GraphCommit:
    """One LTM consolidation cycle (or one subject's removal) for the shared graph: the delta, the
    embeddings of new node texts, and the wall-clock time the cycle's batch was read up to (the
    next cycle starts from it; ``None`` leaves it as it is)."""

    delta: GraphDelta
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    since: float | None = None
    done: list[tuple[str, str]] = field(default_factory=list)  # (user, memory) hand-over marks the cycle took


@dataclass
class ChangeSet:
    """Everything one unit of work changes for one user, committed atomically."""

    user_id: str
    turns: list[Turn] = field(default_factory=list)  # new raw turns to journal
    writes: list[MemoryWrite] = field(default_factory=list)
    removals: list[MemoryRemoval] = field(default_factory=list)
    processed: list[str] = field(default_factory=list)  # turn ids whose memories are written here
    quarantined: dict[str, str] = field(default_factory=dict)  # turn id -> why it could not be processed
    sleep_done: list[str] = field(default_factory=list)  # memory ids leaving the sleep queue
    graph: GraphCommit | None = None  # the shared LTM graph's change, committed in the same transaction

    def merge(self, other: ChangeSet) -> None:
        """Add ``other`` (same user) to this set, so both commit in one transaction."""
        if other.user_id != self.user_id:
            raise ValueError("a change set holds one user's changes")
        self.turns += other.turns
        self.writes += other.writes
        self.removals += other.removals
        self.processed += other.processed
        self.quarantined.update(other.quarantined)
        self.sleep_done += other.sleep_done
        if other.graph is not None:
            if self.graph is not None:
                raise ValueError("a change set holds one graph change")
            self.graph = other.graph

    def is_empty(self) -> bool:
        return not (self.turns or self.writes or self.removals or self.processed or self.quarantined
                    or self.sleep_done or (self.graph is not None and not _graph_empty(self.graph)))


def _graph_empty(graph: GraphCommit) -> bool:
    return graph.delta.is_empty() and graph.since is None and not graph.done
