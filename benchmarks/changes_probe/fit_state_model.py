"""Fit the state chooser's weights (``dialogmem._read._choose.WEIGHTS``) and cross-validate them.

    PYTHONPATH=src python benchmarks/changes_probe/fit_state_model.py [--l2 5.0] [--cache FILE]

Runs ``bench changes`` (LLM-free, sleep) on the four in-repo probe sets (the first, ``changes``; the check
set; the third; the fourth), recording for every question the read path treats as a present- or past-state
question (a cue word, or its grammar: ``_state.implied_state``) the candidates the rule selector saw, with
their relevance (``_select.relevance``), the rules' terms (``_validity``) and whether each cites an evidence
or a superseded turn. The chooser's features (``_choose.feature_table``) are computed from them, so any
subset of ``_choose.ALL_FEATURES`` can be fitted without running the bench again (``--cache``). Then, per
state and per feature set, a conditional logit (softmax over a question's candidates, the evidence candidates
together as the target, L2 penalty) is fitted by gradient ascent with numpy:

* leave one set out over the first, check and third sets: fitted on two, scored on the third (each fold);
* fitted on all three: the weights ``WEIGHTS`` holds, scored on each and on the fourth set.

The fourth set is never fitted on, and no feature set or penalty is chosen on it: it is reported as a check.
Scores here rank by relevance alone (rank 1, recall@3 and stale-first without the selector's MMR, so
recall@3 can differ from the bench's by a question or two); the bench gives the real numbers.
"""

from __future__ import annotations

import argparse
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dialogmem._read import _select
from dialogmem._read._choose import ALL_FEATURES, FEATURES, WEIGHTS, feature_table
from dialogmem._read._validity import validity_terms
from dialogmem.bench._changes_bench import ChangesSpec, run_changes

HERE = Path(__file__).parent
SETS = {"first": "changes", "check": str(HERE / "changes_check.json"), "third": str(HERE / "changes_third.json"),
        "fourth": str(HERE / "changes_fourth.json")}
#: the sets weights are fitted on (leave one out among them); the others are only scored
FIT_SETS = ("first", "check", "third")
#: the feature sets compared (each with ``rel`` first): the chooser's before this fit, and with the
#: per-state features added for past-state questions and corrections
FEATURE_SETS = {
    "base": ("rel", "val", "own", "gap", "lead", "recency", "newest", "replaced"),
    "chain": ("rel", "val", "own", "gap", "lead", "recency", "newest", "replaced", "prev", "stale", "fix"),
}
Pool = dict[str, Any]


def collect(data: str) -> list[Pool]:
    """Every state question's candidates, as the table of all features (rel first) and labels, from one
    bench run."""
    seen: list[Pool] = []
    original = _select.RuleSelector.select

    def select(self: _select.RuleSelector, query: str, plan: Any, candidates: list[Any], k: int) -> list[Any]:
        if plan.state is not None and candidates:
            validity = validity_terms(query, candidates, plan.state)
            rel = _select.relevance(plan, candidates)
            table = feature_table(candidates, validity)
            rows = [[r, *(t[n] for n in ALL_FEATURES[1:])] for r, t in zip(rel, table, strict=True)]
            seen.append({"query": query, "state": plan.state, "table": np.asarray(rows),
                         "ids": [c.record.id for c in candidates],
                         "sources": [list(c.record.source_turn_ids) for c in candidates]})
        return original(self, query, plan, candidates, k)

    _select.RuleSelector.select = select  # type: ignore[method-assign]
    try:
        results = run_changes(ChangesSpec(data=data, systems=["dialogmem"]))
    finally:
        _select.RuleSelector.select = original  # type: ignore[method-assign]
    by_question = {r["question"]: r for r in results["records"]}
    for pool in seen:
        rec = by_question[pool["query"]]
        pool["truth"] = rec["state"]
        pool["y"] = np.asarray([bool(set(s) & set(rec["evidence"])) for s in pool["sources"]], dtype=float)
        pool["stale"] = np.asarray([bool(set(s) & set(rec["superseded"])) for s in pool["sources"]], dtype=float)
        pool["has_stale"] = bool(rec["superseded"])
    return seen


def columns(pools: Sequence[Pool], names: Sequence[str]) -> list[Pool]:
    """The pools with ``x``: the features ``names`` of their table."""
    cols = [ALL_FEATURES.index(n) for n in names]
    return [{**p, "x": p["table"][:, cols]} for p in pools]


def fit(pools: Sequence[Pool], l2: float, iters: int = 3000, rate: float = 0.1) -> np.ndarray:
    data = [(p["x"], p["y"]) for p in pools if p["y"].any()]
    w = np.zeros(data[0][0].shape[1])
    w[0] = 1.0
    for _ in range(iters):
        grad = np.zeros_like(w)
        for x, y in data:
            s = x @ w
            e = np.exp(s - s.max())
            grad += x.T @ ((e * y) / (e * y).sum() - e / e.sum())
        w += rate * (grad / len(data) - 0.01 * l2 * w)
    return w


def score(pools: Sequence[Pool], w: np.ndarray) -> str:
    at1, at3, stale = [], [], []
    for p in pools:
        s = p["x"] @ w
        order = sorted(range(len(s)), key=lambda i: (-s[i], p["ids"][i]))[:10]
        ev = next((n for n, i in enumerate(order) if p["y"][i]), None)
        st = next((n for n, i in enumerate(order) if p["stale"][i]), None)
        at1.append(ev == 0)
        at3.append(ev is not None and ev < 3)
        if p["has_stale"]:
            stale.append(st is not None and (ev is None or st < ev))
    if not pools:
        return "n 0"
    first = f"n {len(pools)} rank 1 {100 * np.mean(at1):.0f} % recall@3 {100 * np.mean(at3):.0f} %"
    return first + (f" stale-first {100 * np.mean(stale):.0f} %" if stale else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--l2", type=float, default=5.0)
    parser.add_argument("--cache", type=Path, help="keep the collected candidates here (pickle) and reuse them")
    args = parser.parse_args()
    if args.cache is not None and args.cache.exists():
        pools = pickle.loads(args.cache.read_bytes())
    else:
        pools = {name: collect(data) for name, data in SETS.items()}
        if args.cache is not None:
            args.cache.write_bytes(pickle.dumps(pools))
    for state in ("present", "past"):
        # a question read as the other state than it asks about is scored where it was read
        mine = {name: [p for p in got if p["state"] == state] for name, got in pools.items()}
        print(f"## {state}")
        for name in SETS:  # rel + the rules' terms: the selector before any chooser; then the chooser's own
            print(f"  rules only, {name}: {score(columns(mine[name], ('rel', 'val')), np.ones(2))}")
            print(f"  WEIGHTS as they are, {name}: {score(columns(mine[name], FEATURES), np.asarray(WEIGHTS[state]))}")
        for label, names in FEATURE_SETS.items():
            print(f"  features {label}: {', '.join(names)}")
            for held in FIT_SETS:
                train = [t for t in FIT_SETS if t != held]
                w = fit(columns([p for t in train for p in mine[t]], names), args.l2)
                print(f"    fitted on {' + '.join(train)}, scored on {held}: "
                      f"{score(columns(mine[held], names), w)}; fourth: {score(columns(mine['fourth'], names), w)}")
            w = fit(columns([p for t in FIT_SETS for p in mine[t]], names), args.l2)
            print(f"    fitted on {' + '.join(FIT_SETS)}: weights {[round(float(v), 3) for v in w]}")
            for name in SETS:
                print(f"      {name}: {score(columns(mine[name], names), w)}")


if __name__ == "__main__":
    main()
