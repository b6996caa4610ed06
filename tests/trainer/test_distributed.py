"""Training on several processes (torchrun, gloo on CPU) and micro-batched updates.

The 2-process tests launch ``torchrun --nproc_per_node=2 -m ragen_torchrl.train`` and compare with one
process playing the same rollout parts (``rollout.shards=2``) and the same forwards
(``algo.micro_batch_size`` = a rank's share): identical rollouts and identical weights (to 1e-5; in
practice bit for bit, since each rank's loss is scaled by a power of two and the gradients are averaged
by one all_reduce). FSDP2 (``trainer.fsdp=true``) resumes the DDP run's checkpoint and ends where the
single process does after its second iteration.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY_RUN, algo_preset, records

from ragen_torchrl.objectives import build_algorithm
from ragen_torchrl.objectives.logprobs import make_logprob_policy
from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR
from ragen_torchrl.trainer.distributed import (
    Distributed,
    local_rows,
    loss_unit,
    part_seed,
    shard_bounds,
    share_weight,
    unscored_rows,
)
from ragen_torchrl.trainer.update import micro_batches, minibatch_plan, optimize, training_batch

ALGO_DIR = Path(PACKAGE_CONFIG_DIR) / "algo"


# -- pure pieces ----------------------------------------------------------------------------
def test_shard_bounds_cover_every_item_once_in_order():
    for n in range(0, 12):
        for w in range(1, 5):
            bounds = shard_bounds(n, w)
            assert len(bounds) == w and bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            sizes = [e - s for s, e in bounds]
            assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        shard_bounds(4, 0)


def test_part_seeds_are_stable_and_distinct():
    seeds = {part_seed(0, it, p, s) for it in range(3) for p in range(3) for s in range(2)}
    assert len(seeds) == 18
    assert part_seed(7, 2, 1) == part_seed(7, 2, 1)
    # stable across processes and Python versions (str seeding is SHA-512 based, not hash())
    out = subprocess.run(
        [sys.executable, "-c", "from ragen_torchrl.trainer.distributed import part_seed; print(part_seed(7, 2, 1))"],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONHASHSEED="123"),
    )
    assert int(out.stdout) == part_seed(7, 2, 1)


def test_rank_rows_and_micro_batches_deal_round_robin():
    idx = torch.tensor([9, 3, 5, 1, 7, 2])
    shares = [local_rows(idx, 2, r).tolist() for r in range(2)]
    assert shares == [[9, 5, 7], [3, 1, 2]]
    # one process with micro batches of a rank's share runs exactly the ranks' forwards
    assert [m.tolist() for m in micro_batches(idx, 3)] == shares
    assert [m.tolist() for m in micro_batches(idx, None)] == [idx.tolist()]
    assert [m.tolist() for m in micro_batches(idx, 100)] == [idx.tolist()]
    assert sorted(sum((m.tolist() for m in micro_batches(idx, 4)), [])) == sorted(idx.tolist())
    assert share_weight(3, 12) == 0.25 and share_weight(0, 0) == 0.0


def test_each_rank_scores_only_the_rows_it_trains_on():
    # two epochs over 6 rows; rank r of 2 trains on positions r, r+2, ... of every mini-batch
    plan = [[torch.tensor([4, 1, 0]), torch.tensor([2, 5, 3])], [torch.tensor([0, 3]), torch.tensor([5, 2, 1, 4])]]
    # rank 0: {4, 0} + {2, 3} + {0} + {5, 1} = {0, 1, 2, 3, 4, 5}; rank 1: {1} + {5} + {3} + {2, 4}
    assert [t.tolist() for t in unscored_rows(plan, 7, world_size=2, rank=0)] == [[6], [6]]
    behaviour, reference = unscored_rows(plan, 7, world_size=2, rank=1)
    assert behaviour.tolist() == reference.tolist() == [0, 6]
    # the on-policy first mini-batch needs no behaviour pass on any rank, but still its reference pass
    behaviour, reference = unscored_rows(plan, 7, world_size=2, rank=1, on_policy=torch.tensor([4, 1, 0]))
    assert behaviour.tolist() == [0, 1, 4, 6] and reference.tolist() == [0, 6]
    # one process scores every row except the on-policy ones
    assert unscored_rows(plan, 7, world_size=1, rank=0) == (None, None)
    on_policy = torch.tensor([4, 1, 0])
    assert unscored_rows(plan, 7, world_size=1, rank=0, on_policy=on_policy) == (on_policy, None)


def test_each_rank_plays_its_own_collection_part():
    assert Distributed().own_parts(3) == [0, 1, 2]
    assert [Distributed(rank=r, world_size=3).own_parts(3) for r in range(3)] == [[0], [1], [2]]


def test_loss_unit_follows_the_aggregation():
    class L:
        def __init__(self, aggregation):
            self.aggregation = aggregation

    assert loss_unit(L("prompt_mean")) == "rows"
    assert loss_unit(L("dr_grpo")) == "rows"
    assert loss_unit(L("token_mean")) == "tokens"
    with pytest.raises(ValueError, match="aggregation='none'"):
        loss_unit(L("none"))


def test_single_process_collectives_are_the_identity():
    d = Distributed.from_env("cpu", environ={})
    assert (d.rank, d.world_size, d.is_main, d.enabled) == (0, 1, True, False)
    assert d.all_gather_objects({"a": 1}) == [{"a": 1}]
    assert d.broadcast_object(3) == 3
    assert d.sum_floats([1.5, 2.0]) == [1.5, 2.0]
    assert d.all_true(True) and not d.all_true(False)
    assert d.max_int(4) == 4
    assert d.device("cuda") == "cuda"
    d.barrier()
    d.close()


# -- micro-batches: the same gradient as the whole mini-batch ------------------------------
@pytest.mark.parametrize("name", ["grpo", "dapo", "drgrpo", "gspo", "ppo"])
def test_micro_batches_give_the_whole_mini_batch_gradient(tiny_model_dir, name):
    """Unequal micro-batches (3 + 1 rows; token_mean weighs them by tokens): gradients within 1e-5."""
    from helpers import load_tiny

    grads, metrics = {}, {}
    for micro in (None, 3):
        model, tok = load_tiny(tiny_model_dir)
        actor = make_logprob_policy(model, tok)
        cfg = algo_preset(name)
        cfg.mini_batch_size = 4
        cfg.micro_batch_size = micro
        obj = build_algorithm(cfg, actor, model, tok)
        optimizer = torch.optim.SGD(obj.optimizer_param_groups(0.0), lr=0.0)
        torch.manual_seed(3)
        recs = obj.shape_rewards(records())
        plan = minibatch_plan(recs.get("group_id"), cfg)
        batch, _ = training_batch(recs, obj, actor)
        stats = optimize(batch, obj, optimizer, cfg, plan=plan)
        assert stats["optimizer_steps"] == 1
        grads[micro] = [p.grad.clone() for p in obj.trainable_parameters() if p.grad is not None]
        metrics[micro] = stats
    assert len(grads[None]) == len(grads[3]) > 0
    for a, b in zip(grads[None], grads[3]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert metrics[3]["loss"] == pytest.approx(metrics[None]["loss"], abs=1e-5)
    assert metrics[3]["grad_norm"] == pytest.approx(metrics[None]["grad_norm"], rel=1e-5)


# -- configuration errors -------------------------------------------------------------------
def _cfg(cache_dir, *extra):
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config_paths import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=["trainer=smoke", f"model.cache_dir={cache_dir}", *TINY_RUN, *extra])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["trainer.fsdp=true"], "launch with torchrun"),
        (["rollout.shards=3"], "exceeds trainer.prompts_per_iter"),
    ],
)
def test_distributed_settings_that_cannot_run_are_config_errors(ragen_cache_dir, tmp_path, extra, message):
    from ragen_torchrl.trainer.config_checks import ConfigError
    from ragen_torchrl.trainer.loop import Trainer

    with pytest.raises(ConfigError, match=message):
        Trainer(_cfg(ragen_cache_dir, *extra), tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before anything was built or written


def test_rollout_shards_is_validated_with_the_config(ragen_cache_dir):
    from ragen_torchrl.trainer.config import validate_config
    from ragen_torchrl.trainer.config_checks import ConfigError

    with pytest.raises(ConfigError, match="rollout.shards"):
        validate_config(_cfg(ragen_cache_dir, "rollout.shards=0"))
    with pytest.raises(ConfigError, match="exceeds trainer.prompts_per_iter"):
        validate_config(_cfg(ragen_cache_dir, "rollout.shards=5"))
    with pytest.raises(ConfigError, match="algo.micro_batch_size"):
        validate_config(_cfg(ragen_cache_dir, "algo.micro_batch_size=0"))


# -- two processes --------------------------------------------------------------------------
#: P=4 groups x G=4 (16 rows, one mini-batch of 16): each rank plays 2 groups and trains on 8 rows
RUN = [
    "trainer=smoke",
    *TINY_RUN,
    "model.num_layers=2",  # FSDP2 shards each decoder layer: more than one
    "trainer.prompts_per_iter=4",
    "trainer.group_size=4",
    "trainer.val_levels=2",
    "trainer.save_every=1",
    "trainer.log_text_samples=0",
    "rollout.max_new_tokens=8",
    "rollout.temperature=1.5",
    "diagnostics.mi.enabled=false",
]


def _launch(cache_dir, run_dir, *extra, ranks: int = 1) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", HYDRA_FULL_ERROR="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    if ranks > 1:
        head = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    else:
        head = [sys.executable]
    cmd = head + ["-m", "ragen_torchrl.train", *RUN, f"model.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=run_dir.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def _state(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def _same_run(a: dict, b: dict, iteration: int) -> None:
    assert a["iteration"] == b["iteration"] == iteration - 1
    ha, hb = a["history"][-1], b["history"][-1]
    # the same rollouts: every rollout statistic equal, and the same update on them
    rollout_keys = sorted(k for k in ha if k.startswith("rollout/"))
    assert rollout_keys and sorted(k for k in hb if k.startswith("rollout/")) == rollout_keys
    for k in rollout_keys:
        assert ha[k] == hb[k], k
    for k in ("train/loss", "train/grad_norm", "train/optimizer_steps", "train/assistant_tokens"):
        assert ha[k] == pytest.approx(hb[k], rel=1e-5, abs=1e-7), k
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        torch.testing.assert_close(a["model"][k], b["model"][k], atol=1e-5, rtol=0, msg=k)


@pytest.mark.slow
def test_two_gloo_ranks_train_exactly_as_one_process(ragen_cache_dir, tmp_path):
    # one process, the same rollout parts and forwards (its two iterations are the reference)
    single = tmp_path / "single"
    _launch(ragen_cache_dir, single, "rollout.shards=2", "algo.micro_batch_size=8", "trainer.total_iterations=2")
    # two ranks, one iteration: rank r plays groups 2r, 2r+1 and trains on 8 rows
    ddp = tmp_path / "ddp"
    proc = _launch(ragen_cache_dir, ddp, "trainer.total_iterations=1", ranks=2)
    assert proc.stdout.count("[iter    1/1]") == 1  # rank 0 alone prints
    assert len([p for p in ddp.rglob("events.out.tfevents*")]) == 1  # rank 0 alone writes TensorBoard
    _same_run(_state(single / "checkpoints" / "prev.pt"), _state(ddp / "checkpoints" / "last.pt"), iteration=1)
    assert (ddp / "summary.json").is_file() and (ddp / "policy" / "config.json").is_file()

    # FSDP2 resumes the DDP checkpoint (full state dicts, any world size) for the second iteration
    fsdp = tmp_path / "fsdp"
    shutil.copytree(ddp, fsdp)
    _launch(ragen_cache_dir, fsdp, "trainer.total_iterations=2", "trainer.fsdp=true", f"trainer.resume={fsdp}", ranks=2)
    _same_run(_state(single / "checkpoints" / "last.pt"), _state(fsdp / "checkpoints" / "last.pt"), iteration=2)
    # the exported policy is a plain Hugging Face model dir
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(fsdp / "policy")
    assert type(model).__name__ == "Qwen2ForCausalLM"
