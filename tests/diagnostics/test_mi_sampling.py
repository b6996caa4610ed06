"""MI pair sampling (RAGEN-2, arXiv 2604.06268, App. D).

* Empty reasoning is dropped *before* sampling. Dropping after sampling scored fewer than
  ``num_pairs`` pairs and kept columns no pair came from: with 8 one-turn trajectories of which
  half have empty reasoning, 64 trajectory-uniform draws gave about 32 scored pairs over 8
  columns (4 of them empty), which shifted N, log N, chance and the marginal exactly when format
  failures rose.
* Trajectory-uniform sampling keeps one column per draw (N = num_pairs), identical prompts being
  equivalent columns, as the reference does. Merging repeated draws into one column made N
  random (about 40 for 64 draws over 64 one-turn trajectories) and shifted log N, chance and the
  marginal.

Every expected number below is worked out by hand in the comment next to it.
"""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.diagnostics.collapse import CollapseMonitor
from ragen_torchrl.diagnostics.mi import mi_proxies
from ragen_torchrl.diagnostics.mi_sampling import (
    equivalence_from_keys,
    reasoning_valid_rate,
    sample_first_turn_pairs,
    sample_trajectory_uniform_pairs,
)


def perfect_matrix(sample) -> tuple[torch.Tensor, torch.Tensor]:
    """``(l, equivalence)``: l[i, j] = 0 on every column holding pair i's own prompt, -1e4 elsewhere.

    Columns naming the same (trajectory, turn) hold the same prompt: they are equivalent.
    """
    equiv = equivalence_from_keys(list(zip(sample.col_traj_idx.tolist(), sample.col_turn_idx.tolist())))
    own = equiv[sample.true_cols].unsqueeze(1) == equiv.unsqueeze(0)
    return torch.where(own, 0.0, -1e4).double(), equiv


# ---------------------------------------------------------------------- trajectory-uniform
def test_trajectory_uniform_half_empty_scores_every_pair():
    # RAGEN-2 App. D: "Pairs with empty reasoning are dropped" -- before sampling, so all M are scored
    turns = torch.ones(8, dtype=torch.long)
    valid = [[i % 2 == 0] for i in range(8)]  # trajectories 1, 3, 5, 7: empty reasoning
    s = sample_trajectory_uniform_pairs(turns, 64, torch.Generator().manual_seed(0), valid_turns=valid)
    assert s.traj_idx.numel() == 64  # all 64 pairs scored (old: ~32 after dropping)
    assert set(s.traj_idx.tolist()) <= {0, 2, 4, 6}
    # one column per draw, each holding its own draw's prompt
    assert s.true_cols.tolist() == list(range(64))
    assert torch.equal(s.col_traj_idx, s.traj_idx) and torch.equal(s.col_turn_idx, s.turn_idx)
    counts = torch.bincount(s.traj_idx, minlength=8).double()  # draws of each valid prompt
    n_own = counts[s.traj_idx]  # n_i: columns equivalent to row i's own (itself included)
    mat, equiv = perfect_matrix(s)
    out = mi_proxies(mat, s.true_cols, col_equivalence=equiv)
    assert (out["num_pairs"], out["num_columns"]) == (64, 64)
    assert out["mi_upper_bound"] == pytest.approx(math.log(64))
    # chance = mean_i n_i / N = sum_k c_k^2 / 64^2 (about 1/4 for 4 prompts)
    assert out["retrieval_chance"] == pytest.approx(float((counts**2).sum()) / 64**2)
    assert out["retrieval_accuracy"] == 1.0  # any equivalent column is a hit
    # matched 0, marginal log(n_i e^0 / 64) -> gap log(64 / n_i)
    assert out["mi_estimate"] == pytest.approx(float(torch.log(64 / n_own).mean()))
    assert out["reasoning_entropy"] == pytest.approx(float(torch.log(64 / n_own).mean()))
    # valid rate: mean over trajectories of valid / turns = 4 / 8
    assert reasoning_valid_rate(turns, valid) == 0.5


