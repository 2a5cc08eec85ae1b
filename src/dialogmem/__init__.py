"""dialogmem: long-term memory for LLM agents and chat assistants.

Offline by default (local embeddings, embedded Qdrant Edge, SQLite journal); better with an LLM
(any OpenAI-compatible endpoint or a local GGUF).
"""

from ._async import AsyncMemory
from ._config import Config, EmbedderConfig, LLMConfig, StoreConfig
from ._errors import (
    ConfigError,
    DialogmemError,
    InputError,
    LLMError,
    LLMOutputError,
    LLMTimeoutError,
    LLMUnavailableError,
    NotFoundError,
    SchemaVersionError,
    StoreError,
)
from ._memory import Memory
from ._read import Answer
from ._settings import ReadSettings, SleepSettings, WriteSettings
from ._sleeptime import SleepReport
from ._types import AddResult, Event, HistoryEntry, MemoryRecord, Message, SearchHit, SearchResult, Turn

__version__ = "0.1.0"

__all__ = [
    "AddResult",
    "Answer",
    "AsyncMemory",
    "Config",
    "ConfigError",
    "DialogmemError",
    "EmbedderConfig",
    "Event",
    "HistoryEntry",
    "InputError",
    "LLMConfig",
    "LLMError",
    "LLMOutputError",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "Memory",
    "MemoryRecord",
    "Message",
    "NotFoundError",
    "ReadSettings",
    "SchemaVersionError",
    "SearchHit",
    "SearchResult",
    "SleepReport",
    "SleepSettings",
    "StoreConfig",
    "StoreError",
    "Turn",
    "WriteSettings",
    "__version__",
]
