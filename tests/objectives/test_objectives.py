"""Policy objectives (GRPO, Dr.GRPO, DAPO, GSPO, PPO + critic), checked by hand.

Most tests run the real torchrl forward of each loss on a stand-in actor whose
distribution returns a *leaf* tensor of current log-probs, so ``d loss / d log pi(y_t)``
can be compared with the per-token coefficient worked out by hand:

    clipped surrogate  l_t = -min(r_t A, clip(r_t) A)
    dl_t / dlog pi_t   = -A r_t  (unclipped branch)   or   0  (clipped branch)

times the aggregation weight of the token (GRPO ``1/(B |y_i|)``, Dr.GRPO ``1/(B L_max)``,
DAPO ``1/sum|y|``). One end-to-end test runs PPO on the tiny Qwen2 policy.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import algo_preset
from omegaconf import OmegaConf
from tensordict import TensorDict
from torch import nn
from torchrl.objectives.llm import GRPOLoss

from ragen_torchrl.objectives import ALGORITHMS, PPOAlgorithm, build_algorithm
from ragen_torchrl.objectives.base import MaskedStatsGRPOLoss, masked_token_metrics
from ragen_torchrl.objectives.dapo import DAPOLoss
from ragen_torchrl.objectives.drgrpo import DrGRPOLoss
from ragen_torchrl.objectives.gspo import GSPOLoss, sequence_metrics
from ragen_torchrl.objectives.ppo import (
    Critic,
    PPOLoss,
    bilevel_gae,
    clipped_value_loss,
    episode_token_rewards,
    explained_variance,
    masked_gae,
    masked_whiten,
    turn_ends,
)
from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR

CONFIG_DIR = Path(PACKAGE_CONFIG_DIR) / "algo"


# --------------------------------------------------------------------------- a stand-in actor
class TokenDist(torch.distributions.Distribution):
    """Masked per-token distribution whose log-prob of the taken token IS a given tensor."""

    arg_constraints: dict = {}

    def __init__(self, log_prob: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor) -> None:
        super().__init__(batch_shape=log_prob.shape, validate_args=False)
        self._lp, self.mask, self._ent = log_prob, mask, entropy

    def log_prob(self, action):  # noqa: ARG002 - the taken tokens are implied
        return torch.where(self.mask, self._lp, torch.zeros_like(self._lp))

    def entropy(self):
        return torch.where(self.mask, self._ent, torch.zeros_like(self._ent))


class FakeActor(nn.Module):
    """``log pi(y_t)`` is the parameter ``cur``; the mask is the batch's assistant mask (rlhf)."""

    def __init__(self, cur: torch.Tensor, entropy: torch.Tensor | None = None) -> None:
        super().__init__()
        self.cur = nn.Parameter(cur.clone())
        self.ent = nn.Parameter(torch.ones_like(cur) if entropy is None else entropy.clone())

    def _get_rlhf_dist(self, td, **_):
        mask = td.get(("masks", "all_assistant_mask"), as_padded_tensor=True, padding_side="left", padding_value=False)
        return TokenDist(self.cur, mask.bool(), self.ent)

    get_dist = _get_rlhf_dist


def make_batch(cur: torch.Tensor, ratios: dict, mask: torch.Tensor, advantage: torch.Tensor) -> TensorDict:
    """Behaviour log-probs chosen so that ``pi/pi_old`` at ``(b, t)`` is ``ratios[(b, t)]``."""
    old = cur.clone()
    for (b, t), r in ratios.items():
        old[b, t] = cur[b, t] - math.log(r)
    B, T = cur.shape
    return TensorDict(
        {
            ("tokens", "full"): torch.arange(B * T).reshape(B, T),
            ("log_probs", "full"): old,
            ("masks", "all_assistant_mask"): mask,
            "advantage": advantage.reshape(B, 1, 1),
        },
        batch_size=[B],
    )


# two sequences: 3 and 2 assistant tokens; position 0 and an observation token are not trained
MASK = torch.tensor([[False, True, True, False, True], [False, False, False, True, True]])
CUR = torch.tensor([[-9.0, -1.0, -2.0, -9.0, -0.5], [-9.0, -9.0, -9.0, -1.5, -0.7]], dtype=torch.float64)
ADV = torch.tensor([1.0, -1.0])
# A > 0 and r = 1.5: clipped high (no grad);  A < 0 and r = 0.5: clipped low (no grad);
# A > 0, r = 0.5 and A < 0, r = 1.5: the unclipped branch is the minimum (grad -A r)
RATIOS = {(0, 1): 1.5, (0, 2): 0.5, (0, 4): 1.1, (1, 3): 1.5, (1, 4): 0.5}


def run(loss_cls, ratios=RATIOS, adv=ADV, **kwargs):
    actor = FakeActor(CUR)
    loss = loss_cls(actor, masking_strategy="rlhf", entropy_bonus=False, **kwargs)
    out = loss(make_batch(CUR, ratios, MASK, adv))
    out.loss_objective.sum().backward()
    return loss, out, actor.cur.grad


def grad_matrix(coefs: dict) -> torch.Tensor:
    g = torch.zeros_like(CUR)
    for (b, t), c in coefs.items():
        g[b, t] = c
    return g


# --------------------------------------------------------------------------- GRPO / DAPO / Dr.GRPO
def test_grpo_loss_and_gradient_by_hand():
    loss, out, grad = run(MaskedStatsGRPOLoss, clip_epsilon=0.2, aggregation="prompt_mean")
    # per-token losses: seq 0 (A=+1): -1.2 (r clipped to 1.2), -0.5, -1.1; seq 1 (A=-1): +1.5, +0.8 (r clipped to 0.8)
    expected = ((-1.2 - 0.5 - 1.1) / 3 + (1.5 + 0.8) / 2) / 2
    assert out.loss_objective.item() == pytest.approx(expected, abs=1e-6)
    # prompt_mean weight 1/(B |y_i|): 1/6 for seq 0, 1/4 for seq 1
    hand = grad_matrix({(0, 2): -1 * 0.5 / 6, (0, 4): -1 * 1.1 / 6, (1, 3): 1.5 / 4})
    torch.testing.assert_close(grad, hand, rtol=0, atol=1e-6)


def test_masked_stats_grpo_equals_torchrl_grpo():
    """The GRPO objective keeps torchrl's numbers: only metrics are added."""
    _, ours, g1 = run(MaskedStatsGRPOLoss, clip_epsilon=0.2, aggregation="prompt_mean")
    _, ref, g2 = run(GRPOLoss, clip_epsilon=0.2, aggregation="prompt_mean")
    assert ours.loss_objective.item() == ref.loss_objective.item()
    torch.testing.assert_close(g1, g2)


