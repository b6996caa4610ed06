"""``rollout.kv_cache`` in the trainer and in ``ragen-eval``: the same rollouts with and without the
per-row KV cache between turns, the turn-cache counters logged per iteration."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.evaluate import main as eval_main
from ragen_torchrl.trainer.loop import Trainer

SMALL = [
    "trainer=smoke",
    "trainer.total_iterations=1",
    "trainer.val_levels=4",
    "trainer.log_text_samples=0",
    *TINY_RUN,
    "rollout.max_new_tokens=8",
    "env.max_turn=3",
    "diagnostics.mi.enabled=false",
]
KV_TAGS = (
    "rollout/kv_rows_reused",
    "rollout/kv_rows_prefilled",
    "rollout/kv_rows_over_cap",
    "rollout/kv_prefill_tokens",
)


def _scalars(run_dir) -> dict[str, list[float]]:
    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.fixture(scope="module")
def runs(ragen_cache_dir, tmp_path_factory):
    out = {}
    for kv in (True, False):
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose("config", overrides=[f"model.cache_dir={ragen_cache_dir}", *SMALL, f"rollout.kv_cache={kv}"])
        run_dir = tmp_path_factory.mktemp("kv") / "run"
        torch.manual_seed(0)
        trainer = Trainer(cfg, run_dir=run_dir)
        trainer.fit()
        out[kv] = (run_dir, trainer, _scalars(run_dir))
    return out


def test_the_trainer_rolls_out_the_same_with_and_without_the_cache(runs):
    (_, on, logged_on), (_, off, logged_off) = runs[True], runs[False]
    assert on.policy.turn_cache is not None and on.val_policy.turn_cache is not None
    assert off.policy.turn_cache is None and off.val_policy.turn_cache is None
    for tag in KV_TAGS:
        assert tag in logged_on and tag not in logged_off, tag
    assert logged_on["rollout/kv_rows_prefilled"] == [
        float(on.prompts_per_iter * on.group_size)
    ]  # every row once, at its first turn
    reused = logged_on["rollout/kv_rows_reused"][0]
    turns = (
        logged_on["rollout/turns"][0] * on.prompts_per_iter * on.group_size
    )  # the mean turns over the iteration's rows
    assert reused == pytest.approx(turns - on.prompts_per_iter * on.group_size)
    assert logged_on["rollout/trajectory_refits"] == logged_off["rollout/trajectory_refits"] == [0.0]
    # the same seed samples the same replies either way (the logits agree to round-off)
    for tag in ("rollout/tokens", "rollout/turns", "rollout/reward_mean", "rollout/success", "val/success"):
        assert logged_on[tag] == logged_off[tag], tag


def test_ragen_eval_honours_the_rollout_keys(runs, monkeypatch, capsys):
    import ragen_torchrl.collectors.rollout_policy as rollout_module

    run_dir = runs[True][0]
    seen = []
    make = rollout_module.make_generation_policy

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return make(*args, **kwargs)

    monkeypatch.setattr(rollout_module, "make_generation_policy", spy)
    results = {}
    for name, extra in (
        ("on", []),
        ("off", ["-o", "rollout.kv_cache=false"]),
        ("hist", ["-o", "rollout.trajectory=history"]),
    ):
        path = run_dir / f"{name}.json"
        assert eval_main([str(run_dir), "--no-progress", "--json", str(path), *extra]) == 0
        results[name] = json.loads(path.read_text())["stats"]
    assert [(k["trajectory"], k["kv_cache"], k["max_cached_tokens"]) for k in seen] == [
        ("tokens", True, 262144),
        ("tokens", False, 262144),
        ("history", True, 262144),
    ]
    assert results["on"]["tokens"] == results["off"]["tokens"]
    assert results["on"]["success"] == results["off"]["success"]
    capsys.readouterr()
    assert eval_main([str(run_dir), "--no-progress", "-o", "rollout.kv_cache=maybe"]) == 2
    assert "rollout.kv_cache must be true or false, got 'maybe'" in capsys.readouterr().err
