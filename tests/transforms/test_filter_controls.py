"""The filter controls: ``filter=random_keep`` (a seeded random subset at a fixed kept fraction) and
``filter=nonzero_variance`` (drop exactly the zero-variance groups), as pure rules and as the filter."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tensordict import TensorDict

from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR
from ragen_torchrl.transforms.group_sampler import TopVarianceGroupSampler
from ragen_torchrl.transforms.group_selection import random_groups, random_seed, select_groups
from ragen_torchrl.transforms.snr import SNRFilter, build_filter, validate_filter_config


def composed(name: str) -> dict:
    """The ``filter`` node ``filter=name`` composes."""
    with initialize_config_dir(config_dir=str(Path(PACKAGE_CONFIG_DIR)), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=[f"filter={name}"]).filter)


def batch(returns: list[list[float]]) -> TensorDict:
    """One row per trajectory: group g's rows hold returns[g]."""
    ids = [g for g, rs in enumerate(returns) for _ in rs]
    flat = [r for rs in returns for r in rs]
    return TensorDict(group_id=torch.tensor(ids), episode_return=torch.tensor(flat), batch_size=[len(flat)])


def kept_groups(filt: SNRFilter, td: TensorDict, **kw) -> list[int]:
    mask, _ = filt.row_mask(td, **kw)
    return sorted(set(td["group_id"][mask].tolist()))


# ------------------------------------------------------------------------ random_seed / random_groups
def test_random_seed_by_hand():
    # (seed * 1_000_003 + step + 0x5EEDF117) mod 2**63
    assert random_seed(0, 0) == 0x5EEDF117 == 1592652055
    assert random_seed(2, 5) == 2 * 1_000_003 + 5 + 0x5EEDF117
    assert random_seed(-1, 0) == (-1_000_003 + 0x5EEDF117) % 2**63
    for bad in (1.5, True, "3"):
        with pytest.raises(ValueError, match="must be an integer"):
            random_seed(bad, 0)


@pytest.mark.parametrize(
    "num, fraction, count",
    [(4, 0.5, 2), (4, 1.0, 4), (16, 0.25, 4), (100, 0.29, 29), (10, 0.3, 3), (3, 0.1, 1), (1, 0.5, 1)],
)
def test_an_integer_expected_count_is_kept_exactly(num, fraction, count):
    # fraction * num an integer (0.29 * 100 = 28.999... in floating point), or below one: no randomness
    for seed in range(20):
        kept = random_groups(num, fraction, seed)
        assert kept.numel() == count
        assert kept.tolist() == sorted(set(kept.tolist())) and all(0 <= i < num for i in kept.tolist())


def test_the_count_is_the_floor_or_the_ceiling_with_the_expected_ratio():
    # 0.36 x 16 = 5.76: 6 groups with probability 0.76, else 5, so the mean kept ratio is 0.36
    counts = [random_groups(16, 0.36, seed).numel() for seed in range(4000)]
    assert set(counts) == {5, 6}
    share6 = counts.count(6) / len(counts)
    assert abs(share6 - 0.76) < 4 * math.sqrt(0.76 * 0.24 / len(counts))
    assert abs(sum(counts) / len(counts) / 16 - 0.36) < 0.005


def test_every_group_is_equally_likely():
    # uniform without replacement: each of 8 groups in 0.5 of the subsets
    hits = torch.zeros(8)
    n = 4000
    for seed in range(n):
        hits[random_groups(8, 0.5, seed)] += 1
    assert torch.all((hits / n - 0.5).abs() < 4 * math.sqrt(0.25 / n)), hits / n


def test_random_groups_is_reproducible_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    a = random_groups(16, 0.36, random_seed(0, 0))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, random_groups(16, 0.36, random_seed(0, 0)))
    # pinned: the subsets of a run are part of its result, so a change of the draw must be deliberate
    assert a.tolist() == [1, 2, 3, 5, 8]
    assert random_groups(16, 0.36, random_seed(0, 1)).tolist() == [9, 10, 12, 14, 15]
    draws = {tuple(random_groups(16, 0.36, random_seed(s, t)).tolist()) for s in range(3) for t in range(5)}
    assert len(draws) == 15  # every (seed, iteration) draws its own subset


def test_random_groups_bounds():
    assert random_groups(0, 0.5, 0).numel() == 0
    assert random_groups(4, 0.5, 0, num_groups=16).numel() == 4  # 8 of 16, at most the 4 candidates
    assert random_groups(4, 2.0, 0).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="fraction must be > 0"):
        random_groups(4, 0.0, 0)
    with pytest.raises(ValueError, match="fraction must be >= 0"):
        random_groups(4, -0.5, 0)


# ------------------------------------------------------------------------ select_groups(strategy="random")
def test_random_selection_reads_no_score_with_zero_score_groups_included():
    seed = random_seed(3, 7)
    a = select_groups(
        torch.tensor([0.0, 0.5, 0.0, 2.0, 0.1, 0.0]), strategy="random", value=0.5, include_zero=True, seed=seed
    )
    b = select_groups(
        torch.tensor([9.0, 0.0, 0.0, 0.0, 0.0, 1.0]), strategy="random", value=0.5, include_zero=True, seed=seed
    )
    assert torch.equal(a, b) and torch.equal(a, random_groups(6, 0.5, seed))
    assert a.numel() == 3 and a.tolist() == sorted(a.tolist())  # index order


