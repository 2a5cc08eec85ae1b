"""Which embedder wrote a store's vectors: recorded in the journal, checked at every open.

The vectors of one store must come from one embedder: memories written by another model would be
compared on another scale (and another dimension breaks the index), silently. The journal's ``meta``
row ``embedder`` names the embedder of the stored vectors; opening the store with another one is a
``ConfigError`` that says which setting gives the recorded one back. Query vectors are never
stored, so ``query_quantize`` may differ from the store's graph. Under ``"auto"`` queries take the
graph of the memories: on the LoCoMo dev set (LLM-free, 1,033 questions) int8 queries against int8
memories measured evidence recall@10 0.821 like fp32 queries (@5 0.754 vs 0.758, @512 tokens 0.769
vs 0.767), and the int8 graph embeds a question in about half the time (docs/configuration.md).
"""

from __future__ import annotations

from .._config import EmbedderConfig
from .._errors import ConfigError
from .._journal import MemoryRows
from .._models._embed import local_identity
from .._models._factory import embedder_identity
from .._models._quantize import Quantize

META_KEY = "embedder"


def recorded_embedder(recorded: str | None, cfg: EmbedderConfig, *, has_memories: bool) -> str:
    """The identity of the embedder that wrote the store's vectors. A store from before this was
    recorded was written without quantisation (the only kind that existed then); an empty one
    takes the configured embedder."""
    if recorded is not None:
        return recorded
    if not has_memories:
        return embedder_identity(cfg)
    return embedder_identity(cfg.model_copy(update={"quantize": "none"}))


def _stored(journal: MemoryRows) -> tuple[str | None, bool]:
    """The recorded embedder, and whether the store has memories without a record (written before
    the record existed: fp32)."""
    stored = journal.meta(META_KEY)
    return stored, stored is None and journal.count_memories() > 0


def auto_quantize(cfg: EmbedderConfig, recorded: str | None, *, has_memories: bool) -> Quantize:
    """What ``quantize = "auto"`` means for a store: the recorded embedder's quantisation; for a store
    with memories but no record, fp32 (the only kind there was); for a new store, int8. The torch
    engine and the openai backend run no int8 graph."""
    if cfg.backend != "local" or cfg.engine == "torch":
        return "none"
    if recorded is not None:
        return "int8" if recorded == local_identity("int8") else "none"
    return "none" if has_memories else "int8"


def resolve_embedder(journal: MemoryRows, cfg: EmbedderConfig) -> EmbedderConfig:
    """``cfg`` with ``quantize = "auto"`` made concrete for this store (queries then take the same
    graph unless ``query_quantize`` says otherwise); any other value is returned as it is."""
    if cfg.quantize != "auto":
        return cfg
    stored, unrecorded_memories = _stored(journal)
    quantize = auto_quantize(cfg, stored, has_memories=unrecorded_memories)
    return cfg.model_copy(update={"quantize": quantize, "query_quantize": cfg.query_quantize or quantize})


def mismatch_message(recorded: str, current: str) -> str | None:
    """None when the configured embedder makes the stored kind of vectors, else why not."""
    if recorded == current:
        return None
    hint = ""
    if recorded.startswith("local/") and current.startswith("local/"):
        hint = " (set embedder.quantize=int8)" if "/int8" in recorded else " (set embedder.quantize=none)"
    return (f"this store's memories were embedded by {recorded}, but the embedder configured is {current}: "
            f"their vectors cannot be compared. Open the store with the recorded embedder{hint}, "
            "or copy its memories into a new store (get_all, then import_records without vectors, "
            "which embeds them again).")


def check_embedder(journal: MemoryRows, cfg: EmbedderConfig, *, read_only: bool) -> None:
    """Record the embedder in a store that has none recorded; refuse another one."""
    stored, unrecorded_memories = _stored(journal)
    recorded = recorded_embedder(stored, cfg, has_memories=unrecorded_memories)
    problem = mismatch_message(recorded, embedder_identity(cfg))
    if problem is not None:
        raise ConfigError(problem)
    if stored is None and not read_only:
        journal.set_meta(META_KEY, recorded)