def test_the_loss_returns_its_token_stats_and_keeps_none():
    """The per-token statistics travel in the output (detached); nothing of the call stays on the module."""
    loss, out, _ = run(MaskedStatsGRPOLoss, clip_epsilon=0.2, aggregation="token_mean")
    stats = out.token_stats
    assert torch.equal(stats["mask"], MASK)
    assert not stats["log_weight"].requires_grad
    # log r at the assistant tokens, by hand from RATIOS (1 elsewhere)
    expected = {bt: math.log(r) for bt, r in RATIOS.items()}
    for (b, t), lw in expected.items():
        assert stats["log_weight"][b, t].item() == pytest.approx(lw)
    # clipped: r = 1.5 twice and r = 0.5 twice are outside [0.8, 1.2]; r = 1.1 is not
    assert stats["clipped"][MASK].sum().item() == 4
    assert "token_stats" not in vars(loss) and "_token_scratch" not in vars(loss)
    m = build_algorithm({"name": "grpo"}, None, None).metrics(out)
    assert m["clip_fraction"] == pytest.approx(4 / 5) and m["assistant_tokens"] == 5.0
    # a loss output without token statistics (a plain torchrl loss) gives the loss terms only
    _, plain, _ = run(GRPOLoss, clip_epsilon=0.2, aggregation="token_mean")
    assert "kl_k3" not in build_algorithm({"name": "grpo"}, None, None).metrics(plain)


def test_dapo_clip_higher_and_token_mean_by_hand():
    loss, out, grad = run(DAPOLoss)  # defaults: clip (0.2, 0.28), token_mean
    assert (loss.clip_epsilon_low.item(), loss.clip_epsilon_high.item()) == pytest.approx((0.2, 0.28))
    # r = 1.5 with A > 0 now clips at 1.28; the rest as for GRPO; sum over 5 tokens / 5
    expected = (-1.28 - 0.5 - 1.1 + 1.5 + 0.8) / 5
    assert out.loss_objective.item() == pytest.approx(expected, abs=1e-6)
    hand = grad_matrix({(0, 2): -0.5 / 5, (0, 4): -1.1 / 5, (1, 3): 1.5 / 5})
    torch.testing.assert_close(grad, hand, rtol=0, atol=1e-6)


# A > 0: (0,1) r=1.5 clipped high, (0,2) r=.5 unclipped, (0,4) r=4 clipped high;
# A < 0: (1,3) r=4 beyond the dual-clip bound c=3, (1,4) r=2 below it
DUAL_RATIOS = {(0, 1): 1.5, (0, 2): 0.5, (0, 4): 4.0, (1, 3): 4.0, (1, 4): 2.0}