def test_random_selection_among_the_groups_with_signal():
    # include_zero=False: candidates are groups 1, 3, 4; 0.5 x 6 = 3 of them: all three
    scores = torch.tensor([0.0, 0.5, 0.0, 2.0, 0.1, 0.0])
    assert select_groups(scores, strategy="random", value=0.5, seed=0).tolist() == [1, 3, 4]
    # 1/6 x 6 = 1 of them, drawn from the candidates alone
    picks = {tuple(select_groups(scores, strategy="random", value=1 / 6, seed=s).tolist()) for s in range(50)}
    assert picks == {(1,), (3,), (4,)}
    assert select_groups(torch.zeros(4), strategy="random", value=0.5, seed=0).numel() == 0


def test_random_selection_needs_a_seed():
    with pytest.raises(ValueError, match="strategy random needs a seed"):
        select_groups(torch.ones(4), strategy="random", value=0.5)


# ------------------------------------------------------------------------ the filter and its config
def test_random_filter_keeps_a_seeded_subset_whatever_the_rewards():
    filt = SNRFilter(strategy="random", value=0.5, include_zero=True, seed=11)
    constant = batch([[1.0, 1.0]] * 8)  # no group carries signal: the draw does not care
    varied = batch([[0.0, 1.0], [1.0, 1.0], [0.0, 2.0], [0.5, 0.5]] * 2)
    for step in range(5):
        expected = random_groups(8, 0.5, random_seed(11, step)).tolist()
        assert kept_groups(filt, constant, step=step) == expected == kept_groups(filt, varied, step=step)
    _, stats = filt.filter(varied, step=0)
    assert stats["kept_groups"] == 4.0 and stats["kept_ratio"] == 0.5 and stats["kept_trajectories"] == 8.0


def test_random_filter_without_a_step_counts_its_calls():
    td = batch([[0.0, 1.0]] * 16)
    filt = SNRFilter(strategy="random", value=0.36, include_zero=True, seed=2)
    first, second = kept_groups(filt, td), kept_groups(filt, td)
    assert first == random_groups(16, 0.36, random_seed(2, 0)).tolist()
    assert second == random_groups(16, 0.36, random_seed(2, 1)).tolist()
    # the torchrl hooks go through the same count
    hooked = SNRFilter(strategy="random", value=0.36, include_zero=True, seed=2)
    assert sorted(set(hooked(td)["group_id"].tolist())) == first
    with pytest.raises(ValueError, match="seed must be an integer"):
        SNRFilter(strategy="random", seed=1.5)


def test_random_keep_preset():
    raw = composed("random_keep")
    assert (raw["enabled"], raw["strategy"], raw["value"], raw["include_zero"]) == (True, "random", 0.36, True)
    filt = build_filter(raw, seed=5)
    assert (filt.strategy, filt.value, filt.include_zero, filt.seed) == ("random", 0.36, True, 5)
    td = batch([[0.0, 1.0, 0.0, 0.0]] * 16)
    assert kept_groups(filt, td, step=3) == random_groups(16, 0.36, random_seed(5, 3)).tolist()


@pytest.mark.parametrize("value", [0.0, 1.5, 36, -0.1])
def test_random_value_outside_0_1_is_an_error(value):
    with pytest.raises(ValueError, match=rf"filter.value must be in \(0, 1\] for strategy random, got {value}"):
        validate_filter_config({"strategy": "random", "value": value, "include_zero": True})
    with pytest.raises(ValueError, match=r"value must be in \(0, 1\] for strategy random"):
        SNRFilter(strategy="random", value=value)


def test_the_sampler_draws_a_random_subset_too():
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    rb = ReplayBuffer(
        storage=LazyTensorStorage(64),
        sampler=TopVarianceGroupSampler(strategy="random", value=0.25, include_zero=True, seed=4),
        batch_size=8,
    )
    rb.extend(batch([[1.0, 1.0]] * 8))
    groups = sorted(set(rb.sample()["group_id"].tolist()))
    assert set(groups) <= set(random_groups(8, 0.25, random_seed(4, 0)).tolist())


# nonzero_variance: variances {0, 1} = .5, {1, 1} = 0, {0, 2} = 2, {0, .1, 0, 0} = .0025 (a format
# penalty's kind of small variance), {0, 0} = 0. top_p 1.0 keeps every non-zero one: 0, 2, 3.
# top_p 0.9 (snr_top_p): total 2.5025, threshold 2.25225 -> 2.0, then 2.5: groups 2, 0 (not 3).
SMALL_VARIANCE = [[0.0, 1.0], [1.0, 1.0], [0.0, 2.0], [0.0, -0.1, 0.0, 0.0], [0.0, 0.0]]


def test_nonzero_variance_drops_exactly_the_zero_variance_groups():
    td = batch(SMALL_VARIANCE)
    raw = composed("nonzero_variance")
    assert (raw["strategy"], raw["value"], raw["include_zero"], raw["metric"]) == (
        "top_p",
        1.0,
        False,
        "reward_variance",
    )
    filt = build_filter(raw)
    assert kept_groups(filt, td) == [0, 2, 3]
    _, stats = filt.filter(td)
    assert stats["kept_groups"] == stats["num_groups"] - stats["zero_variance_groups"] == 3.0
    assert kept_groups(build_filter(composed("snr_top_p")), td) == [0, 2]
    assert select_groups(torch.tensor([0.5, 0.0, 2.0, 0.0025, 0.0]), value=1.0).tolist() == [2, 0, 3]


def test_nonzero_variance_keeps_nothing_when_every_group_is_constant():
    kept, stats = build_filter(composed("nonzero_variance")).filter(batch([[1.0, 1.0], [0.0, 0.0]]))
    assert kept is None and stats["empty_after_filter"] == 1.0
