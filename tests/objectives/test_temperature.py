"""Rollouts at ``rollout.temperature`` T sample ``softmax(logits / T)``; the behaviour, reference and
loss passes score that same distribution (as verl divides the logits by T in both the old-log-prob pass
and the update).

* the issue's case, by hand: logits [2, 0] at T = 0.5 are sampled from [0.982, 0.018]; token 1's
  behaviour log-prob is log 0.018, and after an update to logits [0, 0] its ratio is 0.5 / 0.018 = 27.8
  (scoring at T = 1 would give log 0.119 and 0.5 / 0.119 = 4.2);
* every loss, on a real rollout at T = 0.5: the behaviour log-probs equal ``log_softmax(logits / T)`` of
  the sampled tokens (one plain forward per row), the first mini-batch's ratio is exactly 1 and the
  on-policy shortcut gives the separate pass's loss, and after a weight change every loss's log-ratio is
  the tempered one;
* the rollout's recorded entropy is that of the tempered distribution; a batch that would be scored by
  torchrl's history path (temperature 1) is refused.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import algo_objective
from tensordict import TensorDict
from torch import nn

from ragen_torchrl import keys as K
from ragen_torchrl.collectors.grouped import collect_rollouts, make_generation_policy
from ragen_torchrl.envs import make_env
from ragen_torchrl.objectives import ALGORITHMS
from ragen_torchrl.objectives.base import MaskedStatsGRPOLoss
from ragen_torchrl.objectives.logprobs import behaviour_batch, make_logprob_policy
from ragen_torchrl.trainer.update import minibatch_plan, training_batch

T = 0.5


class ConstantHead(nn.Module):
    """An LM head whose logits are the same vector at every position (the issue's two-token case)."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = nn.Parameter(logits.clone())

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(*hidden.shape[:-1], -1)


def _two_token_head(model, a: int, b: int, la: float, lb: float) -> ConstantHead:
    logits = torch.full((model.config.vocab_size,), -1e4)  # every other token: probability 0 at T = 1 and 0.5
    logits[a], logits[b] = la, lb
    return ConstantHead(logits)


def test_the_issues_case_two_logits_at_half_temperature(tiny_model):
    model, tok = tiny_model
    a, b = 5, 7  # "token 0" and "token 1" of the issue
    model.lm_head = _two_token_head(model, a, b, 2.0, 0.0)
    actor = make_logprob_policy(model, tok, temperature=T)
    batch = TensorDict(
        {
            K.TOKENS_FULL: torch.tensor([[3, 4, b, a]]),
            K.MASKS_ASSISTANT: torch.tensor([[False, False, True, True]]),
            K.MASKS_ATTENTION: torch.ones(1, 4, dtype=torch.bool),
            K.ADVANTAGE: torch.ones(1, 1, 1),
        },
        batch_size=[1],
    )
    for shared_prefix in (False, True):
        lp = behaviour_batch(actor, batch, shared_prefix=shared_prefix)[K.LOG_PROBS_FULL][0]
        # sampled from softmax([2, 0] / 0.5) = [0.982, 0.018]
        assert lp[2].item() == pytest.approx(-math.log1p(math.exp(4.0)), abs=1e-5)  # log 0.01799
        assert lp[3].item() == pytest.approx(-math.log1p(math.exp(-4.0)), abs=1e-5)  # log 0.98201
    batch.set(K.LOG_PROBS_FULL, behaviour_batch(actor, batch)[K.LOG_PROBS_FULL])

    loss = MaskedStatsGRPOLoss(actor, masking_strategy="rlhf")
    out = loss(batch.clone())
    assert out.token_stats["log_weight"][0, 2:].abs().max().item() < 1e-6  # nothing changed yet: ratio 1

    with torch.no_grad():  # an update: the logits of both tokens become equal
        model.lm_head.logits[a] = 0.0
    out = loss(batch.clone())
    ratio = out.token_stats["log_weight"][0, 2].exp().item()
    assert ratio == pytest.approx(0.5 * (1 + math.exp(4.0)), rel=1e-4)  # 0.5 / 0.018 = 27.8, not 0.5 / 0.119
    assert out.token_stats["entropy"][0, 2].item() == pytest.approx(math.log(2), abs=1e-5)


def _rollout(model, tok, temperature: float, seed: int = 0):
    env = make_env("frozenlake", num_envs=4, max_turn=2)
    policy = make_generation_policy(model, tok, max_new_tokens=6, temperature=temperature)
    torch.manual_seed(seed)
    recs = collect_rollouts(env, policy, [3, 5], 2)
    recs.set(K.EPISODE_RETURN, torch.tensor([1.0, 0.0, 0.5, -0.5]))
    return recs, policy


def _tempered_log_probs(model, batch, temperature: float) -> list[torch.Tensor]:
    """Per row: ``log_softmax(logits / T)`` of each assistant token, from one unpadded forward of the row."""
    out = []
    with torch.no_grad():
        for i in range(batch.batch_size[0]):
            real = batch[K.MASKS_ATTENTION][i].bool()
            ids, trained = batch[K.TOKENS_FULL][i][real], batch[K.MASKS_ASSISTANT][i][real]
            logits = model(ids[None]).logits[0, :-1].double() / temperature
            picked = torch.log_softmax(logits, -1).gather(-1, ids[1:, None])[:, 0]
            out.append(picked[trained[1:]].float())
    return out


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_loss_scores_a_tempered_rollout_at_its_temperature(tiny_model, name):
    model, tok = tiny_model
    recs, _ = _rollout(model, tok, T)
    actor = make_logprob_policy(model, tok, temperature=T)
    obj, cfg = algo_objective(name, model, tok, actor, 2)
    batch, _ = training_batch(obj.shape_rewards(recs), obj, actor)

    # the behaviour log-probs are those of the distribution sampled
    trained = batch[K.MASKS_ASSISTANT]
    for i, expected in enumerate(_tempered_log_probs(model, batch, T)):
        torch.testing.assert_close(batch[K.LOG_PROBS_FULL][i][trained[i]], expected, atol=1e-5, rtol=0)

    # the first mini-batch is exactly on-policy: ratio 1, and the shortcut's loss is the separate pass's
    first = batch[minibatch_plan(batch.get(K.GROUP_ID), cfg)[0][0]]
    out = obj.loss_module(first.clone())
    metrics = obj.metrics(out, first)
    assert metrics["ratio_max"] == pytest.approx(1.0, abs=1e-6) and metrics["kl_approx"] == pytest.approx(0, abs=1e-6)
    with obj.loss_module.current_as_behaviour():
        shortcut = obj.loss_module(first.clone())
    for key in out.keys():
        if key.startswith("loss_"):
            torch.testing.assert_close(shortcut.get(key), out.get(key), atol=1e-5, rtol=0)

    # after a weight change, every loss's log-ratio is log pi_T(new) - log pi_T(old)
    old = _tempered_log_probs(model, batch, T)
    with torch.no_grad():
        model.lm_head.weight.mul_(1.5)
    new = _tempered_log_probs(model, batch, T)
    out = obj.loss_module(batch.clone())
    log_weight = out.token_stats["log_weight"]
    width = log_weight.shape[1]  # the loss trims the all-padding columns
    for i in range(batch.batch_size[0]):
        torch.testing.assert_close(log_weight[i][trained[i, -width:]], new[i] - old[i], atol=1e-4, rtol=0)
    assert max((n - o).abs().max().item() for n, o in zip(new, old)) > 0.05  # the change is visible


def test_the_reference_pass_scores_at_the_rollout_temperature(tiny_model):
    model, tok = tiny_model
    recs, _ = _rollout(model, tok, T, seed=1)
    actor = make_logprob_policy(model, tok, temperature=T)
    ref = make_logprob_policy(model, tok, temperature=T)  # the same weights: the KL to the reference is 0
    obj, _ = algo_objective("grpo", model, tok, actor, 2, kl_coeff=0.1)
    batch, _ = training_batch(obj.shape_rewards(recs), obj, actor, ref)
    trained = batch[K.MASKS_ASSISTANT]
    for i, expected in enumerate(_tempered_log_probs(model, batch, T)):
        torch.testing.assert_close(batch[K.REF_LOG_PROBS_FULL][i][trained[i]], expected, atol=1e-5, rtol=0)
    out = obj.loss_module(batch.clone())
    assert out.token_stats["kl_to_ref"].abs().max().item() < 1e-5


def test_the_rollout_entropy_is_the_tempered_distributions(tiny_model):
    model, tok = tiny_model
    policy = make_generation_policy(model, tok, max_new_tokens=6, temperature=T)
    assert policy.entropy_recorder.temperature == T
    rec = policy.entropy_recorder
    rec.clear()
    logits = torch.tensor([[2.0, 0.0]])
    rec(torch.zeros(1, 1, dtype=torch.long), logits)
    p = torch.softmax(logits / T, -1)  # [0.982, 0.018]
    assert rec.row_sums([1])[0].item() == pytest.approx(float(-(p * p.log()).sum()), abs=1e-6)
    greedy = make_generation_policy(model, tok, max_new_tokens=6, temperature=0.0)
    assert greedy.entropy_recorder.temperature == 1.0


def test_bad_temperatures_and_the_untempered_history_path_are_refused(tiny_model):
    model, tok = tiny_model
    for bad in (-0.5, float("inf"), float("nan"), "1", True):
        with pytest.raises(ValueError, match="temperature"):
            make_logprob_policy(model, tok, temperature=bad)
    actor = make_logprob_policy(model, tok, temperature=T)
    batch = TensorDict(
        {
            K.TOKENS_FULL: torch.tensor([[3, 4, 5]]),
            K.MASKS_ASSISTANT: torch.tensor([[False, True, True]]),
            K.LOG_PROBS_FULL: torch.zeros(1, 3),
            K.ADVANTAGE: torch.ones(1, 1, 1),
        },
        batch_size=[1],
    )  # no attention mask: the loss would fall back to torchrl's history path, which scores at T = 1
    with pytest.raises(ValueError, match="temperature is 0.5"):
        MaskedStatsGRPOLoss(actor, masking_strategy="rlhf")(batch)