@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_dual_clip_by_hand(dual_clip):
    # verl compute_policy_loss / arXiv 1912.09729: "for A < 0 the objective is max(min(r A, clip(r) A), c A)"
    loss, out, grad = run(
        MaskedStatsGRPOLoss, ratios=DUAL_RATIOS, clip_epsilon=0.2, aggregation="token_mean", dual_clip=dual_clip
    )
    # per-token losses: A=+1: -1.2, -0.5, -1.2; A=-1: r=4 gives +4 (bounded at c=3 with dual-clip), r=2 gives +2
    tail = 3.0 if dual_clip else 4.0
    assert out.loss_objective.item() == pytest.approx((-1.2 - 0.5 - 1.2 + tail + 2.0) / 5, abs=1e-6)
    # gradient -A r / 5 on the unclipped tokens; the dual-clipped token (1, 3) gets none
    coefs = {(0, 2): -0.5 / 5, (1, 4): 2.0 / 5}
    if dual_clip is None:
        coefs[(1, 3)] = 4.0 / 5
    torch.testing.assert_close(grad, grad_matrix(coefs), rtol=0, atol=1e-6)
    m = masked_token_metrics(**out.token_stats)
    assert m.get("dual_clip_fraction", 0.0) == pytest.approx(0.2 if dual_clip else 0.0)
    # the pure function agrees token by token
    from ragen_torchrl.objectives.base import dual_clip_gain

    r = torch.tensor(list(DUAL_RATIOS.values()), dtype=torch.float64)
    a = torch.tensor([1.0, 1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    assert (-dual_clip_gain(r, a, 0.2, 0.2, dual_clip)).tolist() == pytest.approx([-1.2, -0.5, -1.2, tail, 2.0])


def test_dual_clip_in_every_token_level_objective_and_rejected_values():
    for name in ("grpo", "drgrpo", "dapo"):
        obj = build_algorithm({"name": name, "max_length": 8, "dual_clip": 3}, FakeActor(CUR), None)
        assert obj.loss_module.dual_clip == 3.0
        assert build_algorithm({"name": name, "max_length": 8}, FakeActor(CUR), None).loss_module.dual_clip is None
    loss = PPOLoss(FakeActor(CUR), Critic(1, backbone=FakeTrunk(torch.zeros(2, 5, 1))), dual_clip=3.0)
    assert loss.dual_clip == 3.0
    with pytest.raises(ValueError, match="GSPO"):
        build_algorithm({"name": "gspo", "dual_clip": 3.0}, FakeActor(CUR), None)
    for bad in (1.0, 0.5, True, "3"):
        with pytest.raises(ValueError, match="algo.dual_clip"):
            build_algorithm({"name": "grpo", "dual_clip": bad}, FakeActor(CUR), None)


def test_advantage_whitening_uses_the_unbiased_variance():
    # verl masked_whiten: var = masked_var(values, mask, unbiased=True); whitened = (x - mean) * rsqrt(var + 1e-8)
    # assistant values 1, 2, 3, 6: mean 3, squared deviations 4 1 0 9 -> unbiased var 14/3 (population 3.5)
    x = torch.tensor([[1.0, 50.0, 2.0], [3.0, 6.0, -7.0]])
    mask = torch.tensor([[True, False, True], [True, True, False]])
    sd = math.sqrt(14 / 3)
    hand = [[-2 / sd, 0.0, -1 / sd], [0.0, 3 / sd, 0.0]]
    assert masked_whiten(x, mask, eps=0.0).tolist() == [pytest.approx(r, abs=1e-6) for r in hand]
    pop = masked_whiten(x, mask, eps=0.0, unbiased=False)
    assert pop[1, 1].item() == pytest.approx(3 / math.sqrt(3.5), abs=1e-6)
    one = masked_whiten(x, torch.tensor([[False, True, False], [False, False, False]]))
    assert one.tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]  # a single token: nothing to standardise


def test_drgrpo_sum_over_constant_length_by_hand():
    loss, out, grad = run(DrGRPOLoss, max_length=8, clip_epsilon=0.2)
    expected = ((-1.2 - 0.5 - 1.1) / 8 + (1.5 + 0.8) / 8) / 2
    assert out.loss_objective.item() == pytest.approx(expected, abs=1e-6)
    hand = grad_matrix({(0, 2): -0.5 / 16, (0, 4): -1.1 / 16, (1, 3): 1.5 / 16})
    torch.testing.assert_close(grad, hand, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "loss_cls, kwargs, weight",
    [
        (MaskedStatsGRPOLoss, dict(aggregation="prompt_mean"), lambda n: 1 / (2 * n)),  # 1/(B |y_i|)
        (DrGRPOLoss, dict(max_length=8), lambda n: 1 / (2 * 8)),  # 1/(B L_max)
        (DAPOLoss, dict(), lambda n: 1 / 6),  # 1/sum|y|
    ],
)
def test_length_bias_per_token_weights(loss_cls, kwargs, weight):
    """Equal advantages, lengths 2 and 4, ratio 1: the weight each token gets."""
    mask = torch.tensor([[False, False, True, True], [True, True, True, True]])
    cur = torch.full((2, 4), -1.0, dtype=torch.float64)
    actor = FakeActor(cur)
    loss = loss_cls(actor, masking_strategy="rlhf", entropy_bonus=False, **kwargs)
    out = loss(make_batch(cur, {}, mask, torch.tensor([1.0, 1.0])))
    out.loss_objective.sum().backward()
    g = actor.cur.grad
    assert g[0, 2:].tolist() == pytest.approx([-weight(2)] * 2)
    assert g[1].tolist() == pytest.approx([-weight(4)] * 4)
    assert g[0, :2].abs().sum() == 0
    if loss_cls is DrGRPOLoss:
        assert g[0, 2] == g[1, 0]  # no length bias: a short answer's token weighs the same
    if loss_cls is MaskedStatsGRPOLoss:
        assert g[0, 2] == 2 * g[1, 0]  # GRPO: half the length, twice the weight per token


# --------------------------------------------------------------------------- GSPO
def test_gspo_sequence_ratio_clipping_and_gradient_by_hand():
    # four sequences of 3 tokens, per-token log-ratios with these sequence means:
    #   seq 0: +5e-4, A=+1 -> s above 1+4e-4: clipped       seq 1: -4e-4, A=-1 -> below 1-3e-4: clipped
    #   seq 2: +1e-4, A=+.5 -> inside: gradient             seq 3: +6e-4, A=-1 -> above but A<0: unclipped
    lw = {0: [4e-4, 6e-4, 5e-4], 1: [-5e-4, -3e-4, -4e-4], 2: [1e-4, -1e-4, 3e-4], 3: [6e-4, 6e-4, 6e-4]}
    adv = torch.tensor([1.0, -1.0, 0.5, -1.0])
    mask = torch.tensor([[False, True, True, True]] * 4)
    cur = torch.full((4, 4), -1.0, dtype=torch.float64)
    ratios = {(b, t + 1): math.exp(x) for b, xs in lw.items() for t, x in enumerate(xs)}
    actor = FakeActor(cur)
    loss = GSPOLoss(actor, masking_strategy="rlhf", entropy_bonus=False)  # defaults (3e-4, 4e-4), prompt_mean
    out = loss(make_batch(cur, ratios, mask, adv))
    out.loss_objective.sum().backward()
    s = [math.exp(sum(v) / 3) for v in lw.values()]
    per_seq = [-min(si * a, min(max(si, 1 - 3e-4), 1 + 4e-4) * a) for si, a in zip(s, adv.tolist())]
    assert per_seq[0] == pytest.approx(-1.0004) and per_seq[1] == pytest.approx(0.9997)
    assert out.loss_objective.item() == pytest.approx(sum(per_seq) / 4, abs=1e-9)
    # every token of sequence i gets -A_i s_i / (|y_i| B) when unclipped, 0 when clipped
    g = actor.cur.grad
    assert g[0].abs().sum() == 0 and g[1].abs().sum() == 0
    assert g[2, 1:].tolist() == pytest.approx([-0.5 * s[2] / 12] * 3, abs=1e-9)
    assert g[3, 1:].tolist() == pytest.approx([1.0 * s[3] / 12] * 3, abs=1e-9)
    m = out.token_stats
    assert m["sequence_log_ratio"].tolist() == pytest.approx([5e-4, -4e-4, 1e-4, 6e-4], abs=1e-9)
    # clip fraction counts ratios outside the range (as torchrl does, whichever branch the min
    # picks): sequences 0, 1 and 3, i.e. 9 of the 12 assistant tokens
    assert masked_token_metrics(**m)["clip_fraction"] == pytest.approx(0.75)
    assert sequence_metrics(m)["seq_clip_fraction"] == pytest.approx(0.75)


def test_gspo_caps_the_sequence_log_ratio_at_10_before_exp():
    # float32, as training runs: exp(100) overflows to inf; verl caps log s_i at 10 first
    #   seq 0: log s = 100, A = -1 -> the unclipped branch, e^10 (no gradient: the cap is flat)
    #   seq 1: log s = 100, A = +1 -> the clipped branch, 1 + 4e-4 (no gradient)
    #   seq 2: log s = 1e-4, A = +0.5 -> inside the range: the usual gradient
    lw = {0: [100.0] * 3, 1: [100.0] * 3, 2: [1e-4] * 3}
    adv = torch.tensor([-1.0, 1.0, 0.5])
    mask = torch.tensor([[False, True, True, True]] * 3)
    cur = torch.full((3, 4), -1.0)
    batch = make_batch(cur, {}, mask, adv)
    for b, xs in lw.items():
        batch["log_probs", "full"][b, 1:] = cur[b, 1:] - torch.tensor(xs)
    actor = FakeActor(cur)
    loss = GSPOLoss(actor, masking_strategy="rlhf", entropy_bonus=False)
    out = loss(batch)
    out.loss_objective.sum().backward()
    s2 = math.exp(1e-4)
    expected = (math.exp(10.0) - (1 + 4e-4) - s2 * 0.5) / 3
    assert math.isfinite(out.loss_objective.item())
    assert out.loss_objective.item() == pytest.approx(expected, rel=1e-5)
    g = actor.cur.grad
    assert torch.isfinite(g).all() and g[:2].abs().sum() == 0
    assert g[2, 1:].tolist() == pytest.approx([-0.5 * s2 / 9] * 3, rel=1e-4)
    assert out.token_stats["sequence_log_ratio"][:2].tolist() == pytest.approx([100.0, 100.0])  # logged uncapped


# --------------------------------------------------------------------------- metrics and KL
def test_metrics_average_over_assistant_tokens_only():
    ent = torch.full_like(CUR, 2.0)
    ent[0, 1] = 5.0
    actor = FakeActor(CUR, entropy=ent)
    loss = MaskedStatsGRPOLoss(
        actor, masking_strategy="rlhf", clip_epsilon=0.2, entropy_coeff=0.001, aggregation="prompt_mean"
    )
    out = loss(make_batch(CUR, RATIOS, MASK, ADV))
    obj = build_algorithm({"name": "grpo"}, actor, None)
    obj.loss_module = loss
    m = obj.metrics(out)
    n = 5  # assistant tokens
    assert m["assistant_tokens"] == n
    assert m["entropy"] == pytest.approx((5.0 + 2.0 * 4) / n)
    # the loss output agrees (torchrl's own fields would be diluted by padding: 13 / 10)
    assert out.entropy.item() == pytest.approx((5.0 + 2.0 * 4) / n)
    # r outside [0.8, 1.2] for 4 of the 5 tokens (torchrl: 4 / 10)
    assert m["clip_fraction"] == pytest.approx(4 / n)
    assert out.clip_fraction.item() == pytest.approx(4 / n)
    lw = [math.log(r) for r in RATIOS.values()]
    assert m["kl_approx"] == pytest.approx(-sum(lw) / n)
    assert out.kl_approx.item() == pytest.approx(-sum(lw) / n)
    assert m["kl_k3"] == pytest.approx(sum(math.expm1(x) - x for x in lw) / n)
    assert m["loss"] == pytest.approx(out.loss_objective.item() + out.loss_entropy.item())


def test_kl_to_reference_is_masked_k3():
    td = make_batch(CUR, RATIOS, MASK, ADV)
    ref = CUR.clone()
    ref[MASK] += torch.tensor([0.1, -0.2, 0.3, 0.05, -0.1], dtype=torch.float64)
    ref[~MASK] = 50.0  # garbage where nothing is trained: must not leak in
    td.set(("ref_log_probs", "full"), ref)
    actor = FakeActor(CUR)
    loss = DAPOLoss(actor, masking_strategy="rlhf", entropy_bonus=False, kl_to_ref_coeff=0.5)
    loss.set_keys(ref_log_probs=("ref_log_probs", "full"))
    out = loss(td)
    d = torch.tensor([0.1, -0.2, 0.3, 0.05, -0.1], dtype=torch.float64)
    k3 = (d.expm1() - d).mean().item()  # DAPO: token mean over the 5 assistant tokens
    assert out.kl_to_ref.item() == pytest.approx(k3)
    assert out.loss_kl_to_ref.item() == pytest.approx(0.5 * k3)


# every assistant token clipped: ratio 1.5 (> 1 + 0.28) on all 5 assistant tokens of MASK
ALL_CLIPPED = {(b, t): 1.5 for b, t in MASK.nonzero().tolist()}


@pytest.mark.parametrize(
    "loss_cls, kwargs", [(MaskedStatsGRPOLoss, {}), (DAPOLoss, {}), (GSPOLoss, {}), (DrGRPOLoss, {"max_length": 8})]
)
def test_loss_output_stats_are_over_assistant_tokens(loss_cls, kwargs):
    # "entropy and clip fraction on the loss output are over assistant tokens"
    ent = torch.full_like(CUR, 2.0)
    ent[~MASK] = 0.0  # torchrl's masked dist: 0 off the mask
    ent[0, 1] = 5.0
    actor = FakeActor(CUR, entropy=ent)
    loss = loss_cls(actor, masking_strategy="rlhf", **kwargs)
    out = loss(make_batch(CUR, ALL_CLIPPED, MASK, ADV))
    # 5 of 5 assistant tokens clipped: 1.0 (torchrl averages over the 10 padded positions: 0.5)
    assert out.clip_fraction.item() == pytest.approx(1.0)
    # entropy (5 + 2 + 2 + 2 + 2) / 5 (torchrl: 13 / 10)
    assert out.entropy.item() == pytest.approx(13 / 5)
    # kl_approx = mean(log pi_old - log pi) = -log 1.5 on every assistant token
    assert out.kl_approx.item() == pytest.approx(-math.log(1.5), abs=1e-6)


def test_loss_class_defaults_equal_the_config_defaults():
    # "class defaults equal the config defaults" (configs/algo/*.yaml: entropy_coeff 0.001)
    from ragen_torchrl.objectives import DEFAULT_ENTROPY_COEFF, REF_LOG_PROBS_KEY

    coeffs = {float(algo_preset(f.stem).entropy_coeff) for f in CONFIG_DIR.glob("*.yaml")}
    assert coeffs == {DEFAULT_ENTROPY_COEFF} == {0.001}
    trunk = Critic(1, backbone=FakeTrunk(torch.zeros(2, 5, 1)))
    losses = [
        MaskedStatsGRPOLoss(FakeActor(CUR)),
        DAPOLoss(FakeActor(CUR)),
        GSPOLoss(FakeActor(CUR)),
        DrGRPOLoss(FakeActor(CUR), max_length=8),
        PPOLoss(FakeActor(CUR), trunk),
    ]
    for loss in losses:
        assert loss.entropy_coeff == 0.001, type(loss).__name__
        # one reference-log-prob key: the class default is where build_algorithm and the loop store it
        assert loss.tensor_keys.ref_log_probs == REF_LOG_PROBS_KEY == ("ref_log_probs", "full")
    obj = build_algorithm({"name": "grpo", "kl_coeff": 0.1}, FakeActor(CUR), None)
    assert obj.loss_module.tensor_keys.ref_log_probs == REF_LOG_PROBS_KEY


def test_kl_to_reference_reads_the_default_key_without_set_keys():
    td = make_batch(CUR, RATIOS, MASK, ADV)
    d = torch.tensor([0.1, -0.2, 0.3, 0.05, -0.1], dtype=torch.float64)
    ref = CUR.clone()
    ref[MASK] += d
    td.set(("ref_log_probs", "full"), ref)
    out = DAPOLoss(FakeActor(CUR), masking_strategy="rlhf", entropy_bonus=False, kl_to_ref_coeff=0.5)(td)
    # k3 = mean over the 5 assistant tokens of (e^d - 1 - d)
    assert out.kl_to_ref.item() == pytest.approx((d.expm1() - d).mean().item())


def test_a_batch_missing_an_input_names_the_key_and_the_contract():
    # "docstrings state the input contract (what a batch must hold)"
    td = make_batch(CUR, RATIOS, MASK, ADV)
    del td["log_probs"]
    loss = MaskedStatsGRPOLoss(FakeActor(CUR), masking_strategy="rlhf")
    assert "Input contract" in MaskedStatsGRPOLoss.__doc__ and "Input contract" in PPOLoss.__doc__
    with pytest.raises(KeyError, match=r"log_probs.*input contract.*compute_behaviour_log_probs"):
        loss(td)
    with pytest.raises(KeyError, match="ref_log_probs"):
        DAPOLoss(FakeActor(CUR), masking_strategy="rlhf", kl_to_ref_coeff=0.1)(make_batch(CUR, RATIOS, MASK, ADV))


@pytest.mark.parametrize("pad_output", [True, False])
def test_behaviour_log_probs_with_an_unpadded_wrapper(tiny_model, pad_output):
    # "unpadded wrappers either work or raise an error that says what to set"
    from torchrl.data.llm import History
    from torchrl.modules.llm import TransformersWrapper

    from ragen_torchrl.models.loading import wrapper_chat_template
    from ragen_torchrl.objectives import attach_training_data, compute_behaviour_log_probs, make_logprob_policy

    model, tok = tiny_model
    recs = TensorDict(advantage=torch.tensor([[[0.5]], [[-0.5]]]), batch_size=[2]).to_lazystack(0)
    recs.set(("history", "full"), History.from_chats(SCRIPTED))
    padded = compute_behaviour_log_probs(make_logprob_policy(model, tok), recs)
    # torchrl's default pad_output=False: ragged outputs, one tensor per row
    actor = TransformersWrapper(
        model,
        tokenizer=tok,
        chat_template=wrapper_chat_template(tok),
        input_mode="history",
        generate=False,
        return_log_probs=True,
        pad_output=pad_output,
    )
    rows = compute_behaviour_log_probs(actor, recs)
    for i in range(2):
        for key in padded[i].keys(True, True):
            torch.testing.assert_close(rows[i].get(key), padded[i].get(key))
    # the loss runs with that wrapper too; ratio 1: GRPO loss = -mean(A) = 0, nothing clipped
    out = build_algorithm({"name": "grpo"}, actor, None).loss_module(attach_training_data(recs, rows))
    assert out.loss_objective.item() == pytest.approx(0.0, abs=1e-6)
    assert out.clip_fraction.item() == 0.0


# --------------------------------------------------------------------------- PPO math
def test_token_gae_gamma_lambda_one_is_return_minus_value():
    mask = torch.tensor([[False, True, True, False, True, True]])
    values = torch.tensor([[9.0, 0.1, 0.2, 9.0, 0.3, 0.4]])  # 9 = observation positions, never read
    rewards = episode_token_rewards(mask, torch.tensor([1.0]))
    assert rewards.tolist() == [[0, 0, 0, 0, 0, 1.0]]
    adv, ret = masked_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert adv[0].tolist() == pytest.approx([0, 0.9, 0.8, 0, 0.7, 0.6])
    assert ret[0].tolist() == pytest.approx([0, 1, 1, 0, 1, 1])


def test_token_gae_by_hand():
    # assistant values 0.5, 0.2, 0.1 (an observation token between the first two), R = 1, gamma .9, lambda .5
    #   d3 = 1 - .1 = .9                  A3 = .9
    #   d2 = .9 * .1 - .2 = -.11          A2 = -.11 + .45 * .9    = .295
    #   d1 = .9 * .2 - .5 = -.32          A1 = -.32 + .45 * .295  = -.18725
    mask = torch.tensor([[True, False, True, True], [True, True, False, False]])
    values = torch.tensor([[0.5, 7.0, 0.2, 0.1], [0.3, 0.6, 0.0, 0.0]])
    rewards = episode_token_rewards(mask, torch.tensor([1.0, -1.0]))
    adv, ret = masked_gae(rewards, values, mask, gamma=0.9, lam=0.5)
    assert adv[0].tolist() == pytest.approx([-0.18725, 0, 0.295, 0.9], abs=1e-6)
    assert ret[0].tolist() == pytest.approx([0.31275, 0, 0.495, 1.0], abs=1e-6)
    # row 2 (R = -1): d2 = -1 - .6 = -1.6; d1 = .9*.6 - .3 = .24, A1 = .24 + .45 * -1.6 = -.48
    assert adv[1].tolist() == pytest.approx([-0.48, -1.6, 0, 0], abs=1e-6)


@pytest.mark.parametrize("turn_lam, g1", [(1.0, 0.95), (0.5, 0.76)])
def test_bilevel_gae_by_hand(turn_lam, g1):
    # turns = runs of assistant tokens: (1, 2) and (5, 6); values .1 .2 | .3 .6; R = 1 on token 6
    # turn level (gamma_turn .95): turn 2: d = 1 - .6 = .4, A = .4, G2 = 1
    #   turn 1: d = .95 * .6 - .2 = .37, A = .37 + .95 * lam * .4, G1 = A + .2 (.95 for lam 1, .76 for lam .5)
    # token level (gamma = lambda = 1), each turn ends at its last token with reward G_k: A_t = G_k - V_t
    mask = torch.tensor([[False, True, True, False, False, True, True]])
    values = torch.tensor([[0.0, 0.1, 0.2, 0.0, 0.0, 0.3, 0.6]])
    assert turn_ends(mask).nonzero()[:, 1].tolist() == [2, 6]
    rewards = episode_token_rewards(mask, torch.tensor([1.0]))
    adv, ret = bilevel_gae(rewards, values, mask, gamma=1.0, lam=1.0, turn_gamma=0.95, turn_lam=turn_lam)
    assert adv[0].tolist() == pytest.approx([0, g1 - 0.1, g1 - 0.2, 0, 0, 0.7, 0.4], abs=1e-6)
    assert ret[0].tolist() == pytest.approx([0, g1, g1, 0, 0, 1.0, 1.0], abs=1e-6)
    # with one turn, bi-level GAE is token-level GAE
    one = torch.tensor([[False, True, True, True]])
    v = torch.tensor([[0.0, 0.2, 0.5, 0.1]])
    r = episode_token_rewards(one, torch.tensor([2.0]))
    torch.testing.assert_close(
        bilevel_gae(r, v, one, gamma=0.9, lam=0.8, turn_gamma=0.5), masked_gae(r, v, one, gamma=0.9, lam=0.8)
    )


def test_clipped_value_loss_and_gradient_by_hand():
    old = torch.tensor([0.0, 0.0, 0.0, 0.0])
    ret = torch.tensor([1.0, 1.0, -1.0, 0.3])
    values = torch.tensor([0.8, -0.7, 0.9, 0.2], requires_grad=True)
    # token 0: V moved +.8 > clip .5 towards R: clipped V = .5 is farther (.25 vs .04): clipped branch, grad 0
    # token 1: V moved -.7 away: clipped -.5 is closer (2.25 vs 2.89): unclipped branch, grad V - R = -1.7
    # token 2: V = .9, R = -1: clipped .5 is closer (2.25 vs 3.61): unclipped, grad 1.9
    # token 3: inside the clip range: grad V - R = -.1
    loss, clipped = clipped_value_loss(values, old, ret, clip=0.5)
    assert loss.tolist() == pytest.approx([0.5 * 0.25, 0.5 * 2.89, 0.5 * 3.61, 0.5 * 0.01])
    assert clipped.tolist() == [True, False, False, False]
    loss.sum().backward()
    assert values.grad.tolist() == pytest.approx([0.0, -1.7, 1.9, -0.1])
    assert explained_variance(
        torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[1.0, 2.0, 3.0]]), torch.ones(1, 3, dtype=torch.bool)
    ) == pytest.approx(1.0)
    # V = mean(R): explains nothing
    assert explained_variance(
        torch.full((1, 3), 2.0), torch.tensor([[1.0, 2.0, 3.0]]), torch.ones(1, 3, dtype=torch.bool)
    ) == pytest.approx(0.0)


