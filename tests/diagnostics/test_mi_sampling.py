"""MI pair sampling drops empty reasoning *before* sampling (RAGEN-2, arXiv 2604.06268, App. D).

Dropping after sampling (the old behaviour) scored fewer than ``num_pairs`` pairs and kept
columns no pair came from: with 8 one-turn trajectories of which half have empty reasoning, 64
trajectory-uniform draws gave about 32 scored pairs over 8 columns (4 of them empty), which
shifted N, log N, chance and the marginal exactly when format failures rose. Every expected
number below is worked out by hand in the comment next to it.
"""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.diagnostics.collapse import CollapseMonitor
from ragen_torchrl.diagnostics.mi import (
    mi_proxies,
    reasoning_valid_rate,
    sample_first_turn_pairs,
    sample_trajectory_uniform_pairs,
)


def perfect_matrix(sample) -> torch.Tensor:
    """l[i, j] = 0 on the true column, -1e4 elsewhere: every reasoning identifies its prompt."""
    m, n = sample.traj_idx.numel(), sample.col_traj_idx.numel()
    return torch.full((m, n), -1e4, dtype=torch.float64).scatter_(1, sample.true_cols.unsqueeze(1), 0.0)


# ---------------------------------------------------------------------- trajectory-uniform
def test_trajectory_uniform_half_empty_scores_every_pair():
    # RAGEN-2 App. D: "Pairs with empty reasoning are dropped" -- before sampling, so all M are scored
    turns = torch.ones(8, dtype=torch.long)
    valid = [[i % 2 == 0] for i in range(8)]  # trajectories 1, 3, 5, 7: empty reasoning
    s = sample_trajectory_uniform_pairs(turns, 64, torch.Generator().manual_seed(0), valid_turns=valid)
    assert s.traj_idx.numel() == 64  # all 64 pairs scored (old: ~32 after dropping)
    assert set(s.traj_idx.tolist()) <= {0, 2, 4, 6}
    # 4 valid (trajectory, turn) pairs; 64 draws miss one with prob 4 * (3/4)^64 ~ 4e-8 -> N = 4
    assert sorted(s.col_traj_idx.tolist()) == [0, 2, 4, 6]
    assert set(s.true_cols.tolist()) == {0, 1, 2, 3}  # no column without a pair
    out = mi_proxies(perfect_matrix(s), s.true_cols)
    assert (out["num_pairs"], out["num_columns"]) == (64, 4)
    assert out["mi_upper_bound"] == pytest.approx(math.log(4))  # old: log 8
    assert out["retrieval_chance"] == pytest.approx(1 / 4)  # old: 1/8
    # matched 0, marginal logsumexp(0, -1e4 x 3) - log 4 = -log 4 -> gap log 4
    assert out["mi_estimate"] == pytest.approx(math.log(4))
    assert out["reasoning_entropy"] == pytest.approx(math.log(4))
    # valid rate: mean over trajectories of valid / turns = 4 / 8
    assert reasoning_valid_rate(turns, valid) == 0.5


def test_trajectory_uniform_multi_turn_pool_by_hand():
    turns = torch.tensor([2, 3, 1, 0])
    valid = torch.tensor([[True, False, True], [False, False, True], [False, True, True], [True, True, True]])
    # entries past a trajectory's turns are ignored: valid pairs are (0, 0) and (1, 2) only
    s = sample_trajectory_uniform_pairs(turns, 400, torch.Generator().manual_seed(3), valid_turns=valid)
    pairs = set(zip(s.traj_idx.tolist(), s.turn_idx.tolist()))
    assert pairs == {(0, 0), (1, 2)}
    assert list(zip(s.col_traj_idx.tolist(), s.col_turn_idx.tolist())) == [(0, 0), (1, 2)]  # N = 2
    assert abs((s.traj_idx == 0).double().mean().item() - 0.5) < 0.08  # uniform over the 2 trajectories
    assert (s.col_traj_idx[s.true_cols] == s.traj_idx).all() and (s.col_turn_idx[s.true_cols] == s.turn_idx).all()
    # trajectory valid rate: (1/2 + 1/3 + 0/1) / 3 trajectories with turns = 5/18
    assert reasoning_valid_rate(turns, valid) == pytest.approx(5 / 18)
    # first-turn valid rate: first turns of trajectories 0, 1, 2 -> 1 of 3
    assert reasoning_valid_rate(turns, valid, "first_turn") == pytest.approx(1 / 3)


def test_trajectory_uniform_turn_is_uniform_over_valid_turns():
    # trajectory with 4 turns, turn 1 empty: turns 0, 2, 3 each with probability 1/3
    s = sample_trajectory_uniform_pairs(
        torch.tensor([4]), 3000, torch.Generator().manual_seed(4), valid_turns=[[True, False, True, True]]
    )
    freq = torch.bincount(s.turn_idx, minlength=4).double() / 3000
    assert freq[1] == 0.0
    assert (freq[[0, 2, 3]] - 1 / 3).abs().max() < 0.04


