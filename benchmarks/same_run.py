"""Check that a change keeps the default run's numbers: metrics and weights of its first iterations.

Runs the default config (plus any Hydra overrides) for a few training iterations in-process, with a
fresh model cache, and writes every logged metric (timings and memory excluded) and a SHA-256 of the
policy's weights after each iteration to a JSON file. Run it on two commits and compare::

    python benchmarks/same_run.py --out before.json            # on the old commit
    python benchmarks/same_run.py --out after.json             # on the new one
    python benchmarks/same_run.py --compare before.json after.json

``--compare`` exits 0 only if every metric is equal (bit for bit) and the weight hashes agree.
Use ``--threads 1`` on both sides (the default): float reductions depend on the thread count.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import tempfile
from pathlib import Path

import torch

VOLATILE_PREFIXES = ("timing/", "memory/", "throughput/")


def weight_digest(model: torch.nn.Module) -> str:
    """SHA-256 over the state dict's names, dtypes, shapes and bytes, in name order."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def run(iterations: int, overrides: list[str], threads: int) -> dict:
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR
    from ragen_torchrl.trainer.loop import Trainer

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        with initialize_config_dir(config_dir=str(PACKAGE_CONFIG_DIR), version_base="1.3"):
            cfg = compose("config", overrides=[f"model.cache_dir={tmp}/cache", f"model.threads={threads}", *overrides])
        trainer = Trainer(cfg, f"{tmp}/run")
        out = {"overrides": overrides, "threads": threads, "iterations": []}
        for _ in range(iterations):
            stats = trainer.train_iteration()
            metrics = {k: float(v) for k, v in sorted(stats.items()) if not k.startswith(VOLATILE_PREFIXES)}
            out["iterations"].append({"metrics": metrics, "weights": weight_digest(trainer.model)})
        trainer.dist.close()
    return out


def compare(a: dict, b: dict) -> list[str]:
    """Every difference between two ``run`` outputs, as lines; empty when they agree exactly."""
    diffs = []
    if len(a["iterations"]) != len(b["iterations"]):
        diffs.append(f"iterations: {len(a['iterations'])} vs {len(b['iterations'])}")
    for i, (x, y) in enumerate(zip(a["iterations"], b["iterations"], strict=False)):
        for key in sorted(set(x["metrics"]) | set(y["metrics"])):
            u, v = x["metrics"].get(key), y["metrics"].get(key)
            same = u == v or (u is not None and v is not None and math.isnan(u) and math.isnan(v))
            if not same:
                diffs.append(f"iteration {i + 1} {key}: {u} vs {v}")
        if x["weights"] != y["weights"]:
            diffs.append(f"iteration {i + 1} weights differ")
    return diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the run's metrics and weight hashes here")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. trainer.prompts_per_iter=8")
    args = parser.parse_args(argv)
    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        diffs = compare(a, b)
        n = sum(len(it["metrics"]) for it in a["iterations"])
        print("\n".join(diffs) if diffs else f"identical: {n} metrics and {len(a['iterations'])} weight hashes")
        return 1 if diffs else 0
    if args.out is None:
        parser.error("--out is required unless --compare is given")
    result = run(args.iterations, args.overrides, args.threads)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}: {len(result['iterations'])} iterations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
