"""What a memory is about, read from its vector: its affinity to each mutable attribute kind.

A change is often said without a word of the attribute ("got a Kobo for my birthday" replaces an older
e-reader; "typing this on the new ThinkPad" a laptop), so word lists miss it however long they grow.
The embedder knows better: each kind has a few prototype sentences (``PROTOTYPES``, written once, here),
embedded once per embedder (``AttributeSpace``, built lazily by the read pipeline and kept with it), and a
memory's affinity to a kind is the best cosine between its stored vector and the kind's prototypes.
Nothing is re-embedded at query time: the memories' vectors are the index's, the question's is the
one its view already has.

An affinity is only a hint for ordering (``_validity``): it decides that a line *may* be about the asked
attribute, never that anything was superseded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .._models._embed_base import Embedder

#: a few first-person statements per attribute kind, varied in wording, none naming a particular value
#: that a conversation would repeat (the kinds are ``_text._facts``'s)
PROTOTYPES: dict[str, tuple[str, ...]] = {
    "residence": (
        "I live in a small flat in the city.",
        "We moved house and now live in a different town.",
        "Our new place is near the river, the neighbours are friendly.",
        "I'm renting a room while I look for somewhere to live.",
    ),
    "job": (
        "I work as a nurse at the hospital.",
        "I started a new job at a different company this month.",
        "My shifts at work have been long this week.",
        "I got promoted and my role has changed.",
    ),
    "relationship": (
        "My girlfriend and I have been together for two years.",
        "We broke up and I'm single again.",
        "I've been seeing someone new, we met last month.",
        "My husband and I just got engaged and married.",
    ),
    "pet": (
        "Our dog loves long walks in the park.",
        "We adopted a cat from the animal shelter.",
        "My pet rabbit chewed through a cable again.",
        "The vet said our puppy is healthy.",
    ),
    "vehicle": (
        "I drive an old car that keeps breaking down.",
        "I bought a new car last weekend.",
        "I ride my bike or scooter to get around town.",
        "Filling up the tank and parking the car is expensive.",
    ),
    "diet": (
        "I've stopped eating meat and I'm vegetarian now.",
        "I'm on a strict diet, no bread or sugar.",
        "I eat fish but no other meat.",
        "I went back to eating meat and cheese.",
    ),
    "favourite": (
        "That is my favourite show, nothing comes close.",
        "My favourite drink in the morning is a cup of coffee.",
        "I'm obsessed with this band, I listen to them all the time.",
        "This dish is the best thing I've ever eaten, I love it most.",
    ),
    "plan": (
        "The wedding date has been set for next month.",
        "Our trip is booked for the summer.",
        "The party has been moved to a later date.",
        "The event was postponed, the new date is in the autumn.",
    ),
    "device": (
        "My phone's battery barely lasts the day.",
        "I bought a new laptop and it is much faster.",
        "I'm reading on my e-reader every night.",
        "The screen on my tablet cracked, I need a new gadget.",
    ),
    "manager": (
        "My manager at work approved my holiday.",
        "I have a new boss who wants weekly reports.",
        "My team lead scheduled another meeting with me.",
    ),
    "coach": (
        "Our coach made the team run drills at training.",
        "My personal trainer pushed me hard in today's session.",
        "The new instructor runs our practice on Tuesdays.",
    ),
    "doctor": (
        "My doctor at the clinic changed my prescription.",
        "I have an appointment with my GP next week.",
        "The dentist says my teeth are fine.",
        "My physiotherapist gave me exercises for my knee.",
    ),
    "school": (
        "My son started at a new school this term.",
        "I enrolled in a college course in the evenings.",
        "I'm studying for a degree at the university.",
    ),
    "gym": (
        "I go to the gym three mornings a week.",
        "I joined a fitness class and my membership is paid.",
        "I work out at the climbing wall after work.",
    ),
    "hobby": (
        "I took up a new hobby in my spare time.",
        "I'm learning to play an instrument, my lessons are weekly.",
        "I gave up painting and started something new for fun.",
        "I spend my weekends on my craft.",
    ),
}


def _unit(rows: np.ndarray) -> np.ndarray:
    m = np.asarray(rows, dtype=np.float32)
    if m.ndim == 1:
        m = m[None, :]
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


class AttributeSpace:
    """The prototypes' vectors for one embedder (embedded in one call when built)."""

    def __init__(self, embedder: Embedder, prototypes: dict[str, tuple[str, ...]] | None = None) -> None:
        protos = PROTOTYPES if prototypes is None else prototypes
        self.kinds: tuple[str, ...] = tuple(protos)
        texts = [t for k in self.kinds for t in protos[k]]
        self._owner = np.asarray([i for i, k in enumerate(self.kinds) for _ in protos[k]])
        self._vectors = _unit(embedder.embed(texts))

    def affinities(self, vectors: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """(n, kinds): each vector's best cosine with each kind's prototypes."""
        m = _unit(np.asarray(vectors, dtype=np.float32))
        sims = m @ self._vectors.T  # (n, prototypes)
        out = np.full((len(m), len(self.kinds)), -1.0, dtype=np.float32)
        for i in range(len(self.kinds)):
            out[:, i] = sims[:, self._owner == i].max(axis=1)
        return out

    def column(self, kind: str) -> int | None:
        return self.kinds.index(kind) if kind in self.kinds else None

    def affinity(self, vectors: np.ndarray | Sequence[np.ndarray], kinds: Iterable[str]) -> np.ndarray:
        """Each vector's lead of ``kinds`` over the other kinds: its best cosine with ``kinds``'
        prototypes less its best with any other kind's (> 0: the asked kind is the closest; −1 when no
        kind is known). A lead, not a cosine: a small model's cosines with short prototypes are low and
        alike for any line, small talk included, while which kind is closest still tells."""
        cols = [c for k in kinds if (c := self.column(k)) is not None]
        if not cols or len(vectors) == 0:
            return np.full(len(vectors), -1.0, dtype=np.float32)
        table = self.affinities(vectors)
        others = np.ones(len(self.kinds), dtype=bool)
        others[cols] = False
        best = table[:, cols].max(axis=1)
        return best - table[:, others].max(axis=1) if others.any() else best

    def query_kinds(self, vector: np.ndarray, *, margin: float = 0.05, floor: float = 0.3) -> frozenset[str]:
        """The kinds a question's vector is clearly about: the best one when it beats the runner-up by
        ``margin`` and reaches ``floor``; else none (the question's words decide)."""
        row = self.affinities(vector)[0]
        order = np.argsort(-row)
        best, second = float(row[order[0]]), float(row[order[1]]) if len(order) > 1 else -1.0
        return frozenset({self.kinds[int(order[0])]}) if best >= floor and best - second >= margin else frozenset()
