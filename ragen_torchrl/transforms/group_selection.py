"""Pure group statistics and group selection for SNR-aware filtering (RAGEN-2, arXiv 2604.06268, §3.3).

* :func:`group_scores` -- one score per prompt group from per-trajectory values (reward std or
  variance, or an ablation metric).
* :func:`select_groups` -- which groups to keep, given one score per group (top-p linear or
  softmax, top-k, top-k absolute, min-p; ``random``: a seeded subset that reads no score).
* :func:`random_groups` / :func:`random_seed` -- the ``random`` strategy's draw: a seeded subset of
  the candidates at a given kept fraction, the seed mixed from the run seed and the iteration.
* :func:`check_filter_value` -- the valid range of a strategy's ``value``.
* :class:`GroupSelection` -- the six selection settings, checked once, as one frozen value.

No TorchRL here: :class:`~ragen_torchrl.transforms.snr.SNRFilter` (a transform) and
:class:`~ragen_torchrl.transforms.group_sampler.TopVarianceGroupSampler` (a sampler) wrap these, and the
trainer's stop rules (:mod:`ragen_torchrl.trainer.early_stop`) read the same statistics.

Example:
    >>> import torch
    >>> ids, rv = group_scores(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]), "reward_variance")
    >>> ids.tolist(), rv.tolist(), select_groups(rv, strategy="top_p", value=0.9).tolist()
    ([0, 1], [0.5, 0.0], [0])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..checks import check_bool, check_choice, check_number
from ..data.groups import Groups

__all__ = [
    "STRATEGIES",
    "MODES",
    "METRICS",
    "ENTROPY_METRICS",
    "check_filter_value",
    "GroupSelection",
    "select_groups",
    "group_scores",
    "random_groups",
    "random_seed",
]

STRATEGIES = ("top_p", "top_k", "top_k_abs", "min_p", "random")
MODES = ("linear", "softmax")
METRICS = (
    "reward_std",
    "reward_variance",
    "reward_mean",
    "entropy",
    "entropy_std",
    "entropy_variance",
    "length",
)
#: Metrics read from the per-trajectory entropy column (``entropy_key``, default ``"entropy"``).
ENTROPY_METRICS = ("entropy", "entropy_std", "entropy_variance")

# Relative slack of the top_p linear threshold and of the min_p bound: float rounding only, so that
# a prefix that reaches p of the mass mathematically is never missed, and the selection does not
# change when every reward is multiplied by a constant (a tolerance relative to the scores scales
# with them; an absolute one does not).
_MASS_RTOL = 1e-9
# int(0.29 * 100) == 28 in floating point; this nudge makes top_k keep the 29 groups the user means.
_FLOOR_TOL = 1e-9


# --------------------------------------------------------------------------------------------
# selection
# --------------------------------------------------------------------------------------------
_UNKNOWN_OPTION = "unknown {name} {value!r}; valid options: {choices}"


def _check_choice(name: str, got: Any, valid: Sequence[str]) -> None:
    check_choice(name, got, valid, message=_UNKNOWN_OPTION)


def _check_number(name: str, got: Any, *, minimum: float | None = 0.0) -> float:
    # bool is an int subclass: check_number rejects it, so that `value: true` in a YAML file is an error.
    return check_number(name, got, minimum=minimum)


def _check_selection_args(strategy: str, value: Any, mode: str, eps: Any) -> tuple[float, float]:
    _check_choice("strategy", strategy, STRATEGIES)
    _check_choice("mode", mode, MODES)
    value = _check_number("value", value)
    eps = _check_number("eps", eps)
    if strategy == "min_p" and value > 1.0:
        # score >= value * max with value > 1 could only keep groups above the maximum.
        raise ValueError(f"min_p needs a value in [0, 1], got {value!r}")
    return value, eps


def check_filter_value(strategy: str, value: Any, key: str = "value") -> float:
    """Check a filter ``value`` against its strategy's range; return it as a float.

    The ranges a *configured* filter must respect (RAGEN-2 §3.3 and the reference code's
    options): ``top_p`` in (0, 1], ``top_k`` and ``random`` in (0, 1] (a fraction of the groups),
    ``top_k_abs`` a positive integer (``4`` or ``4.0``), ``min_p`` in [0, 1]; NaN, inf and
    booleans are rejected. :func:`select_groups` itself is more lenient (any ``value >= 0``:
    e.g. top_p ``>= 1`` keeps every candidate), so that the pure rule stays total; the config
    (:func:`validate_filter_config`) and :class:`SNRFilter` use this stricter check, because an
    out-of-range value there is almost always a mistake (``top_p: 90``, ``top_k: 4``).

    Args:
        strategy: one of :data:`STRATEGIES`.
        value: the value to check.
        key: the config key named in the error message.

    Raises:
        ValueError: naming ``key``, the strategy, the allowed range and the bad value.

    Examples:
        >>> check_filter_value("top_k_abs", 4)
        4.0
        >>> check_filter_value("top_p", 1.5, "filter.value")
        Traceback (most recent call last):
        ...
        ValueError: filter.value must be in (0, 1] for strategy top_p, got 1.5
        >>> check_filter_value("random", 0, "filter.value")
        Traceback (most recent call last):
        ...
        ValueError: filter.value must be in (0, 1] for strategy random, got 0
    """
    _check_choice("strategy", strategy, STRATEGIES)
    got = _check_number(key, value, minimum=None)
    if strategy in ("top_p", "top_k", "random"):
        ok, allowed = 0.0 < got <= 1.0, "in (0, 1]"
    elif strategy == "top_k_abs":
        ok, allowed = got >= 1.0 and got.is_integer(), "a positive integer"
    else:
        ok, allowed = 0.0 <= got <= 1.0, "in [0, 1]"
    if not ok:
        raise ValueError(f"{key} must be {allowed} for strategy {strategy}, got {value!r}")
    return got


@dataclass(frozen=True)
class GroupSelection:
    """The settings of :func:`select_groups`, checked once, as one frozen value.

    What a configured filter or sampler holds: ``value`` must lie in its strategy's range
    (:func:`check_filter_value`, stricter than :func:`select_groups` itself), ``eps`` is a
    non-negative number and the flags are booleans. The defaults are the paper's rule
    (RAGEN-2 §3.3: top_p 0.9, linear, no absolute slack, zero-score groups excluded).

    Examples:
        >>> import torch
        >>> rule = GroupSelection(strategy="top_k", value=0.5)
        >>> rule.select(torch.tensor([0.5, 0.0, 2.0, 1.0]))
        tensor([2, 3])
        >>> GroupSelection(value=90)
        Traceback (most recent call last):
        ...
        ValueError: value must be in (0, 1] for strategy top_p, got 90
    """

    strategy: str = "top_p"
    value: float = 0.9
    mode: str = "linear"
    include_zero: bool = False
    eps: float = 0.0
    largest: bool = True

    def __post_init__(self) -> None:
        value = check_filter_value(self.strategy, self.value)
        value, eps = _check_selection_args(self.strategy, value, self.mode, self.eps)
        for name in ("include_zero", "largest"):
            check_bool(name, getattr(self, name))
        # frozen: the checked floats replace what was given (e.g. 4 -> 4.0)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "eps", eps)

    def select(self, scores, *, seed: int | None = None) -> torch.Tensor:
        """:func:`select_groups` with these settings: kept group indices, best first (``random``:
        in index order, drawn with ``seed``; the other strategies ignore it)."""
        return select_groups(scores, **asdict(self), seed=seed)


def select_groups(
    scores,
    *,
    strategy: str = "top_p",
    value: float = 0.9,
    mode: str = "linear",
    include_zero: bool = False,
    eps: float = 0.0,
    largest: bool = True,
    seed: int | None = None,
) -> torch.Tensor:
    """Return the indices of the groups to keep, given one score per group.

    Candidates are all groups, minus the zero-score groups (score exactly 0: :func:`group_scores`
    gives exactly 0 to a group whose values are all equal) when ``include_zero`` is False. They are ranked by score -- descending when ``largest`` (the method),
    ascending when not (the "smallest" ablation) -- with a stable sort, so tied groups keep their
    index order (lower index first). The strategy then keeps a prefix (or subset) of that ranking:

    * ``top_p`` / ``mode="linear"`` (recommended): keep the smallest prefix whose cumulative score
      reaches ``value * sum(candidate scores)`` (less a float-rounding slack of ``1e-9`` of the sum,
      and less ``eps``); the prefix stops at the first score ``<= 0``; if the threshold is never
      reached (e.g. every score is 0) nothing is kept. With ``eps = 0`` (the paper's rule) the
      selection is invariant to multiplying the scores by a positive constant, and a positive sum
      keeps at least one group. The reference code subtracts an absolute ``eps = 0.01``, tuned for
      std scores: on variance scores (squares, far smaller) it keeps nothing once
      ``value * sum <= eps`` and well under ``value`` of the mass otherwise.
    * ``top_p`` / ``mode="softmax"`` (the paper's main-table runs): ``probs = softmax(scores)``
      (``softmax(-scores)`` when not ``largest``) in ranking order; keep
      ``searchsorted(cumsum(probs), value) + 1`` groups, at most the number of candidates.
      Scale-dependent: multiplying the rewards by 10 changes the selection.
    * ``top_p`` with ``value >= 1`` keeps every candidate (both modes).
    * ``top_k``: keep ``max(1, int(value * num_groups))`` groups, ``num_groups`` counting *all*
      groups (zero-score ones included), at most the number of candidates.
    * ``top_k_abs``: keep ``max(1, int(value))`` groups, at most the number of candidates.
    * ``min_p`` (``value`` in [0, 1]): when ``largest``, keep groups with
      ``score >= value * max``; when not, keep ``score <= min / value`` (both with a relative
      float-rounding slack). Meant for non-negative scores (std, variance, entropy, length).
    * ``random`` (``value`` in (0, 1], a control): keep a random subset of the candidates drawn with
      ``seed`` (:func:`random_groups`), ``value * num_groups`` of them on average (``num_groups``
      counting *all* groups, at least one, at most the number of candidates), in index order. The
      scores decide only which groups are candidates (``include_zero``): with ``include_zero=True``
      the draw reads no score at all.

    Scale: every rule except ``top_p`` softmax and ``eps > 0`` gives the same selection when all
    scores are multiplied by a positive constant (reward std and mean scale with the rewards,
    variance with their square).

    For ``largest=False`` every rule is applied unchanged to the ascending ranking (top_p linear
    accumulates the smallest positive scores until they reach ``value`` of the total; with
    ``include_zero=True`` a zero score comes first and stops the prefix, so nothing is kept).

    Args:
        scores: 1-D tensor (or sequence) with one finite score per group.

    Keyword Args:
        strategy: one of ``top_p``, ``top_k``, ``top_k_abs``, ``min_p``.
        value: ``p`` for top_p, the fraction for top_k, the count for top_k_abs, the ratio for
            min_p. Must be ``>= 0``.
        mode: ``linear`` or ``softmax`` (used by top_p only, always validated).
        include_zero: whether zero-score groups are candidates at all.
        eps: absolute slack subtracted from the top_p linear threshold: the reference code's
            ``0.01`` (a switch; scale-dependent). ``0`` (default) is the paper's rule.
        largest: rank descending (keep high scores) or ascending (keep low scores).
        seed: the ``random`` strategy's seed (an int; :func:`random_seed` mixes the run seed and
            the iteration into one); the other strategies ignore it.

    Returns:
        A ``torch.long`` tensor of kept group indices **in ranking order** (best first; ties by
        lower index; ``random``: index order). Sort it if you need index order. Empty when nothing
        is kept.

    Raises:
        ValueError: NaN or infinite scores, a scores tensor with more than one dimension, an
            unknown ``strategy``/``mode``, a negative ``value``/``eps``, or ``random`` without a seed.

    Examples:
        >>> import torch
        >>> select_groups(torch.tensor([0.5, 0.0, 2.0, 1.0]))  # 0.9 * 3.5 = 3.15: 2 + 1 < 3.15
        tensor([2, 3, 0])
        >>> select_groups(torch.tensor([0.0025, 0.0025]), eps=0.01)  # reference slack: 0.0045 - 0.01 < 0
        tensor([], dtype=torch.int64)
        >>> select_groups(torch.tensor([0.5, 0.0, 2.0, 1.0]), strategy="top_k", value=0.5)
        tensor([2, 3])
        >>> select_groups(torch.zeros(3))  # no group carries signal
        tensor([], dtype=torch.int64)
        >>> select_groups(torch.zeros(4), strategy="random", value=0.5, include_zero=True, seed=0).numel()
        2
    """
    value, eps = _check_selection_args(strategy, value, mode, eps)
    scores = torch.as_tensor(scores)
    if scores.ndim > 1:
        raise ValueError(f"scores must be 1-D (one per group), got shape {tuple(scores.shape)}")
    # float64 keeps the cumulative sums exact enough for the hand-checked thresholds.
    scores = scores.reshape(-1).to(torch.float64)
    device = scores.device
    empty = torch.empty(0, dtype=torch.long, device=device)
    if torch.isnan(scores).any():
        raise ValueError(
            f"select_groups got NaN scores at group indices "
            f"{torch.nonzero(torch.isnan(scores)).flatten().tolist()}; check the episode returns"
        )
    if not torch.isfinite(scores).all():
        raise ValueError("select_groups got infinite scores; scores must be finite")

    num_groups = scores.numel()
    candidates = torch.arange(num_groups, device=device)
    if not include_zero:
        nonzero = scores != 0
        scores, candidates = scores[nonzero], candidates[nonzero]
    num_candidates = scores.numel()
    if num_candidates == 0:
        return empty
    if strategy == "random":
        if seed is None:
            raise ValueError("strategy random needs a seed (an int, e.g. random_seed(run seed, iteration))")
        return candidates[random_groups(num_candidates, value, seed, num_groups=num_groups).to(device)]

    order = torch.sort(scores, descending=largest, stable=True).indices
    ranked_scores, ranked = scores[order], candidates[order]

    if strategy == "top_p":
        if value >= 1.0:
            return ranked
        if mode == "softmax":
            probs = torch.softmax(ranked_scores if largest else -ranked_scores, dim=0)
            # searchsorted (left) = first position whose cumulative mass is >= p.
            cutoff = int(torch.searchsorted(torch.cumsum(probs, 0), value).item())
            return ranked[: min(cutoff + 1, num_candidates)]
        total = float(scores.sum())
        threshold = value * total - _MASS_RTOL * abs(total) - eps
        cumulative, count = 0.0, 0
        for score in ranked_scores.tolist():
            if cumulative >= threshold or score <= 0:
                break
            cumulative += score
            count += 1
        return ranked[:count] if cumulative >= threshold else empty

    if strategy in ("top_k", "top_k_abs"):
        raw = value * num_groups if strategy == "top_k" else value
        k = max(1, min(int(raw + _FLOOR_TOL), num_candidates))
        return ranked[:k]

    # min_p: the relative slack keeps the max (or min) itself when value == 1, at any scale.
    if largest:
        bound = value * float(ranked_scores.max())
        keep = ranked_scores >= bound - _MASS_RTOL * abs(bound)
    else:
        bound = float(ranked_scores.min()) / value if value > 0 else math.inf
        keep = ranked_scores <= bound + _MASS_RTOL * abs(bound)
    return ranked[keep]


# --------------------------------------------------------------------------------------------
# the random control
# --------------------------------------------------------------------------------------------
#: added to the mixed seed, so that the filter's draws are not the level seeds' stream
#: (:func:`~ragen_torchrl.envs.splits.train_level_seeds` seeds with ``seed * 1_000_003 + iteration``)
_RANDOM_STREAM = 0x5EED_F117


def _check_int(name: str, got: Any) -> int:
    if isinstance(got, bool) or not isinstance(got, int):
        raise ValueError(f"{name} must be an integer, got {got!r}")
    return got


def random_seed(seed: int, step: int) -> int:
    """The ``random`` strategy's seed for iteration ``step`` of a run seeded ``seed``: reproducible,
    different at every iteration and run seed, and independent of the rewards.

    ``(seed * 1_000_003 + step + 0x5EEDF117) mod 2**63``: a resumed run draws the same subsets.

    Examples:
        >>> random_seed(0, 0), random_seed(0, 1), random_seed(1, 0)
        (1592652055, 1592652056, 1593652058)
        >>> random_seed(0, 1.5)
        Traceback (most recent call last):
        ...
        ValueError: step must be an integer, got 1.5
    """
    seed, step = _check_int("seed", seed), _check_int("step", step)
    return (seed * 1_000_003 + step + _RANDOM_STREAM) % 2**63


def random_groups(num_candidates: int, fraction: float, seed: int, *, num_groups: int | None = None) -> torch.Tensor:
    """A seeded random subset of ``range(num_candidates)`` at the kept fraction ``fraction``, in index order.

    The count is ``fraction * num_groups`` rounded at random: ``floor(fraction * num_groups + u)``
    with ``u`` uniform in [0, 1), i.e. the floor or the floor plus one, the latter with probability
    the fractional part, so the *expected* kept ratio is ``fraction`` exactly (0.36 of 16 groups
    = 5.76: 6 groups with probability 0.76, else 5; an integer product is kept exactly). At least
    one group is kept (which lifts the mean above ``fraction`` only when ``fraction * num_groups
    < 1``), at most ``num_candidates``. Then ``count`` of the candidates are drawn uniformly without
    replacement. ``u`` and the draw come from a ``torch.Generator`` seeded with ``seed`` alone (the
    global RNG is neither read nor advanced), so the same arguments always give the same subset.

    Args:
        num_candidates: the groups to draw from.
        fraction: the kept fraction, ``> 0`` (a configured filter checks (0, 1]).
        seed: the generator's seed (e.g. :func:`random_seed` of the run seed and the iteration).

    Keyword Args:
        num_groups: the groups ``fraction`` is a fraction of; defaults to ``num_candidates``.

    Returns:
        A sorted ``torch.long`` tensor of distinct indices in ``[0, num_candidates)``.

    Examples:
        >>> random_groups(4, 0.5, seed=0).numel(), random_groups(4, 1.0, seed=0).tolist()
        (2, [0, 1, 2, 3])
        >>> random_groups(16, 0.36, seed=7).numel() in (5, 6)  # 5.76 groups on average
        True
        >>> torch.equal(random_groups(16, 0.36, seed=7), random_groups(16, 0.36, seed=7))
        True
        >>> random_groups(3, 0.1, seed=0).numel()  # 0.3 groups: at least one is kept
        1
    """
    num_candidates = _check_int("num_candidates", num_candidates)
    num_groups = num_candidates if num_groups is None else _check_int("num_groups", num_groups)
    fraction = _check_number("fraction", fraction)
    seed = _check_int("seed", seed)
    if num_candidates <= 0:
        return torch.empty(0, dtype=torch.long)
    if fraction <= 0:
        raise ValueError(f"fraction must be > 0, got {fraction!r}")
    generator = torch.Generator().manual_seed(seed)
    expected = fraction * num_groups
    if abs(expected - round(expected)) < _FLOOR_TOL:  # an integer product is kept exactly (0.29 * 100 = 28.999...)
        expected = float(round(expected))
    u = float(torch.rand((), dtype=torch.float64, generator=generator))
    count = max(1, min(int(math.floor(expected + u)), num_candidates))
    return torch.randperm(num_candidates, generator=generator)[:count].sort().values


# --------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------
def group_scores(
    returns,
    group_ids,
    metric: str = "reward_variance",
    entropy=None,
    lengths=None,
    *,
    groups: Groups | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Score every prompt group from per-trajectory values.

    Metrics: ``reward_variance`` (unbiased within-group variance of ``returns`` -- the paper's
    text, RAGEN-2 §3.3, and the default of the presets), ``reward_std`` (its square root, ddof=1
    -- what the reference code ranks by), and the ablations ``reward_mean``, ``entropy`` (group
    mean of the per-trajectory entropy), ``entropy_std`` / ``entropy_variance`` (unbiased std /
    variance *across the group* of the per-trajectory entropies: the "entropy-variance" filter)
    and ``length`` (group mean of per-trajectory length). A group with a single trajectory has
    std/variance 0: it carries no within-group signal.

    The entropy metrics need exactly one number per trajectory (the trainer's ``entropy`` column:
    the mean token entropy of the trajectory's generated tokens, shape ``(N,)``); per-token values
    must be reduced first.

    Args:
        returns: one raw episode return per trajectory, shape (N,) (or (N, 1) / (N, 1, 1)).
        group_ids: integer group id per trajectory, shape (N,).
        metric: one of :data:`METRICS`. Defaults to ``reward_variance`` (the paper's text).
        entropy: per-trajectory entropy (one value each), needed by the :data:`ENTROPY_METRICS`.
        lengths: per-trajectory length (e.g. response tokens), needed by ``length``.
        groups: the batch's :class:`~ragen_torchrl.data.groups.Groups` of ``returns``, when already
            built (its moments are then not computed again).

    Returns:
        ``(ids, scores)``: the unique group ids in ascending order (long) and one float64 score
        per id, aligned.

    Examples:
        >>> import torch
        >>> r, g = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([7, 7, 3, 3])
        >>> ids, s = group_scores(r, g)  # group 7: unbiased variance of {1, 0} = 0.5
        >>> ids.tolist(), s.tolist()
        ([3, 7], [0.0, 0.5])
        >>> [round(x, 4) for x in group_scores(r, g, "reward_std")[1].tolist()]  # sqrt(0.5)
        [0.0, 0.7071]
    """
    _check_choice("metric", metric, METRICS)
    group_ids = torch.as_tensor(group_ids)
    if group_ids.ndim != 1:
        raise ValueError(f"group_ids must be 1-D, got shape {tuple(group_ids.shape)}")
    if group_ids.is_floating_point() or group_ids.is_complex():
        raise ValueError(f"group_ids must be integers, got dtype {group_ids.dtype}")
    if groups is None:
        groups = Groups.from_values(group_ids, returns)
    return scores_of(groups, metric, entropy=entropy, lengths=lengths)


def scores_of(
    groups: Groups, metric: str = "reward_variance", entropy=None, lengths=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`group_scores` of a :class:`~ragen_torchrl.data.groups.Groups` built from the returns.

    The reward metrics read its moments; the entropy and length metrics build the moments of their
    own column over the same groups.

    Example:
        >>> import torch
        >>> g = Groups.from_values(torch.tensor([7, 7, 3, 3]), torch.tensor([1.0, 0.0, 1.0, 1.0]))
        >>> scores_of(g, "reward_mean")[1].tolist()
        [1.0, 0.5]
    """
    _check_choice("metric", metric, METRICS)
    if metric in ENTROPY_METRICS or metric == "length":
        column, name = (entropy, "entropy") if metric in ENTROPY_METRICS else (lengths, "lengths")
        if column is None:
            what = "per-trajectory entropy values" if name == "entropy" else "per-trajectory lengths"
            raise ValueError(f"metric {metric!r} needs {what} (got None)")
        groups = Groups.from_values(groups.ids[groups.inverse], column, name=name)
    ids, mean, variance = groups.ids, groups.mean, groups.var
    if metric in ("reward_std", "entropy_std"):
        return ids, variance.sqrt()
    if metric in ("reward_variance", "entropy_variance"):
        return ids, variance
    return ids, mean


def filter_stats(reward_var: torch.Tensor, kept_group: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    num_groups = reward_var.numel()
    kept_groups = int(kept_group.sum())
    std = reward_var.sqrt()
    kept_std = std[kept_group]
    rv_mean = float(reward_var.mean()) if num_groups else 0.0
    # Population std: defined for a single group and independent of a ddof convention choice.
    rv_std = float(reward_var.std(correction=0)) if num_groups else 0.0
    return {
        "num_groups": float(num_groups),
        "kept_groups": float(kept_groups),
        "kept_ratio": kept_groups / num_groups if num_groups else 0.0,
        "num_trajectories": float(mask.numel()),
        "kept_trajectories": float(mask.sum()),
        "zero_variance_groups": float((std == 0).sum()),
        "in_group_std_mean": float(std.mean()) if num_groups else 0.0,
        "in_group_std_max": float(std.max()) if num_groups else 0.0,
        "kept_in_group_std_mean": float(kept_std.mean()) if kept_groups else 0.0,
        "kept_in_group_std_max": float(kept_std.max()) if kept_groups else 0.0,
        "empty_after_filter": 0.0 if kept_groups else 1.0,
        "heterogeneity": rv_std / rv_mean if rv_mean > 0 else 0.0,
    }