class FakeTrunk(nn.Module):
    """A 'backbone' whose last hidden state is a parameter (H = 1)."""

    def __init__(self, hidden: torch.Tensor) -> None:
        super().__init__()
        self.h = nn.Parameter(hidden)

    def forward(self, input_ids, attention_mask):
        assert input_ids.shape == self.h.shape[:2]
        return SimpleNamespace(last_hidden_state=self.h)


def test_ppo_loss_token_advantages_and_value_loss_by_hand():
    # V(t) = h[t-1] (head weight 1, bias 0); hidden chosen so assistant-token values are known
    h = torch.zeros(2, 5, 1, dtype=torch.float64)
    h[0, 0], h[0, 1], h[0, 3] = 0.2, 0.4, 0.9  # values at tokens 1, 2, 4
    h[1, 2], h[1, 3] = -0.3, 0.1  # values at tokens 3, 4
    critic = Critic(1, backbone=FakeTrunk(h)).double()
    with torch.no_grad():
        critic.head.weight.fill_(1.0)
    actor = FakeActor(CUR)
    loss = PPOLoss(actor, critic, masking_strategy="rlhf", entropy_bonus=False, clip_epsilon=0.2, value_clip=None)
    td = make_batch(CUR, RATIOS, MASK, torch.zeros(2))
    token_adv = torch.tensor([[0, 1.0, -2.0, 0, 0.5], [0, 0, 0, 1.0, -1.0]], dtype=torch.float64)
    td.set("advantage", token_adv.unsqueeze(-1))
    td.set("state_value", torch.zeros(2, 5, dtype=torch.float64))
    target = torch.tensor([[0, 1.0, 1.0, 0, 1.0], [0, 0, 0, 0.5, 0.5]], dtype=torch.float64)
    td.set("value_target", target)
    out = loss(td)
    # policy: token-level A; l = -min(rA, clip(r)A): (A=1,r=1.5) -1.2; (A=-2,r=.5) +1.6; (A=.5,r=1.1) -.55;
    #         (A=1, r=1.5) -1.2; (A=-1, r=.5) +.8; token mean over 5
    assert out.loss_objective.item() == pytest.approx((-1.2 + 1.6 - 0.55 - 1.2 + 0.8) / 5, abs=1e-6)
    # critic: 0.5 * (V - R)^2 at V = .2 .4 .9 | -.3 .1, token mean
    sq = [(0.2 - 1) ** 2, (0.4 - 1) ** 2, (0.9 - 1) ** 2, (-0.3 - 0.5) ** 2, (0.1 - 0.5) ** 2]
    assert out.loss_critic.item() == pytest.approx(0.5 * sum(sq) / 5, abs=1e-6)
    (out.loss_objective.sum() + out.loss_critic.sum()).backward()
    # gradient only where the unclipped branch is the minimum: (0, 4) (A=.5, r=1.1 inside the range);
    # (0, 1), (1, 3) are A>0 with r=1.5 and (0, 2), (1, 4) are A<0 with r=.5: clipped, no gradient
    hand = grad_matrix({(0, 4): -0.5 * 1.1 / 5})
    torch.testing.assert_close(actor.cur.grad, hand, rtol=0, atol=1e-6)
    # value gradient (V - R) / 5 lands on the hidden state one position earlier
    gh = critic.backbone.h.grad[..., 0]
    assert gh[0, [0, 1, 3]].tolist() == pytest.approx([(0.2 - 1) / 5, (0.4 - 1) / 5, (0.9 - 1) / 5])
    assert gh[1, [2, 3]].tolist() == pytest.approx([(-0.3 - 0.5) / 5, (0.1 - 0.5) / 5])


