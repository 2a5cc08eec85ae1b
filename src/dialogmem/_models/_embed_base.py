"""Embedder protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Turns text into L2-normalised float32 vectors of size ``dim``."""

    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows L2-normalised. Empty input gives shape (0, dim)."""

    def embed_query(self, text: str) -> np.ndarray:
        """(dim,) float32, L2-normalised."""
