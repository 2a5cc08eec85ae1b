"""Memory vectors made of their turns' vectors (``write.vectors``: "auto" with the local embedder, or "turns").

An LLM-free memory is its turn and the turns before it (``write.context_turns``), so consecutive
memories share most of their text and embedding each window embeds every turn three times, in a
text three times as long. Here each part (a turn's line) is embedded once and remembered, and a
memory's vector is made of its parts' vectors, so a turn arriving alone costs one embedding of its
own line.

How they are summed follows the encoder. all-MiniLM-L6-v2 averages its token states and normalises
the mean, so the vector of a text made of several lines is, attention across the lines aside, the
normalised *sum of the lines' token-state sums*: each line's unit vector times its mass (token count
times the norm of its mean before normalisation, ``LocalEmbedder.embed_parts``). A short line weighs
less than a long one, a line of diffuse tokens (small norm) less than a pointed one. Each context
part is further weighted by ``context_weight`` (tuned on LoCoMo dev recall, docs/benchmarks.md). An
embedder that gives no masses (an endpoint's vectors need not be mean-pooled) counts each part as 1.

The vector is a function of the parts alone (the cache only saves work), so a replayed turn gets
the same vector. Facts without parts (an LLM's statements, event units, the per-turn writer's items)
are embedded as text, and so is a memory re-embedded later (an edit, an import without vectors).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .._models._embed_cache import QueryCache
from ._extract import ExtractedFact

#: texts -> (unit vectors, masses): each row times its mass is what a concatenation sums
PartEmbedFn = Callable[[Sequence[str]], tuple[np.ndarray, np.ndarray]]

#: each context part's weight against the own turn's 1, on top of its mass. LoCoMo dev (1,033 questions,
#: int8), against "text" in the same session: 1.0 evidence at 512 tokens -0.009 (whole or clipped lines),
#: 0.75 (clipped lines) -0.004, recall@10 and session_any within 0.002 (docs/benchmarks.md); session_all@10
#: -0.007 at 0.75, -0.006 at 1.0 and at 0.5 (where evidence at 512 tokens fell 0.007): no weight holds it
CONTEXT_WEIGHT = 0.75
UNIT_CONTEXT_WEIGHT = 0.5  # parts without masses (unit vectors): the own turn 1, each context turn 0.5
PART_CACHE = 4096  # part vectors remembered (a user's next memories reuse its last turns)


def compose(parts: np.ndarray, *, context_weight: float = CONTEXT_WEIGHT) -> np.ndarray:
    """One unit vector from a memory's part vectors (rows, each scaled by its mass, its own turn last)."""
    weights = np.full(len(parts), context_weight, dtype=np.float32)
    weights[-1] = 1.0
    rows = np.asarray(parts, dtype=np.float32)
    summed = weights @ rows
    norm = float(np.linalg.norm(summed))
    if norm < 1e-6:  # the context cancels the turn out: keep the turn's own direction
        summed, norm = rows[-1], float(np.linalg.norm(rows[-1])) or 1.0
    return (summed / norm).astype(np.float32)


def unit_parts(embed: Callable[[Sequence[str]], np.ndarray]) -> PartEmbedFn:
    """A part embedder of an embedder without masses: every part's mass is 1."""
    def parts(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        vectors = embed(texts)
        return vectors, np.ones(len(vectors), dtype=np.float32)
    return parts


class PartVectors:
    """The vectors of each user's memory parts, embedded once each (a bounded, thread-safe
    ``QueryCache`` keyed by user and text: a part holds a turn's text, so ``forget`` drops a user's).
    A part is kept as one row: its unit vector, then its mass."""

    def __init__(self, embed: PartEmbedFn, *, size: int = PART_CACHE, context_weight: float = CONTEXT_WEIGHT) -> None:
        self._embed = embed
        self.context_weight = context_weight
        self._cache = QueryCache(size)

    def memory_vectors(self, user_id: str, facts: Sequence[ExtractedFact]) -> np.ndarray:
        """One row per fact: composed from its parts, or its text's vector when it has none; every
        text not yet known goes to the embedder in one call."""
        texts = list(dict.fromkeys(p for f in facts for p in (f.parts or [f.fact])))
        # the cache hands out copies: what is found now is used now, whatever another writer evicts
        found = self._cache.lookup([_key(user_id, t) for t in texts])
        known = {t: v for t, v in zip(texts, found, strict=True) if v is not None}
        todo = [t for t in texts if t not in known]
        if todo:
            vectors, masses = self._embed(todo)
            rows = np.concatenate([np.asarray(vectors, dtype=np.float32),
                                   np.asarray(masses, dtype=np.float32).reshape(-1, 1)], axis=1)
            self._cache.store([_key(user_id, t) for t in todo], rows)
            known.update(zip(todo, rows, strict=True))
        out = [compose(np.stack([known[p][:-1] * known[p][-1] for p in f.parts]),
                       context_weight=self.context_weight) if f.parts
               else known[f.fact][:-1] for f in facts]
        return np.stack(out).astype(np.float32) if out else np.zeros((0, 0), np.float32)

    def forget(self, user_id: str) -> None:
        """Drop what is remembered of ``user_id``'s turns."""
        self._cache.drop(_key(user_id, ""))


def _key(user_id: str, text: str) -> str:
    return f"{user_id}\x1f{text}"