# --------------------------------------------------------------------------- the factory and configs
@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n != "ppo"])
def test_build_objective_from_the_config_files(name):
    cfg = algo_preset(name)
    assert set(algo_preset("grpo")) <= set(cfg)  # grpo.yaml's keys (its base), plus its own
    obj = build_algorithm(cfg, FakeActor(CUR), None)
    lm = obj.loss_module
    assert lm.masking_strategy == "rlhf"
    expected = {
        "grpo": (MaskedStatsGRPOLoss, (0.2, 0.2), "prompt_mean"),
        "drgrpo": (DrGRPOLoss, (0.2, 0.2), "dr_grpo"),
        "dapo": (DAPOLoss, (0.2, 0.28), "token_mean"),
        "gspo": (GSPOLoss, (3e-4, 4e-4), "prompt_mean"),
    }[name]
    assert type(lm) is expected[0]
    assert (lm.clip_epsilon_low.item(), lm.clip_epsilon_high.item()) == pytest.approx(expected[1])
    assert lm.aggregation == expected[2]
    assert lm.kl_to_ref_coeff is None  # off by default everywhere
    assert (obj.dynamic_sampling is not None) == (name == "dapo")
    assert (obj.reward_transform is not None) == (name == "dapo")
    recs = TensorDict(
        episode_return=torch.tensor([1.0, 0.0, 3.0, 3.0]),
        group_id=torch.tensor([0, 0, 1, 1]),
        num_tokens=torch.tensor([10, 230, 5, 5]),
        batch_size=[4],
    )
    recs = obj.advantage(obj.shape_rewards(recs))
    adv = recs["advantage"].reshape(-1)
    assert recs["advantage"].shape == (4, 1, 1)
    if name == "drgrpo":
        assert adv.tolist() == pytest.approx([0.5, -0.5, 0, 0])  # R - mean, no std
    elif name == "dapo":  # 230 tokens > 240 - 48: penalty (192 - 230) / 48
        assert recs["episode_return"][1].item() == pytest.approx(-38 / 48)
    else:
        assert adv[:2].tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)], abs=1e-5)


