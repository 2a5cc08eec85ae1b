"""Which journal a store opens: SQLite in its data directory, or PostgreSQL when ``journal.url`` is set."""

from __future__ import annotations

from pathlib import Path

from .._config import JournalConfig
from ._protocol import Journal
from ._sqlite import SQLiteJournal


def open_journal(config: JournalConfig, sqlite_path: Path, *, read_only: bool = False) -> Journal:
    if config.url is None:
        return SQLiteJournal(sqlite_path, read_only=read_only)
    from ._postgres import PostgresJournal  # psycopg is an extra: imported only when asked for

    return PostgresJournal(config.url, schema_name=config.schema_name, read_only=read_only,
                           pool_min_size=config.pool_min_size, pool_max_size=config.pool_max_size,
                           connect_timeout_s=config.connect_timeout_s)
