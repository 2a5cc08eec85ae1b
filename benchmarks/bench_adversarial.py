"""Bad and adversarial input through the public API: what each case does, how long it takes, and
whether the store opens again afterwards.

Every case runs in its own subprocess with a fresh store and a time cap, so a case that hangs (a
super-linear regex, an unbounded size) is reported as ``> cap`` instead of stalling the run. Only the
public API is used (``Memory(data_dir=...)``, ``add``, ``search``, ``update``, ``get_all``), so the same
script measures an older checkout too: point ``PYTHONPATH`` at its ``src``.

Usage::

    python benchmarks/bench_adversarial.py [--cap 60] [--only NAME,...]

Output: a markdown table — case, outcome (the exception class and its first line, or what was
stored), seconds, whether a reopen succeeds and the store answers a search.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time

#: name -> (what the case sends, the code it runs with ``m`` an open Memory and ``u`` a user id)
CASES: dict[str, tuple[str, str]] = {
    "surrogate-metadata": ("metadata {'k': lone surrogate}", 'm.add("hi", u, metadata={"k": "\\ud800"})'),
    "deep-metadata": ("metadata nested 130 levels", textwrap.dedent("""\
        d = {}
        for _ in range(130):
            d = {"k": d}
        m.add("hi", u, metadata=d)""")),
    "datetime-metadata": ("metadata {'when': datetime}",
                          'import datetime\nm.add("hi", u, metadata={"when": datetime.datetime.now()})'),
    "set-metadata": ("metadata {'s': set}", 'm.add("hi", u, metadata={"s": {1, 2}})'),
    "bytes-metadata": ("metadata {'b': bytes}", 'm.add("hi", u, metadata={"b": b"x"})'),
    "int-key-metadata": ("metadata {1: 'x'}", 'm.add("hi", u, metadata={1: "x"})'),
    "string-limit": ("search(limit='5')", 'm.add("I like tea", u, flush=True)\nm.search("tea", u, limit="5")'),
    "word-40k": ("one 40,000-char word, capitalised",
                 'm.add("I said " + "Abc" * 13333 + "ing", u, flush=True)'),
    "word-100k": ("one 100,000-char word", 'm.add("A" + "b" * 99999, u, flush=True)'),
    "speaker-100k": ("speaker name of 100,000 chars",
                     'm.add({"role": "user", "name": "N" * 100000, "content": "I like tea"}, u, flush=True)'),
    "retry-same-id": ("3 turns, then the second re-sent with its id", textwrap.dedent("""\
        msgs = [{"id": f"t{i}", "role": "user", "content": f"I visited city number {i} in May"} for i in range(3)]
        m.add(msgs[:2], u)
        m.add(msgs[1:], u, flush=True)
        m.add(msgs[1], u, flush=True)
        print("memories:", len(m.get_all(u)), "for 3 turns")""")),
    "update-10mb": ("update() with 10 MB of text", textwrap.dedent("""\
        r = m.add("I like tea", u, flush=True)
        mid = m.get_all(u)[0].id
        m.update(mid, "x " * 5_000_000, u)
        print("updated")""")),
    "query-1mb": ("a 1 MB search query", 'm.add("I like tea", u, flush=True)\nm.search("tea " * 250_000, u)'),
}

_RUNNER = """
import sys, time
from dialogmem import Memory
path, u = sys.argv[1], "bob"
m = Memory(data_dir=path)
t0 = time.perf_counter()
try:
{body}
    print("ok")
except Exception as exc:
    print("raised", type(exc).__name__ + ":", str(exc).splitlines()[0][:120] if str(exc) else "")
except BaseException as exc:
    print("raised", type(exc).__name__ + " (BaseException):", str(exc).splitlines()[0][:120] if str(exc) else "")
print("seconds %.2f" % (time.perf_counter() - t0))
try:
    m.close()
except BaseException as exc:
    print("close raised", type(exc).__name__)
"""

_REOPEN = """
import sys
from dialogmem import Memory
m = Memory(data_dir=sys.argv[1])
m.search("tea", "bob")
m.add("a later turn", "carol", flush=True)
m.close()
print("reopen ok")
"""


def run_case(name: str, cap: float) -> dict[str, str]:
    what, body = CASES[name]
    with tempfile.TemporaryDirectory() as store:
        code = _RUNNER.format(body=textwrap.indent(body, "    "))
        started = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-c", code, store], capture_output=True, text=True, timeout=cap)
            lines = [ln for ln in done.stdout.splitlines() if ln]
            seconds = next((ln.split()[1] for ln in lines if ln.startswith("seconds")), "?")
            outcome = "; ".join(ln for ln in lines if not ln.startswith("seconds")) or (
                done.stderr.strip().splitlines() or ["crashed"])[-1][:120]
        except subprocess.TimeoutExpired:
            return {"case": name, "sends": what, "outcome": f"still running after {cap:.0f} s (killed)",
                    "seconds": f"> {cap:.0f}", "reopen": reopen(store, cap)}
        if seconds == "?":
            seconds = f"{time.perf_counter() - started:.2f} (process)"
        return {"case": name, "sends": what, "outcome": outcome, "seconds": seconds, "reopen": reopen(store, cap)}


def reopen(store: str, cap: float) -> str:
    try:
        done = subprocess.run([sys.executable, "-c", _REOPEN, store], capture_output=True, text=True, timeout=cap)
    except subprocess.TimeoutExpired:
        return f"reopen hangs (> {cap:.0f} s)"
    if "reopen ok" in done.stdout:
        return "yes"
    last = (done.stderr.strip().splitlines() or ["?"])[-1]
    return f"NO: {last[:100]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=float, default=60.0, help="seconds a case may run before it is killed")
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CASES)
    rows = [run_case(n, args.cap) for n in names]
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    out = ["| case | sends | outcome | seconds | reopens |", "|---|---|---|---|---|"]
    out += [f"| {r['case']} | {r['sends']} | {r['outcome'].replace('|', '/')} | {r['seconds']} | {r['reopen']} |"
            for r in rows]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