def test_build_objective_rejects_bad_configs():
    with pytest.raises(ValueError, match="unknown algo.name"):
        build_algorithm({"name": "reinforce"}, None, None)
    with pytest.raises(ValueError, match="max_length"):
        build_algorithm({"name": "drgrpo"}, None, None)
    with pytest.raises(ValueError, match="aggregates"):
        build_algorithm({"name": "drgrpo", "max_length": 8, "aggregation": "token_mean"}, None, None)
    with pytest.raises(ValueError, match="critic"):
        build_algorithm({"name": "ppo", "critic": "shared"}, None, nn.Linear(2, 2))


def test_build_algorithm_fills_each_default_once_and_rejects_unknown_keys():
    # a partial dict: every other option is AlgoOptions' default, the clip the algorithm's own
    obj = build_algorithm({"name": "dapo"}, None, None)
    assert (obj.loss_module.clip_epsilon_low.item(), obj.loss_module.clip_epsilon_high.item()) == pytest.approx(
        (0.2, 0.28)
    )
    assert obj.loss_module.entropy_coeff == pytest.approx(0.001) and obj.train_on == "generated"
    gspo = build_algorithm({"name": "gspo", "dynamic_sampling": {"tol": 0.5}}, None, None).loss_module
    from ragen_torchrl.options import algo_options

    assert build_algorithm(algo_options({"name": "drgrpo", "max_length": 7}), None, None).loss_module.max_length == 7
    assert (gspo.clip_epsilon_low.item(), gspo.clip_epsilon_high.item()) == pytest.approx((3e-4, 4e-4))
    with pytest.raises(ValueError, match=r"unknown key algo\.entropy_coef; valid keys: name, lr"):
        build_algorithm({"name": "grpo", "entropy_coef": 0.1}, None, None)
    with pytest.raises(ValueError, match=r"unknown key algo\.overlong\.lenght; valid keys: enabled"):
        build_algorithm(OmegaConf.create({"name": "grpo", "overlong": {"lenght": 3}}), None, None)


