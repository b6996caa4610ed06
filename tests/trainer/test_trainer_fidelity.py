"""Trainer-level fidelity fixes, at the default P x G (16 x 4).

* DAPO's refill asks for any number of groups (fewer or more than P) and gets them.
* The filter's kept-ratio loss scaling multiplies the advantages (the task term) only.
"""

from __future__ import annotations

import pytest
import torch
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir

from ragen_torchrl.keys import MASKS_ASSISTANT
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.loop import Trainer

pytestmark = pytest.mark.slow

SMALL = [
    "trainer.val_levels=2",
    *TINY_RUN,
    "rollout.max_new_tokens=8",
    "diagnostics.mi.enabled=false",
]


def make_trainer(cache_dir, tmp_path, *extra):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"model.cache_dir={cache_dir}", *SMALL, *extra])
    torch.manual_seed(0)
    return Trainer(cfg, run_dir=tmp_path / "run")


@pytest.mark.parametrize("missing", [5, 20])
def test_dapo_refill_collects_any_number_of_groups(ragen_cache_dir, tmp_path, missing):
    # issue: "Refill must work for any number of missing groups (fewer or more than P)"
    trainer = make_trainer(ragen_cache_dir, tmp_path, "algo=dapo")
    assert (trainer.prompts_per_iter, trainer.group_size) == (16, 4)
    more = trainer._collect_more(missing)
    assert more.batch_size[0] == missing * trainer.group_size
    assert len(set(more.get("group_id").tolist())) == missing
    # every group holds G rows of one level
    for g in set(more.get("group_id").tolist()):
        rows = (more.get("group_id") == g).nonzero().reshape(-1)
        assert rows.numel() == trainer.group_size
        assert len(set(more.get("level_seed")[rows].tolist())) == 1


def test_loss_scale_multiplies_the_task_term_only(ragen_cache_dir, tmp_path):
    # RAGEN-2 reference: the kept-ratio scale multiplies the advantages; entropy/KL are not scaled
    trainer = make_trainer(ragen_cache_dir, tmp_path, "trainer.prompts_per_iter=2", "algo.kl_coeff=0.01")
    from ragen_torchrl.collectors.grouped import collect_rollouts
    from ragen_torchrl.envs.splits import train_level_seeds

    torch.manual_seed(1)
    records = collect_rollouts(trainer.env, trainer.policy, train_level_seeds(0, 0, 2), trainer.group_size)
    # give the groups within-group variance so the advantages are not all zero
    records.set("episode_return", torch.tensor([1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 0.2, 0.0]))
    full, full_stats = trainer._training_batch(records, 1.0)
    half, half_stats = trainer._training_batch(records, 0.5)
    # the batch's statistics come back with it: the scale, its rows and the tokens the loss trains on
    assert (full_stats["loss_scale"], half_stats["loss_scale"]) == (1.0, 0.5)
    assert full_stats["trajectories"] == 8.0
    assert full_stats["assistant_tokens"] == float(full.get(MASKS_ASSISTANT).sum()) > 0
    for a, b in zip(full.get("advantage", as_list=True), half.get("advantage", as_list=True)):
        torch.testing.assert_close(b, 0.5 * a)
    out_full, out_half = trainer.loss_module(full), trainer.loss_module(half)
    # on-policy (ratio 1, nothing clipped): the policy-gradient term halves exactly
    torch.testing.assert_close(out_half.loss_objective, 0.5 * out_full.loss_objective)
    torch.testing.assert_close(out_half.loss_entropy, out_full.loss_entropy)
    torch.testing.assert_close(out_half.loss_kl_to_ref, out_full.loss_kl_to_ref)


def test_iteration_logs_the_whole_batch_counts_not_mini_batch_means(ragen_cache_dir, tmp_path, monkeypatch):
    # 8 rows in mini-batches of 4: the loss metrics are means over the 2 steps, but
    # train/assistant_tokens and train/trajectories count the whole trained batch
    trainer = make_trainer(ragen_cache_dir, tmp_path, "trainer.prompts_per_iter=2", "algo.mini_batch_size=4")
    trained = []
    update_step = trainer._update_step
    monkeypatch.setattr(trainer, "_update_step", lambda batch, plan: trained.append(batch) or update_step(batch, plan))
    stats = trainer.train_iteration()
    assert stats["train/optimizer_steps"] == 2.0
    assert stats["train/trajectories"] == 8.0
    assert stats["train/assistant_tokens"] == float(trained[0].get(MASKS_ASSISTANT).sum())


