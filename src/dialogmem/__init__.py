"""dialogmem: long-term memory for LLM agents and chat assistants.

Offline by default (local embeddings, embedded Qdrant Edge, SQLite journal); better with an LLM
(any OpenAI-compatible endpoint or a local GGUF).
"""

from ._api import AsyncMemoryAPI, MemoryAPI
from ._client import AsyncClient, Client
from ._config import Config, EmbedderConfig, LLMConfig, StoreConfig
from ._errors import (
    AuthError,
    ConfigError,
    DialogmemError,
    DiskFullError,
    InputError,
    LLMError,
    LLMOutputError,
    LLMTimeoutError,
    LLMUnavailableError,
    NotFoundError,
    SchemaVersionError,
    ServerUnavailableError,
    StoreError,
)
from ._facade._async import AsyncMemory
from ._facade._memory import Memory
from ._graph import GraphEdge, GraphNode, LTMGraph
from ._models import Embedder, LLMClient, ScriptedLLM
from ._read import Answer
from ._settings import ReadSettings, ServerSettings, SleepSettings, WriteSettings
from ._sleep._consolidator import ConsolidationReport
from ._sleep._updater import SleepReport
from ._store import IndexFilter, VectorIndex
from ._sync._repair import RepairReport
from ._types import (
    AddResult,
    Event,
    ExportReport,
    HistoryEntry,
    ImportReport,
    MemoryRecord,
    Message,
    QuarantinedTurn,
    SearchHit,
    SearchPlan,
    SearchResult,
    SourceTurn,
    Turn,
)

__version__ = "0.2.0"

__all__ = [
    "AddResult",
    "Answer",
    "AsyncClient",
    "AsyncMemory",
    "AsyncMemoryAPI",
    "AuthError",
    "Client",
    "Config",
    "ConfigError",
    "ConsolidationReport",
    "DialogmemError",
    "DiskFullError",
    "Embedder",
    "EmbedderConfig",
    "Event",
    "ExportReport",
    "GraphEdge",
    "GraphNode",
    "HistoryEntry",
    "ImportReport",
    "IndexFilter",
    "InputError",
    "LLMClient",
    "LLMConfig",
    "LLMError",
    "LLMOutputError",
    "LLMTimeoutError",
    "LLMUnavailableError",
    "LTMGraph",
    "Memory",
    "MemoryAPI",
    "MemoryRecord",
    "Message",
    "NotFoundError",
    "QuarantinedTurn",
    "ReadSettings",
    "RepairReport",
    "SchemaVersionError",
    "ScriptedLLM",
    "SearchHit",
    "SearchPlan",
    "SearchResult",
    "ServerSettings",
    "ServerUnavailableError",
    "SleepReport",
    "SleepSettings",
    "SourceTurn",
    "StoreConfig",
    "StoreError",
    "Turn",
    "VectorIndex",
    "WriteSettings",
    "__version__",
]
