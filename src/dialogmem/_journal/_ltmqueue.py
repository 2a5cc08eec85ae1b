"""The LTM hand-over queue of the journal (schema step ``_v5_ltm_pending``): MTM items evicted (or
compressed into a near-duplicate) that the next consolidation cycle must take in.

The mark is written in the eviction's own transaction (``_memories.remove_memories`` with status
``evicted``) and cleared in the transaction that commits the consolidation cycle which read it
(``GraphCommit.done``). So an evicted item is handed to consolidation exactly once, whatever
process dies in between and whatever the clocks say: before the cycle commits, the mark is still
there and the next cycle takes the item; after, both the graph change and the cleared mark are
durable. Deleting the item (``Memory.delete``) or its user (``forget_user``) removes the mark.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._dialect import Dialect
from ._rows import Conn, SQLRows, many


class LTMQueueSQL(SQLRows):
    """Reading the queue (the ``GraphRows`` role); marks and clears are the functions below, run
    inside the eviction's and the cycle's transactions."""

    def ltm_queued(self) -> list[tuple[str, str]]:
        """(user id, memory id) of every item waiting to be handed to consolidation."""
        return [(r[0], r[1]) for r in self._query("SELECT user_id, memory_id FROM ltm_pending "
                                                  "ORDER BY user_id, memory_id")]


def queue_for_ltm(db: Conn, d: Dialect, pairs: Sequence[tuple[str, str]]) -> None:
    many(db, f"INSERT INTO ltm_pending (user_id, memory_id) VALUES ({d.mark}, {d.mark}) ON CONFLICT DO NOTHING",
         list(pairs))


def unqueue_for_ltm(db: Conn, d: Dialect, pairs: Sequence[tuple[str, str]]) -> None:
    many(db, f"DELETE FROM ltm_pending WHERE user_id={d.mark} AND memory_id={d.mark}", list(pairs))
