"""LoRA policies (``model.lora``): adapters only train, the reference is the base model, checkpoints and
exports hold the adapter, a merged export loads into the base class, step 0 equals the full model's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import TINY_RUN
from hydra import compose, initialize_config_dir
from transformers import AutoModelForCausalLM

from ragen_torchrl.models.loading import load_pretrained
from ragen_torchrl.models.lora import (
    LoRASettings,
    adapter_state,
    adapters_disabled,
    apply_lora,
    load_adapter_dir,
    merged_state_dict,
    save_adapter,
)
from ragen_torchrl.trainer.config_checks import ConfigError
from ragen_torchrl.trainer.config_paths import CONFIG_DIR
from ragen_torchrl.trainer.loop import MERGED_POLICY_DIR, Trainer

SETTINGS = LoRASettings(rank=4, alpha=8.0, target_modules=("q_proj", "v_proj", "o_proj"))


def _perturb(model):
    # lora_B starts at 0 (the base model exactly): give the adapters something to do
    gen = torch.Generator().manual_seed(1)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data = torch.randn(p.shape, generator=gen) * 0.5


def test_gradients_reach_only_the_adapters_and_disabling_gives_the_base(tiny_model_dir):
    model, _ = load_pretrained(tiny_model_dir, device="cpu", dtype="float32")
    x = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        base = model(x).logits
    model = apply_lora(model, SETTINGS)
    _perturb(model)
    out = model(x).logits
    assert not torch.allclose(out, base)
    out.logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert (p.grad is not None) == ("lora_" in name), name
    with torch.no_grad(), adapters_disabled(model):
        assert torch.equal(model(x).logits, base)
    # switching back restores the trainable set
    assert {n for n, p in model.named_parameters() if p.requires_grad} == set(adapter_state(model))


def test_adapter_dir_and_merged_weights_reproduce_the_adapted_logits(tiny_model_dir, tmp_path):
    model, _ = load_pretrained(tiny_model_dir, device="cpu", dtype="float32")
    model = apply_lora(model, SETTINGS)
    _perturb(model)
    x = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        adapted = model(x).logits
    save_adapter(model, tmp_path / "adapter", base_model=tiny_model_dir)
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 4 and cfg["base_model_name_or_path"] == tiny_model_dir
    # any LoRA dir loads onto its base: ours, and through load_pretrained (ragen-eval's path)
    fresh, _ = load_pretrained(tiny_model_dir, device="cpu", dtype="float32")
    reloaded = load_adapter_dir(fresh, tmp_path / "adapter")
    again, _ = load_pretrained(str(tmp_path / "adapter"), device="cpu", dtype="float32")
    merged_model, _ = load_pretrained(tiny_model_dir, device="cpu", dtype="float32")
    merged_model.load_state_dict(merged_state_dict(model), strict=True)  # the base class's own names
    with torch.no_grad():
        assert torch.allclose(reloaded(x).logits, adapted, atol=1e-6)
        assert torch.allclose(again(x).logits, adapted, atol=1e-6)
        assert torch.allclose(merged_model(x).logits, adapted, atol=1e-5)


def test_the_adapter_dir_never_reaches_a_hub(tmp_path):
    from ragen_torchrl.model_source import ModelSourceError, check_model_source

    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": "org/m"}))
    with pytest.raises(ModelSourceError, match="not a local model dir"):
        check_model_source(str(tmp_path))


def test_bad_lora_settings_are_refused():
    with pytest.raises(ValueError, match="model.lora.alpha"):
        LoRASettings(alpha=0)
    with pytest.raises(ValueError, match="target_modules"):
        LoRASettings(target_modules=())


def _cfg(cache_dir, *extra):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(
            "config",
            overrides=[
                "trainer=smoke",
                "trainer.total_iterations=1",
                "trainer.val_levels=2",
                "trainer.val_every=0",
                "trainer.log_text_samples=0",
                *TINY_RUN,
                f"model.cache_dir={cache_dir}",
                "rollout.max_new_tokens=8",
                "algo.kl_coeff=0.1",
                "diagnostics.mi.enabled=false",
                *extra,
            ],
        )


@pytest.mark.slow
def test_a_lora_run_starts_as_the_full_model_and_exports_its_adapter(ragen_cache_dir, tmp_path):
    full = Trainer(_cfg(ragen_cache_dir), run_dir=tmp_path / "full")
    full_summary = full.fit()
    lora = Trainer(
        _cfg(ragen_cache_dir, "model.lora.enabled=true", "model.lora.rank=4", "model.lora.export_merged=true"),
        run_dir=tmp_path / "lora",
    )
    assert lora.ref_actor.model is lora.model  # no deep copy: the base model with its adapters off
    base_before = {k: v.clone() for k, v in lora.model.state_dict().items() if "lora_" not in k}
    summary = lora.fit()
    # step 0: the same rollouts and the same loss as the full model (lora_B = 0 computes the base model)
    assert summary["history"][0]["train/loss"] == pytest.approx(full_summary["history"][0]["train/loss"], abs=1e-6)
    # only the adapters moved
    after = lora.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in base_before.items())
    ckpt = torch.load(tmp_path / "lora" / "checkpoints" / "last.pt", map_location="cpu", weights_only=True)
    assert set(ckpt["model"]) == set(adapter_state(lora.model))
    policy = Path(summary["final_policy"])
    assert (policy / "adapter_model.safetensors").is_file() and not (policy / "config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "lora" / MERGED_POLICY_DIR)
    reloaded, _ = load_pretrained(str(policy), device="cpu", dtype="float32")
    x = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(reloaded(x).logits, lora.model(x).logits, atol=1e-5)
        assert torch.allclose(merged(x).logits, lora.model(x).logits, atol=1e-4)

    # ragen-eval: the exported adapter dir, and with the exports gone the adapter-only checkpoint on the
    # starting model, give the same numbers as the run's final validation
    from ragen_torchrl.trainer.eval_cli import main as eval_main

    run_dir = tmp_path / "lora"
    assert eval_main([str(run_dir), "--json", str(tmp_path / "policy.json"), "--no-progress"]) == 0
    shutil.rmtree(policy)
    shutil.rmtree(run_dir / MERGED_POLICY_DIR)
    assert eval_main([str(run_dir), "--json", str(tmp_path / "ckpt.json"), "--no-progress"]) == 0
    stats = [json.loads((tmp_path / f"{name}.json").read_text())["stats"] for name in ("policy", "ckpt")]
    keys = ("success", "reward_mean", "turns", "tokens", "format_valid")
    assert {k: stats[1][k] for k in keys} == {k: stats[0][k] for k in keys}
    assert {k: stats[0][k] for k in keys} == {k: summary["val_end"][k] for k in keys}


def test_lora_with_fsdp_or_vllm_is_a_config_error(ragen_cache_dir):
    from ragen_torchrl.trainer.config import validate_config

    with pytest.raises(ConfigError, match="model.lora"):
        validate_config(
            _cfg(ragen_cache_dir, "model.lora.enabled=true", "rollout.backend=vllm", "rollout.trajectory=history")
        )