def _tiny_run(cache_dir, tmp_path, *extra):
    # the smallest run shape: these tests are about the stop rules, not the batch
    return make_trainer(cache_dir, tmp_path, "trainer.prompts_per_iter=2", "trainer.group_size=2", *extra)


def test_variance_collapse_stop_also_runs_without_a_filter(ragen_cache_dir, tmp_path, monkeypatch):
    # RAGEN-2 §4: early stopping "triggered by reward-variance collapse" applies to the unfiltered arm too
    import ragen_torchrl.trainer.iteration as iteration_mod

    real = iteration_mod.collect_rollouts
    calls = {"n": 0}

    def shrinking_variance(*args, **kwargs):
        records = real(*args, **kwargs)
        if records.batch_size[0] != 4:  # validation rollouts are left alone
            return records
        calls["n"] += 1
        # iteration 1: in-group std of {1, 0} = 0.707 (the base); later std of {0.05, 0} = 0.035 < 0.1 x base
        d = 1.0 if calls["n"] == 1 else 0.05
        records.set("episode_return", torch.tensor([d, 0.0, d, 0.0]))
        return records

    monkeypatch.setattr(iteration_mod, "collect_rollouts", shrinking_variance)
    trainer = _tiny_run(
        ragen_cache_dir,
        tmp_path,
        "filter=none",
        "trainer.total_iterations=10",
        "trainer.early_stop.collapse_stop.warmup=1",
        "trainer.early_stop.collapse_stop.patience=2",
        "trainer.val_every=0",
    )
    trainer.fit()
    # base = std{1, 0} = 0.7071 after iteration 1; iterations 2 and 3 have std 0.0354 < 0.0707
    assert trainer.stop_reason is not None and trainer.stop_reason.startswith("reward_variance_collapse")
    assert [h["iteration"] for h in trainer.history] == [1, 2, 3]
    assert trainer.history[0]["filter/kept_ratio"] == 1.0  # no filter: every group is used


def test_sustained_low_validation_success_stops_training(ragen_cache_dir, tmp_path):
    # RAGEN-2 reference: stop when validation success stays below 1% for 5 consecutive validations
    # (threshold 1.0 here makes every validation below 100% "low"; patience 2: the validations after
    # iterations 1 and 2; the one before training is not counted, as the reference only logs it)
    trainer = _tiny_run(
        ragen_cache_dir,
        tmp_path,
        "trainer.total_iterations=5",
        "trainer.val_every=1",
        "trainer.early_stop.val_stop.threshold=1.0",
        "trainer.early_stop.val_stop.patience=2",
    )
    summary = trainer.fit()
    assert trainer.stop_reason is not None and "validation" in trainer.stop_reason
    assert len(trainer.history) == 2
    assert summary["iterations"] == 5


def test_an_env_bug_does_not_stop_training_and_is_counted(ragen_cache_dir, tmp_path, monkeypatch):
    # "an env exception on one row is logged ..., the row ends with the format penalty,
    # and training goes on"; the trainer logs how many rows hit one
    from ragen_torchrl.envs.text_env import TextGameEnv

    trainer = _tiny_run(ragen_cache_dir, tmp_path)

    def broken(self, idx, reply):
        raise RuntimeError("injected env bug")

    monkeypatch.setattr(TextGameEnv, "_step_row", broken)
    stats = trainer.train_iteration()
    # every row hit the bug on its first turn: 4 rows ended with the format penalty (-0.1)
    assert stats["rollout/num_trajectories"] == 4.0
    assert stats["rollout/env_errors_total"] == 4.0
    assert stats["rollout/reward_mean"] == pytest.approx(-0.1)
    assert stats["rollout/turns"] == 1.0


