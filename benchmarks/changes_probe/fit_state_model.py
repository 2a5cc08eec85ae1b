"""Fit the state chooser's weights (``dialogmem._read._choose.WEIGHTS``) and cross-validate them.

    PYTHONPATH=src python benchmarks/changes_probe/fit_state_model.py [--l2 5.0] [--cache FILE]

Runs ``bench changes`` (LLM-free, sleep) on the first probe set (``changes``), the check set and the third
set, recording for every present- or past-state question the candidates the rule selector saw, each with
the chooser's own features (``_choose.features``; ``rel`` from ``_select.relevance``) and whether it cites an
evidence turn. Then, per state, a conditional logit (softmax over a question's candidates, the evidence
candidates together as the target, L2 penalty) is fitted by gradient ascent with numpy:

* on the first set, scored on the check set and the third; on the check set, scored on the first and the
  third (the cross-validation, both ways);
* on the first and check sets together: the weights ``WEIGHTS`` holds (the third set is never fitted on).

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
from dialogmem._read._choose import features
from dialogmem._read._validity import validity_terms
from dialogmem.bench._changes_bench import ChangesSpec, run_changes

HERE = Path(__file__).parent
SETS = {"first": "changes", "check": str(HERE / "changes_check.json"), "third": str(HERE / "changes_third.json")}
Pool = dict[str, Any]


def collect(data: str) -> list[Pool]:
    """Every state question's candidates: features (rel first) and labels, from one bench run."""
    seen: list[Pool] = []
    original = _select.RuleSelector.select

    def select(self: _select.RuleSelector, query: str, plan: Any, candidates: list[Any], k: int) -> list[Any]:
        if plan.state is not None and candidates:
            validity = validity_terms(query, candidates, plan.state)
            rel = _select.relevance(plan, candidates)
            rows = [[r, *f] for r, f in zip(rel, features(candidates, validity), strict=True)]
            seen.append({"query": query, "state": plan.state, "x": np.asarray(rows),
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
        pool["y"] = np.asarray([bool(set(s) & set(rec["evidence"])) for s in pool["sources"]], dtype=float)
        pool["stale"] = np.asarray([bool(set(s) & set(rec["superseded"])) for s in pool["sources"]], dtype=float)
        pool["has_stale"] = bool(rec["superseded"])
    return seen


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
    first = f"n {len(pools)} rank 1 {100 * np.mean(at1):.0f} % recall@3 {100 * np.mean(at3):.0f} %"
    return first + (f" stale-first {100 * np.mean(stale):.0f} %" if stale else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--l2", type=float, default=5.0)
    parser.add_argument("--cache", type=Path, help="keep the collected candidates here (pickle) and reuse them")
    args = parser.parse_args()
    if args.cache is not None and args.cache.exists():
        pools = pickle.loads(args.cache.read_bytes())
    else:
        pools = {name: collect(data) for name, data in SETS.items()}
        if args.cache is not None:
            args.cache.write_bytes(pickle.dumps(pools))
    rules = np.zeros(8)
    rules[:2] = 1.0  # rel + the rules' terms: what the selector did before the chooser
    for state in ("present", "past"):
        mine = {name: [p for p in got if p["state"] == state] for name, got in pools.items()}
        print(f"## {state}")
        for name in SETS:
            print(f"  rules only, {name}: {score(mine[name], rules)}")
        for train in (("first",), ("check",), ("first", "check")):
            w = fit([p for t in train for p in mine[t]], args.l2)
            print(f"  fitted on {' + '.join(train)}: weights {[round(float(v), 3) for v in w]}")
            for name in SETS:
                print(f"    {name}: {score(mine[name], w)}")


if __name__ == "__main__":
    main()
