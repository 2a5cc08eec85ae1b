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

``feature_table`` also computes three features the model does not read (``ALL_FEATURES``), for the fit
script to compare: ``prev`` (within the margin and exactly one later statement is: the one before the
newest), ``stale`` (superseded at sleep time) and ``fix`` (its own turn is a correction). Fitted with them
on the first, check and third sets, leave one set out, they raised no fold consistently and not the fourth
set (present rank 1 on the fourth 48 % with or without them), so the model reads the eight above; ``stale``
is 0 throughout under the LLM-free defaults (the rule updater supersedes only with ``supersede_rules``).

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

Refitted on the first, check and third sets (with the questions read as state questions by their grammar
alone among them), leave one set out, the folds matched these weights within a question (present rank 1:
first 81 vs 85 %, check 74 vs 74 %, third 55 vs 50 %) and the fourth set, fitted on by nothing, did not move
(present 48 % rank 1, 68 % recall@3 either way; past rank 1 64 vs 59 %, recall@3 82 % either way): the
weights are kept as they were (``docs/benchmarks.md``).
"""

from __future__ import annotations

from collections.abc import Sequence

from .._text._facts import is_correction
from .._types import ScoredRecord
from ._validity import line_text

#: how far below the best cosine to the question a statement may be and still count as on topic
TOPIC_MARGIN = 0.1
#: every feature ``feature_table`` computes, in order; ``rel`` is the selector's fused relevance
ALL_FEATURES = ("rel", "val", "own", "gap", "lead", "recency", "newest", "replaced", "prev", "stale", "fix")
#: the features the fitted model reads (``WEIGHTS`` holds one weight each, in this order)
FEATURES = ("rel", "val", "own", "gap", "lead", "recency", "newest", "replaced")
#: feature weights per state, in the order of ``FEATURES``; from
#: ``benchmarks/changes_probe/fit_state_model.py`` (conditional logit, L2 5.0, first + check sets)
WEIGHTS: dict[str, tuple[float, ...]] = {
    "present": (0.837, 3.688, 1.161, 0.265, 0.932, 1.813, 0.616, 0.626),
    "past": (1.160, 2.862, 1.888, 0.347, 1.272, -1.274, 0.575, 1.451),
}


def feature_table(candidates: Sequence[ScoredRecord], validity: Sequence[float], *,
                  fix: bool = True) -> list[dict[str, float]]:
    """Every feature of ``ALL_FEATURES`` but ``rel`` for each candidate (see the module docstring); a
    candidate is the person's statement when ``_state`` gave it a ``topicality``. ``fix`` False leaves
    ``fix`` at 0 (its correction test reads every own turn; the model does not read it)."""
    own = [i for i, c in enumerate(candidates)
           if getattr(c, "topicality", None) is not None
           and c.record.memory_class == "fact" and c.record.tier == "mtm"]
    cos = {i: float(getattr(candidates[i], "topicality", 0.0)) for i in own}
    best = max(cos.values(), default=0.0)
    when = {i: (candidates[i].record.float_time_stamp, candidates[i].record.created_at) for i in own}
    out = []
    for i, c in enumerate(candidates):
        row = dict.fromkeys(ALL_FEATURES[1:], 0.0)
        row["val"] = float(validity[i])
        row["stale"] = float(not c.record.is_current)
        if i in cos:
            gap = cos[i] - best
            newer = [j for j in own if when[j] > when[i]]
            topical = gap >= -TOPIC_MARGIN
            later = sum(cos[j] >= best - TOPIC_MARGIN for j in newer)
            lead = getattr(c, "affinity", None)
            row.update(own=1.0, gap=gap, lead=float(lead) if lead is not None else 0.0,
                       recency=1.0 - len(newer) / len(own), newest=float(topical and not later),
                       replaced=float(topical and later > 0), prev=float(topical and later == 1),
                       fix=float(fix and is_correction(line_text(c.record))))
        out.append(row)
    return out


def features(candidates: Sequence[ScoredRecord], validity: Sequence[float],
             names: Sequence[str] = FEATURES[1:]) -> list[list[float]]:
    """Each candidate's features ``names`` (by default the model's, after ``rel``)."""
    return [[row[n] for n in names] for row in feature_table(candidates, validity, fix="fix" in names)]


def state_terms(state: str | None, candidates: Sequence[ScoredRecord], validity: Sequence[float]) -> list[float]:
    """The addition to each candidate's relevance: for a present- or past-state question the model's
    (see the module docstring), else ``validity`` as it is."""
    weights = WEIGHTS.get(state or "")
    if weights is None or not candidates:
        return list(validity)
    scale, rest = weights[0], weights[1:]
    return [sum(w * x for w, x in zip(rest, row, strict=True)) / scale for row in features(candidates, validity)]
