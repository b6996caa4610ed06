"""Group-relative advantages (``group_advantage`` / ``GroupAdvantage``), checked by hand."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import LazyStackStorage, ReplayBuffer
from torchrl.envs.transforms import Compose, Transform

from ragen_torchrl.transforms.advantage import GroupAdvantage, group_advantage

# two groups, interleaved, with arbitrary ids:
#   group 7: returns 1, 0, 0.5  -> mean 0.5, centred  .5 -.5 0,  unbiased std sqrt(.5/2)  = 0.5
#   group 3: returns 2, -1      -> mean 0.5, centred 1.5 -1.5,   unbiased std sqrt(4.5/1) = 2.1213...
RETURNS = torch.tensor([1.0, 2.0, 0.0, -1.0, 0.5])
GROUPS = torch.tensor([7, 3, 7, 3, 7])


def hand_advantage(eps: float) -> list[float]:
    s7, s3 = 0.5, math.sqrt(4.5)
    return [0.5 / (s7 + eps), 1.5 / (s3 + eps), -0.5 / (s7 + eps), -1.5 / (s3 + eps), 0.0]


@pytest.mark.parametrize("eps", [1e-6, 0.1])
def test_std_normalised_by_hand(eps):
    adv = group_advantage(RETURNS, GROUPS, eps=eps)
    assert adv.shape == (5,)
    assert adv.dtype == torch.float32
    assert adv.tolist() == pytest.approx(hand_advantage(eps), abs=1e-6)


def test_std_uses_the_unbiased_estimator():
    # population std of (1, 0) is 0.5, unbiased 0.7071: advantages are +-0.7071
    adv = group_advantage(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), eps=0.0)
    assert adv.tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)], abs=1e-6)


def test_scale_none_only_centres():
    adv = group_advantage(RETURNS, GROUPS, scale="none")
    assert adv.tolist() == pytest.approx([0.5, 1.5, -0.5, -1.5, 0.0], abs=1e-6)


def test_advantages_sum_to_zero_within_each_group():
    torch.manual_seed(0)
    returns = torch.randn(24)
    groups = torch.arange(6).repeat_interleave(4)[torch.randperm(24)]
    for scale in ("std", "none"):
        adv = group_advantage(returns, groups, scale=scale)
        for g in groups.unique():
            assert adv[groups == g].sum().abs() < 1e-5


def test_equal_returns_give_zero_and_a_group_of_one_its_return():
    # verl's and RAGEN's GRPO advantage: a group of one has mean 0 and std 1, so A = R / (1 + eps)
    returns = torch.tensor([3.0, 0.2, 0.2, 0.2, -1.0, 1.0, -0.5])
    groups = torch.tensor([0, 1, 1, 1, 2, 2, 3])  # groups 0 and 3 have one member, group 1 equal returns
    for scale in ("std", "none"):
        adv = group_advantage(returns, groups, scale=scale)
        assert torch.isfinite(adv).all()
        assert adv[1:4].tolist() == [0.0, 0.0, 0.0]
    std_adv = group_advantage(returns, groups)
    assert std_adv[[0, 6]].tolist() == pytest.approx([3.0 / (1 + 1e-6), -0.5 / (1 + 1e-6)], rel=1e-7)
    assert std_adv[4:6].tolist() == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], abs=1e-5)
    assert group_advantage(returns, groups, scale="none")[[0, 6]].tolist() == [3.0, -0.5]
    assert group_advantage(returns, groups, eps=0.5)[0].item() == pytest.approx(2.0)  # 3 / (1 + 0.5)


def test_accepts_column_shaped_inputs_and_lists():
    adv = group_advantage(RETURNS.reshape(-1, 1), GROUPS.reshape(-1, 1, 1))
    assert adv.tolist() == pytest.approx(hand_advantage(1e-6), abs=1e-6)
    adv = group_advantage([1.0, 0.0], [5, 5], eps=0.0)
    assert adv.tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)], abs=1e-6)


@pytest.mark.parametrize(
    "returns, groups, kwargs, match",
    [
        (torch.zeros(3), torch.zeros(2, dtype=torch.long), {}, "shape"),
        (torch.tensor([1.0, float("nan")]), torch.tensor([0, 0]), {}, "NaN"),
        (torch.tensor([1.0, float("inf")]), torch.tensor([0, 0]), {}, "NaN or inf"),
        (torch.zeros(2), torch.zeros(2, dtype=torch.long), {"scale": "mad"}, "scale"),
    ],
)
def test_group_advantage_rejects_bad_input(returns, groups, kwargs, match):
    with pytest.raises(ValueError, match=match):
        group_advantage(returns, groups, **kwargs)


# --------------------------------------------------------------------------- the transform
def records() -> TensorDict:
    return TensorDict(episode_return=RETURNS.clone(), group_id=GROUPS.clone(), batch_size=[5])


def test_transform_writes_n11_advantage():
    td = GroupAdvantage()(records())
    adv = td.get("advantage")
    assert adv.shape == (5, 1, 1)
    assert adv.reshape(-1).tolist() == pytest.approx(hand_advantage(1e-6), abs=1e-6)
    # the inputs are untouched
    assert torch.equal(td.get("episode_return"), RETURNS)


def test_transform_options_and_custom_keys():
    td = TensorDict(ret=RETURNS.clone(), grp=GROUPS.clone(), batch_size=[5])
    out = GroupAdvantage(scale="none", return_key="ret", group_key="grp", advantage_key="adv")(td)
    assert out.get("adv").reshape(-1).tolist() == pytest.approx([0.5, 1.5, -0.5, -1.5, 0.0], abs=1e-6)
    assert "advantage" not in out.keys()


def test_transform_rejects_bad_scale_at_construction():
    with pytest.raises(ValueError, match="scale"):
        GroupAdvantage(scale="rank")


def test_transform_passes_none_through():
    t = GroupAdvantage()
    assert t(None) is None
    assert t._inv_call(None) is None  # what a Compose calls at write time
    assert Compose(t)._inv_call(None) is None


def test_transform_on_a_lazy_stack_of_records():
    td = records().to_lazystack(0)
    out = GroupAdvantage()(td)
    assert out.get("advantage").shape == (5, 1, 1)
    assert out.get("advantage").reshape(-1).tolist() == pytest.approx(hand_advantage(1e-6), abs=1e-6)


def test_write_time_transform_in_a_replay_buffer():
    rb = ReplayBuffer(storage=LazyStackStorage(max_size=100), transform=GroupAdvantage(), batch_size=5)
    rb.extend(records())
    assert len(rb) == 5
    stored = rb[:]
    adv = stored.get("advantage")
    assert adv.shape == (5, 1, 1)
    assert adv.reshape(-1).tolist() == pytest.approx(hand_advantage(1e-6), abs=1e-6)
    # a second write normalises its own batch only
    more = TensorDict(episode_return=torch.tensor([4.0, 2.0]), group_id=torch.tensor([9, 9]), batch_size=[2])
    rb.extend(more)
    assert len(rb) == 7
    assert rb[5:7].get("advantage").reshape(-1).tolist() == pytest.approx(
        [1 / math.sqrt(2), -1 / math.sqrt(2)], abs=1e-5
    )
    sample = rb.sample()
    assert sample.get("advantage").shape == (5, 1, 1)


class DropEverything(Transform):
    """A write-time filter that keeps nothing (as an SNR filter may)."""

    def _inv_call(self, tensordict):
        return None

    def forward(self, tensordict):
        return tensordict


def test_after_a_filter_that_drops_everything_nothing_is_written():
    # Compose runs write-time transforms last-to-first: the filter first, then the advantage
    rb = ReplayBuffer(storage=LazyStackStorage(max_size=100), transform=Compose(GroupAdvantage(), DropEverything()))
    rb.extend(records())
    assert len(rb) == 0


# --------------------------------------------------------------------------- float rounding of equal returns
@pytest.mark.parametrize("G", range(2, 17))
@pytest.mark.parametrize("scale", ["std", "none"])
def test_all_equal_group_is_exactly_zero_at_every_group_size(G, scale):
    # reference notes: "A group whose rewards are all equal has advantage exactly 0 (compute group
    # statistics in float64: float32 rounding of e.g. -0.1 otherwise yields spurious advantages)"
    # float32 returns k * 0.1 (e.g. -0.1: one invalid turn); the old float32 code gave up to +-0.19 here
    for k in range(-20, 21):
        returns = torch.full((G,), k * 0.1, dtype=torch.float32)
        adv = group_advantage(returns, torch.zeros(G, dtype=torch.long), scale=scale)
        assert adv.dtype == torch.float32
        assert adv.tolist() == [0.0] * G, (G, k)


def test_equal_group_next_to_an_informative_one():
    # group 0: sixteen returns of -0.1 (no signal: exactly 0); group 1: -0.1 and 0.9 (mean .4, unbiased std
    # sqrt(.5)), whose advantages are the float64 hand numbers rounded once to float32
    returns = torch.tensor([-0.1] * 16 + [-0.1, 0.9], dtype=torch.float32)
    groups = torch.tensor([0] * 16 + [1, 1])
    adv = group_advantage(returns, groups, eps=1e-6)
    assert adv[:16].tolist() == [0.0] * 16
    d = 0.9 - float(torch.tensor(-0.1, dtype=torch.float32))  # the float32 spread, computed in float64
    hand = (d / 2) / (math.sqrt(d * d / 2) + 1e-6)
    assert adv[16:].tolist() == pytest.approx([-hand, hand], abs=1e-7)
    assert group_advantage(returns, groups, scale="none")[:16].tolist() == [0.0] * 16
