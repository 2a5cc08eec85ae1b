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
- with a cap ``k`` (the plan's list length), each item keeps only its best ``k`` pairs as they are
  computed, block by block and cell by cell: memory is ``n * k`` pairs, not the number of pairs
  above the floor (6 million for 10⁵ items of a talkative user, 10⁸ for 10⁴ copies of "ok").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

EXACT_LIMIT = 8192
_BLOCK_FLOATS = 1 << 22  # similarity block size: 16 MiB of float32 (its temporaries are a few times that)
_LLOYD_STEPS = 2
_PROBES = 2


class Pairs(NamedTuple):
    """Ordered pairs ``(rows[x], cols[x])`` with cosine ``cos[x]``; ``over``: per item, True when it
    had more pairs above the floor than the cap kept (only its best ``cap`` are here)."""

    rows: np.ndarray  # int32
    cols: np.ndarray  # int32
    cos: np.ndarray  # float32
    over: np.ndarray  # (n,) bool


def pairs_above(vecs: np.ndarray, floor: float, *, cap: int | None = None,
                exact_limit: int = EXACT_LIMIT) -> Pairs:
    """Every ordered pair ``(i, j)``, ``i != j``, with cosine ``>= floor``; with ``cap``, per item
    ``i`` only its best ``cap`` of them (highest cosine, then lower ``j``), so memory stays
    ``n * cap`` pairs whatever the data (a user who said "ok" 10⁴ times has 10⁸ pairs above any
    floor). Above ``exact_limit`` items, an item's best ``cap`` of each of its cells are kept and
    merged (the best ``cap`` of the union are among them)."""
    n = len(vecs)
    over = np.zeros(n, dtype=bool)
    if n < 2:
        return Pairs(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32), over)
    if n <= exact_limit:
        return Pairs(*_exact_pairs(vecs, np.arange(n, dtype=np.int32), floor, cap, over), over)
    probes, cells = _cells(vecs)
    parts = []
    for c, members in cells:
        rows, cols, cos = _exact_pairs(vecs, members, floor, cap, over)
        if probes.shape[1] == 2:  # two items that share their other cell too meet there again: keep the lower cell's
            other_r = np.where(probes[rows, 0] == c, probes[rows, 1], probes[rows, 0])
            other_c = np.where(probes[cols, 0] == c, probes[cols, 1], probes[cols, 0])
            keep = (other_r != other_c) | (c < other_r)
            rows, cols, cos = rows[keep], cols[keep], cos[keep]
        parts.append([rows, cols, cos])
    joined = []
    for k in range(3):  # one array at a time, the parts' pieces freed once copied
        joined.append(np.concatenate([p[k] for p in parts]))
        for p in parts:
            p[k] = p[k][:0]
    return Pairs(joined[0], joined[1], joined[2], over)


def _exact_pairs(vecs: np.ndarray, members: np.ndarray, floor: float, cap: int | None,
                 over: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs above ``floor`` among ``members`` (global row numbers), one block of rows at a time;
    with ``cap``, each row's best ``cap`` (``over`` is set for the rows that had more)."""
    sub = vecs[members]
    m = len(members)
    step = max(1, min(m, _BLOCK_FLOATS // max(1, m)))
    rows, cols, cos = [], [], []
    for start in range(0, m, step):
        sims = sub[start:start + step] @ sub.T
        block = np.arange(len(sims))
        sims[block, block + start] = -np.inf  # an item is not its own neighbour
        above = sims >= floor
        if cap is not None:
            more = np.count_nonzero(above, axis=1) > cap
            over[members[start + np.flatnonzero(more)]] = True
            if more.any():
                above[more] = _best(sims[more], cap) & above[more]
        r, c = np.nonzero(above)
        rows.append(members[r + start])
        cols.append(members[c])
        cos.append(sims[r, c].astype(np.float32))
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(cos)


def _best(sims: np.ndarray, cap: int) -> np.ndarray:
    """Per row, a mask of its ``cap`` highest values; ties at the edge go to the lower columns."""
    if cap <= 0:
        return np.zeros(sims.shape, dtype=bool)
    edge = -np.partition(-sims, cap - 1, axis=1)[:, cap - 1:cap]  # each row's cap-th highest value
    higher = sims > edge
    tied = sims == edge
    room = cap - np.count_nonzero(higher, axis=1, keepdims=True)
    return higher | (tied & (np.cumsum(tied, axis=1, dtype=np.int32) <= room))


def _cells(vecs: np.ndarray) -> tuple[np.ndarray, list[tuple[int, np.ndarray]]]:
    """A seeded partition: each item's ``_PROBES`` best cells (best first), and each cell of two
    items or more with its members (int32, ascending)."""
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
    items = np.repeat(np.arange(n, dtype=np.int32), probes.shape[1])
    cells = probes.ravel()
    order = np.argsort(cells, kind="stable")
    bounds = np.searchsorted(cells[order], np.arange(count + 1))
    return probes, [(c, items[order[bounds[c]:bounds[c + 1]]]) for c in range(count)
                    if bounds[c + 1] - bounds[c] > 1]


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


def _offsets(counts: np.ndarray) -> np.ndarray:
    """Where each row starts when rows of ``counts`` items are packed one after the other."""
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


@dataclass
class NeighbourLists:
    """Per row ``i``: its best neighbours above the floor, best first, at most ``cap`` of them:
    ``ids[starts[i]:ends[i]]`` and ``cos[...]`` (rows packed one after the other); ``cut[i]``: the row
    had more than ``cap`` (a list that runs out must be computed again)."""

    starts: np.ndarray  # (n,) int64
    ends: np.ndarray  # (n,) int64
    ids: np.ndarray  # int32
    cos: np.ndarray  # float32
    cut: np.ndarray  # (n,) bool

    @classmethod
    def build(cls, n: int, rows: np.ndarray, cols: np.ndarray, cos: np.ndarray, cap: int,
              over: np.ndarray | None = None) -> NeighbourLists:
        """``over``: rows known to have had more pairs than the ones given (``Pairs.over``)."""
        order = np.lexsort((cols, -cos, rows))  # by row, best cosine first, then lower column
        rows, cols, cos = rows[order], cols[order], cos[order]
        del order
        every = np.bincount(rows, minlength=n)
        keep = np.arange(len(rows)) - np.repeat(_offsets(every), every) < cap  # rank inside the row
        rows, cols, cos = rows[keep], cols[keep], cos[keep]
        counts = np.minimum(every, cap)
        starts = _offsets(counts)
        return cls(starts=starts, ends=starts + counts, ids=cols.astype(np.int32), cos=cos.astype(np.float32),
                   cut=(every > cap) | (over if over is not None else False))

    def holders(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows that list each item (whose best it may be): ``rows[bounds[i]:bounds[i + 1]]``."""
        rows = np.repeat(np.arange(len(self.starts), dtype=np.int32), self.ends - self.starts)
        order = np.argsort(self.ids, kind="stable")
        bounds = np.searchsorted(self.ids[order], np.arange(len(self.starts) + 1))
        return rows[order], bounds