def test_a_registered_objective_is_built_from_its_config(monkeypatch):
    """register_algorithm adds an algorithm without editing the package; build_algorithm dispatches to it."""
    from ragen_torchrl.objectives import Algorithm, available_algorithms, register_algorithm
    from ragen_torchrl.objectives import algorithm as objective_module

    monkeypatch.setattr(objective_module, "_REGISTRY", dict(objective_module._REGISTRY))  # undone after the test
    seen = {}

    def no_clip_grpo(algo_cfg, actor, model, tokenizer=None):
        seen.update(cfg=algo_cfg, actor=actor, model=model, tokenizer=tokenizer)
        clip = (0.2, float(algo_cfg.get("clip_high")))  # no upper clip
        loss = MaskedStatsGRPOLoss(actor, clip_epsilon=clip, masking_strategy="rlhf")
        return Algorithm("no_clip_grpo", loss, model)

    assert register_algorithm("No_Clip_GRPO", no_clip_grpo) is no_clip_grpo  # names match lower-case
    assert available_algorithms() == [*ALGORITHMS, "no_clip_grpo"]
    cfg = OmegaConf.create({"name": "no_clip_grpo", "clip_high": 1e6})
    actor, model = FakeActor(CUR), nn.Linear(2, 2)
    obj = build_algorithm(cfg, actor, model, tokenizer="tok")
    assert type(obj) is Algorithm and obj.name == "no_clip_grpo"
    assert seen == {"cfg": cfg, "actor": actor, "model": model, "tokenizer": "tok"}
    assert obj.loss_module.clip_epsilon_high.item() == pytest.approx(1e6)
    assert obj.optimizer_param_groups(1e-3)[0]["params"] == list(model.parameters())
    # an unknown name lists every valid one, the registered one included
    with pytest.raises(ValueError, match=r"unknown algo.name 'reinforce'; choose one of grpo, .*, ppo, no_clip_grpo$"):
        build_algorithm({"name": "reinforce"}, None, None)
    with pytest.raises(TypeError, match="callable"):
        register_algorithm("broken", None)
    # a built-in can be replaced too (the registry is the only dispatch)
    register_algorithm("grpo", no_clip_grpo)
    assert build_algorithm({"name": "grpo", "clip_high": 0.5}, actor, model).name == "no_clip_grpo"


def test_the_registry_is_restored():
    from ragen_torchrl.objectives import available_algorithms, build_algorithm

    assert available_algorithms() == list(ALGORITHMS) == ["grpo", "drgrpo", "dapo", "gspo", "ppo"]
    assert type(build_algorithm({"name": "grpo"}, None, None).loss_module) is MaskedStatsGRPOLoss


# --------------------------------------------------------------------------- PPO on the tiny policy
SCRIPTED = [
    [
        {"role": "system", "content": "You play FrozenLake."},
        {"role": "user", "content": "P___\n_O__\n___G"},
        {"role": "assistant", "content": "<think>down</think><answer>Down</answer>"},
        {"role": "user", "content": "obs two"},
        {"role": "assistant", "content": "<answer>Right</answer>"},
    ],
    [
        {"role": "system", "content": "You play FrozenLake."},
        {"role": "user", "content": "obs"},
        {"role": "assistant", "content": "<think>x</think><answer>Up</answer>"},
    ],
]


def scripted_batch(obj, actor):
    from torchrl.data.llm import History

    from ragen_torchrl.objectives.logprobs import attach_training_data, compute_behaviour_log_probs

    recs = TensorDict(
        group_id=torch.tensor([0, 0]),
        episode_return=torch.tensor([1.0, -0.5]),
        num_tokens=torch.tensor([20, 12]),
        batch_size=[2],
    ).to_lazystack(0)
    recs.set(("history", "full"), History.from_chats(SCRIPTED))
    recs = obj.advantage(obj.shape_rewards(recs))
    return obj.prepare(attach_training_data(recs, compute_behaviour_log_probs(actor, recs)))[0]


@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n != "ppo"])
def test_each_objective_on_the_tiny_policy(tiny_model, name):
    """Real wrapper, real masks, ratio 1: the loss is minus the aggregated advantage."""
    from ragen_torchrl.objectives.logprobs import make_logprob_policy

    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    cfg = algo_preset(name)
    cfg.entropy_coeff = 0.0
    obj = build_algorithm(cfg, actor, model, tok)
    batch = scripted_batch(obj, actor)
    out = obj.loss_module(batch)
    m = obj.metrics(out, batch)
    n = [int(x.sum()) for x in batch.get(("masks", "all_assistant_mask"), as_list=True)]
    a = batch.get("advantage").reshape(-1).tolist()
    expected = {
        "grpo": -(a[0] + a[1]) / 2,
        "gspo": -(a[0] + a[1]) / 2,
        "dapo": -(a[0] * n[0] + a[1] * n[1]) / (n[0] + n[1]),
        "drgrpo": -(a[0] * n[0] + a[1] * n[1]) / (2 * cfg.get("max_length", 1)),
    }[name]
    assert out.loss_objective.item() == pytest.approx(expected, abs=1e-5)
    assert m["assistant_tokens"] == sum(n) and abs(m["kl_approx"]) < 1e-5 and m["clip_fraction"] == 0
    obj.total_loss(out).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert sum(p.grad.abs().sum() for p in model.parameters() if p.grad is not None) > 0


# every shipped preset in configs/algo (add new ones here)
PRESETS = ("dapo", "dapo_ragen", "drgrpo", "grpo", "gspo", "ppo")