def test_all_valid_mask_draws_like_no_mask():
    turns = torch.tensor([1, 4, 0, 2])
    a = sample_trajectory_uniform_pairs(turns, 50, torch.Generator().manual_seed(1))
    b = sample_trajectory_uniform_pairs(
        turns, 50, torch.Generator().manual_seed(1), valid_turns=torch.ones(4, 4, dtype=torch.bool)
    )
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    g = torch.tensor([5, 5, 2, 2, 9])
    a = sample_first_turn_pairs(g, 3, torch.Generator().manual_seed(2))
    b = sample_first_turn_pairs(g, 3, torch.Generator().manual_seed(2), valid=torch.ones(5, dtype=torch.bool))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------------- first-turn
def test_first_turn_columns_are_groups_with_a_valid_first_turn():
    # RAGEN-2 App. D: first-turn columns = prompt groups; a group left without any non-empty
    # first-turn reasoning is no column (else chance and log N would count a prompt no pair has)
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    valid = torch.tensor([True, False, False, True, False, False, True, True])  # group 2: none
    s = sample_first_turn_pairs(groups, 64, torch.Generator().manual_seed(0), valid=valid)
    assert s.col_traj_idx.tolist() == [0, 3, 6]  # groups 0, 1, 3, each by its first valid trajectory
    assert s.traj_idx.tolist() == [0, 3, 6, 7]  # min(64, 4 valid) pairs, every one scored
    assert s.true_cols.tolist() == [0, 1, 2, 2]
    out = mi_proxies(perfect_matrix(s), s.true_cols)
    assert (out["num_pairs"], out["num_columns"]) == (4, 3)
    assert out["retrieval_chance"] == pytest.approx(1 / 3)  # old: 1/4 (group 2 kept as a column)
    assert out["mi_upper_bound"] == pytest.approx(math.log(3))
    assert reasoning_valid_rate(torch.ones(8, dtype=torch.long), valid.unsqueeze(1), "first_turn") == 0.5
    # fewer pairs than valid trajectories: 2 of {0, 3, 6, 7}, the columns stay the 3 groups
    s2 = sample_first_turn_pairs(groups, 2, torch.Generator().manual_seed(0), valid=valid)
    assert s2.traj_idx.numel() == 2 and set(s2.traj_idx.tolist()) <= {0, 3, 6, 7}
    assert s2.col_traj_idx.tolist() == [0, 3, 6]


def test_sampling_errors():
    with pytest.raises(ValueError, match="non-empty first-turn reasoning"):
        sample_first_turn_pairs(torch.tensor([0, 1]), 4, valid=torch.tensor([False, False]))
    with pytest.raises(ValueError, match="length 2"):
        sample_first_turn_pairs(torch.tensor([0, 1]), 4, valid=torch.tensor([True]))
    with pytest.raises(ValueError, match="non-empty reasoning"):
        sample_trajectory_uniform_pairs(torch.tensor([1, 2]), 4, valid_turns=[[False], [False, False]])
    with pytest.raises(ValueError, match="fewer than the 2 turns"):
        sample_trajectory_uniform_pairs(torch.tensor([1, 2]), 4, valid_turns=torch.ones(2, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="scheme"):
        reasoning_valid_rate(torch.tensor([1]), None, "uniform")
    assert reasoning_valid_rate(torch.tensor([0, 0]), None) == 0.0


# ---------------------------------------------------------------------- the monitor
SYSTEM = {"role": "system", "content": "You play FrozenLake."}
OBS = ["Player (0,0) Goal (3,3)", "Player (2,1) Goal (0,0)", "Player (3,3) Goal (3,0)", "Player (1,2) Goal (2,2)"]


def test_monitor_with_half_empty_reasoning(tiny_model):
    # 4 groups x 2 one-turn trajectories; the second of each group answers without reasoning
    model, tok = tiny_model
    chats, groups = [], []
    for g, obs in enumerate(OBS):
        for s in range(2):
            reply = (
                f"<think>the goal is {g} steps away</think><answer>Down</answer>" if s == 0 else "<answer>Down</answer>"
            )
            chats.append([SYSTEM, {"role": "user", "content": obs}, {"role": "assistant", "content": reply}])
            groups.append(g)
    td = TensorDict(group_id=torch.tensor(groups), episode_return=torch.zeros(8), batch_size=[8]).to_lazystack(0)
    td.set(("history", "full"), History.from_chats(chats))
    m = CollapseMonitor(model, tok, num_pairs=64, every=1, seed=0)(td)
    for scheme in ("first_turn", "trajectory"):
        assert m[f"collapse/{scheme}/valid_rate"] == 0.5  # 4 of 8 reasonings non-empty
        assert m[f"collapse/{scheme}/num_columns"] == 4.0  # only valid prompts: log N = log 4, chance 1/4
        assert m[f"collapse/{scheme}/mi_upper_bound"] == pytest.approx(math.log(4))
        assert m[f"collapse/{scheme}/retrieval_chance"] == pytest.approx(1 / 4)
    # first-turn: min(64, 4 valid trajectories) pairs; trajectory-uniform: all 64 draws scored
    assert m["collapse/first_turn/num_pairs"] == 4.0
    assert m["collapse/trajectory/num_pairs"] == 64.0
