"""PPO clips the actor's and the critic's gradient norms separately (verl: one optimizer each)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from torch import nn

from ragen_torchrl.objectives.algorithm import PPOAlgorithm
from ragen_torchrl.trainer.update import optimize


class _Out(SimpleNamespace):
    def items(self):
        return vars(self).items()


class _Loss(nn.Module):
    """Policy term 3 w0 + 4 w1 (gradient norm 5), value term 1000 v (gradient norm 1000)."""

    def __init__(self, actor: nn.Module, critic: nn.Module):
        super().__init__()
        self.actor, self.critic = actor, critic

    def forward(self, minibatch):
        w, v = self.actor.weight.reshape(-1), self.critic.weight.reshape(-1)
        return _Out(loss_objective=3 * w[0] + 4 * w[1], loss_critic=1000 * v[0])


def _one_step(critic_grad_clip):
    actor, critic = nn.Linear(2, 1, bias=False), nn.Linear(1, 1, bias=False)
    nn.init.zeros_(actor.weight), nn.init.zeros_(critic.weight)
    obj = PPOAlgorithm("ppo", _Loss(actor, critic), actor, critic_lr=1.0, gae={}, critic_grad_clip=critic_grad_clip)
    opt = torch.optim.SGD(obj.optimizer_param_groups(1.0), lr=1.0)  # w <- w - grad: the step is the clipped gradient
    algo = OmegaConf.create({"max_grad_norm": 1.0})
    metrics = optimize(TensorDict(batch_size=[1]), obj, opt, algo, plan=[[torch.tensor([0])]])
    return actor.weight.detach().reshape(-1).tolist(), critic.weight.item(), metrics


def test_a_huge_critic_gradient_does_not_shrink_the_actor_step():
    w, v, metrics = _one_step(critic_grad_clip=1.0)
    # actor clipped on its own: (3, 4) / 5 -> step (0.6, 0.8); clipped jointly with the critic it
    # would be (3, 4) / sqrt(25 + 1000^2) = (0.0029999, 0.0039999)
    assert w == pytest.approx([-0.6, -0.8])
    assert v == pytest.approx(-1.0)  # critic: 1000 clipped to 1
    assert metrics["grad_norm"] == pytest.approx(5.0) and metrics["critic_grad_norm"] == pytest.approx(1000.0)
    assert metrics["optimizer_steps"] == 1.0


def test_critic_grad_clip_is_the_critics_own():
    w, v, _ = _one_step(critic_grad_clip=250.0)
    assert w == pytest.approx([-0.6, -0.8]) and v == pytest.approx(-250.0)
    w, v, _ = _one_step(critic_grad_clip=0.0)  # 0: no clipping
    assert w == pytest.approx([-0.6, -0.8]) and v == pytest.approx(-1000.0)
    w, v, _ = _one_step(critic_grad_clip=None)  # None: the actor's max_grad_norm
    assert w == pytest.approx([-0.6, -0.8]) and v == pytest.approx(-1.0)
