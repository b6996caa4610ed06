"""DeepCoder sandbox: what hostile programs leave behind after many runs.

Usage:
    python benchmarks/sandbox_cleanup.py [--runs 100] [--timeout 0.5]

Two programs, each run ``--runs`` times under every isolation that works here (the audit
hook switched off, as a program that got around it would have it), in a fresh temporary
root per program and isolation:

* ``nest+fill``: 1,100 directories nested with ``mkdir``/``rename``, then 1 MB files
  (4 KB under ``weak``, whose directory is on the host's disk) written until the time limit
  kills it;
* ``create``: directories and files created as fast as it can until the time limit.

Printed per row: runs, how many ended in a timeout, the bytes and entries left in the
temporary root after all runs (checked after every run), the runs after which a process of
the run was still alive when ``run_script`` returned, and the mean wall seconds per run.

Example:
    $ python benchmarks/sandbox_cleanup.py --runs 10
"""

from __future__ import annotations

import argparse
import marshal
import os
import tempfile
import time
import warnings

import psutil

from ragen_torchrl.envs.games.remove_tree import remove_tree
from ragen_torchrl.envs.games.sandbox import Sandbox, SandboxLimits, bwrap_available

NEST_AND_FILL = """
import os
os.mkdir('x')
for _ in range(1100):
    os.mkdir('n')
    os.rename('x', 'n/x')
    os.rename('n', 'x')
i = 0
while True:
    try:
        with open(f'f{i}', 'wb') as f:
            f.write(b'z' * CHUNK)
    except OSError:
        pass
    i += 1
"""
CREATE = """
import os
i = 0
while True:
    try:
        os.mkdir(f'd{i}')
        open(f'd{i}/f', 'w').close()
        open(f'f{i}', 'w').close()
    except OSError:
        pass
    i += 1
"""


def box_processes(nofile: int) -> int:
    """Processes whose command line carries a sandbox config with this ``RLIMIT_NOFILE``."""
    count = 0
    for proc in psutil.process_iter(["cmdline"]):
        for arg in (proc.info["cmdline"] or [])[-1:]:
            try:
                cfg = marshal.loads(bytes.fromhex(arg))
            except (ValueError, EOFError, TypeError):
                continue
            if isinstance(cfg, dict) and cfg.get("rlimits", {}).get("RLIMIT_NOFILE") == (nofile, nofile):
                count += 1
    return count


def left_behind(root: str) -> tuple[int, int]:
    """Bytes and entries under ``root`` (iterative: the trees are deeper than the recursion limit)."""
    size = entries = 0
    stack = [root]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    entries += 1
                    size += entry.stat(follow_symlinks=False).st_size
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            pass
    return size, entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=0.5)
    args = parser.parse_args()
    modes = ["weak"] + (["bwrap"] if bwrap_available() else [])
    print(f"{'':18s} {'runs':>5s} {'timeouts':>9s} {'bytes left':>11s} {'entries':>8s} {'alive':>6s} {'s/run':>6s}")
    for mode in modes:
        for name, code in (("nest+fill", NEST_AND_FILL), ("create", CREATE)):
            chunk = 1 << 20 if mode == "bwrap" else 4096
            nofile = 900 + len(name) + (mode == "bwrap")  # names this row's processes
            limits = SandboxLimits(timeout_s=args.timeout, memory_mb=256, max_file_mb=1, max_open_files=nofile)
            root = tempfile.mkdtemp(prefix="ragen_cleanup_bench_")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                box = Sandbox(limits, isolation=mode, tmp_root=root, audit_hook=False)
            timeouts = size = entries = alive = 0
            start = time.perf_counter()
            for _ in range(args.runs):
                run = box.run_script(code.replace("CHUNK", str(chunk)))
                timeouts += run.status == "timeout"
                b, e = left_behind(root)
                size, entries = size + b, entries + e
                alive += box_processes(nofile) > 0
                for leftover in os.listdir(root):  # so one failure is not counted again
                    remove_tree(os.path.join(root, leftover))
            wall = (time.perf_counter() - start) / args.runs
            remove_tree(root)
            label = f"{mode} {name}"
            print(f"{label:18s} {args.runs:5d} {timeouts:9d} {size:11d} {entries:8d} {alive:6d} {wall:6.2f}")


if __name__ == "__main__":
    main()
