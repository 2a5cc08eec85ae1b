"""How a memory's dense vector is kept in the journal: eight bits a component and one scale, once.

A float32 MiniLM vector is 1,536 bytes; in float16 (the format before this one) 770. A new blob is
``b"q" + pad + scale + int8 components + pad bytes``: the components divided by one float32 scale a
vector, rounded to the nearest of -127..127, and 0-3 zero bytes (their count is the tag's second
character) that make its length 2 mod 4 — 390 bytes for 384 dimensions. The write path rounds every vector to this
precision (:func:`stored_precision`) *before* it reaches the journal or the vector index, so the
index holds exactly the values the journal gives back: a rebuild from the journal (no re-embedding)
writes the same float32 points, and so the same copies in the index. The cosine between a unit
vector and its rounded self is above 0.9999.

The scale keeps 12 significant bits (rounded up), so ``component * scale`` is exact in float32 and
rounding a rounded vector gives it back bit for bit: a vector read from the journal and written
again (an update that keeps it, a re-import) keeps its values.

Rows written before read as they were; nothing is rewritten: float32 (``4 * dim`` bytes) and float16
(``b"h2"`` and ``2 * dim`` bytes). The three cannot be mistaken for each other: a float32 blob's length
is a multiple of four, the other two are 2 mod 4 long and start with their own tag.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

HALF_TAG = b"h2"  # float16 blobs of an earlier version (length 2 + 2 * dim)
TAG = b"q"  # this version's blobs: TAG, the pad count (a digit), a little-endian float32 scale, dim int8
_HEAD = 6  # components, the pad
_SCALE_MASK = np.uint32(0xFFFFF000)  # a float32 scale keeps 12 significant bits (11 stored and the implicit one)


def _quantize(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row of ``m`` (n, dim) as int8 components and one float32 scale: its largest magnitude over
    127, rounded up to 12 significant bits (so a component times it is exact in float32, and a rounded
    vector's scale is its own); all rows at once (an import rounds thousands)."""
    if m.shape[1] == 0:
        return np.zeros(len(m), dtype=np.float32), np.zeros(m.shape, dtype=np.int8)
    top = np.max(np.abs(m), axis=1)
    raw = (top.astype(np.float64) / 127.0).astype(np.float32)
    up = ((raw.view(np.uint32) + np.uint32(0xFFF)) & _SCALE_MASK).view(np.float32)  # round the mantissa up
    scales = np.where(top == 0.0, np.float32(0.0), up).astype(np.float32)
    divisor = np.where(scales == 0.0, 1.0, scales.astype(np.float64))
    q = np.clip(np.rint(m.astype(np.float64) / divisor[:, None]), -127, 127).astype(np.int8)
    q[scales == 0.0] = 0
    return scales, q


def _dequantize(scale: np.ndarray | np.float32, q: np.ndarray) -> np.ndarray:
    """The float32 values of ``q`` (int8) times ``scale`` (a vector's, or a column of rows' scales)."""
    return q.astype(np.float32) * np.asarray(scale, dtype=np.float32)


def stored_precision(vector: np.ndarray) -> np.ndarray:
    """``vector`` (float32) as the journal keeps it: the values its blob decodes to (rows of a
    vector matrix each with its own scale)."""
    v = np.asarray(vector, dtype=np.float32)
    rows = v.reshape(-1, v.shape[-1])
    scales, q = _quantize(rows)
    return _dequantize(scales[:, None], q).reshape(v.shape)


def encode(vector: np.ndarray | None) -> bytes | None:
    """The blob of ``vector`` (None stays None)."""
    return encode_all([vector])[0]


def encode_all(vectors: Sequence[np.ndarray | None]) -> list[bytes | None]:
    """The blob of each vector (None stays None), the vectors of one dimension rounded together (a
    change set's or an import batch's: one ``_quantize`` instead of one a vector)."""
    out: list[bytes | None] = [None] * len(vectors)
    for where, m in _by_dim(vectors):
        scales, q = _quantize(m)
        pad = (2 - _HEAD - m.shape[1]) % 4
        head, tail = TAG + str(pad).encode(), bytes(pad)
        for row, i in enumerate(where):
            out[i] = head + scales[row:row + 1].astype("<f4").tobytes() + q[row].tobytes() + tail
    return out


def stored_precision_all(vectors: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``stored_precision`` of each vector (each one scale, as its blob keeps it), in its own shape: the
    vectors of one dimension rounded together (a change set's, an import's)."""
    out: list[np.ndarray] = [np.empty(0, np.float32)] * len(vectors)
    for where, m in _by_dim(vectors):
        scales, q = _quantize(m)
        rounded = _dequantize(scales[:, None], q)
        for row, i in enumerate(where):
            out[i] = rounded[row].reshape(np.shape(vectors[i]))
    return out


def _by_dim(vectors: Sequence[np.ndarray | None]) -> list[tuple[list[int], np.ndarray]]:
    """The vectors that are not None, flattened to float32 and stacked by dimension: (their indices in
    ``vectors``, their matrix) per dimension."""
    groups: dict[int, list[int]] = {}
    flat: dict[int, np.ndarray] = {}
    for i, v in enumerate(vectors):
        if v is not None:
            flat[i] = np.asarray(v, dtype=np.float32).reshape(-1)
            groups.setdefault(flat[i].size, []).append(i)
    return [(where, np.stack([flat[i] for i in where]) if dim else np.zeros((len(where), 0), np.float32))
            for dim, where in groups.items()]


def decode(blob: bytes | None) -> np.ndarray | None:
    """The float32 vector of a blob of any format (None stays None)."""
    if blob is None:
        return None
    raw = bytes(blob)  # PostgreSQL hands out memoryview
    if len(raw) % 4 == 2 and raw[:1] == TAG and raw[1:2] in (b"0", b"1", b"2", b"3") and len(raw) >= _HEAD:
        scale = np.frombuffer(raw, dtype="<f4", count=1, offset=2)[0]
        count = len(raw) - _HEAD - int(raw[1:2])
        return _dequantize(scale, np.frombuffer(raw, dtype=np.int8, offset=_HEAD, count=count))
    if len(raw) % 4 == 2 and raw[:2] == HALF_TAG:
        return np.frombuffer(raw, dtype="<f2", offset=2).astype(np.float32)
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)
