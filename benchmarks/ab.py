"""Run one benchmark under two environments, alternating, several rounds: old vs new on a shared machine.

Each side is a list of ``NAME=VALUE`` settings (``PYTHONPATH`` picks the tree, ``DIALOGMEM_*`` the
configuration); the benchmark's output is printed per run with the load average before it, so the two
sides see the same machine as nearly as alternation allows. Compare the figures of the same round.

Usage::

    python benchmarks/ab.py --rounds 3 --a PYTHONPATH=/path/old/src \\
        --b PYTHONPATH=src --b DIALOGMEM_EMBEDDER__QUANTIZE=int8 -- benchmarks/bench_ingest.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def env_of(pairs: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{pair!r}: expected NAME=VALUE")
        env[name] = value
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", action="append", default=[], help="NAME=VALUE for side a (repeatable)")
    ap.add_argument("--b", action="append", default=[], help="NAME=VALUE for side b (repeatable)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("bench", nargs=argparse.REMAINDER, help="-- script.py [its arguments]")
    args = ap.parse_args()
    bench = [a for a in args.bench if a != "--"]
    if not bench:
        raise SystemExit("give the benchmark after --, e.g. -- benchmarks/bench_spine.py --n 100000")
    sides = {"a": (args.a, env_of(args.a)), "b": (args.b, env_of(args.b))}
    for r in range(1, args.rounds + 1):
        for name, (pairs, env) in sides.items():
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            print(f"=== round {r} side {name} ({' '.join(pairs) or 'unchanged'}); load {load}", flush=True)
            subprocess.run([sys.executable, *bench], env=env, check=True)


if __name__ == "__main__":
    main()
