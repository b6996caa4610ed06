"""The update step along three scoring paths, side by side on the same batch.

* **history path**: behaviour log-probs from the wrapper's history path for every
  row (chat template, tokenisation and forward inside ``TransformersWrapper``), and every loss
  forward through the same history path;
* **stored tokens**: each conversation tokenised once (the decoded conversation re-tokenised,
  ``algo.train_on=retokenized``); the behaviour pass scores the stored tokens and skips the rows of
  the first mini-batch of a one-epoch update (the loss takes their behaviour log-probs from its own
  forward, ``current_as_behaviour``); every loss forward is one padded pass over the stored tokens
  (``algo.shared_prefix=false``);
* **ragged batch**: "now" with the training batch kept as ragged per-row tensors (a lazy stack of
  rows, re-padded by every loss forward), the layout the losses also accept;
* **now** (the defaults): the rows are the ids the policy read and sampled
  (``algo.train_on=generated``), and a prompt shared by a group's rows runs through the model once
  (``algo.shared_prefix=true``), in the behaviour pass and in every loss forward; the training batch
  is one dense left-padded TensorDict built once (:mod:`ragen_torchrl.data.dense`).

All run on the same rollout batch from the same weights, alternately, ``--repeats`` times; the
script prints seconds per update (behaviour pass + optimizer steps) for each, the ratios, and the
largest weight differences after the update between "now" and "ragged batch" (the same update: the
dense-batch tests bound the losses and gradients by 1e-5), and between "now" and "stored tokens" (the equivalence tests
bound it by 1e-5 when the replies' text round-trips, as a warm-started policy's does; a random
policy's byte-level replies re-tokenise into other ids, so there the two train different tokens).

Two shapes: FrozenLake at the default batch (16 groups x 4, mini-batches of 16: four optimizer
steps, the default run's warm start) and single-turn Countdown as in ``benchmarks/vs_trl.py`` (8 x 8,
64 new tokens, one optimizer step over the whole batch, random initialisation).

Usage::

    python benchmarks/update_paths.py            # 3 repeats
    python benchmarks/update_paths.py --quick    # 1 repeat, smaller batches
    python benchmarks/update_paths.py --quick --countdown-only   # no warm start: the quickest check
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time

import torch
from hydra import compose, initialize_config_dir
from tensordict import lazy_stack

from ragen_torchrl.collectors import collect_rollouts
from ragen_torchrl.envs.splits import train_level_seeds
from ragen_torchrl.objectives.logprobs import (
    _wrapper_log_probs,
    attach_training_data,
    compute_behaviour_log_probs,
    training_view,
)
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.loop import Trainer
from ragen_torchrl.trainer.update import minibatch_plan, optimize, scores_shared_prefixes, training_batch


def before(tr: Trainer, records, plan) -> dict:
    batch = tr.algorithm.advantage(records)
    batch, _ = tr.algorithm.prepare(attach_training_data(batch, _wrapper_log_probs(tr.actor, batch, 32)))
    tr.loss_module.score_stored_tokens = False
    try:
        return optimize(batch, tr.algorithm, tr.optimizer, tr.cfg.algo, plan=plan)
    finally:
        tr.loss_module.score_stored_tokens = True


def now(tr: Trainer, records, plan) -> dict:
    batch, _ = training_batch(records, tr.algorithm, tr.actor, skip_behaviour=plan[0][0])
    return optimize(batch, tr.algorithm, tr.optimizer, tr.cfg.algo, plan=plan, on_policy_first=True)


def ragged(tr: Trainer, records, plan) -> dict:
    obj = tr.algorithm
    recs = obj.advantage(records)
    shared = scores_shared_prefixes(obj.loss_module)
    beh = compute_behaviour_log_probs(tr.actor, recs, skip=plan[0][0], shared_prefix=shared, train_on=obj.train_on)
    batch, _ = obj.prepare(lazy_stack([row.update(b) for row, b in zip(training_view(recs).unbind(0), beh.unbind(0))]))
    return optimize(batch, obj, tr.optimizer, tr.cfg.algo, plan=plan, on_policy_first=True)


def stored(tr: Trainer, records, plan) -> dict:
    tr.algorithm.train_on, tr.loss_module.shared_prefix = "retokenized", False
    try:
        return now(tr, records, plan)
    finally:
        tr.algorithm.train_on, tr.loss_module.shared_prefix = "generated", True


ARMS = (("history path", before), ("stored tokens", stored), ("ragged batch", ragged), ("now", now))


def measure(name: str, overrides: list[str], repeats: int, cache: str) -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=[
                "trainer.val_levels=4",
                "diagnostics.mi.enabled=false",
                f"model.cache_dir={cache}",
                *overrides,
            ],
        )
    tr = Trainer(cfg, run_dir=tempfile.mkdtemp())
    records = tr.algorithm.shape_rewards(
        collect_rollouts(
            tr.env,
            tr.policy,
            train_level_seeds(0, 0, tr.prompts_per_iter),
            tr.group_size,
            chunk_size=int(cfg.rollout.chunk_size),
        )
    )
    start_model = copy.deepcopy(tr.model.state_dict())
    start_opt = copy.deepcopy(tr.optimizer.state_dict())
    times = {label: [] for label, _ in ARMS}
    weights = {}
    for _ in range(repeats):
        for label, fn in ARMS:
            tr.model.load_state_dict(start_model)
            tr.optimizer.load_state_dict(start_opt)
            torch.manual_seed(0)
            plan = minibatch_plan(records.get("group_id"), cfg.algo)
            t = time.perf_counter()
            stats = fn(tr, records.clone(), plan)  # the update writes into the rows it trains on
            times[label].append(time.perf_counter() - t)
            weights[label] = [p.detach().clone() for p in tr.model.parameters()]
    diff = max(float((a - b).abs().max()) for a, b in zip(weights["stored tokens"], weights["now"]))
    diff_r = max(float((a - b).abs().max()) for a, b in zip(weights["ragged batch"], weights["now"]))
    h, st, r, n = (min(times[label]) for label, _ in ARMS)
    print(
        f"| {name} | {records.batch_size[0]} | {int(stats['optimizer_steps'])} | {h:.2f} | {st:.2f} | {r:.2f} | "
        f"{n:.2f} | {n / h:.2f} | {n / st:.2f} | {n / r:.2f} | {diff_r:.1e} | {diff:.1e} |",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=None, help="default 3 (1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="smaller batches (and 1 repeat unless --repeats)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--countdown-only", action="store_true", help="only the single-turn Countdown shape")
    parser.add_argument("--cache", default=None, help="model cache dir (default: $RAGEN_CACHE or a temp dir)")
    args = parser.parse_args()
    import os

    torch.set_num_threads(args.threads)
    cache = args.cache or os.environ.get("RAGEN_CACHE") or tempfile.mkdtemp()
    repeats = args.repeats or (1 if args.quick else 3)
    frozenlake = ["env=frozenlake", f"model.threads={args.threads}"]  # the default run's warm start
    countdown = [
        "env=countdown",
        "trainer.prompts_per_iter=8",
        "trainer.group_size=8",
        "rollout.max_new_tokens=64",
        "algo.mini_batch_size=64",
        "sft.enabled=false",  # random initialisation, as benchmarks/vs_trl.py
        f"model.threads={args.threads}",
    ]
    if args.quick:
        frozenlake += ["trainer.prompts_per_iter=4", "algo.mini_batch_size=8"]
        countdown += ["trainer.prompts_per_iter=2", "algo.mini_batch_size=16"]
    print(
        "| batch | rows | optimizer steps | history path (s) | stored tokens (s) | ragged batch (s) | now (s) "
        "| now / history | now / stored | now / ragged | max weight diff now vs ragged | now vs stored |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    if not args.countdown_only:
        measure("FrozenLake, default shape", frozenlake, repeats, cache)
    measure("Countdown, single turn, one step", countdown, repeats, cache)


if __name__ == "__main__":
    main()
