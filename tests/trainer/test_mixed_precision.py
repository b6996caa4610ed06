"""Mixed precision (``model.precision=mixed``): float32 master weights and AdamW state, bf16 compute.

At a learning rate of 1e-6 an Adam step moves a weight by about 1e-6, far below bfloat16's resolution
for the tiny model's weights (2^-8 of a weight of magnitude ~1e-2): bf16 parameters stepped directly
(``model.precision=pure``) mostly round back to themselves, while float32 masters updated from a
bf16-autocast forward move as a float32 run's do. Ten GRPO steps of the trainer's update
(:func:`~ragen_torchrl.trainer.update.optimize`) on the tiny model show both.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import algo_objective, records

from ragen_torchrl.models.loading import (
    load_pretrained,
    low_precision_warning,
    resolve_precision,
)
from ragen_torchrl.objectives.logprobs import make_logprob_policy
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.update import minibatch_plan, optimize, training_batch

LR, STEPS = 1e-6, 10


def _run(model_dir: str, dtype: str, precision: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The weights before and after ``STEPS`` AdamW steps on one batch (float32 copies)."""
    prec = resolve_precision("cpu", dtype, precision)
    model, tok = load_pretrained(model_dir, device="cpu", dtype=str(prec.param_dtype).removeprefix("torch."))
    actor = make_logprob_policy(model, tok)
    obj, cfg = algo_objective("grpo", model, tok, actor, 4)
    before = [p.detach().float().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(obj.optimizer_param_groups(LR), lr=LR, weight_decay=0.0)
    torch.manual_seed(0)
    recs = obj.shape_rewards(records())
    with prec.autocast():
        batch, _ = training_batch(recs, obj, actor)
    plan = minibatch_plan(recs.get("group_id"), cfg)
    for _ in range(STEPS):
        stats = optimize(batch, obj, optimizer, cfg, plan=plan, forward_context=prec.autocast)
        assert stats["optimizer_steps"] == 1 and stats["skipped_nonfinite"] == 0
    assert {p.dtype for p in model.parameters()} == {prec.param_dtype}
    return before, [p.detach().float().clone() for p in model.parameters()]


def test_fp32_masters_under_bf16_autocast_move_as_fp32_while_pure_bf16_mostly_stays(tiny_model_dir):
    b32, a32 = _run(tiny_model_dir, "float32", "mixed")  # float32 everything: the reference run
    bmix, amix = _run(tiny_model_dir, "bfloat16", "mixed")
    bpure, apure = _run(tiny_model_dir, "bfloat16", "pure")
    update32 = torch.cat([(a - b).reshape(-1) for a, b in zip(a32, b32)])
    update_mix = torch.cat([(a - b).reshape(-1) for a, b in zip(amix, bmix)])
    assert all(torch.equal(x, y) for x, y in zip(b32, bmix))  # the same float32 start
    # ten Adam steps of ~lr each: the float32 run moves (almost) every weight by up to STEPS * lr
    assert float((update32 != 0).float().mean()) > 0.99
    assert 0.5 * STEPS * LR < float(update32.abs().max()) < 1.5 * STEPS * LR
    # the masters move as far as the float32 run's: the update's size within 1%
    size = abs(float(update_mix.norm() / update32.norm()) - 1.0)
    assert size < 0.01, size  # measured: 0.0014
    # and the same way: Adam steps each weight by ~lr * sign(gradient), so a weight whose gradient is
    # within bf16 rounding of zero (well under 1% of them) may step the other way; nothing else differs
    same_way = float(((update_mix * update32) > 0).float().mean())
    assert same_way > 0.99, same_way  # measured: 0.9985
    rel = float((update_mix - update32).norm() / update32.norm())
    assert rel < 0.1, rel  # measured: 0.060 (the opposite steps: 2 * lr * STEPS each)
    # pure bf16: the same ten steps, stepped on the bf16 weights themselves, round back to them
    unchanged = torch.cat([(a == b).reshape(-1) for a, b in zip(apure, bpure)])
    assert float(unchanged.float().mean()) > 0.9, float(unchanged.float().mean())  # measured: 0.976


def test_the_compute_dtype_and_the_parameter_dtype_of_each_setting():
    assert resolve_precision("cpu", "auto", "mixed")[1:] == (torch.float32, torch.float32, "mixed")
    mixed = resolve_precision("cpu", "bf16", "mixed")
    assert (mixed.param_dtype, mixed.compute_dtype, mixed.autocast_enabled) == (torch.float32, torch.bfloat16, True)
    with mixed.autocast():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with mixed.autocast(enabled=False):  # FSDP2: its mixed precision policy casts instead
        assert not torch.is_autocast_enabled("cpu")
    pure = resolve_precision("cpu", "bfloat16", "pure")
    assert (pure.param_dtype, pure.autocast_enabled) == (torch.bfloat16, False)
    with resolve_precision("cpu", "float32", "pure").autocast():  # the CPU default: nothing changes
        assert not torch.is_autocast_enabled("cpu")


def test_bad_settings_are_refused_with_the_key():
    with pytest.raises(ValueError, match="model.precision='half': valid: mixed, pure"):
        resolve_precision("cpu", "auto", "half")
    with pytest.raises(ValueError, match="model.dtype=float16 with model.precision=mixed"):
        resolve_precision("cpu", "float16", "mixed")
    with pytest.raises(ValueError, match="unknown model.dtype 'bf17'"):
        resolve_precision("cpu", "bf17", "mixed")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.precision=half"], "model.precision must be one of mixed, pure, got 'half'"),
        (["model.dtype=float16"], "model.precision=mixed with model.dtype=float16"),
        (["model.export_dtype=int8"], "model.export_dtype must be one of auto, float32, bfloat16, float16"),
        (["model.gradient_checkpointing=yes"], "model.gradient_checkpointing"),
    ],
)
def test_bad_precision_keys_are_config_errors(overrides, message):
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config import validate_config
    from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR

    with initialize_config_dir(config_dir=str(PACKAGE_CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    with pytest.raises(ConfigError, match=message):
        validate_config(cfg)


def test_pure_low_precision_at_a_small_rate_warns():
    pure = resolve_precision("cpu", "bfloat16", "pure")
    text = low_precision_warning(pure, 1e-6)
    assert "algo.lr=1e-06" in text and "bfloat16" in text and "model.precision=mixed" in text
    assert low_precision_warning(pure, 1e-4) is None  # from 1e-4 on: no warning
    assert low_precision_warning(resolve_precision("cpu", "bfloat16", "mixed"), 1e-6) is None
    assert low_precision_warning(resolve_precision("cpu", "float32", "pure"), 1e-6) is None
    assert low_precision_warning(resolve_precision("cpu", "float16", "pure"), 1e-5, "sft.lr").count("sft.lr") == 2


def test_a_bf16_mixed_run_trains_fp32_masters_and_exports_bf16(ragen_cache_dir, tmp_path):
    """One iteration with ``model.dtype=bfloat16``: float32 parameters and AdamW moments throughout, the
    rollouts and the loss under bf16 autocast, and ``policy/`` written in bfloat16 (``model.export_dtype=auto``)."""
    import json

    from hydra import compose, initialize_config_dir
    from safetensors import safe_open

    from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR
    from ragen_torchrl.trainer.loop import Trainer

    overrides = [
        "trainer=smoke",
        "sft.enabled=false",
        "model.device=cpu",
        "model.dtype=bfloat16",
        "trainer.total_iterations=1",
        "trainer.val_levels=2",
        "trainer.val_every=0",
        "diagnostics.mi.enabled=false",
    ]
    with initialize_config_dir(config_dir=str(PACKAGE_CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    assert trainer.precision.compute_dtype == torch.bfloat16
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    summary = trainer.fit()
    assert summary["history"][-1]["train/optimizer_steps"] >= 1
    moments = [v for s in trainer.optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.ndim > 0]
    assert moments and {m.dtype for m in moments} == {torch.float32}
    policy = Path(summary["final_policy"])
    assert json.loads((policy / "config.json").read_text())["dtype"] == "bfloat16"
    with safe_open(str(policy / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}


def test_the_warm_start_trains_in_the_precision_and_caches_each_apart(tiny_model_dir, tmp_path):
    import json

    from ragen_torchrl.envs import make_env
    from ragen_torchrl.trainer.sft import warm_start

    env = make_env("frozenlake", num_envs=1)
    sft = dict(
        episodes=4, noise=0.0, noise_kind="uniform", steps=2, batch_size=2, lr=1e-3, seed=0, reasoning="grounded"
    )
    dirs = {
        (dtype, precision): warm_start(tiny_model_dir, env, sft, str(tmp_path), "cpu", dtype, precision=precision)
        for dtype, precision in (("float32", "mixed"), ("float32", "pure"), ("bfloat16", "mixed"), ("bfloat16", "pure"))
    }
    # float32 compute: one run whatever the precision, under the cache key it always had
    assert dirs["float32", "mixed"] == dirs["float32", "pure"]
    assert len(set(dirs.values())) == 3
    saved = {k: json.loads((Path(d) / "config.json").read_text())["dtype"] for k, d in dirs.items()}
    assert saved == {
        ("float32", "mixed"): "float32",
        ("float32", "pure"): "float32",
        ("bfloat16", "mixed"): "float32",  # float32 masters, trained under bf16 autocast
        ("bfloat16", "pure"): "bfloat16",
    }
