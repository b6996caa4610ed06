"""End-to-end: the Hydra-composed config, ``Trainer.fit``, TensorBoard logs, checkpoints and resume.

Every run uses the ``smoke`` preset with a 1-layer, hidden-32 tiny model and a 3-step warm
start, all cached in one session directory, so the model is built once.
"""

from __future__ import annotations

import math
from pathlib import Path

import hydra
import pytest
import torch
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import ragen_torchrl.trainer.iteration as iteration_mod
import ragen_torchrl.trainer.loop as loop_mod
from ragen_torchrl.models.loading import load_pretrained
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.loop import Trainer

pytestmark = pytest.mark.slow

EXPECTED_TAGS = {
    "train/loss",
    "train/clip_fraction",
    "train/kl_approx",
    "train/entropy",
    "train/grad_norm",
    "rollout/reward_mean",
    "rollout/success",
    "rollout/turns",
    "rollout/tokens",
    "rollout/format_valid",
    "rollout/kv_rows_reused",
    "rollout/trajectory_refits",
    "val/success",
    "timing/rollout",
    "timing/update",
    "timing/total",
}


def base_overrides(cache_dir: str) -> list[str]:
    return [
        "trainer=smoke",
        "sft.steps=3",
        "sft.episodes=10",
        "model.hidden_size=32",
        "model.intermediate_size=64",
        "model.num_layers=1",
        "model.vocab_size=300",
        f"model.cache_dir={cache_dir}",
        "model.device=cpu",
        "model.threads=1",
        "rollout.max_new_tokens=8",
        "sft.reply_budget=warn",  # 8-token replies: the warm start's longer ones are cut, and that is fine here
        "trainer.val_levels=4",
        "trainer.log_text_samples=1",
        "diagnostics.mi.enabled=false",
    ]


