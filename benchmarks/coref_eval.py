"""Precision and recall of the rule coreference (``dialogmem._write._coref``) on hand-annotated turns.

The fixture ``tests/fixtures/coref_dev.json`` holds LoCoMo dev turns (speaker, text, the up to four
preceding turns of the same session) chosen at random per conversation (``--select`` shows how),
annotated by hand by the author of the resolver: for every second-person, third-person singular and
"there" / "that place" mention, its referent (a name, "Maria's cousin", "the beach"; a list gives
accepted alternatives) or ``null`` where there is none to name (generic or plural "you",
existential "there", "be there for"). A referent that the rules cannot produce by design ("the
main actress in Harry Potter") stays annotated and counts as a miss. First-person mentions are
not annotated one by one: outside quotes each refers to its speaker.

A resolution is correct when it names the annotated referent (case, dots and spaces ignored).
Precision = correct / resolutions made; recall = correct / mentions with a referent. Items are
split into ``dev`` (the turns looked at while writing the rules) and ``heldout`` (annotated before
the resolver was first run on them).

Usage::

    python benchmarks/coref_eval.py [--fixture tests/fixtures/coref_dev.json]
    python benchmarks/coref_eval.py --select conv-42,conv-44 --per 9,3 --data locomo10_dev.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

from dialogmem._write._coref import resolve

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "coref_dev.json"
KINDS = ("first", "second", "third", "place")
MENTION = re.compile(
    r"\b(?:(?P<first>I|me|my|mine|myself)|(?P<second>you|your|yours|yourself)"
    r"|(?P<third>he|him|his|himself|she|her|hers|herself)|(?P<place>there|that place))\b",
    re.IGNORECASE,
)
QUOTED = re.compile(r"\"[^\"\n]*\"|“[^“”\n]*”")


def mention_keys(text: str) -> dict[int, tuple[str, str, int]]:
    """Start offset -> (kind, word, n): the n-th occurrence of ``word`` in ``text``."""
    seen: Counter[str] = Counter()
    out = {}
    for m in MENTION.finditer(text):
        word = m.group(0).lower()
        kind = next(k for k in KINDS if m.group(k))
        out[m.start()] = (kind, word, seen[word])
        seen[word] += 1
    return out


def _norm(label: str) -> str:
    return re.sub(r"[^a-z0-9']", "", label.lower().replace("’", "'"))


def gold_of(item: dict[str, Any]) -> dict[tuple[str, int], tuple[str, list[str] | None]]:
    """(word, n) -> (kind, accepted referents or None) for every in-scope mention of the item."""
    keys = mention_keys(item["text"])
    quoted = [m.span() for m in QUOTED.finditer(item["text"])]
    gold: dict[tuple[str, int], tuple[str, list[str] | None]] = {}
    for start, (kind, word, n) in keys.items():
        if kind == "first" and not any(a <= start < b for a, b in quoted):
            gold[(word, n)] = (kind, [item["speaker"]])
    for e in item["expected"]:
        key = (e["mention"], e["n"])
        kind = next((k for k, w, n in keys.values() if (w, n) == key), None)
        if kind is None:
            raise ValueError(f"{item['id']}: no mention {key} in the text")
        ref = e["referent"]
        gold[key] = (kind, None if ref is None else ([ref] if isinstance(ref, str) else list(ref)))
    return gold


def score(items: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per kind: ``tp`` correct resolutions, ``fp`` wrong ones (incl. where the gold is None or
    the mention is not annotated), ``gold`` mentions with a referent, ``abstained_ok`` mentions
    with no referent left alone."""
    out = {k: Counter() for k in KINDS}
    for item in items:
        gold = gold_of(item)
        got = resolve(item["text"], speaker=item["speaker"],
                      context=[tuple(c) for c in item["context"]]).mentions
        keys = mention_keys(item["text"])
        made = {keys[m.start][1:]: m.referent for m in got}
        for (word, n), (kind, refs) in gold.items():
            ref = made.pop((word, n), None)
            if refs is not None:
                out[kind]["gold"] += 1
            if ref is None:
                out[kind]["abstained_ok"] += refs is None
                continue
            ok = refs is not None and _norm(ref) in {_norm(r) for r in refs}
            out[kind]["tp" if ok else "fp"] += 1
        for (word, n) in made:  # resolved but not annotated: counted as wrong
            out[keys[next(s for s, v in keys.items() if v[1:] == (word, n))][0]]["fp"] += 1
    return {k: dict(v) for k, v in out.items()}


def table(results: dict[str, dict[str, int]]) -> list[str]:
    rows = ["| kind | gold | resolved | correct | precision | recall | null left alone |",
            "|---|---|---|---|---|---|---|"]
    for kind, c in [*results.items(), ("2nd+3rd+place", _sum(results, ("second", "third", "place")))]:
        made = c.get("tp", 0) + c.get("fp", 0)
        p = f"{c.get('tp', 0) / made:.3f}" if made else "-"
        r = f"{c.get('tp', 0) / c['gold']:.3f}" if c.get("gold") else "-"
        rows.append(f"| {kind} | {c.get('gold', 0)} | {made} | {c.get('tp', 0)} | {p} | {r} | "
                    f"{c.get('abstained_ok', 0)} |")
    return rows


def _sum(results: dict[str, dict[str, int]], kinds: tuple[str, ...]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for k in kinds:
        total.update(results[k])
    return dict(total)


def select(data: Path, convs: list[str], per_third: int, per_you: int) -> list[dict[str, Any]]:
    """The random draw used to build the fixture: per conversation, ``per_third`` turns with a
    third-person or place mention and ``per_you`` with a second-person mention only."""
    third = re.compile(r"\b(she|her|hers|herself|he|him|his|himself|there|that place)\b", re.I)
    you = re.compile(r"\b(you|your|yours|yourself)\b", re.I)
    by_id = {c["sample_id"]: c["conversation"] for c in json.loads(data.read_text())}
    out = []
    for cid in convs:
        pool_t, pool_y = [], []
        for key, turns in by_id[cid].items():
            if not re.fullmatch(r"session_\d+", key):
                continue
            for i, t in enumerate(turns):
                item = {"id": f"{cid}/{t['dia_id']}", "speaker": t["speaker"], "text": t["text"],
                        "context": [[u["speaker"], u["text"]] for u in turns[max(0, i - 4):i]]}
                (pool_t if third.search(t["text"]) else pool_y if you.search(t["text"]) else []).append(item)
        rng = random.Random(f"coref-{cid}")
        out += rng.sample(pool_t, per_third) + rng.sample(pool_y, per_you)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixture", type=Path, default=FIXTURE)
    ap.add_argument("--select", help="comma-separated conversation ids: print a fresh draw")
    ap.add_argument("--per", default="9,3")
    ap.add_argument("--data", type=Path, default=Path("../shared/data/locomo/locomo10_dev.json"))
    args = ap.parse_args()
    if args.select:
        a, b = (int(x) for x in args.per.split(","))
        print(json.dumps(select(args.data, args.select.split(","), a, b), indent=1, ensure_ascii=False))
        return
    items = json.loads(args.fixture.read_text(encoding="utf-8"))["items"]
    for split in sorted({i["split"] for i in items}):
        part = [i for i in items if i["split"] == split]
        print(f"\n{split}: {len(part)} turns")
        print("\n".join(table(score(part))))
    print(f"\nall: {len(items)} turns")
    print("\n".join(table(score(items))))


if __name__ == "__main__":
    main()
