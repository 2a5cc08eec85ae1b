"""dialogmem: long-term memory for LLM agents and chat assistants.

Offline by default (local embeddings, embedded Qdrant Edge, SQLite journal); better with an LLM
(any OpenAI-compatible endpoint or a local GGUF). ``pip install dialogmem`` is the client of a server
(``Client``, ``AsyncClient``, the types of ``dialogmem.types``); ``pip install 'dialogmem[local]'`` adds the
engine (``Memory``). Names load on first use, so importing the client loads nothing of the engine.
"""

from typing import TYPE_CHECKING, Any

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
    ServerResponseError,
    ServerUnavailableError,
    StoreError,
)
from ._extras import MissingPartError, engine_missing

if TYPE_CHECKING:  # the names below load on first use (``__getattr__``), so a client never loads the engine
    from ._api import AsyncMemoryAPI, MemoryAPI
    from ._client import AsyncClient, Client
    from ._config import Config, EmbedderConfig, LLMConfig, StoreConfig
    from ._facade._async import AsyncMemory
    from ._facade._memory import Memory
    from ._models import Embedder, LLMClient, ScriptedLLM
    from ._settings import ReadSettings, ServerSettings, SleepSettings, WriteSettings
    from ._store import VectorIndex
    from .types import (
        AddResult,
        Answer,
        ConsolidationReport,
        Event,
        ExportReport,
        GraphAudit,
        GraphEdge,
        GraphNode,
        HistoryEntry,
        ImportReport,
        IndexFilter,
        LTMGraph,
        MemoryRecord,
        Message,
        QuarantinedTurn,
        RepairReport,
        SearchHit,
        SearchPlan,
        SearchResult,
        SleepReport,
        SourceTurn,
        Turn,
    )

#: where each lazily loaded name lives
_LAZY: dict[str, str] = {
    **dict.fromkeys(("AsyncMemoryAPI", "MemoryAPI"), "._api"),
    **dict.fromkeys(("AsyncClient", "Client"), "._client"),
    **dict.fromkeys(("Config", "EmbedderConfig", "LLMConfig", "StoreConfig"), "._config"),
    **dict.fromkeys(("ReadSettings", "ServerSettings", "SleepSettings", "WriteSettings"), "._settings"),
    **dict.fromkeys(("AddResult", "Answer", "ConsolidationReport", "Event", "ExportReport", "GraphAudit", "GraphEdge",
                     "GraphNode", "HistoryEntry", "ImportReport", "IndexFilter", "LTMGraph", "MemoryRecord", "Message",
                     "QuarantinedTurn", "RepairReport", "SearchHit", "SearchPlan", "SearchResult", "SleepReport",
                     "SourceTurn", "Turn"), ".types"),
    # the engine: the ``local`` extra (numpy, onnxruntime, Qdrant Edge...)
    "AsyncMemory": "._facade._async",
    "Memory": "._facade._memory",
    **dict.fromkeys(("Embedder", "LLMClient", "ScriptedLLM"), "._models"),
    "VectorIndex": "._store",
}


def __getattr__(name: str) -> Any:
    """Loads a public name on first use: ``from dialogmem import Client`` loads the client and the
    public types only; ``Memory`` loads the engine, or says how to install it (``engine_missing``)."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'dialogmem' has no attribute {name!r}")
    import importlib

    try:
        module = importlib.import_module(where, __name__)
    except ModuleNotFoundError as exc:
        raise engine_missing(name, exc) from exc
    value = getattr(module, name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


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
    "GraphAudit",
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
    "MissingPartError",
    "NotFoundError",
    "QuarantinedTurn",
    "ReadSettings",
    "RepairReport",
    "SchemaVersionError",
    "ScriptedLLM",
    "SearchHit",
    "SearchPlan",
    "SearchResult",
    "ServerResponseError",
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
