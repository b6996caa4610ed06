"""DeepCoder sandbox: the cost of one test, side by side with a bare ``python`` process.

Usage:
    python benchmarks/sandbox_cost.py [--runs 40]

Each row runs the same small stdin -> stdout program (read two numbers, print their sum)
``--runs`` times, one run at a time (no threads, so the numbers are per test, not
throughput). The rows take turns, one run each, so a machine whose load changes during the
benchmark slows every row alike. Printed per row: the median and mean wall milliseconds per
run and the median's ratio to a bare ``subprocess.run([python, "-I", "-S", "-c", PROGRAM])``
(the sandbox's own interpreter flags, no limits, no isolation):

* ``bare python -I -S``: the baseline;
* ``bare python``: the same with site-packages loaded (what a naive harness pays);
* ``sandbox weak``: the audit-hook fallback (``unshare`` namespaces where they work);
* ``sandbox bwrap``: the kernel sandbox (skipped, with the reason, where it does not work).

Example:
    $ python benchmarks/sandbox_cost.py --runs 20
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
import warnings

from ragen_torchrl.envs.games.sandbox import Sandbox
from ragen_torchrl.envs.games.sandbox_box import _interpreter, _probe_bwrap

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)"


def timed(rows: list, runs: int) -> dict[str, list[float]]:
    """``name -> wall seconds`` of each run, the rows taking turns."""
    for _, fn in rows:
        fn()  # warm up (probes, page cache)
    out: dict[str, list[float]] = {name: [] for name, _ in rows}
    for _ in range(runs):
        for name, fn in rows:
            start = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    python = _interpreter(None)

    def bare(*flags):
        return lambda: subprocess.run([python, *flags, "-c", PROGRAM], input=b"2 3\n", capture_output=True, check=True)

    def boxed(isolation):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            box = Sandbox(isolation=isolation)

        def run():
            assert box.run_script(PROGRAM, "2 3\n").stdout == "5\n"

        return run

    rows = [("bare python -I -S", bare("-I", "-S")), ("bare python", bare()), ("sandbox weak", boxed("weak"))]
    why = _probe_bwrap(python)
    if why is None:
        rows.append(("sandbox bwrap", boxed("bwrap")))
    results = timed(rows, args.runs)
    base = statistics.median(results[rows[0][0]])
    print(f"{'':20s} {'median ms':>10s} {'mean ms':>10s} {'x bare -I -S':>13s}")
    for name, _ in rows:
        wall = results[name]
        med = statistics.median(wall)
        print(f"{name:20s} {1e3 * med:10.1f} {1e3 * statistics.fmean(wall):10.1f} {med / base:13.2f}")
    if why is not None:
        print(f"sandbox bwrap: not run ({why})")


if __name__ == "__main__":
    main()
