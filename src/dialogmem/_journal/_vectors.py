"""How a memory's dense vector is kept in the journal: half precision, once.

A float32 MiniLM vector is 1,536 bytes, and with the ~0.7 KB JSON payload a ``memories`` row (~2.3
KB) took a 4 KB SQLite page of its own. Kept as float16 (768 bytes and a 2-byte tag) a row is ~1.5 KB,
two to a page. The write path rounds every vector to float16 (:func:`stored_precision`) *before*
it reaches the journal or the vector index, so the index holds exactly the values the journal can
give back: a rebuild from the journal (no re-embedding) writes the same float32 points, and so the
same int8 copy. The cosine between a unit vector and its rounded self is above 0.99999.

Rows written before (plain float32, ``4 * dim`` bytes) are read as they are; nothing is rewritten.
A new blob is ``TAG + float16 bytes``: ``2 + 2 * dim`` bytes, which for an even ``dim`` is never a
multiple of four, so the two formats cannot be mistaken for each other. An odd ``dim`` (no model
here has one) keeps float32.
"""

from __future__ import annotations

import numpy as np

TAG = b"h2"  # the half-precision blob's first two bytes (its length is 2 mod 4)


def stored_precision(vector: np.ndarray) -> np.ndarray:
    """``vector`` (float32) as the journal keeps it: rounded to float16 for an even dimension."""
    v = np.asarray(vector, dtype=np.float32)
    if v.shape[-1] % 2:
        return v
    return v.astype(np.float16).astype(np.float32)


def encode(vector: np.ndarray | None) -> bytes | None:
    """The blob of ``vector`` (None stays None)."""
    if vector is None:
        return None
    v = np.asarray(vector, dtype=np.float32).reshape(-1)
    if v.size % 2:
        return v.astype("<f4").tobytes()
    return TAG + v.astype("<f2").tobytes()


def decode(blob: bytes | None) -> np.ndarray | None:
    """The float32 vector of a blob of either format (None stays None)."""
    if blob is None:
        return None
    raw = bytes(blob)  # PostgreSQL hands out memoryview
    if len(raw) % 4 == 2 and raw[:2] == TAG:
        return np.frombuffer(raw, dtype="<f2", offset=2).astype(np.float32)
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)