def _dapo_run(cache_dir, tmp_path, monkeypatch, first, later, refill, *extra):
    """A 2 x 2 DAPO run (dynamic sampling on shaped returns, no filter) whose rollouts return
    ``first`` in iteration 1, ``later`` afterwards, and ``refill`` for every refill group."""
    import ragen_torchrl.trainer.iteration as iteration_mod

    real = iteration_mod.collect_rollouts
    calls = {"n": 0}

    def scripted(*args, **kwargs):
        records = real(*args, **kwargs)
        n = records.batch_size[0]
        if n == 4:  # a training rollout of P = 2 groups
            calls["n"] += 1
            records.set("episode_return", torch.tensor(first if calls["n"] == 1 else later))
        elif n == 2 and calls["n"]:  # a refill of one group
            records.set("episode_return", torch.tensor(refill))
        return records

    monkeypatch.setattr(iteration_mod, "collect_rollouts", scripted)
    trainer = _tiny_run(
        cache_dir,
        tmp_path,
        "algo=dapo",
        "algo.dynamic_sampling.criterion=return",
        "filter=none",
        "trainer.val_every=0",
        "trainer.early_stop.collapse_stop.warmup=1",
        "trainer.early_stop.collapse_stop.patience=2",
        *extra,
    )
    trainer.fit()
    return trainer


def test_dapo_collapse_stop_reads_the_batch_before_dynamic_sampling(ragen_cache_dir, tmp_path, monkeypatch):
    # iteration 1: {3, 0} twice, std 3 / sqrt 2 = 2.1213 each -> base 2.1213, limit .21213.
    # Later: {0.5, 0} (std .35355) and the constant {1, 1} (std 0): mean .17678 < .21213 as sampled.
    # Dynamic sampling drops {1, 1} and refills with {0.5, 0}: its batch has mean .35355, which
    # would never trip the rule. The window starts empty once the base is set: [.17678] after iteration 2,
    # [.17678, .17678] (both below) after 3.
    trainer = _dapo_run(
        ragen_cache_dir,
        tmp_path,
        monkeypatch,
        [3.0, 0.0, 3.0, 0.0],
        [0.5, 0.0, 1.0, 1.0],
        [0.5, 0.0],
        "trainer.total_iterations=6",
    )
    assert trainer.stops.guard.base_std == pytest.approx(3 / 2**0.5)
    assert list(trainer.stops.guard._window) == pytest.approx([0.5 / 2**0.5 / 2] * 2)
    assert trainer.stop_reason is not None and trainer.stop_reason.startswith("reward_variance_collapse")
    assert [h["iteration"] for h in trainer.history] == [1, 2, 3]
    # the update still trains on the refilled batch: 2 informative groups, one of them a refill
    assert trainer.history[1]["filter/in_group_std_mean"] == pytest.approx(0.5 / 2**0.5)
    assert trainer.history[1]["dynamic_sampling/extra_groups"] == 1.0


def test_dapo_skipped_update_counts_as_empty(ragen_cache_dir, tmp_path, monkeypatch):
    # every group constant, every refill too: dynamic sampling finds no signal after its 3 refills
    # and the update is skipped; 2 such iterations in a row stop the run (max_consecutive_empty=2).
    # Empty iterations enter neither the collapse warm-up nor its window.
    trainer = _dapo_run(
        ragen_cache_dir,
        tmp_path,
        monkeypatch,
        [1.0, 1.0, 0.0, 0.0],
        [1.0, 1.0, 0.0, 0.0],
        [0.0, 0.0],
        "trainer.total_iterations=4",
        "trainer.early_stop.max_consecutive_empty=2",
    )
    assert [h["iteration"] for h in trainer.history] == [1, 2]
    assert all(h["dapo/skipped_update"] == 1.0 for h in trainer.history)
    assert [h["stop/consecutive_empty"] for h in trainer.history] == [1.0, 2.0]
    assert trainer.stop_reason == "empty_selection: 2 consecutive iterations kept no group"
    assert trainer.stops.guard.base_std is None and not trainer.stops.guard._window
    assert not [k for h in trainer.history for k in h if k.startswith("train/")]  # no update ran
