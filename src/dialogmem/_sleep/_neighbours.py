"""Near neighbours of one user's MTM items for the eviction plan (``_mtm``), without I/O.

The redundancy term of the utility needs, per item, its most similar *kept* item, and only when the
cosine is above ``floor`` (below it the term is 0). So the plan needs every pair above ``floor``, and
per item its best few of them (``NeighbourLists``): when an item's current best neighbour is evicted,
the next one in its list takes over (no new vector product); only an item whose whole list is gone
and whose list was cut at ``k`` is computed again, one row against the kept items.

*Pairs* (``pairs_above``):

- up to ``exact_limit`` items: exact, one matrix product in blocks of rows (bounded memory);
- above: an inverted-file partition, seeded and deterministic — ``cells`` centroids (rows at even
  strides, refined by two Lloyd steps), every item in its ``probes`` nearest cells, exact products
  inside each cell. Cost about ``probes**2 * n**2 / cells`` dot products instead of ``n**2`` (with
  ``cells ~ sqrt(n)``: ``n**1.5``). Pairs whose two items share no cell are missed; a near duplicate
  (cosine >= 0.8) almost always shares one, a pair at 0.5-0.6 sometimes does not: its redundancy then
  counts as 0 (the item looks a little more useful than it is). Exact below the limit, so the
  hand-made tests and small stores get the exact order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EXACT_LIMIT = 8192
_BLOCK_FLOATS = 1 << 24  # similarity block size: 64 MiB of float32
_LLOYD_STEPS = 2
_PROBES = 2


def pairs_above(vecs: np.ndarray, floor: float, *, exact_limit: int = EXACT_LIMIT
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every ordered pair ``(i, j)``, ``i != j``, with cosine ``>= floor``: (rows, cols, cosines)."""
    n = len(vecs)
    if n < 2:
        return _empty()
    if n <= exact_limit:
        return _exact_pairs(vecs, np.arange(n), floor)
    parts = [_exact_pairs(vecs, members, floor) for members in _cells(vecs)]
    rows = np.concatenate([p[0] for p in parts])
    cols = np.concatenate([p[1] for p in parts])
    cos = np.concatenate([p[2] for p in parts])
    _, first = np.unique(rows.astype(np.int64) * n + cols, return_index=True)  # a pair shared by two cells
    return rows[first], cols[first], cos[first]


def _empty() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)


def _exact_pairs(vecs: np.ndarray, members: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs above ``floor`` among ``members`` (global row numbers), one block of rows at a time."""
    sub = vecs[members]
    m = len(members)
    step = max(1, min(m, _BLOCK_FLOATS // max(1, m)))
    rows, cols, cos = [], [], []
    for start in range(0, m, step):
        sims = sub[start:start + step] @ sub.T
        r, c = np.nonzero(sims >= floor)
        keep = (r + start) != c
        r, c = r[keep], c[keep]
        rows.append(members[r + start])
        cols.append(members[c])
        cos.append(sims[r, c].astype(np.float32))
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(cos)


def _cells(vecs: np.ndarray) -> list[np.ndarray]:
    """The members of each cell of a seeded partition; every item sits in its ``_PROBES`` best cells."""
    n = len(vecs)
    count = max(2, int(np.sqrt(n)))
    centroids = vecs[np.linspace(0, n - 1, count).astype(np.int64)].copy()
    for _ in range(_LLOYD_STEPS):
        nearest = _nearest_cells(vecs, centroids, 1)[:, 0]
        for c in range(count):
            mine = vecs[nearest == c]
            if len(mine):
                centre = mine.sum(axis=0)
                centroids[c] = centre / max(float(np.linalg.norm(centre)), 1e-12)
    probes = _nearest_cells(vecs, centroids, min(_PROBES, count))
    items = np.repeat(np.arange(n), probes.shape[1])
    cells = probes.ravel()
    order = np.argsort(cells, kind="stable")
    bounds = np.searchsorted(cells[order], np.arange(count + 1))
    return [items[order[bounds[c]:bounds[c + 1]]] for c in range(count) if bounds[c + 1] - bounds[c] > 1]


def _nearest_cells(vecs: np.ndarray, centroids: np.ndarray, p: int) -> np.ndarray:
    out = np.empty((len(vecs), p), dtype=np.int64)
    step = max(1, _BLOCK_FLOATS // max(1, len(centroids)))
    for start in range(0, len(vecs), step):
        sims = vecs[start:start + step] @ centroids.T
        if p == 1:
            out[start:start + step, 0] = np.argmax(sims, axis=1)
            continue
        top = np.argpartition(-sims, p - 1, axis=1)[:, :p]
        out[start:start + step] = np.take_along_axis(
            top, np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1, kind="stable"), axis=1)
    return out


@dataclass
class NeighbourLists:
    """Per row ``i``: its best neighbours above the floor, best first, at most ``cap`` of them:
    ``ids[starts[i]:ends[i]]`` and ``cos[...]`` (rows packed one after the other); ``cut[i]``: the row
    had more than ``cap`` (a list that runs out must be computed again)."""

    starts: np.ndarray  # (n,) int64
    ends: np.ndarray  # (n,) int64
    ids: np.ndarray  # int64
    cos: np.ndarray  # float32
    cut: np.ndarray  # (n,) bool

    @classmethod
    def build(cls, n: int, rows: np.ndarray, cols: np.ndarray, cos: np.ndarray, cap: int) -> NeighbourLists:
        # by row, best cosine first, then lower column (one stable sort: the pairs come by row, then column)
        order = np.lexsort((cols, rows))
        rows, cols, cos = rows[order], cols[order], cos[order]
        order = np.argsort(rows + (2.0 - cos.astype(np.float64)) / 4.0, kind="stable")
        rows, cols, cos = rows[order], cols[order], cos[order]
        every = np.bincount(rows, minlength=n)
        keep = (np.arange(len(rows)) - np.searchsorted(rows, np.arange(n))[rows]) < cap
        rows, cols, cos = rows[keep], cols[keep], cos[keep]
        counts = np.minimum(every, cap)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        return cls(starts=starts, ends=starts + counts, ids=cols.astype(np.int64), cos=cos.astype(np.float32),
                   cut=every > cap)

    def holders(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows that list each item (whose best it may be): ``rows[bounds[i]:bounds[i + 1]]``."""
        rows = np.repeat(np.arange(len(self.starts)), self.ends - self.starts)
        order = np.argsort(self.ids, kind="stable")
        bounds = np.searchsorted(self.ids[order], np.arange(len(self.starts) + 1))
        return rows[order], bounds
