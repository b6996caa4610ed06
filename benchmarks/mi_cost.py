"""Cost of MI cross-scoring: prefix-tree and KV-cached paths vs naive concatenation.

Scores ``M`` reasonings against ``N`` prompt columns with a tiny randomly initialised Qwen2
(hidden 128, 4 layers, vocabulary 64) built in-process, at paper-like shapes: contexts ~10x
longer than the reasoning (240 vs 24 tokens by default, lengths jittered by +-25% so every
path deals with ragged batches), ``N`` = 8 (first-turn sampling, one column per prompt group)
and ``N`` = 64 (trajectory-uniform sampling, one column per pair), ``M`` = 64 pairs.

Each shape runs twice: with random reasonings (nothing shared: the worst case for the tree)
and with templated ones (``--shared``, default 0.5: the first half of every reasoning is one
of 8 stems, about what the tiny policy's "Goal is up left. ..." reasonings share).

The naive path runs ``M * N * (|x| + |z|)`` token-forwards, the cached one
``N * |x| + M * N * (|z| + 1)``, the tree one ``N * (|x| + distinct prefixes)``; the table
prints the wall time of each, the speed-ups over naive and the largest disagreement with
the naive matrix.

``--share K`` also runs the default ``ragen-train`` config (the cached warm start, built
first if missing) for ``K`` training iterations with the MI diagnostics on their default
schedule (every 5 iterations, 64 pairs, both sampling schemes) and prints the MI step's share
of the training-iteration time: ``sum(timing/mi_seconds) / sum(timing/total)``.

Usage::

    python benchmarks/mi_cost.py            # N = 8 and 64, M = 64, |x| = 240, |z| = 24, random + templated
    python benchmarks/mi_cost.py --share 20 # + MI share of 20 default training iterations
    python benchmarks/mi_cost.py --quick    # smaller M and N for a fast smoke run
    python benchmarks/mi_cost.py --columns 8 32 --reasonings 32 --context-len 480 --device cuda --dtype bfloat16

Example (programmatic):
    >>> from benchmarks.mi_cost import run_case, tiny_model   # doctest: +SKIP
    >>> row = run_case(tiny_model(), num_columns=4, num_reasonings=4, context_len=20, reasoning_len=4)  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from ragen_torchrl.diagnostics.cross_scoring import cross_score

VOCAB = 64


def tiny_model(dtype: torch.dtype = torch.float32, device: str = "cpu", seed: int = 0) -> Qwen2ForCausalLM:
    """The benchmark's tiny Qwen2 (hidden 128, 4 layers, vocab 64), seeded, eval mode.

    Example:
        >>> tiny_model().config.num_hidden_layers   # doctest: +SKIP
        4
    """
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )
    return Qwen2ForCausalLM(cfg).to(device=device, dtype=dtype).eval()


def _lengths(n: int, mean: int, jitter: float, g: torch.Generator) -> list[int]:
    lo, hi = max(1, round(mean * (1 - jitter))), max(1, round(mean * (1 + jitter)))
    return torch.randint(lo, hi + 1, (n,), generator=g).tolist()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


METHODS = ("tree", "cached", "naive")
NUM_STEMS = 8


def make_batch(
    num_columns: int,
    num_reasonings: int,
    context_len: int,
    reasoning_len: int,
    jitter: float = 0.25,
    shared: float = 0.0,
    seed: int = 0,
):
    """Random contexts and reasonings; with ``shared > 0`` each reasoning starts with one of
    :data:`NUM_STEMS` stems of ``round(shared * reasoning_len)`` tokens (templated reasoning).

    Example:
        >>> ctx, zs = make_batch(2, 4, 10, 6, shared=0.5)
        >>> len(ctx), len(zs), bool((zs[0][:3] == zs[NUM_STEMS % 4][:3]).all())
        (2, 4, True)
    """
    g = torch.Generator().manual_seed(seed)
    ctx = [torch.randint(VOCAB, (n,), generator=g) for n in _lengths(num_columns, context_len, jitter, g)]
    stem_len = round(shared * reasoning_len)
    stems = [torch.randint(VOCAB, (stem_len,), generator=g) for _ in range(NUM_STEMS)]
    zs = []
    for k, n in enumerate(_lengths(num_reasonings, reasoning_len - stem_len, jitter, g)):
        zs.append(torch.cat([stems[k % NUM_STEMS], torch.randint(VOCAB, (n,), generator=g)]))
    return ctx, zs


def run_case(
    model: torch.nn.Module,
    *,
    num_columns: int,
    num_reasonings: int,
    context_len: int,
    reasoning_len: int,
    jitter: float = 0.25,
    shared: float = 0.0,
    batch_size: int | None = None,
    repeats: int = 1,
    seed: int = 0,
    methods: tuple[str, ...] = METHODS,
) -> dict[str, float]:
    """Time each method on one shape; returns seconds (best of ``repeats``) and errors vs naive.

    Example:
        >>> run_case(tiny_model(), num_columns=2, num_reasonings=2, context_len=8, reasoning_len=2)["cached_speedup"] > 0  # doctest: +SKIP
        True
    """
    ctx, zs = make_batch(num_columns, num_reasonings, context_len, reasoning_len, jitter, shared, seed)
    device = str(next(model.parameters()).device)
    row: dict[str, float] = {
        "N": num_columns,
        "M": num_reasonings,
        "ctx": context_len,
        "z": reasoning_len,
        "shared": shared,
    }
    results = {}
    for method in methods:
        best = best_cpu = float("inf")
        for _ in range(repeats):
            _sync(device)
            t0, c0 = time.perf_counter(), time.process_time()
            results[method] = cross_score(model, ctx, zs, method=method, batch_size=batch_size)
            _sync(device)
            best = min(best, time.perf_counter() - t0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        row[f"{method}_s"] = best
        row[f"{method}_cpu_s"] = best_cpu
    if "naive" in results:
        for method in results:
            if method != "naive":
                row[f"{method}_speedup"] = row["naive_s"] / row[f"{method}_s"]
                row[f"{method}_cpu_speedup"] = row["naive_cpu_s"] / row[f"{method}_cpu_s"]
                row[f"{method}_max_abs_diff"] = (results[method][0] - results["naive"][0]).abs().max().item()
    return row


def training_share(iterations: int, overrides: list[str] | None = None) -> dict[str, float]:
    """MI seconds / training-iteration seconds over ``iterations`` default iterations."""
    import tempfile

    import tensordict
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config_paths import CONFIG_DIR
    from ragen_torchrl.trainer.loop import Trainer

    tensordict.set_list_to_stack(True).set()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["trainer.val_levels=8", *(overrides or [])])
    trainer = Trainer(cfg, run_dir=tempfile.mkdtemp(prefix="mi_share_"))
    total = mi = 0.0
    calls = 0
    for _ in range(iterations):
        stats = trainer.train_iteration()
        trainer.iteration += 1
        total += stats["timing/total"]
        if "timing/mi_seconds" in stats:
            mi += stats["timing/mi_seconds"]
            calls += 1
    return {
        "iterations": iterations,
        "train_s": total,
        "mi_s": mi,
        "mi_calls": calls,
        "share": mi / total if total else float("nan"),
    }


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    """Parse flags, run every column count, print the table (returns the rows).

    Example:
        >>> rows = main(["--quick", "--columns", "2", "--reasonings", "2"])  # doctest: +SKIP
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--columns", type=int, nargs="+", default=None, help="N values (default 8 64)")
    p.add_argument("--reasonings", type=int, default=None, help="M (default 64)")
    p.add_argument("--context-len", type=int, default=240, help="mean context length |x|")
    p.add_argument("--reasoning-len", type=int, default=24, help="mean reasoning length |z|")
    p.add_argument("--jitter", type=float, default=0.25, help="relative +- length jitter (ragged batches)")
    p.add_argument(
        "--shared",
        type=float,
        default=0.5,
        help="stem fraction of the templated reasonings (second row per N; 0 = random only)",
    )
    p.add_argument("--batch-size", type=int, default=None, help="rows per forward (default 64)")
    p.add_argument("--repeats", type=int, default=1, help="best-of repeats per method")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--quick", action="store_true", help="N = 8 and 16, M = 16 (same lengths)")
    p.add_argument(
        "--share",
        type=int,
        default=0,
        metavar="K",
        help="also measure the MI share of K default training iterations (0 = skip)",
    )
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    columns = args.columns or ([8, 16] if args.quick else [8, 64])
    m = args.reasonings or (16 if args.quick else 64)
    model = tiny_model(getattr(torch, args.dtype), args.device)
    # Warm-up: first calls pay one-off allocation / kernel-selection costs.
    run_case(model, num_columns=2, num_reasonings=2, context_len=16, reasoning_len=4)
    rows = []
    print(
        f"tiny Qwen2 (hidden 128, 4 layers, vocab 64), {args.dtype} on {args.device}, "
        f"{torch.get_num_threads()} threads, batch_size={args.batch_size or 64}, "
        f"length jitter +-{args.jitter:.0%}"
    )
    # Wall time is what a user waits for; CPU (process) time is shown too because on a
    # shared CPU box other processes inflate wall time unevenly.
    header = (
        f"{'N':>4} {'M':>4} {'|x|':>5} {'|z|':>4} {'shared':>6} {'tree s':>7} {'cached s':>9} {'naive s':>8}"
        f" {'tree x':>7} {'cached x':>9} {'tree cpu x':>11} {'cached cpu x':>13} {'max|diff|':>10}"
    )
    print(header)
    print("-" * len(header))
    shares = [0.0] + ([args.shared] if args.shared > 0 else [])
    for n in columns:
        for shared in shares:
            row = run_case(
                model,
                num_columns=n,
                num_reasonings=m,
                context_len=args.context_len,
                reasoning_len=args.reasoning_len,
                jitter=args.jitter,
                shared=shared,
                batch_size=args.batch_size,
                repeats=args.repeats,
            )
            rows.append(row)
            diff = max(row["tree_max_abs_diff"], row["cached_max_abs_diff"])
            print(
                f"{row['N']:>4} {row['M']:>4} {row['ctx']:>5} {row['z']:>4} {shared:>6.2f} {row['tree_s']:>7.2f} "
                f"{row['cached_s']:>9.2f} {row['naive_s']:>8.2f} {row['tree_speedup']:>6.1f}x "
                f"{row['cached_speedup']:>8.1f}x {row['tree_cpu_speedup']:>10.1f}x "
                f"{row['cached_cpu_speedup']:>12.1f}x {diff:>10.1e}",
                flush=True,
            )
    if args.share:
        share = training_share(args.share)
        print(
            f"default training, {share['iterations']} iterations: {share['train_s']:.1f} s, "
            f"MI diagnostics {share['mi_s']:.1f} s in {share['mi_calls']} calls = "
            f"{100 * share['share']:.1f}% of training-iteration time",
            flush=True,
        )
    return rows


if __name__ == "__main__":
    main()
