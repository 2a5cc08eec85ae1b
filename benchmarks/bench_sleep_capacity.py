"""``sleep()`` bounding one long-lived user's MTM (issue 31, item 5): seconds and peak RSS.

The history is ``bench_mtm_latency.build``'s: ``--n`` memories of one user (MiniLM vectors of LoCoMo
turns plus noise, one minute apart), written through the change writer, kept in ``--store`` (built
when absent, reused after). Each run copies it, opens the copy (LTM off), resets the process's peak
RSS (Linux ``/proc/self/clear_refs``), runs ``sleep()`` with ``mtm_capacity = --capacity`` and prints
the seconds, the counts, the RSS after the open and the peak during ``sleep``.

Usage::

    python benchmarks/bench_sleep_capacity.py --store /tmp/one-user-1e5 [--n 100000] [--capacity 10000]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from bench_mtm_latency import USER, build, proc_mb

from dialogmem import Memory


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data/locomo/locomo10_dev.json")
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--capacity", type=int, default=10_000)
    args = ap.parse_args()
    if not args.store.exists():
        t0 = time.perf_counter()
        build(args.store, Path(args.data), args.n)
        print(f"built one user with {args.n} memories in {time.perf_counter() - t0:.0f} s", flush=True)
    run = args.store.with_name(args.store.name + "-run")
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(args.store, run)
    try:
        with Memory(data_dir=run, sleep={"mtm_capacity": args.capacity, "ltm": False}) as mem:
            opened = proc_mb("VmRSS")
            Path("/proc/self/clear_refs").write_text("5")  # the peak from here on
            t0 = time.perf_counter()
            report = mem.sleep(USER)
            seconds = time.perf_counter() - t0
            counts = mem.stats(USER)["counts"]
            print(f"sleep to capacity {args.capacity}: {seconds:.1f} s, evicted {report.evicted}, compressed "
                  f"{report.compressed}, active {counts['memories']}; RSS after open {opened:.0f} MB, "
                  f"peak during sleep {proc_mb('VmHWM'):.0f} MB", flush=True)
    finally:
        shutil.rmtree(run, ignore_errors=True)


if __name__ == "__main__":
    main()
