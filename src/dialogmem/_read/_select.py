"""Stage 2: keep K of the ≤ 2K stage-1 candidates (seed 000 §3.4 "semantic filtering").

``RuleSelector`` (no model, deterministic) ranks by a fused relevance score and picks with MMR:

* relevance = 0.6 · retrieval score (min-max normalised over the candidates)
            + 0.15 · multi-view agreement (share of the plan's views that returned it)
            + 0.25 · keyword overlap (share of plan keywords/entities found in the memory)
            ± 0.15 when the plan has a time window: bonus inside it, penalty outside a strict one;
* plus, for a question about the present or the past, the fitted chooser of ``_choose`` over the
  validity terms of ``_validity`` (a superseded memory demoted for "now", the newest statement of the
  asked attribute first), the asked person's own statements, their recency and their closeness to the
  question; zeros for other questions;
* MMR with λ = 0.8: each pick maximises λ·relevance − (1−λ)·(max similarity to the picks so far);
  a candidate nearly identical to a pick (cosine ≥ 0.92, or Jaccard ≥ 0.6) is only used when
  nothing else is left. Similarity is the cosine of the stored vectors when stage 1 attached them, else the
  Jaccard overlap of content-word sets — a cheap proxy that catches the near-verbatim repeats a
  dialogue produces without re-embedding anything.

``LLMSelector`` shows the numbered candidates to the LLM (stage ``select``) and keeps the numbers
it names, in its order, at most K; it never changes a memory's text. Unknown numbers are ignored;
no usable number, or an ``LLMError``, falls back to the rules (recorded as a fallback).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import numpy as np
from pydantic import BaseModel

from .._backends import with_fallback
from .._errors import LLMOutputError
from .._models._llm_base import LLMClient
from .._prompts import select as select_prompt
from .._text._words import content_words, tokens
from .._types import ScoredRecord
from ._choose import state_terms
from ._plan import QueryPlan
from ._validity import validity_terms

logger = logging.getLogger(__name__)

W_SCORE, W_AGREE, W_KEYWORD, W_TIME = 0.6, 0.15, 0.25, 0.15
# 0.8 (was 0.7): on the LoCoMo dev set (LLM-free, 1,033 questions) evidence recall at 256 / 512 / 1,024
# context tokens .620/.749/.819 -> .629/.753/.819, higher at 512 in all four categories; at equal k, @5
# unchanged, @10 -.002 (multi-hop @10 -.012, open-domain +.008). Less diversity keeps neighbouring
# memories together, and they share lines in the reader's context. 0.6 lost at every budget; 0.85
# gained less at 512 and lost more session-level recall.
MMR_LAMBDA = 0.8
DUPLICATE_SIM = 0.92  # cosine of MiniLM vectors
DUPLICATE_JACCARD = 0.6  # content-word overlap, when no vectors are at hand


class Selector(Protocol):
    def select(self, query: str, plan: QueryPlan, candidates: list[ScoredRecord], k: int
               ) -> list[ScoredRecord]: ...


def _views(c: ScoredRecord) -> int:
    return int(getattr(c, "views", 1))


def _keyword_overlap(c: ScoredRecord, terms: list[str], memory_words: list[str] | None = None) -> float:
    """Share of ``terms`` found in the memory, its keywords, entities or speaker; ``memory_words``
    is ``tokens(c.record.memory)`` when the caller has it already."""
    if not terms:
        return 0.0
    r = c.record
    tags = " ".join([*r.keywords, *r.entities, r.speaker_name])
    words = set(tokens(r.memory) if memory_words is None else memory_words) | set(tokens(tags))
    hay = None
    hits = 0
    for t in terms:
        if " " not in t:
            hits += t in words
        else:
            hay = hay if hay is not None else f"{r.memory} {tags}".lower()
            hits += t in hay
    return hits / len(terms)


def _time_term(plan: QueryPlan, c: ScoredRecord) -> float:
    if not plan.has_window:
        return 0.0
    t = c.record.float_time_stamp
    inside = (plan.time_from is None or t >= plan.time_from) and (plan.time_to is None or t <= plan.time_to)
    if inside:
        return W_TIME
    return -W_TIME if plan.time_strict else 0.0


def relevance(plan: QueryPlan, candidates: Sequence[ScoredRecord],
              memory_words: Sequence[list[str]] | None = None) -> list[float]:
    """Fused relevance of every candidate (see module docstring); ``memory_words[i]`` is
    ``tokens()`` of candidate ``i``'s memory when the caller has them already."""
    if not candidates:
        return []
    top = max(c.score for c in candidates)
    low = min(c.score for c in candidates)
    n_views = max(1, len(plan.hqs))
    terms = list(dict.fromkeys(t.lower() for t in [*plan.keywords, *plan.entities] if t.strip()))
    out = []
    for i, c in enumerate(candidates):
        # Min-max: fused RRF scores sit in a narrow band (1/(60+rank)), dividing by the top
        # alone would leave every candidate near 1 and let the diversity term decide everything.
        norm = (c.score - low) / (top - low) if top > low else 1.0
        agree = (_views(c) - 1) / (n_views - 1) if n_views > 1 else 0.0
        words = memory_words[i] if memory_words is not None else None
        out.append(W_SCORE * norm + W_AGREE * min(1.0, agree) + W_KEYWORD * _keyword_overlap(c, terms, words)
                   + _time_term(plan, c))
    return out


