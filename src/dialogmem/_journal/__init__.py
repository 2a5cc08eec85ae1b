"""The journal: the durable source of truth of a store (raw turns, memory rows, history, usage)."""

from ._schema import SCHEMA_VERSION, IndexState, TurnStatus
from ._sqlite import Journal

__all__ = ["SCHEMA_VERSION", "IndexState", "Journal", "TurnStatus"]
