"""Vector index layer: one protocol, an embedded Qdrant Edge adapter and a Qdrant server adapter."""

from __future__ import annotations

from pathlib import Path

from .._config import StoreConfig
from .._errors import ConfigError
from ._base import LTM_SCOPE, IndexFilter, IndexPoint, VectorIndex
from ._edge import EdgeIndex
from ._remote import RemoteIndex

__all__ = ["LTM_SCOPE", "EdgeIndex", "IndexFilter", "IndexPoint", "RemoteIndex", "VectorIndex", "open_index"]


def open_index(store_cfg: StoreConfig, path: Path, dim: int) -> VectorIndex:
    """The index ``store_cfg.backend`` names: an Edge shard under ``path / "index"``, or a
    collection on the Qdrant at ``store_cfg.url``."""
    if store_cfg.backend == "edge":
        return EdgeIndex.from_config(Path(path) / "index", dim, store_cfg)
    if store_cfg.backend == "qdrant":
        if not store_cfg.url:
            raise ConfigError("store.url is required when store.backend is 'qdrant' "
                              "(use ':memory:' for an in-process qdrant-client)")
        return RemoteIndex(store_cfg.url, api_key=store_cfg.api_key,
                           collection=store_cfg.collection, dim=dim)
    raise ConfigError(f"unknown store backend {store_cfg.backend!r}; expected 'edge' or 'qdrant'")
