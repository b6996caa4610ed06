"""DeepCoder sandbox throughput: sandboxed executions per second vs a bare ``subprocess.run``.

Usage:
    python benchmarks/sandbox_speed.py [--seconds 3.0] [--workers 2]

Every execution runs the same small stdin -> stdout program (read two numbers, print their
sum). Rows, each timed for ``--seconds`` with ``--workers`` threads (the DeepCoder env's
default is 2 threads, one per core of the reference CPU box):

* ``bare python``: ``subprocess.run([sys.executable, "-c", PROGRAM])`` (site-packages
  loaded, no limits): what a naive harness pays;
* ``bare python -I -S``: the same interpreter flags as the sandbox, no limits;
* ``sandbox weak``: :class:`~ragen_torchrl.envs.games.sandbox.Sandbox` with the audit-hook
  fallback (limits, audit hook, temp dir, session kill, capped reads; ``unshare`` namespaces
  where they work);
* ``sandbox bwrap``: the kernel sandbox, the default where ``bwrap`` works.

The last column is the overhead ratio (seconds per execution / those of ``bare python``,
and of ``bare python -I -S``). Then the grading rate of whole submissions: the shipped
hand-written set's reference solutions on all their hidden tests (cache off).

Example:
    $ python benchmarks/sandbox_speed.py --seconds 1
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ragen_torchrl.envs.games.deepcoder import extract_code
from ragen_torchrl.envs.games.deepcoder_data import shipped_problems
from ragen_torchrl.envs.games.deepcoder_grading import Grader
from ragen_torchrl.envs.games.sandbox import Sandbox, bwrap_available

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)"
STDIN = "2 3\n"


def rate(run_once, seconds: float, workers: int) -> tuple[float, int]:
    """Executions per second of ``run_once`` on ``workers`` threads for ``seconds``."""
    run_once()  # warm up (namespace probe, caches)
    stop = time.perf_counter() + seconds
    counts = [0] * workers
    lock = threading.Lock()

    def loop(i: int) -> None:
        while time.perf_counter() < stop:
            run_once()
            with lock:
                counts[i] += 1

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(loop, range(workers)))
    n = sum(counts)
    return n / (time.perf_counter() - start), n


def bare(flags: tuple[str, ...]):
    def run() -> None:
        out = subprocess.run([sys.executable, *flags, "-c", PROGRAM], input=STDIN, capture_output=True, text=True)
        assert out.stdout == "5\n", out.stderr

    return run


def sandboxed(isolation: str):
    box = Sandbox(isolation=isolation)

    def run() -> None:
        out = box.run_script(PROGRAM, STDIN)
        assert out.stdout == "5\n", out.stderr

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    rows = [("bare python", bare(())), ("bare python -I -S", bare(("-I", "-S")))]
    rows.append(("sandbox weak", sandboxed("weak")))
    if bwrap_available():
        rows.append(("sandbox bwrap", sandboxed("bwrap")))
    results = {name: rate(fn, args.seconds, args.workers) for name, fn in rows}
    base, base_is = results["bare python"][0], results["bare python -I -S"][0]
    print(f"executions/s with {args.workers} worker threads, {args.seconds:.1f} s each")
    print("(time x bare: seconds per execution relative to the bare run; > 1 = the sandbox costs more)")
    print(f"{'mode':<20} {'exec/s':>8} {'ms/exec':>8} {'runs':>6} {'time x bare':>12} {'time x bare -I -S':>18}")
    for name, (r, n) in results.items():
        print(f"{name:<20} {r:8.1f} {1000 * args.workers / r:8.1f} {n:6d} {base / r:12.2f} {base_is / r:18.2f}")

    problems = shipped_problems()
    grader = Grader(Sandbox(), workers=args.workers, cache_size=0)
    jobs = [(extract_code(f"```python\n{p.solution}```"), p) for p in problems]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        reports = list(pool.map(lambda job: grader.grade(*job), jobs))
    wall = time.perf_counter() - start
    assert all(r.all_passed for r in reports)
    tests = sum(r.total for r in reports)
    print(
        f"\nshipped set: {len(jobs)} reference submissions, {tests} hidden tests in {wall:.2f} s "
        f"({len(jobs) / wall:.1f} submissions/s, {tests / wall:.1f} tests/s, isolation={grader.sandbox.isolation})"
    )


if __name__ == "__main__":
    main()
