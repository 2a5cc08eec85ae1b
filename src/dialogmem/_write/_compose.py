"""Memory vectors made of their turns' vectors (``write.vectors = "turns"``).

An LLM-free memory is its turn and the turns before it (``write.context_turns``), so consecutive
memories share most of their text and embedding each window embeds every turn three times, in a
text three times as long. Here a memory's vector is the weighted sum of its parts' vectors (the
turn's own line weighs 1, each context turn ``context_weight``), normalised; each part is
embedded once and remembered, so a turn arriving alone costs one embedding of its own line.

The vector is a function of the parts alone (the cache only saves work), so a replayed turn gets
the same vector. Facts without parts (an LLM's statements, event units, the per-turn writer's items)
are embedded as text, and so is a memory re-embedded later (an edit, an import without vectors).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

from ._extract import ExtractedFact

EmbedFn = Callable[[Sequence[str]], np.ndarray]

CONTEXT_WEIGHT = 0.5
PART_CACHE = 4096  # part vectors remembered (a user's next memories reuse its last turns)


def compose(parts: np.ndarray, *, context_weight: float = CONTEXT_WEIGHT) -> np.ndarray:
    """One unit vector from a memory's part vectors (rows, its own turn last)."""
    weights = np.full(len(parts), context_weight, dtype=np.float32)
    weights[-1] = 1.0
    rows = np.asarray(parts, dtype=np.float32)
    summed = weights @ rows
    norm = float(np.linalg.norm(summed))
    if norm < 1e-6:  # the context cancels the turn out: keep the turn's own direction
        summed, norm = rows[-1], float(np.linalg.norm(rows[-1])) or 1.0
    return (summed / norm).astype(np.float32)


class PartVectors:
    """The vectors of each user's memory parts, embedded once each (thread-safe, bounded: a part
    holds a turn's text, so it is kept per user and ``forget`` drops a user's)."""

    def __init__(self, embed: EmbedFn, *, size: int = PART_CACHE, context_weight: float = CONTEXT_WEIGHT) -> None:
        self._embed = embed
        self._size = size
        self.context_weight = context_weight
        self._known: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def memory_vectors(self, user_id: str, facts: Sequence[ExtractedFact]) -> np.ndarray:
        """One row per fact: composed from its parts, or its text's vector when it has none; every
        text not yet known goes to the embedder in one call."""
        texts = [p for f in facts for p in (f.parts or [f.fact])]
        with self._lock:  # what is found now is used now, whatever another writer evicts meanwhile
            known = {t: self._known[(user_id, t)] for t in texts if (user_id, t) in self._known}
            for t in known:
                self._known.move_to_end((user_id, t))
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        if todo:
            # copies: a cached row must not keep the embedder's whole output array alive
            known.update((t, np.array(v, dtype=np.float32)) for t, v in zip(todo, self._embed(todo), strict=True))
            with self._lock:
                for t in todo:
                    self._known[(user_id, t)] = known[t]
                while len(self._known) > self._size:
                    self._known.popitem(last=False)
        out = [compose(np.stack([known[p] for p in f.parts]), context_weight=self.context_weight) if f.parts
               else known[f.fact] for f in facts]
        return np.stack(out).astype(np.float32) if out else np.zeros((0, 0), np.float32)

    def forget(self, user_id: str) -> None:
        """Drop what is remembered of ``user_id``'s turns."""
        with self._lock:
            for key in [k for k in self._known if k[0] == user_id]:
                del self._known[key]
