"""The journal: the durable source of truth of a store (raw turns, memory rows, history, usage).

The rest of dialogmem names the role it uses (``TurnLog``, ``MemoryRows``, ``UserRows``,
``GraphRows``, ``IndexSource``, ``KeyRing``) or, where a store is wired, the whole ``Journal``.
One SQL journal (``_sql``), written once over a ``Dialect``, implements them all on a SQLite file
(``SQLiteJournal``, the default) or in a PostgreSQL schema (``PostgresJournal``, ``journal.url``);
``open_journal`` picks one.
"""

from ._factory import open_journal
from ._protocol import GraphRows, IndexSource, Journal, JournalHandle, KeyRing, MemoryRows, TurnLog, UserRows
from ._schema import SCHEMA_VERSION, IndexState, TurnStatus
from ._sqlite import SQLiteJournal
from ._vectors import stored_precision, stored_precision_all

__all__ = ["SCHEMA_VERSION", "GraphRows", "IndexSource", "IndexState", "Journal", "JournalHandle", "KeyRing",
           "MemoryRows", "SQLiteJournal", "TurnLog", "TurnStatus", "UserRows", "open_journal", "stored_precision",
           "stored_precision_all"]
