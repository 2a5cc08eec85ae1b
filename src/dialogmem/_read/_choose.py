"""Choosing among a present- or past-state question's candidates: a small fitted model over a handful of
features that name no word (pure, no I/O).

The rules of ``_validity`` (word lists and prototypes) put the newest on-topic statement first on the
conversations they were tuned on and barely moved on conversations written by someone else: there the
newest statement was among the candidates and not put first. What carries across sets is structural:
a present-state question about a person is answered by one of *that person's own statements*, usually
their newest one on the topic; a past-state question by an older one. So each candidate is described by

* ``rel``: the selector's fused relevance (``_select.relevance``);
* ``val``: the rules' verdict (``_validity.validity_terms``), kept as one feature among the others;
* ``own``: 1 when its own turn is a statement (≥ 6 words, not a question) by the person asked about,
  for which ``_state`` embedded the turn; every feature below is 0 for any other candidate;
* ``gap``: its own turn's cosine to the question less the best such cosine among the person's statements
  (≤ 0; relative, not an absolute cosine);
* ``lead``: its own turn's lead for the asked attribute over the other kinds (``_attributes``; 0 when the
  question names none);
* ``recency``: 1 − (the person's statements said after it) / (the person's statements): 1 for the newest;
* ``newest``: its gap is within ``TOPIC_MARGIN`` of the best, and no later statement of the person is;
* ``replaced``: within the margin, and a later one is.

The score is a conditional logit, ``w · x`` per state (weights below), divided by the weight of ``rel``
so that the selector's MMR sees relevance on its usual scale: the addition to a candidate's relevance is
``(w · x − w_rel · rel) / w_rel``. Any other question gets the rules' terms unchanged (zeros for a
question that is not about a state), so it ranks exactly as before.

The weights were fitted on the first changes probe set and the check set together (both in the repo),
with the features this module computes, and checked on a third set written apart
(``benchmarks/changes_probe/conversations_third.txt``) that no weight or feature was chosen on; fitted on
either in-repo set alone, the weights differ by little and each set's numbers hold on the other
(``benchmarks/changes_probe/fit_state_model.py`` reproduces the fit and prints the cross-validation). With
the rules' verdict left out (the features alone), a fit lost about 20 points of present rank 1 on both
in-repo sets and gained nothing on the third: the rules are kept as a feature, not replaced.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._types import ScoredRecord

#: how far below the best cosine to the question a statement may be and still count as on topic
TOPIC_MARGIN = 0.1
#: feature weights (rel, val, own, gap, lead, recency, newest, replaced) per state; from
#: ``benchmarks/changes_probe/fit_state_model.py`` (conditional logit, L2 5.0, first + check sets)
WEIGHTS: dict[str, tuple[float, ...]] = {
    "present": (0.837, 3.688, 1.161, 0.265, 0.932, 1.813, 0.616, 0.626),
    "past": (1.160, 2.862, 1.888, 0.347, 1.272, -1.274, 0.575, 1.451),
}


def features(candidates: Sequence[ScoredRecord], validity: Sequence[float]) -> list[list[float]]:
    """Each candidate's features after ``rel`` (val, own, gap, lead, recency, newest, replaced); see the
    module docstring. A candidate is the person's statement when ``_state`` gave it a ``topicality``."""
    own = [i for i, c in enumerate(candidates)
           if getattr(c, "topicality", None) is not None
           and c.record.memory_class == "fact" and c.record.tier == "mtm"]
    cos = {i: float(getattr(candidates[i], "topicality", 0.0)) for i in own}
    best = max(cos.values(), default=0.0)
    when = {i: (candidates[i].record.float_time_stamp, candidates[i].record.created_at) for i in own}
    out = []
    for i, c in enumerate(candidates):
        row = [float(validity[i])]
        if i in cos:
            gap = cos[i] - best
            newer = [j for j in own if when[j] > when[i]]
            topical = gap >= -TOPIC_MARGIN
            later = any(cos[j] >= best - TOPIC_MARGIN for j in newer)
            lead = getattr(c, "affinity", None)
            row += [1.0, gap, float(lead) if lead is not None else 0.0, 1.0 - len(newer) / len(own),
                    float(topical and not later), float(topical and later)]
        else:
            row += [0.0] * 6
        out.append(row)
    return out


def state_terms(state: str | None, candidates: Sequence[ScoredRecord], validity: Sequence[float]) -> list[float]:
    """The addition to each candidate's relevance: for a present- or past-state question the model's
    (see the module docstring), else ``validity`` as it is."""
    weights = WEIGHTS.get(state or "")
    if weights is None or not candidates:
        return list(validity)
    scale, rest = weights[0], weights[1:]
    return [sum(w * x for w, x in zip(rest, row, strict=True)) / scale for row in features(candidates, validity)]
