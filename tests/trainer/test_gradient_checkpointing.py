"""Activation checkpointing (``model.gradient_checkpointing``): the same loss and gradients (fp32, 1e-6).

The padded loss pass checkpoints its decoder layers (fewer tensors saved for the backward, which
recomputes them); the shared-prefix pass writes and reads a KV cache, which a checkpointed layer drops,
so it runs unchecked and stays exact (without that guard its loss is off by ~1e-3). No-grad passes
(generation, scoring) save nothing either way.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from helpers import algo_objective, grads

from ragen_torchrl.models.loading import (
    checkpoint_layers,
    checkpointed_layers,
    enable_gradient_checkpointing,
    without_checkpointing,
)
from ragen_torchrl.objectives.logprobs import attach_training_data, compute_behaviour_log_probs, make_logprob_policy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "objectives"))
from test_shared_prefix import grouped_records  # noqa: E402 - the shared-prefix tests' grouped batch


def _loss_and_grads(obj, model, batch, checkpointed: bool):
    """Loss, gradients and the number of tensor elements saved for the backward of one loss pass."""
    saved = [0]

    def pack(t):
        saved[0] += t.numel()
        return t

    model.zero_grad()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), checkpointed_layers(model, checkpointed):
        loss = obj.total_loss(obj.loss_module(batch))
    loss.backward()
    return loss.detach(), grads(model), saved[0]


@pytest.mark.parametrize("shared_prefix", [False, True], ids=["padded", "shared_prefix"])
def test_checkpointing_gives_the_same_loss_and_gradients(tiny_model, shared_prefix):
    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    obj, _ = algo_objective("grpo", model, tok, actor, 8)
    recs = obj.advantage(obj.shape_rewards(grouped_records()))
    batch, _ = obj.prepare(attach_training_data(recs, compute_behaviour_log_probs(actor, recs)))
    obj.loss_module.shared_prefix = shared_prefix
    loss0, grads0, saved0 = _loss_and_grads(obj, model, batch, checkpointed=False)
    enable_gradient_checkpointing(model)
    assert not model.training and len(checkpoint_layers(model)) == len(model.model.layers)
    loss1, grads1, saved1 = _loss_and_grads(obj, model, batch, checkpointed=True)
    torch.testing.assert_close(loss1, loss0, atol=1e-6, rtol=0)
    for a, b in zip(grads1, grads0):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    assert any(bool(g.abs().sum() > 0) for g in grads0)
    if shared_prefix:
        assert saved1 == saved0  # the cache passes run unchecked
    else:
        assert saved1 < 0.5 * saved0  # checkpointed: the layers' activations are recomputed (measured: 0.30)
    # armed but outside checkpointed_layers (eval mode): nothing is checkpointed
    assert _loss_and_grads(obj, model, batch, checkpointed=False)[2] == saved0


def test_the_shared_prefix_pass_needs_checkpointing_off(tiny_model):
    """Why :func:`without_checkpointing` is there: a checkpointed layer drops the prefix's KV cache."""
    from ragen_torchrl.objectives import shared_prefix as sp

    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    obj, _ = algo_objective("grpo", model, tok, actor, 8)
    recs = obj.advantage(obj.shape_rewards(grouped_records()))
    batch, _ = obj.prepare(attach_training_data(recs, compute_behaviour_log_probs(actor, recs)))
    obj.loss_module.shared_prefix = True
    loss0 = _loss_and_grads(obj, model, batch, checkpointed=False)[0]
    enable_gradient_checkpointing(model)
    guard = sp.without_checkpointing
    try:
        sp.without_checkpointing = lambda m: torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
        unguarded = _loss_and_grads(obj, model, batch, checkpointed=True)[0]
    finally:
        sp.without_checkpointing = guard
    assert float((unguarded - loss0).abs()) > 1e-4  # measured: 1.6e-3


def test_without_checkpointing_disarms_for_the_block_only(tiny_model):
    model, _ = tiny_model
    assert checkpoint_layers(model) == []
    enable_gradient_checkpointing(model)
    with without_checkpointing(model):
        assert checkpoint_layers(model) == []
    assert len(checkpoint_layers(model)) == len(model.model.layers)
    with checkpointed_layers(model):
        assert all(layer.training for layer in model.model.layers)
        assert not any(m.training for layer in model.model.layers for m in layer.children())  # dropout stays off
    assert not any(m.training for m in model.modules())


def test_the_trainer_arms_checkpointing_and_scores_with_the_padded_pass(ragen_cache_dir, tmp_path):
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR
    from ragen_torchrl.trainer.loop import Trainer

    overrides = [
        "trainer=smoke",
        "sft.enabled=false",
        "model.gradient_checkpointing=true",
        "diagnostics.mi.enabled=false",
        "trainer.val_levels=2",
        "trainer.val_every=0",
    ]
    with initialize_config_dir(config_dir=str(PACKAGE_CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    assert len(checkpoint_layers(trainer.model)) == len(trainer.model.model.layers)
    assert trainer.loss_module.shared_prefix is False
    assert not trainer.model.training