def test_trajectory_uniform_keeps_one_column_per_draw_by_hand():
    # 3 one-turn trajectories with prompts A, B, C; 5 draws: A B A A B (seed 8; C never drawn)
    s = sample_trajectory_uniform_pairs(torch.tensor([1, 1, 1]), 5, torch.Generator().manual_seed(8))
    assert s.traj_idx.tolist() == [0, 1, 0, 0, 1]
    # N = num_pairs = 5 columns A B A A B (merging repeats gave 2 columns: A B)
    assert s.true_cols.tolist() == [0, 1, 2, 3, 4] and s.col_traj_idx.tolist() == [0, 1, 0, 0, 1]
    equiv = equivalence_from_keys(s.col_traj_idx.tolist())
    assert equiv.tolist() == [0, 1, 0, 0, 1]
    # mean log p(z | x): z_A under A -1, under B -3; z_B under A -2, under B -1
    table = torch.tensor([[-1.0, -3.0], [-2.0, -1.0]], dtype=torch.float64)
    mat = table[s.traj_idx][:, s.col_traj_idx]
    out = mi_proxies(mat, s.true_cols, col_equivalence=equiv)
    assert out["num_columns"] == 5 and out["mi_upper_bound"] == pytest.approx(math.log(5))  # merged: log 2
    # chance = mean over rows of n_i / N = (3 + 2 + 3 + 3 + 2) / 5 / 5 = 13/25 (merged: 1/2)
    assert out["retrieval_chance"] == pytest.approx(13 / 25)
    assert out["retrieval_accuracy"] == 1.0  # every row's best columns are its own prompt's
    assert out["retrieval_above_chance"] == pytest.approx(12 / 25)
    # marginal of z_A: log((3 e^-1 + 2 e^-3) / 5); of z_B: log((3 e^-2 + 2 e^-1) / 5)
    marg_a = math.log((3 * math.exp(-1) + 2 * math.exp(-3)) / 5)
    marg_b = math.log((3 * math.exp(-2) + 2 * math.exp(-1)) / 5)
    assert out["reasoning_entropy"] == pytest.approx(-(3 * marg_a + 2 * marg_b) / 5)
    assert out["conditional_entropy"] == pytest.approx(1.0)  # matched = -1 for every row
    assert out["mi_estimate"] == pytest.approx((3 * (-1 - marg_a) + 2 * (-1 - marg_b)) / 5)


def test_trajectory_uniform_multi_turn_pool_by_hand():
    turns = torch.tensor([2, 3, 1, 0])
    valid = torch.tensor([[True, False, True], [False, False, True], [False, True, True], [True, True, True]])
    # entries past a trajectory's turns are ignored: valid pairs are (0, 0) and (1, 2) only
    s = sample_trajectory_uniform_pairs(turns, 400, torch.Generator().manual_seed(3), valid_turns=valid)
    pairs = set(zip(s.traj_idx.tolist(), s.turn_idx.tolist()))
    assert pairs == {(0, 0), (1, 2)}
    assert s.col_traj_idx.numel() == 400  # one column per draw, of 2 distinct prompts
    assert set(zip(s.col_traj_idx.tolist(), s.col_turn_idx.tolist())) == {(0, 0), (1, 2)}
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
    mat, equiv = perfect_matrix(s)
    out = mi_proxies(mat, s.true_cols, col_equivalence=equiv)
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


def test_monitor_with_half_empty_reasoning(tiny_model, monkeypatch):
    # 4 groups x 2 one-turn trajectories; the second of each group answers without reasoning
    import ragen_torchrl.diagnostics.collapse as collapse_mod

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
    scored_columns = []
    real_cross_score = collapse_mod.cross_score

    def counting_cross_score(model, contexts, reasonings, **kw):
        scored_columns.append(len(contexts))
        return real_cross_score(model, contexts, reasonings, **kw)

    monkeypatch.setattr(collapse_mod, "cross_score", counting_cross_score)
    m = CollapseMonitor(model, tok, num_pairs=64, every=1, seed=0)(td)
    for scheme in ("first_turn", "trajectory"):
        assert m[f"collapse/{scheme}/valid_rate"] == 0.5  # 4 of 8 reasonings non-empty
        assert m[f"collapse/{scheme}/distinct_columns"] == 4.0  # only valid prompts
    # first-turn: columns = the 4 groups with a valid first turn: log N = log 4, chance 1/4
    assert m["collapse/first_turn/num_columns"] == 4.0
    assert m["collapse/first_turn/mi_upper_bound"] == pytest.approx(math.log(4))
    assert m["collapse/first_turn/retrieval_chance"] == pytest.approx(1 / 4)
    # trajectory-uniform: one column per draw (N = 64) over the 4 valid prompts; the monitor's
    # generator drew the first-turn sample first, then these 64 draws
    g = torch.Generator().manual_seed(0)
    valid = torch.tensor([i % 2 == 0 for i in range(8)])
    sample_first_turn_pairs(torch.tensor(groups), 64, g, valid=valid)
    draws = sample_trajectory_uniform_pairs(torch.ones(8, dtype=torch.long), 64, g, valid_turns=valid.unsqueeze(1))
    counts = torch.bincount(draws.traj_idx, minlength=8).double()
    assert m["collapse/trajectory/num_columns"] == 64.0
    assert m["collapse/trajectory/mi_upper_bound"] == pytest.approx(math.log(64))
    assert m["collapse/trajectory/retrieval_chance"] == pytest.approx(float((counts**2).sum()) / 64**2)
    # each distinct prompt scored once: 4 contexts per cross-scoring pass, not 64
    assert scored_columns == [4, 4]
    # first-turn: min(64, 4 valid trajectories) pairs; trajectory-uniform: all 64 draws scored
    assert m["collapse/first_turn/num_pairs"] == 4.0
    assert m["collapse/trajectory/num_pairs"] == 64.0
