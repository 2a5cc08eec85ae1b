"""Retrieval scoring of one question: recall at every k, and recall at fixed context-token budgets.

Both datasets get the same five numbers from one implementation. Turn level: the evidence turn ids
among the ``source_turn_ids`` the hits cite. Session level: the evidence sessions among the sessions
of those turn ids (a LoCoMo dia_id ``D3:5`` is in ``session_3``; a LongMemEval turn ``{session}:{i}``
in its session), scored with LongMemEval's definitions: ``recall_any`` is 1 when at least one
target was retrieved, ``recall_all`` when every target was. The session of a hit is where the turns
it cites were said, so a memory that cites two sessions covers both. (LongMemEval's own
turn-granularity script instead ranks distinct sessions, growing k until it has k of them; here k
always counts hits, the same unit as turn-level recall.)

At a budget of B tokens the hits of one search are taken in rank order while the system's own
rendering of the hits taken so far stays within B tokens (``count_tokens``, the same counter for
every system); the first hit that would overflow ends the walk (see ``_metrics.budget_cut``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from . import _metrics as m
from ._loaders import BenchQuestion
from ._systems import BenchSystem, RetrievedHit, SearchOutcome, count_tokens

#: every retrieval metric, headline ones first
METRICS = ("evidence", "session_any", "session_all", "turn_any", "turn_all")
METRIC_LABELS = {
    "evidence": "turn level: fraction of the evidence turns cited by the hits",
    "session_any": "session level: at least one evidence session among the sessions of the hits",
    "session_all": "session level: every evidence session among the sessions of the hits",
    "turn_any": "turn level: at least one evidence turn cited by the hits",
    "turn_all": "turn level: every evidence turn cited by the hits",
}
#: the k whose latency and context tokens the report shows (when it is among --k)
REFERENCE_K = 10
DEFAULT_BUDGETS = (256, 512, 1024)
#: hits fetched once per question to fill the budgets (at least the largest k)
DEFAULT_BUDGET_K = 50

#: why the walk over the hits ended: a hit overflowed the budget; the system had no more hits;
#: every fetched hit fit (a larger fetch might have filled the budget further)
Ended = Literal["budget", "hits", "fetch"]


def has_target(q: BenchQuestion) -> bool:
    """Whether retrieval can be scored: evidence turns or sessions, and not an abstention question."""
    return bool(q.evidence or q.evidence_sessions) and not q.abstention


def target_sessions(dataset: str, q: BenchQuestion) -> list[str]:
    """The evidence sessions: the loader's (LongMemEval ``answer_session_ids``; LoCoMo the sessions
    of the evidence dia_ids), else the sessions of the evidence turns."""
    if q.evidence_sessions:
        return list(q.evidence_sessions)
    return sorted(m.sessions_of(q.evidence, m.session_mapper(dataset)))


def score_hits(dataset: str, q: BenchQuestion, sources: Sequence[Sequence[str]]) -> dict[str, float | None]:
    """The five recalls of a hit list, given as each hit's ``source_turn_ids`` (cut it first);
    None where the question has no target of that kind."""
    turns = m.retrieved_ids(sources, len(sources))
    found_sessions = m.sessions_of(turns, m.session_mapper(dataset))
    sessions = target_sessions(dataset, q)
    return {
        "evidence": m.evidence_recall(q.evidence, sources, len(sources)),
        "session_any": m.recall_any(sessions, found_sessions),
        "session_all": m.recall_all(sessions, found_sessions),
        "turn_any": m.recall_any(q.evidence, turns),
        "turn_all": m.recall_all(q.evidence, turns),
    }


def retrieval_scores(dataset: str, q: BenchQuestion, sources: Sequence[Sequence[str]], ks: Sequence[int]
                     ) -> dict[str, dict[str, float | None]]:
    """Every metric at every k: ``{metric: {str(k): value}}`` for the top-k of ``sources``."""
    out: dict[str, dict[str, float | None]] = {name: {} for name in METRICS}
    for k in ks:
        for name, value in score_hits(dataset, q, sources[:k]).items():
            out[name][str(k)] = value
    return out


def budget_scores(dataset: str, q: BenchQuestion, sources: Sequence[Sequence[str]], prefix_tokens: Sequence[int],
                  budgets: Sequence[int], fetch_k: int
                  ) -> tuple[dict[str, dict[str, float | None]], dict[str, dict[str, Any]]]:
    """Recall at each budget, and how each budget was filled.

    ``prefix_tokens[i]`` is the context size of hits[:i + 1] (``_metrics.budget_prefix_tokens``).
    Returns ``({metric: {str(budget): value}}, {str(budget): {"hits", "tokens", "ended"}})``.
    """
    scores: dict[str, dict[str, float | None]] = {name: {} for name in METRICS}
    fill: dict[str, dict[str, Any]] = {}
    for budget in budgets:
        n = m.budget_cut(prefix_tokens, budget)
        ended: Ended = "budget" if n < len(prefix_tokens) else "fetch" if len(sources) >= fetch_k else "hits"
        fill[str(budget)] = {"hits": n, "tokens": prefix_tokens[n - 1] if n else 0, "ended": ended}
        for name, value in score_hits(dataset, q, sources[:n]).items():
            scores[name][str(budget)] = value
    return scores, fill


def context_prefix_tokens(system: BenchSystem, hits: Sequence[RetrievedHit], ceiling: int) -> list[int]:
    """Tokens of the system's own rendering of hits[:1], hits[:2], … up to the first over ``ceiling``."""
    return m.budget_prefix_tokens(len(hits), lambda n: count_tokens(system.render(hits[:n])), ceiling)


def search_question(system: BenchSystem, dataset: str, q: BenchQuestion, ks: Sequence[int],
                    budgets: Sequence[int], fetch_k: int) -> dict[str, Any]:
    """Search one question at every k (and once more for the budgets, unless ``fetch_k`` is among
    the ks) and score it: the retrieval fields of the question's record."""
    # one search per k: a selector ranks differently for limit=10 than for limit=50, and the
    # context a caller would get at k is what the tokens column must show
    retrieval: dict[str, dict[str, float | None]] = {}
    tokens_at: dict[str, int] = {}
    outcomes: dict[int, SearchOutcome] = {}
    for k in ks:
        outcomes[k] = system.search(q, k)
        tokens_at[str(k)] = outcomes[k].context_tokens
        for name, by_k in retrieval_scores(dataset, q, [h.source_turn_ids for h in outcomes[k].hits], [k]).items():
            retrieval.setdefault(name, {}).update(by_k)
    ref = outcomes[REFERENCE_K if REFERENCE_K in outcomes else max(ks)]
    fields: dict[str, Any] = {"search_ms": round(ref.latency_ms, 3), "context_tokens": ref.context_tokens,
                              "context_tokens_at": tokens_at, "n_hits": len(ref.hits), "retrieval": retrieval}
    if budgets:
        # after the k searches, so an extra search cannot touch what they measure (access counts)
        fetched = outcomes[fetch_k] if fetch_k in outcomes else system.search(q, fetch_k)
        prefix = context_prefix_tokens(system, fetched.hits, max(budgets))
        scores, fill = budget_scores(dataset, q, [h.source_turn_ids for h in fetched.hits], prefix, budgets,
                                     fetch_k)
        fields.update(budget_retrieval=scores, budget_fill=fill, budget_fetched=len(fetched.hits))
    return fields
