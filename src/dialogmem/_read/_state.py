"""Stage 1½ for a present- or past-state question: every candidate learns how close its stored vector is
to the asked attribute (``AttributeSpace``), for ``_validity`` to read.

The question's attribute kinds are its words' (``_text._facts.question_kinds``), else its vector's clear
best (``AttributeSpace.query_kinds``). The candidates' vectors are read from the index in one
``retrieve``; nothing is embedded here.

A second hybrid pass restricted to the asked speaker's memories (the question's vector blended with the
attribute's prototype centroid) was tried to widen the pool: on both changes probe sets it added no
evidence that the 2K candidates lacked, so it is not run.
"""

from __future__ import annotations

import numpy as np

from .._store._base import VectorIndex
from .._text._facts import question_kinds
from ._attributes import AttributeSpace
from ._plan import QueryPlan
from ._retrieve import Candidate


def asked_kinds(query: str, vector: np.ndarray, space: AttributeSpace) -> frozenset[str]:
    """The attribute kinds a question asks about: its words', else its vector's clear best."""
    return question_kinds(query) or space.query_kinds(vector)


def with_affinity(index: VectorIndex, user_id: str, plan: QueryPlan, query_vector: np.ndarray,
                  candidates: list[Candidate], space: AttributeSpace) -> list[Candidate]:
    """``candidates``, each with its ``affinity`` to the asked kinds (unchanged when the question names
    no attribute kind)."""
    kinds = asked_kinds(plan.query, query_vector, space)
    if not kinds or not candidates:
        return candidates
    got = index.retrieve([c.record.id for c in candidates], user_id, with_vectors=True)
    by_id = {rec.id: vec for rec, vec in got if vec is not None}
    have = [c for c in candidates if c.record.id in by_id]
    if have:
        scores = space.affinity(np.asarray([by_id[c.record.id] for c in have]), kinds)
        for c, a in zip(have, scores, strict=True):
            c.affinity = float(a)
    return candidates
