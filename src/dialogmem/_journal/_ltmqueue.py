"""The LTM hand-over queue of the journal (schema step ``_v5_ltm_pending``): MTM items evicted (or
compressed into a near-duplicate) that the next consolidation cycle must take in.

The mark is written in the eviction's own transaction (``MemoryRows._remove`` with status
``evicted``) and cleared in the transaction that commits the consolidation cycle which read it
(``GraphCommit.done``). So an evicted item is handed to consolidation exactly once, whatever
process dies in between and whatever the clocks say: before the cycle commits, the mark is still
there and the next cycle takes the item; after, both the graph change and the cleared mark are
durable. Deleting the item (``Memory.delete``) or its user (``forget_user``) removes the mark.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

Row = Any


class LTMQueueRows:
    """Mixin: needs ``_query()`` of the journal."""

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[Row]:
        raise NotImplementedError  # provided by the journal

    @staticmethod
    def _queue_for_ltm(db: sqlite3.Connection, user_id: str, memory_id: str) -> None:
        db.execute("INSERT INTO ltm_pending (user_id, memory_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                   (user_id, memory_id))

    @staticmethod
    def _unqueue_for_ltm(db: sqlite3.Connection, pairs: Sequence[tuple[str, str]]) -> None:
        db.executemany("DELETE FROM ltm_pending WHERE user_id=? AND memory_id=?", list(pairs))

    def ltm_queued(self) -> list[tuple[str, str]]:
        """(user id, memory id) of every item waiting to be handed to consolidation."""
        return [(r[0], r[1]) for r in self._query("SELECT user_id, memory_id FROM ltm_pending "
                                                  "ORDER BY user_id, memory_id")]
