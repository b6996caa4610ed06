"""Fidelity of SNR-aware filtering to RAGEN-2 (arXiv 2604.06268, §3.3) and its reference code.

Covers the early-stop rules without a filter (``unfiltered_stats`` + ``FilterGuard``), the
validation-success stop (``ValidationStop``), the range of ``filter.value``, the paper-text vs
reference-code presets and the per-trajectory entropy column the entropy ablations read. Every
expected number is worked out by hand in the comment next to it.
"""

import math
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from ragen_torchrl.trainer.config_paths import PACKAGE_CONFIG_DIR
from ragen_torchrl.trainer.early_stop import FilterGuard, ValidationStop, unfiltered_stats
from ragen_torchrl.transforms.group_selection import check_filter_value
from ragen_torchrl.transforms.snr import SNRFilter, build_filter, validate_filter_config

CONFIG_DIR = Path(PACKAGE_CONFIG_DIR) / "filter"
GROUPS = [0, 0, 1, 1, 2, 2]
RETURNS = [1.0, 0.0, 1.0, 1.0, 0.0, 2.0]  # var .5, 0, 2; std .7071, 0, 1.4142


def load(name):
    """The ``filter`` node Hydra composes for ``filter=name`` (presets inherit from snr_top_p)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(CONFIG_DIR.parent), version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=[f"filter={name}"]).filter)


def records(returns=RETURNS, groups=GROUPS, **extra):
    n = len(groups)
    return TensorDict(group_id=torch.tensor(groups), episode_return=torch.tensor(returns), batch_size=[n], **extra)


# ---------------------------------------------------------------------- stops without a filter
def test_stop_stats_read_the_batch_before_dynamic_sampling():
    from ragen_torchrl.trainer.early_stop import stop_stats

    # a DAPO batch where every group is constant: dynamic sampling keeps nothing and the update
    # is skipped; the collapse statistic is that of the batch as sampled (std 0 everywhere) and
    # the iteration is empty
    s = stop_stats(torch.tensor([1.0, 1.0, 0.0, 0.0, -0.1, -0.1]), torch.tensor([0, 0, 1, 1, 2, 2]), skipped=True)
    assert s == {"in_group_std_mean": 0.0, "empty_after_filter": 1.0}
    # one informative group among constant ones: (std{1, 0} + 0 + 0) / 3 = .70711 / 3 = .23570,
    # not the .70711 of the one group dynamic sampling keeps
    s = stop_stats(torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]), torch.tensor(GROUPS), skipped=False)
    assert s["in_group_std_mean"] == pytest.approx(math.sqrt(0.5) / 3) and s["empty_after_filter"] == 0.0
    guard = FilterGuard(max_consecutive_empty=2)
    empty = stop_stats(torch.ones(4), torch.tensor([0, 0, 1, 1]), skipped=True)
    assert guard.update(empty) is None
    assert guard.update(empty) == "empty_selection: 2 consecutive iterations kept no group"


def test_unfiltered_stats_by_hand():
    # RAGEN-2 §4: "early stopping triggered by reward-variance collapse" applies to the no-filter arm too
    s = unfiltered_stats(torch.tensor(RETURNS), torch.tensor(GROUPS))
    assert s["num_groups"] == 3.0 and s["kept_groups"] == 3.0 and s["kept_ratio"] == 1.0
    assert s["num_trajectories"] == 6.0 and s["kept_trajectories"] == 6.0
    assert s["empty_after_filter"] == 0.0
    assert s["zero_variance_groups"] == 1.0
    # (sqrt(.5) + 0 + sqrt(2)) / 3 = .70711; max sqrt(2)
    assert s["in_group_std_mean"] == pytest.approx((math.sqrt(0.5) + math.sqrt(2.0)) / 3)
    assert s["in_group_std_max"] == pytest.approx(math.sqrt(2.0))
    # RV [.5, 0, 2]: mean 5/6, population std sqrt(((1/3)^2 + (5/6)^2 + (7/6)^2) / 3) = sqrt(13/18)
    assert s["heterogeneity"] == pytest.approx(math.sqrt(13 / 18) / (5 / 6))
    # same keys as the filter logs, and the same reward statistics as a keep-everything filter
    keep_all = SNRFilter(value=1.0, include_zero=True)
    _, kept_stats = keep_all.filter(records())
    assert set(s) == set(kept_stats)
    assert s == pytest.approx(kept_stats)
    # string group ids and the (N, 1, 1) reward shape work as in the filter
    s2 = unfiltered_stats(torch.tensor(RETURNS).reshape(6, 1, 1), ["a", "a", "b", "b", "c", "c"])
    assert s2 == pytest.approx(s)


def test_none_preset_keeps_every_group_and_still_runs_the_stop_rules():
    cfg = load("none")
    assert build_filter(cfg) is None  # filter=none: every group is used
    assert (cfg["value"], cfg["include_zero"]) == (1.0, True)  # the reference's "no filter"
    guard = FilterGuard.from_config({"collapse_stop": {"warmup": 2, "patience": 2}})  # trainer.early_stop
    assert guard.collapse_stop and guard.max_consecutive_empty == 5
    # two healthy iterations: base = mean in-group std = .70711 -> limit .070711
    for _ in range(2):
        assert guard.update(unfiltered_stats(torch.tensor(RETURNS), torch.tensor(GROUPS))) is None
    # collapsed: every group {1, 1.01}: std .01 / sqrt(2) = .00707 < .0707
    collapsed = unfiltered_stats(torch.tensor([1.0, 1.01] * 3), torch.tensor(GROUPS))
    assert collapsed["in_group_std_mean"] == pytest.approx(0.01 / math.sqrt(2))
    assert guard.update(collapsed) is None
    assert guard.update(collapsed).startswith("reward_variance_collapse")
    assert ValidationStop.from_config({}).enabled


# ---------------------------------------------------------------------- validation-success stop
def test_validation_stop_by_hand():
    # reference: stop when validation success is below 1% for 5 consecutive validations
    stop = ValidationStop()
    assert (stop.threshold, stop.patience, stop.enabled) == (0.01, 5, True)
    for it, s in zip((10, 20, 30, 40), (0.0, 0.005, 0.0, 0.0)):
        assert stop.update(s, it) is None
    assert stop.update(0.01, 50) is None  # exactly 1% is not "below 1%": the count resets
    assert stop.consecutive_low == 0
    for it, s in zip((60, 70, 80, 90), (0.0, 0.009, 0.0, 0.0)):
        assert stop.update(s, it) is None
    assert stop.metrics() == {"val_consecutive_low": 4.0, "val_patience": 5.0}
    reason = stop.update(0.0, 100)  # 5th in a row
    assert reason == "validation_success: below 0.01 for 5 consecutive validations"
    assert stop.stop_reason == reason
    # a resumed run continues the count
    other = ValidationStop()
    other.load_state_dict(stop.state_dict())
    assert other.state_dict() == stop.state_dict() and other.consecutive_low == 5
    # disabled: counts, never stops
    off = ValidationStop(patience=1, enabled=False)
    assert off.update(0.0, 10) is None and off.consecutive_low == 1


def test_validation_stop_does_not_count_the_validation_before_training():
    # success 0 at iterations 0, 10, ..., 50: the reference only logs the initial validation, so
    # the 5 low validations that stop the run are those at 10..50 (stop at 50, not at 40)
    stop = ValidationStop()
    assert [stop.update(0.0, it) for it in (0, 10, 20, 30, 40)] == [None] * 5
    assert stop.consecutive_low == 4
    assert stop.update(0.0, 50) == "validation_success: below 0.01 for 5 consecutive validations"
    with pytest.raises(ValueError, match="validation iteration"):
        ValidationStop().update(0.0, -1)


def test_collapse_window_starts_after_the_warm_up():
    # in-group std [1, 0 x 9] sets the base 0.1 (limit 0.01) at iteration 10; then std 0 on: the
    # reference clears the window when the base is set, so the 10 collapsed iterations it needs are
    # 11..20 (the warm-up's own zeros do not count: no stop at 11)
    guard = FilterGuard()
    stds = [1.0] + [0.0] * 9 + [0.0] * 10
    reasons = [guard.update({"empty_after_filter": 0.0, "in_group_std_mean": s}) for s in stds]
    assert guard.base_std == pytest.approx(0.1)
    first = next(i for i, r in enumerate(reasons, start=1) if r is not None)
    assert first == 20 and reasons[19].startswith("reward_variance_collapse")
    # empty iterations enter neither the warm-up nor the window
    guard = FilterGuard(max_consecutive_empty=0, warmup=2, patience=2)
    feed = [(0, 1.0), (0, 1.0), (1, 0.0), (0, 0.0), (1, 0.0), (0, 0.0)]
    reasons = [guard.update({"empty_after_filter": float(e), "in_group_std_mean": s}) for e, s in feed]
    assert reasons[:5] == [None] * 5 and reasons[5].startswith("reward_variance_collapse")
    assert guard.metrics()["collapse_window_below"] == 2.0


def test_validation_stop_config_and_errors():
    # trainer.early_stop.val_stop: its fields are checked by the typed config, named in full
    from ragen_torchrl.trainer.config_keys import check_unknown_keys
    from ragen_torchrl.trainer.config_typing import check_fields, typed_config

    stop = ValidationStop.from_config({"val_stop": {"threshold": 0.05, "patience": 3}})
    assert (stop.threshold, stop.patience, stop.enabled) == (0.05, 3, True)
    key = "trainer.early_stop.val_stop"
    for bad, match in [
        ({"threshold": 1.5}, rf"{key}.threshold must be a finite number in \[0.0, 1.0\], got 1.5"),
        ({"patience": 0}, f"{key}.patience must be a positive integer, got 0"),
        ({"enabled": "yes"}, f"{key}.enabled must be true or false"),
        ({"patiense": 2}, rf"{key}.patiense \(did you mean {key}.patience\?\)"),
    ]:
        node = {"trainer": {"early_stop": {"val_stop": bad}}}
        with pytest.raises(ValueError, match=match):
            check_unknown_keys(node)
            check_fields(typed_config(node))
    with pytest.raises(ValueError, match="filter.val_stop moved to trainer.early_stop.val_stop"):
        validate_filter_config({"val_stop": {"patience": 3}})
    with pytest.raises(ValueError, match="rate in"):
        ValidationStop().update(2.0, 10)
    with pytest.raises(ValueError, match="finite"):
        ValidationStop().update(float("nan"), 10)


# ---------------------------------------------------------------------- filter.value ranges
@pytest.mark.parametrize(
    "strategy, value, allowed",
    [
        ("top_p", 0.0, r"in \(0, 1\]"),
        ("top_p", 1.5, r"in \(0, 1\]"),
        ("top_p", 90, r"in \(0, 1\]"),
        ("top_k", 0.0, r"in \(0, 1\]"),
        ("top_k", 4, r"in \(0, 1\]"),
        ("top_k_abs", 2.5, "a positive integer"),
        ("top_k_abs", 0, "a positive integer"),
        ("top_k_abs", -3, "a positive integer"),
        ("min_p", 1.5, r"in \[0, 1\]"),
        ("min_p", -0.1, r"in \[0, 1\]"),
    ],
)
def test_out_of_range_value_is_a_config_error(strategy, value, allowed):
    # top_p in (0,1], top_k in (0,1], top_k_abs a positive integer, min_p in [0,1]
    with pytest.raises(ValueError, match=f"filter.value must be {allowed} for strategy {strategy}, got {value}"):
        validate_filter_config({"strategy": strategy, "value": value})
    with pytest.raises(ValueError, match=f"value must be {allowed}"):
        SNRFilter(strategy=strategy, value=value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, "0.9"])
def test_non_finite_or_non_number_value_is_rejected(value):
    with pytest.raises(ValueError, match="filter.value must be"):
        validate_filter_config({"value": value})


@pytest.mark.parametrize(
    "strategy, value",
    [
        ("top_p", 1.0),
        ("top_p", 1e-6),
        ("top_k", 1.0),
        ("top_k_abs", 4),
        ("top_k_abs", 4.0),
        ("min_p", 0.0),
        ("min_p", 1.0),
    ],
)
def test_in_range_values_are_accepted(strategy, value):
    assert check_filter_value(strategy, value) == float(value)
    assert validate_filter_config({"strategy": strategy, "value": value})["value"] == float(value)


# ---------------------------------------------------------------------- paper text vs reference
def test_paper_text_and_reference_presets_select_differently():
    td = records()
    # paper text (snr_top_p): variance [.5, 0, 2] excluding zeros, thr .9 * 2.5 - .01 = 2.24:
    # group 2 (2.0) then group 0 (2.5) -> rows 0, 1, 4, 5
    paper = build_filter(load("snr_top_p"))
    assert paper(td)["group_id"].tolist() == [0, 0, 2, 2]
    # reference code (snr_reference): softmax over std [1.4142, .7071, 0] in ranking order
    # = [.5760, .2840, .1400], cumsum [.5760, .8600, 1.0]; searchsorted(.9) = 2 -> 3 groups,
    # the zero-std group 1 included
    ref = build_filter(load("snr_reference"))
    assert ref(td)["group_id"].tolist() == GROUPS
    assert ref.filter(td)[1]["kept_groups"] == 3.0 and paper.filter(td)[1]["kept_groups"] == 2.0


def test_top_k_preset_includes_zero_variance_groups():
    # RAGEN: top-k keeps zero-variance groups as candidates. 8 groups, k = int(.25 * 8) = 2;
    # only group 0 ({0, 1}, var .5) varies -> groups 0, then group 1 (first zero group by index)
    groups = [g for g in range(8) for _ in range(2)]
    returns = [0.0, 1.0] + [1.0] * 14
    out = build_filter(load("snr_top_k"))(records(returns, groups))
    assert out["group_id"].tolist() == [0, 0, 1, 1]


# ---------------------------------------------------------------------- the entropy column
def test_entropy_ablations_read_one_entropy_value_per_trajectory():
    # the trainer's `entropy` column: mean token entropy per trajectory, shape (N,)
    ent = torch.tensor([1.0, 3.0, 2.0, 2.0, 0.0, 4.0])
    td = records(entropy=ent)
    # entropy: group means [2, 2, 2] -> all equal; thr .9 * 6 - .01 = 5.39 -> 3 groups, index order
    assert build_filter(load("snr_entropy"))(td)["group_id"].tolist() == GROUPS
    # entropy_variance: {1, 3} -> 2, {2, 2} -> 0, {0, 4} -> 8; thr .9 * 10 - .01 = 8.99:
    # group 2 (8) then group 0 (10)
    assert build_filter(load("snr_entropy_variance"))(td)["group_id"].tolist() == [0, 0, 2, 2]
    # entropy_std (std across the group of per-trajectory entropies) needs nothing else
    assert SNRFilter(metric="entropy_std")(td)["group_id"].tolist() == [0, 0, 2, 2]
    # per-token entropies (N, T) must be reduced by the trainer first
    with pytest.raises(ValueError, match="one value per trajectory"):
        SNRFilter(metric="entropy")(records(entropy=torch.ones(6, 3)))