def test_the_preset_list_is_complete():
    assert sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")) == sorted(PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_builds_on_the_tiny_policy(tiny_model, preset):
    from ragen_torchrl.objectives.logprobs import make_logprob_policy

    model, tok = tiny_model
    cfg = algo_preset(preset)
    obj = build_algorithm(cfg, make_logprob_policy(model, tok), model, tok)
    lm = obj.loss_module
    clip = (lm.clip_epsilon_low.item(), lm.clip_epsilon_high.item())
    assert lm.kl_to_ref_coeff is None and lm.dual_clip is None  # no KL, no dual-clip by default
    if preset in ("ppo", "dapo_ragen"):
        assert isinstance(obj, PPOAlgorithm) and obj.critic.backbone is not None  # a separate critic by default
        assert obj.optimizer_param_groups(1e-4)[1]["lr"] == cfg.critic_lr
    if preset == "dapo_ragen":
        # RAGEN-2's "DAPO": PPO + critic, clip-higher (0.2, 0.28), token-mean; no dynamic sampling, no overlong
        assert clip == pytest.approx((0.2, 0.28)) and lm.aggregation == "token_mean"
        assert obj.dynamic_sampling is None and obj.reward_transform is None
    if preset == "dapo":
        # the DAPO paper's variant: no critic, dynamic sampling (by success) and overlong shaping
        assert not isinstance(obj, PPOAlgorithm) and clip == pytest.approx((0.2, 0.28))
        assert obj.dynamic_sampling.criterion == "success" and obj.reward_transform is not None


def test_ppo_critic_defaults_to_a_separate_trunk(tiny_model):
    # a value head on the policy trunk lets the value loss train the policy: the default is a separate critic
    from ragen_torchrl.objectives.logprobs import make_logprob_policy

    model, tok = tiny_model
    obj = build_algorithm({"name": "ppo", "critic_lr": 3e-3}, make_logprob_policy(model, tok), model, tok)
    assert obj.critic.backbone is not None
    policy_ids = {id(p) for p in model.parameters()}
    critic_params = list(obj.critic.parameters())
    assert not policy_ids & {id(p) for p in critic_params}  # no shared tensors
    groups = obj.optimizer_param_groups(1e-4)
    assert [g["name"] for g in groups] == ["policy", "critic"] and [g["lr"] for g in groups] == [1e-4, 3e-3]
    assert {id(p) for p in groups[1]["params"]} == {id(p) for p in critic_params if p.requires_grad}
    head = build_algorithm({"name": "ppo", "critic": "head"}, make_logprob_policy(model, tok), model, tok)
    assert head.critic.backbone is None  # still available


def test_ppo_clips_the_critic_on_its_own_and_a_head_with_the_critic(tiny_model):
    # verl: actor and critic have separate optimizers and grad clips; with critic=head the shared
    # trunk is the policy's (clipped at max_grad_norm), only the Linear head is the critic's
    from ragen_torchrl.objectives.logprobs import make_logprob_policy

    model, tok = tiny_model
    policy_ids = {id(p) for p in model.parameters() if p.requires_grad}
    for mode in ("separate", "head"):
        cfg = {"name": "ppo", "critic": mode, "critic_grad_clip": 7.0}
        obj = build_algorithm(cfg, make_logprob_policy(model, tok), model, tok)
        groups = obj.grad_clip_groups(0.5)
        assert [(name, norm) for name, _, norm in groups] == [("policy", 0.5), ("critic", 7.0)]
        assert {id(p) for p in groups[0][1]} == policy_ids
        assert {id(p) for p in groups[1][1]} == {id(p) for p in obj.critic.parameters()}
        if mode == "head":
            assert {id(p) for p in groups[1][1]} == {id(p) for p in obj.critic.head.parameters()}
    # unset: the critic takes the actor's clip
    obj = build_algorithm({"name": "ppo"}, make_logprob_policy(model, tok), model, tok)
    assert [norm for _, _, norm in obj.grad_clip_groups(0.5)] == [0.5, 0.5]


@pytest.mark.parametrize("critic", ["head", "separate", "separate_from_path"])
def test_ppo_end_to_end_on_the_tiny_policy(tiny_model, tiny_model_dir, critic):
    from ragen_torchrl.objectives.logprobs import make_logprob_policy

    model, tok = tiny_model
    actor = make_logprob_policy(model, tok)
    cfg = algo_preset("ppo")
    cfg.critic, cfg.bi_level = critic.split("_")[0], True
    if critic == "separate_from_path":
        cfg.critic_path = tiny_model_dir  # a saved causal LM: its trunk starts the critic
    obj = build_algorithm(cfg, actor, model, tok)
    assert isinstance(obj, PPOAlgorithm)
    with torch.no_grad():  # a non-zero head, so values (and their agreement) are not trivially 0
        obj.critic.head.weight.normal_(0, 0.5)
    batch = scripted_batch(obj, actor)  # advantage() is the identity for PPO; prepare() runs GAE
    for i in range(2):
        L = batch[i].get(("tokens", "full")).shape[0]
        assert batch[i].get("advantage").shape == (L, 1)
        assert batch[i].get("state_value").shape == batch[i].get("value_target").shape == (L,)
    assert "ppo/explained_variance_old" in obj.prepare(batch)[1]  # prepare returns its statistics

    out = obj.loss_module(batch)
    stash = out.token_stats
    mask = stash["mask"]
    # same parameters: the loss's values are the old ones, the ratio is 1
    torch.testing.assert_close(stash["values"][mask], stash["old_values"][mask], rtol=0, atol=1e-5)
    m = obj.metrics(out, batch)
    assert m["value_clip_fraction"] == 0 and abs(m["kl_approx"]) < 1e-5 and m["clip_fraction"] == 0
    assert set(m) >= {"loss", "loss_objective", "loss_critic", "explained_variance", "entropy"}
    # the value loss alone: with a head on the policy trunk it trains the policy, with a separate critic it must not
    model.zero_grad(set_to_none=True)
    out.loss_critic.sum().backward(retain_graph=True)
    policy_grad = sum(float(p.grad.abs().sum()) for p in model.parameters() if p.grad is not None)
    assert (policy_grad > 0) == (critic == "head")
    model.zero_grad(set_to_none=True)
    obj.critic.zero_grad(set_to_none=True)
    obj.total_loss(out).backward()
    assert obj.critic.head.weight.grad.abs().sum() > 0
    groups = obj.optimizer_param_groups(1e-4)
    assert [g["lr"] for g in groups] == [1e-4, 1e-3]
    n_policy = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for p in groups[0]["params"]) == n_policy
    if critic == "head":  # just the head; its input is the policy's own last hidden state
        assert sum(p.numel() for p in groups[1]["params"]) == model.config.hidden_size + 1
    else:  # a trunk of its own
        assert sum(p.numel() for p in groups[1]["params"]) > model.config.hidden_size + 1
        assert all(p.grad is not None for p in obj.critic.backbone.parameters() if p.requires_grad)
