"""The budget caps (trainer.max_rollouts, trainer.max_seconds) and the filter controls, end to end.

The runs use test_trainer.py's smoke settings (1-layer hidden-32 model, 3-step warm start, 2 x 2
rollouts per iteration) from the session cache, so each is a few seconds.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_trainer import make_cfg

from ragen_torchrl.trainer.budget import budget_stop, budget_totals, training_rollouts, training_seconds
from ragen_torchrl.trainer.summary import read_summary


# --------------------------------------------------------------------------- the pure rules
def test_training_rollouts_count_refills_and_skip_missing_scalars():
    history = [
        {"rollout/num_trajectories": 64.0},
        {"rollout/num_trajectories": 64.0, "dynamic_sampling/extra_rows": 32.0},
        {"filter/skipped_update": 1.0},  # an iteration without the scalar adds nothing
    ]
    assert training_rollouts(history) == 160.0


def test_training_seconds_count_only_the_training_phases():
    phases = {
        "setup": {"wall": 100.0, "cpu": 1.0},
        "warm_start": {"wall": 50.0, "cpu": 1.0},
        "validation": {"wall": 30.0, "cpu": 1.0},
        "diagnostics": {"wall": 9.0, "cpu": 1.0},
        "checkpoint": {"wall": 2.0, "cpu": 1.0},
        "rollout": {"wall": 20.0, "cpu": 1.0},
        "filter": {"wall": 0.5, "cpu": 1.0},
        "update": {"wall": 10.0, "cpu": 1.0},
        "other": {"wall": 1.0, "cpu": 1.0},
        "total": {"wall": 222.5, "cpu": 9.0},
    }
    assert training_seconds(phases) == 30.5
    assert training_seconds(None) == training_seconds({}) == 0.0


def test_budget_stop_names_each_cap_reached():
    h = [{"train/optimizer_steps": 3.0, "rollout/num_trajectories": 64.0}] * 4  # 12 steps, 256 rollouts
    phases = {"rollout": {"wall": 40.0}, "update": {"wall": 20.0}}  # 60 s
    off = {"max_optimizer_steps": None, "max_rollouts": None, "max_seconds": None}
    assert budget_stop(off, h, phases) is None
    assert budget_stop({**off, "max_rollouts": 256}, h, phases) == "trainer.max_rollouts=256 reached"
    assert budget_stop({**off, "max_rollouts": 257}, h, phases) is None
    assert budget_stop({**off, "max_seconds": 60.0}, h, phases) == "trainer.max_seconds=60 reached"
    assert budget_stop({**off, "max_seconds": 60.5}, h, phases) is None
    assert budget_stop({**off, "max_seconds": 59.75}, h, phases) == "trainer.max_seconds=59.75 reached"
    assert (
        budget_stop({"max_optimizer_steps": 12, "max_rollouts": 200, "max_seconds": 61.0}, h, phases)
        == "trainer.max_optimizer_steps=12 reached; trainer.max_rollouts=200 reached"
    )
    assert budget_totals(h, phases) == {"optimizer_steps": 12.0, "rollouts": 256.0, "training_seconds": 60.0}


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.max_rollouts=0", "trainer.max_rollouts must be a positive integer, got 0"),
        ("trainer.max_rollouts=-4", "trainer.max_rollouts must be a positive integer, got -4"),
        ("trainer.max_rollouts=1.5", "trainer.max_rollouts must be an integer, got 1.5"),
        ("trainer.max_seconds=0", "trainer.max_seconds must be a finite positive number, got 0.0"),
        ("trainer.max_seconds=-60", "trainer.max_seconds must be a finite positive number, got -60.0"),
        ("trainer.max_seconds=inf", "trainer.max_seconds must be a finite number, got inf"),
        ("trainer.max_seconds=soon", "trainer.max_seconds"),
    ],
)
def test_bad_caps_are_config_errors(override, message, tmp_path):
    from ragen_torchrl.trainer.config import validate_config
    from ragen_torchrl.trainer.config_checks import ConfigError

    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        validate_config(make_cfg(str(tmp_path), override))


# --------------------------------------------------------------------------- the caps, end to end
@pytest.mark.slow
def test_max_rollouts_stops_the_run_at_the_cap(ragen_cache_dir, tmp_path):
    from ragen_torchrl.trainer.loop import Trainer

    # 2 x 2 rollouts per iteration: 8 are reached at the end of iteration 2 of 5
    cfg = make_cfg(ragen_cache_dir, "trainer.total_iterations=5", "trainer.max_rollouts=8", "trainer.val_every=0")
    summary = Trainer(cfg, run_dir=tmp_path / "run").fit()
    assert summary["stop_reason"] == "trainer.max_rollouts=8 reached"
    assert [h["iteration"] for h in summary["history"]] == [1, 2]
    assert summary["totals"]["rollouts"] == 8.0
    written = read_summary(tmp_path / "run")
    assert written["stop_reason"] == summary["stop_reason"] and written["totals"]["rollouts"] == 8.0
    assert summary["val_end"] is not None  # the final validation still runs


@pytest.mark.slow
def test_max_seconds_stops_the_run_at_the_cap(ragen_cache_dir, tmp_path):
    from ragen_torchrl.trainer.loop import Trainer

    # any iteration takes longer than a microsecond of rollout + filter + update: the run stops after one
    cfg = make_cfg(ragen_cache_dir, "trainer.max_seconds=1e-6", "trainer.val_every=0")
    summary = Trainer(cfg, run_dir=tmp_path / "run").fit()
    assert summary["stop_reason"] == "trainer.max_seconds=1e-06 reached"
    assert [h["iteration"] for h in summary["history"]] == [1]
    seconds = summary["totals"]["training_seconds"]
    assert seconds > 1e-6
    # the count is the training phases of the run's own phases: what a matched arm reads back
    assert math.isclose(seconds, training_seconds(read_summary(tmp_path / "run")["phases"]), rel_tol=1e-9)


@pytest.mark.slow
def test_no_cap_runs_every_iteration_and_records_the_budget(ragen_cache_dir, tmp_path):
    from ragen_torchrl.trainer.loop import Trainer

    summary = Trainer(make_cfg(ragen_cache_dir, "trainer.val_every=0"), run_dir=tmp_path / "run").fit()
    assert summary["stop_reason"] is None and len(summary["history"]) == 2
    totals = summary["totals"]
    assert totals["rollouts"] == 8.0 and totals["training_seconds"] > 0
    assert totals["optimizer_steps"] == sum(h.get("train/optimizer_steps", 0.0) for h in summary["history"])


# --------------------------------------------------------------------------- the filter controls, end to end
@pytest.mark.slow
def test_random_keep_runs_and_draws_from_the_run_seed_and_iteration(ragen_cache_dir, tmp_path):
    from ragen_torchrl.trainer.loop import Trainer
    from ragen_torchrl.transforms.group_selection import random_groups, random_seed

    # 4 groups: 0.5 x 4 = 2 kept at every iteration
    cfg = make_cfg(ragen_cache_dir, "filter=random_keep", "filter.value=0.5", "trainer.prompts_per_iter=4", "seed=3")
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    assert (trainer.snr.strategy, trainer.snr.seed) == ("random", 3)
    seen, row_mask = [], trainer.snr.row_mask

    def spy(td, groups=None, *, step=None):  # which groups (by rank among the batch's ids) were kept
        mask, stats = row_mask(td, groups, step=step)
        ids = td.get("group_id")
        order = torch.unique(ids).tolist()
        seen.append((step, [order.index(g) for g in torch.unique(ids[mask]).tolist()]))
        return mask, stats

    trainer.snr.row_mask = spy
    summary = trainer.fit()
    assert len(summary["history"]) == 2
    for h in summary["history"]:
        assert h["filter/num_groups"] == 4.0 and h["filter/kept_groups"] == 2.0
        assert h["filter/kept_trajectories"] == 4.0  # 2 groups of 2
        assert "filter/skipped_update" not in h  # a random subset is never empty
    # the trainer passes its iteration: the subsets are the pure draw of (run seed, iteration)
    assert seen == [(it, random_groups(4, 0.5, random_seed(3, it)).tolist()) for it in (0, 1)]


@pytest.mark.slow
def test_nonzero_variance_runs_and_keeps_every_group_with_variance(ragen_cache_dir, tmp_path):
    from ragen_torchrl.trainer.loop import Trainer

    cfg = make_cfg(ragen_cache_dir, "filter=nonzero_variance")
    summary = Trainer(cfg, run_dir=tmp_path / "run").fit()
    assert len(summary["history"]) == 2
    for h in summary["history"]:
        assert h["filter/kept_groups"] == h["filter/num_groups"] - h["filter/zero_variance_groups"]
