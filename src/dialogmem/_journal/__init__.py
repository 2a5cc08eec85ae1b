"""The journal: the durable source of truth of a store (raw turns, memory rows, history, usage).

``Journal`` is the protocol the rest of dialogmem uses; ``SQLiteJournal`` (the default, one file) and
``PostgresJournal`` (``journal.url``, several processes) implement it; ``open_journal`` picks one.
"""

from ._factory import open_journal
from ._protocol import Journal
from ._schema import SCHEMA_VERSION, IndexState, TurnStatus
from ._sqlite import SQLiteJournal
from ._vectors import stored_precision

__all__ = ["SCHEMA_VERSION", "IndexState", "Journal", "SQLiteJournal", "TurnStatus", "open_journal", "stored_precision"]
