"""Vector index layer: one protocol; an embedded Qdrant Edge adapter, a Qdrant server adapter and a
PostgreSQL (pgvector) adapter that lives beside a PostgreSQL journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._config import StoreConfig
from .._errors import ConfigError
from ._base import LTM_SCOPE, IndexFilter, IndexPoint, VectorIndex
from ._edge import EdgeIndex
from ._postgres import PgIndex
from ._remote import RemoteIndex

__all__ = ["LTM_SCOPE", "EdgeIndex", "IndexFilter", "IndexPoint", "PgIndex", "RemoteIndex", "VectorIndex", "open_index"]


def open_index(store_cfg: StoreConfig, path: Path, dim: int, *, pool: Any = None,
               read_only: bool = False) -> VectorIndex:
    """The index ``store_cfg.backend`` names: an Edge shard under ``path / "index"``, a collection
    on the Qdrant at ``store_cfg.url``, or tables beside the journal in PostgreSQL (``pool``: the
    PostgreSQL journal's connection pool). ``read_only`` (server indexes): open without creating
    anything; writes are refused by the server or by the caller's wrapper."""
    if store_cfg.backend == "edge":
        return EdgeIndex.from_config(Path(path) / "index", dim, store_cfg)
    if store_cfg.backend == "qdrant":
        if not store_cfg.url:
            raise ConfigError("store.url is required when store.backend is 'qdrant' "
                              "(use ':memory:' for an in-process qdrant-client)")
        return RemoteIndex(store_cfg.url, api_key=store_cfg.api_key,
                           collection=store_cfg.collection, dim=dim, read_only=read_only)
    if store_cfg.backend == "postgres":
        if pool is None:
            raise ConfigError("store.backend = 'postgres' keeps the index in the journal's database: set "
                              "journal.url to a PostgreSQL URL")
        return PgIndex(pool, dim=dim, exact_max=store_cfg.exact_max, read_only=read_only)
    raise ConfigError(f"unknown store backend {store_cfg.backend!r}; expected 'edge', 'qdrant' or 'postgres'")
