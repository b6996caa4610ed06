"""The Groups value: membership and float64 moments checked against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from ragen_torchrl.data.groups import Groups
from ragen_torchrl.data.minibatch import group_minibatches
from ragen_torchrl.transforms.advantage import group_advantage
from ragen_torchrl.transforms.group_selection import group_scores


def test_moments_by_hand():
    # group 4: {3, 1, 2} mean 2, unbiased var ((1 + 1 + 0) / 2) = 1; group 1: {0.5, 1.5} var 0.5;
    # group 9: one row -> var 0 and flat
    g = Groups.from_values(torch.tensor([4, 1, 4, 9, 1, 4]), torch.tensor([3.0, 0.5, 1.0, 7.0, 1.5, 2.0]))
    assert g.ids.tolist() == [1, 4, 9]
    assert g.inverse.tolist() == [1, 0, 1, 2, 0, 1]
    assert g.counts.tolist() == [2, 3, 1]
    assert g.mean.dtype == torch.float64 and g.var.dtype == torch.float64
    assert g.mean.tolist() == [1.0, 2.0, 7.0]
    assert g.var.tolist() == [0.5, 1.0, 0.0]
    assert g.std.tolist() == pytest.approx([math.sqrt(0.5), 1.0, 0.0], rel=1e-15)
    assert g.flat.tolist() == [False, False, True]
    assert g.spread.tolist() == [1.0, 2.0, 0.0]
    assert [m.tolist() for m in g.members()] == [[1, 4], [0, 2, 5], [3]]
    # advantages: (R - mean) / (std + eps); group 9, of one, takes mean 0 and std 1 (verl, RAGEN)
    eps = 1e-6
    expected = [1 / (1 + eps), -0.5 / (math.sqrt(0.5) + eps), -1 / (1 + eps), 7 / (1 + eps)]
    expected += [0.5 / (math.sqrt(0.5) + eps), 0.0]
    assert g.advantage("std", eps).tolist() == pytest.approx(expected, rel=1e-6)
    assert g.advantage("none").tolist() == [1.0, -0.5, -1.0, 7.0, 0.5, 0.0]


def test_float64_moments_of_values_float32_gets_wrong():
    # sixteen returns of -0.1: the float32 mean is off by an ulp, the float64 two-pass variance is
    # not 0 either without the flat rule; the flat rule makes it exactly 0 and the advantage exactly 0
    returns = torch.full((16,), -0.1)
    g = Groups.from_values(torch.zeros(16, dtype=torch.long), returns)
    assert g.flat.tolist() == [True] and g.var.tolist() == [0.0]
    assert g.advantage().tolist() == [0.0] * 16
    # a value difference of 1e-12 at scale 1 is signal, and float64 keeps it
    g = Groups.from_values(torch.tensor([0, 0]), torch.tensor([1.0, 1.0 + 1e-12], dtype=torch.float64))
    assert not bool(g.flat[0]) and g.var.item() == pytest.approx(0.5e-24, rel=1e-3)


@pytest.mark.parametrize("scale", [1e-6, 0.1, 1.0, 37.0, 1e6])
def test_flat_groups_at_every_reward_scale(scale):
    # group 0 flat at value 0.3 * scale (not exactly representable), group 1 informative, group 2 of one
    r = torch.tensor([0.3, 0.3, 0.3, 0.3, 0.0, 1.0, 0.7]) * scale
    g = Groups.from_values(torch.tensor([0, 0, 0, 0, 1, 1, 2]), r)
    assert g.flat.tolist() == [True, False, True]
    assert g.var[0].item() == 0.0 and g.var[2].item() == 0.0
    assert g.var[1].item() == pytest.approx(0.5 * scale**2, rel=1e-6)
    adv = g.advantage()
    assert adv[:4].tolist() == [0.0] * 4 and adv[6].item() == pytest.approx(0.7 * scale / (1 + 1e-6), rel=1e-6)


def test_ties_are_bit_identical_in_any_row_order():
    vals = torch.tensor([0.1, 0.7, 0.2, 0.3, 0.2, 0.7, 0.3, 0.1])
    g = Groups.from_values(torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), vals)
    assert g.mean[0].item() == g.mean[1].item() and g.var[0].item() == g.var[1].item()


def test_groups_of_one_and_string_ids():
    g = Groups.from_values(["a", "b", "c"], [1.0, -2.0, 5.0])
    assert g.counts.tolist() == [1, 1, 1] and g.flat.tolist() == [True] * 3
    assert g.var.tolist() == [0.0] * 3 and g.advantage("none").tolist() == [1.0, -2.0, 5.0]


def test_take_keeps_whole_groups_and_their_moments():
    g = Groups.from_values(torch.tensor([3, 3, 5, 5, 8]), torch.tensor([1.0, 0.0, 4.0, 2.0, 1.0]))
    k = g.take(torch.tensor([False, False, True, True, True]))
    assert k.ids.tolist() == [5, 8] and k.inverse.tolist() == [0, 0, 1]
    assert k.var.tolist() == [2.0, 0.0] and k.values.tolist() == [4.0, 2.0, 1.0]
    built = Groups.from_values(torch.tensor([5, 5, 8]), torch.tensor([4.0, 2.0, 1.0]))
    assert torch.equal(k.advantage(), built.advantage())
    with pytest.raises(ValueError, match="whole groups"):
        g.take(torch.tensor([0, 2, 3]))


def test_shared_readers_agree_with_groups():
    # the SNR scores, the advantages and the mini-batch membership all read the same moments
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 6, (40,), generator=gen)
    r = torch.randint(0, 3, (40,), generator=gen).float() * 0.37
    g = Groups.from_values(ids, r)
    s_ids, var = group_scores(r, ids, "reward_variance")
    assert torch.equal(s_ids, g.ids) and torch.equal(var, g.var)
    assert torch.equal(group_advantage(r, ids), g.advantage())
    # an independent float64 computation of the unbiased variance per group
    for k, gid in enumerate(g.ids.tolist()):
        x = r[ids == gid].double()
        ref = x.var(correction=1).item() if x.numel() > 1 else 0.0
        assert g.var[k].item() == pytest.approx(ref, abs=1e-15)
    a = group_minibatches(ids, 8, generator=torch.Generator().manual_seed(1))
    b = group_minibatches(g, 8, generator=torch.Generator().manual_seed(1))
    assert [x.tolist() for x in a] == [x.tolist() for x in b]


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="returns contains NaN"):
        Groups.from_values(torch.tensor([0, 0]), torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="one value per trajectory"):
        Groups.from_values(torch.tensor([0, 0]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="integers or strings"):
        Groups.from_values(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="Groups.var needs values"):
        Groups.from_ids(torch.tensor([0, 1])).std  # noqa: B018
    with pytest.raises(ValueError, match="scale must be"):
        Groups.from_values(torch.tensor([0]), torch.tensor([1.0])).advantage("mad")