def make_cfg(cache_dir: str, *extra: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("config", overrides=base_overrides(cache_dir) + list(extra))


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """All scalars under ``run_dir/tb`` (every event file), as tag -> [(step, value)]."""
    acc = EventAccumulator(str(run_dir / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def state_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- a full smoke run
def test_fit_logs_scalars_and_writes_a_checkpoint(ragen_cache_dir, tmp_path):
    run_dir = tmp_path / "run"
    trainer = Trainer(make_cfg(ragen_cache_dir), run_dir=run_dir)
    assert trainer.iteration == 0
    assert trainer.prompts_per_iter * trainer.group_size == 4
    summary = trainer.fit()

    assert summary["iterations"] == 2 and summary["run_dir"] == str(run_dir)
    assert summary["val_start"] is not None and summary["val_end"] is not None
    assert summary["val_end"]["num_trajectories"] == 4.0
    assert trainer.iteration == 2
    assert [h["iteration"] for h in trainer.history] == [1, 2]

    logged = scalars(run_dir)
    missing = EXPECTED_TAGS - logged.keys()
    assert not missing, f"missing TensorBoard tags: {sorted(missing)}"
    for tag in EXPECTED_TAGS:
        assert all(math.isfinite(v) for _, v in logged[tag]), tag
    assert [s for s, _ in logged["train/loss"]] == [1, 2]
    assert [s for s, _ in logged["val/success"]] == [0, 1, 2]  # start, val_every=1, end
    assert all(v == 1.0 for _, v in logged["train/optimizer_steps"])
    assert all(v == 0.0 for _, v in logged["train/skipped_nonfinite"])
    assert all(v > 0 for _, v in logged["train/assistant_tokens"])
    assert all(0.0 <= v <= 1.0 for _, v in logged["rollout/success"])

    ckpt_path = run_dir / "checkpoints" / "last.pt"
    assert ckpt_path.exists()
    assert not ckpt_path.with_suffix(".tmp").exists()
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    assert ckpt["iteration"] == 1
    assert state_equal(ckpt["model"], trainer.model.state_dict())
    assert ckpt["config"]["trainer"]["total_iterations"] == 2
    # the tiny model and its warm start were cached for the other runs
    assert any(p.name.startswith("sft-") for p in Path(ragen_cache_dir).iterdir())


# --------------------------------------------------------------------------- checkpoint -> resume
def test_resume_restores_weights_optimizer_and_continues(ragen_cache_dir, tmp_path):
    run_dir = tmp_path / "first"
    first = Trainer(make_cfg(ragen_cache_dir, "trainer.total_iterations=1", "trainer.save_every=1"), run_dir=run_dir)
    first.fit()
    ckpt = torch.load(run_dir / "checkpoints" / "last.pt", map_location="cpu", weights_only=True)
    assert ckpt["iteration"] == 0
    saved_opt = first.optimizer.state_dict()
    assert saved_opt["state"], "the first run took no optimizer step"

    resumed = Trainer(
        make_cfg(ragen_cache_dir, "trainer.total_iterations=2", f"trainer.resume={run_dir}"),
        run_dir=tmp_path / "ignored",
    )
    assert resumed.run_dir == run_dir
    assert resumed.iteration == 1
    # weights: identical to the saved ones, and different from the warm start they began at
    assert state_equal(resumed.model.state_dict(), ckpt["model"])
    assert state_equal(resumed.model.state_dict(), first.model.state_dict())
    warm, _ = load_pretrained(resumed.model_path, device="cpu", dtype="float32")
    assert not state_equal(resumed.model.state_dict(), warm.state_dict())
    # optimizer: AdamW moments and step counts restored
    opt = resumed.optimizer.state_dict()
    assert opt["state"].keys() == saved_opt["state"].keys()
    for idx, st in saved_opt["state"].items():
        for k, v in st.items():
            assert torch.equal(torch.as_tensor(opt["state"][idx][k]), torch.as_tensor(v)), (idx, k)
    assert opt["param_groups"][0]["lr"] == saved_opt["param_groups"][0]["lr"]
    # RNG restored last, so the next rollout draws what the interrupted run would have
    assert torch.equal(torch.get_rng_state(), ckpt["rng"]["torch"])
    assert [h["iteration"] for h in resumed.history] == [1]

    summary = resumed.fit()
    assert resumed.iteration == 2
    assert summary["val_start"] is None  # no second "iteration 0" validation
    assert [h["iteration"] for h in resumed.history] == [1, 2]
    ckpt2 = torch.load(run_dir / "checkpoints" / "last.pt", map_location="cpu", weights_only=True)
    assert ckpt2["iteration"] == 1
    assert not state_equal(ckpt2["model"], ckpt["model"])  # it trained on
    assert not (tmp_path / "ignored").exists()
    logged = scalars(run_dir)
    assert sorted(s for s, _ in logged["train/loss"]) == [1, 2]


def test_ppo_resume_restores_actor_and_critic_optimizer_states(ragen_cache_dir, tmp_path):
    # actor and critic: separate parameter groups (own lr and grad clip), both saved and restored
    run_dir = tmp_path / "ppo"
    overrides = ("algo=ppo", "trainer.val_every=0", "algo.critic_grad_clip=0.5")
    first = Trainer(make_cfg(ragen_cache_dir, *overrides, "trainer.total_iterations=1"), run_dir=run_dir)
    first.fit()
    stats = first.history[-1]
    assert stats["train/optimizer_steps"] > 0 and stats["train/critic_grad_norm"] > 0
    saved = first.optimizer.state_dict()
    assert [g["name"] for g in saved["param_groups"]] == ["policy", "critic"]
    critic_ids = saved["param_groups"][1]["params"]
    assert critic_ids and all(i in saved["state"] for i in critic_ids)  # the critic stepped too
    resumed = Trainer(
        make_cfg(ragen_cache_dir, *overrides, "trainer.total_iterations=2", f"trainer.resume={run_dir}"),
        run_dir=tmp_path / "ignored",
    )
    opt = resumed.optimizer.state_dict()
    assert [(g["name"], g["lr"], g["params"]) for g in opt["param_groups"]] == [
        (g["name"], g["lr"], g["params"]) for g in saved["param_groups"]
    ]
    assert opt["state"].keys() == saved["state"].keys()
    for idx, st in saved["state"].items():
        for k, v in st.items():
            assert torch.equal(torch.as_tensor(opt["state"][idx][k]), torch.as_tensor(v)), (idx, k)
    assert state_equal(resumed.algorithm.critic.state_dict(), first.algorithm.critic.state_dict())
    assert resumed.algorithm.critic_grad_clip == 0.5


def test_resume_without_checkpoint_fails(ragen_cache_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        Trainer(make_cfg(ragen_cache_dir, f"trainer.resume={tmp_path / 'nothing'}"), run_dir=tmp_path / "run")


# --------------------------------------------------------------------------- filter + collapse diagnostics
def test_snr_filter_and_collapse_tags_are_logged(ragen_cache_dir, tmp_path):
    run_dir = tmp_path / "run"
    cfg = make_cfg(
        ragen_cache_dir,
        "filter=snr_top_p",
        "diagnostics.mi.enabled=true",
        "diagnostics.mi.every=1",
        "diagnostics.mi.num_pairs=4",
        "trainer.total_iterations=2",
        "trainer.val_every=0",
    )
    trainer = Trainer(cfg, run_dir=run_dir)
    assert trainer.snr is not None and trainer.collapse is not None
    trainer.fit()
    logged = scalars(run_dir)
    filter_tags = {t for t in logged if t.startswith("filter/")}
    collapse_tags = {t for t in logged if t.startswith("collapse/")}
    for tag in ("filter/kept_ratio", "filter/num_groups", "filter/kept_groups", "filter/zero_variance_groups"):
        assert tag in filter_tags, tag
    for tag in ("collapse/first_turn/valid_rate", "collapse/trajectory/valid_rate", "timing/mi_seconds"):
        assert tag in logged, tag
    assert collapse_tags
    assert [s for s, _ in logged["collapse/first_turn/valid_rate"]] == [1, 2]  # every=1
    assert [v for _, v in logged["filter/num_groups"]] == [2.0, 2.0]
    for _, v in logged["filter/kept_ratio"]:
        assert 0.0 <= v <= 1.0
    # a batch where no group has reward variance is skipped, not trained on
    for (step, kept), skipped in zip(logged["filter/kept_groups"], [trainer.history[i] for i in range(2)]):
        assert (kept == 0) == ("filter/skipped_update" in skipped)


# --------------------------------------------------------------------------- config errors
@pytest.mark.parametrize(
    "override, key",
    [
        ("trainer.prompts_per_iter=-1", "trainer.prompts_per_iter"),
        ("env.success_rate=1.5", "env.success_rate"),
        ("sft.noise=-0.1", "sft.noise"),
        ("algo.lr=0", "algo.lr"),
        ("rollout.max_new_tokens=0", "rollout.max_new_tokens"),
        ("sft.noise_kind=gaussian", "sft.noise_kind"),
        ("algo.mini_batch_by=rows", "algo.mini_batch_by"),
        ("diagnostics.mi.every=0", "diagnostics.mi.every"),
        ("diagnostics.mi.num_pairs=-4", "diagnostics.mi.num_pairs"),
        ("diagnostics.mi.method=fast", "diagnostics.mi.method"),
        ("diagnostics.mi.dtype=int8", "diagnostics.mi.dtype"),
    ],
)
def test_config_errors_are_raised_before_any_model_is_built(override, key, tmp_path, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("reached model/env construction despite a bad config")

    monkeypatch.setattr(Trainer, "_prepare_model", must_not_run)
    monkeypatch.setattr(loop_mod, "load_policy", must_not_run)
    monkeypatch.setattr(loop_mod, "make_env", must_not_run)
    cache = tmp_path / "cache"
    cfg = make_cfg(str(cache), override)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        Trainer(cfg, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert not cache.exists()


def test_unknown_group_option_lists_the_available_ones(tmp_path):
    with pytest.raises(hydra.errors.MissingConfigException) as err:
        make_cfg(str(tmp_path), "env=nope")
    msg = str(err.value)
    assert "env/nope" in msg and "Available options" in msg
    for option in ("frozenlake", "sokoban", "countdown", "bandit"):
        assert option in msg


# --------------------------------------------------------------------------- non-finite loss
def test_non_finite_loss_is_skipped_and_logged(ragen_cache_dir, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    cfg = make_cfg(ragen_cache_dir, "trainer.total_iterations=1", "algo.update_epochs=2")  # two mini-batch steps
    trainer = Trainer(cfg, run_dir=run_dir)
    initial = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    original = trainer.loss_module.forward  # the algorithm's own loss, whose forward the update calls
    calls: list = []

    def nan_once(td):
        out = original(td)
        if not calls:
            out.loss_objective = out.loss_objective * float("nan")
            calls.append("nan")
        else:
            # the skipped step left the weights and the optimizer untouched
            calls.append(state_equal(trainer.model.state_dict(), initial) and not trainer.optimizer.state)
        return out

    monkeypatch.setattr(trainer.loss_module, "forward", nan_once)
    trainer.fit()
    assert calls == ["nan", True]
    logged = scalars(run_dir)
    assert logged["train/skipped_nonfinite"] == [(1, 1.0)]
    assert logged["train/optimizer_steps"] == [(1, 1.0)]
    assert math.isfinite(logged["train/loss"][0][1])
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert not state_equal(trainer.model.state_dict(), initial)  # the second, finite step trained


def test_all_non_finite_losses_leave_weights_unchanged(ragen_cache_dir, tmp_path, monkeypatch):
    trainer = Trainer(make_cfg(ragen_cache_dir, "trainer.total_iterations=1"), run_dir=tmp_path / "run")
    initial = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    original = trainer.loss_module.forward

    def always_nan(td):
        out = original(td)
        out.loss_objective = out.loss_objective * float("nan")
        return out

    monkeypatch.setattr(trainer.loss_module, "forward", always_nan)
    stats = trainer.train_iteration()
    assert stats["train/skipped_nonfinite"] == 1.0
    assert stats["train/optimizer_steps"] == 0.0
    assert state_equal(trainer.model.state_dict(), initial)
    assert not trainer.optimizer.state


# --------------------------------------------------------------------------- every algorithm and env
@pytest.mark.parametrize("algo", ["grpo", "drgrpo", "dapo", "gspo", "ppo"])
@pytest.mark.parametrize("env", ["frozenlake", "sokoban"])
def test_every_algorithm_trains_end_to_end(ragen_cache_dir, tmp_path, algo, env):
    cfg = make_cfg(
        ragen_cache_dir,
        f"algo={algo}",
        f"env={env}",
        "trainer.total_iterations=1",
        "trainer.val_every=0",
        "sft.episodes=4",
    )
    trainer = Trainer(cfg, run_dir=tmp_path / f"{algo}-{env}")
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    summary = trainer.fit()
    assert summary["iterations"] == 1 and trainer.iteration == 1
    stats = trainer.history[-1]
    assert stats["rollout/num_trajectories"] >= 4
    if stats.get("train/optimizer_steps", 0) > 0:
        # an optimizer step happened: the policy changed and the losses were finite
        assert not state_equal(before, trainer.model.state_dict())
        assert math.isfinite(stats["train/loss"])
    if algo == "ppo":
        assert "train/explained_variance" in stats or stats.get("train/optimizer_steps", 0) == 0
        assert "train/critic_grad_norm" in stats or stats.get("train/optimizer_steps", 0) == 0
    if algo == "dapo":
        assert any(k.startswith("dapo/") for k in stats)


def test_t3_truncation_runs_in_the_trainer(ragen_cache_dir, tmp_path):
    cfg = make_cfg(
        ragen_cache_dir,
        "env=guess_numbers",
        "t3.enabled=true",
        "trainer.total_iterations=1",
        "trainer.val_every=0",
        "sft.episodes=4",
    )
    trainer = Trainer(cfg, run_dir=tmp_path / "t3")
    trainer.fit()
    stats = trainer.history[-1]
    for key in ("t3/rollout_tokens", "t3/truncation_rate", "t3/mean_turns_saved"):
        assert key in stats
    tags = scalars(tmp_path / "t3")
    assert "t3/truncation_rate" in tags


@pytest.mark.parametrize("preset, kept_groups", [("snr_top_p", 1.0), ("snr_reference", 2.0), ("none", 2.0)])
def test_filter_presets_and_gradient_snr_probe(ragen_cache_dir, tmp_path, monkeypatch, preset, kept_groups):
    # Returns by hand: group 0 = [1, 0] (std 0.707), group 1 = [0.5, 0.5] (std 0).
    # top-p 0.9 linear over variance without zero-score groups keeps group 0 only; the reference preset
    # (softmax, zero groups included): softmax([0.707, 0]) = [0.67, 0.33], cumsum reaches
    # 0.9 at the 2nd group -> keeps both.
    real = iteration_mod.collect_rollouts

    def with_variance(*args, **kwargs):
        records = real(*args, **kwargs)
        records.set("episode_return", torch.tensor([1.0, 0.0, 0.5, 0.5]))
        return records

    monkeypatch.setattr(iteration_mod, "collect_rollouts", with_variance)
    run_dir = tmp_path / preset
    cfg = make_cfg(
        ragen_cache_dir,
        f"filter={preset}",
        "diagnostics.grad_snr.every=1",
        "trainer.total_iterations=1",
        "trainer.val_every=0",
    )
    trainer = Trainer(cfg, run_dir=run_dir)
    trainer.fit()
    logged = scalars(run_dir)
    assert logged["filter/kept_groups"][0][1] == kept_groups
    assert logged["filter/zero_variance_groups"][0][1] == 1.0
    norms = {t: v[0][1] for t, v in logged.items() if t.startswith("grad_snr/") and t.endswith("task_grad_norm")}
    rvs = {t: v[0][1] for t, v in logged.items() if t.startswith("grad_snr/") and t.endswith("reward_variance")}
    assert len(norms) == 2 and len(rvs) == 2  # two RV buckets: variance 0.5 and 0
    by_rv = sorted((rvs[t.replace("task_grad_norm", "reward_variance")], n) for t, n in norms.items())
    # zero advantage -> zero task gradient; the high-variance bucket has a real gradient
    assert by_rv[0] == (0.0, 0.0) and by_rv[1][1] > 0
    assert any(t.endswith("entropy_grad_norm") for t in logged)