def similarity_matrix(candidates: Sequence[ScoredRecord], memory_words: Sequence[list[str]] | None = None
                      ) -> tuple[np.ndarray, bool]:
    """Pairwise similarity, and whether it is cosine (all candidates have vectors) or Jaccard of
    content-word sets (``memory_words[i]``: ``tokens()`` of candidate ``i``'s memory, if at hand)."""
    n = len(candidates)
    vectors = [getattr(c, "vector", None) for c in candidates]
    if n and all(v is not None for v in vectors):
        m = np.asarray(vectors, dtype=np.float32)
        m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
        return m @ m.T, True
    words = memory_words if memory_words is not None else [tokens(c.record.memory) for c in candidates]
    sets = [set(content_words(list(set(w)))) for w in words]  # each word once: the same set, sooner
    vocab: dict[str, int] = {}
    rows = [[vocab.setdefault(w, len(vocab)) for w in s] for s in sets]
    incidence = np.zeros((n, max(1, len(vocab))), dtype=np.float64)
    for i, cols in enumerate(rows):
        incidence[i, cols] = 1.0
    inter = incidence @ incidence.T
    sizes = incidence.sum(axis=1)
    union = sizes[:, None] + sizes[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        sim = np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0).astype(np.float32)
    np.fill_diagonal(sim, 1.0)
    return sim, False


class RuleSelector:
    """Fused relevance + MMR diversity + time consistency. Deterministic."""

    def __init__(self, *, mmr_lambda: float = MMR_LAMBDA, duplicate_sim: float = DUPLICATE_SIM,
                 duplicate_jaccard: float = DUPLICATE_JACCARD) -> None:
        self.mmr_lambda = mmr_lambda
        self.duplicate_sim = duplicate_sim
        self.duplicate_jaccard = duplicate_jaccard

    def select(self, query: str, plan: QueryPlan, candidates: list[ScoredRecord], k: int
               ) -> list[ScoredRecord]:
        if not candidates or k <= 0:
            return []
        words = [tokens(c.record.memory) for c in candidates]
        rel = np.asarray(relevance(plan, candidates, words), dtype=np.float64)
        validity = validity_terms(query, candidates, plan.state)
        rel += np.asarray(state_terms(plan.state, candidates, validity), dtype=np.float64)
        sim, cosine = similarity_matrix(candidates, words)
        duplicate = self.duplicate_sim if cosine else self.duplicate_jaccard
        # Ties are broken by id so the same input always gives the same output: candidates are
        # visited in that order and the first best value wins. Positions below are in that order.
        order = np.asarray(sorted(range(len(candidates)), key=lambda i: (-rel[i], candidates[i].record.id)))
        gain = self.mmr_lambda * rel[order]
        sim = sim[np.ix_(order, order)]
        penalty = np.full(len(order), -np.inf)  # max similarity to the picks so far
        taken = np.zeros(len(order), dtype=bool)  # picked, or set aside as a duplicate
        picked: list[int] = []
        duplicates: list[int] = []
        while len(picked) < k and not taken.all():
            values = np.where(taken, -np.inf, (gain - (1 - self.mmr_lambda) * penalty) if picked else gain)
            best = int(np.argmax(values))
            taken[best] = True
            if picked and penalty[best] >= duplicate:
                duplicates.append(best)
                continue
            picked.append(best)
            penalty = np.maximum(penalty, sim[:, best])
        picked.extend(duplicates[: max(0, k - len(picked))])
        return [ScoredRecord(record=candidates[i].record, score=round(float(rel[i]), 6))
                for i in (int(order[p]) for p in picked)]


class SelectOutput(BaseModel):
    """The JSON the selecting LLM must produce: 1-based numbers of the memories to keep."""

    ids: list[int]


class LLMSelector:
    """Lets the LLM pick among the numbered candidates; rules on failure."""

    def __init__(self, llm: LLMClient, fallback: RuleSelector | None = None) -> None:
        self.llm = llm
        self.fallback = fallback or RuleSelector()

    def select(self, query: str, plan: QueryPlan, candidates: list[ScoredRecord], k: int
               ) -> list[ScoredRecord]:
        if not candidates or k <= 0:
            return []
        lines = [select_prompt.format_candidate(i, c.record.time_stamp, c.record.speaker_name,
                                                c.record.memory)
                 for i, c in enumerate(candidates, start=1)]
        messages = select_prompt.build_messages(query, lines, k=k,
                                                hypothetical_queries=[h.text for h in plan.hqs])

        def attempt() -> list[ScoredRecord]:
            out = self.llm.complete_json(messages, SelectOutput, stage="select")
            chosen: list[int] = []
            for n in out.ids:
                if 1 <= n <= len(candidates) and n - 1 not in chosen:
                    chosen.append(n - 1)
            if not chosen:
                raise LLMOutputError(f"named none of the {len(candidates)} candidates", stage="select")
            return [ScoredRecord(record=candidates[i].record, score=candidates[i].score) for i in chosen[:k]]

        return with_fallback(self.llm, "select", attempt,
                             lambda: self.fallback.select(query, plan, candidates, k))
