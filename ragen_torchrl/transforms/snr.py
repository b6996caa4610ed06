"""SNR-aware filtering (RAGEN-2 §3.3) as pure functions and a TorchRL transform.

Per training iteration the rollout holds P prompt groups x G samples. Each group is scored from the
*raw* episode returns (never from already-normalised advantages: after normalisation every group
has unit std and the signal is gone), the groups are ranked, a subset is kept *whole* and the rest
is dropped. Filtering runs before advantage computation and before the expensive per-sample work
(behaviour/reference log-probs, critic values, the update), so a smaller kept set also makes the
step cheaper.

Layers, from pure to integrated:

* :func:`select_groups` -- which groups to keep, given one score per group.
* :func:`group_scores` -- one score per group from per-trajectory values.
* :class:`SNRFilter` -- a replay-buffer write-time transform (``_inv_call``) that drops whole
  groups from a TensorDict of trajectory records, and logs ``last_stats``.
* :class:`FilterGuard`, :class:`ValidationStop`, :func:`unfiltered_stats` and :func:`loss_scale` --
  small training-loop helpers (the early-stop rules, which also run without a filter, and the
  optional kept-ratio loss scaling).
* :func:`validate_filter_config` / :func:`build_filter` -- the Hydra ``filter`` config group.

**Paper text vs reference code** (RAGEN-2, arXiv 2604.06268, §3.3). The paper's text ranks groups
by within-group reward *variance* and keeps the smallest prefix reaching ``p`` of the variance mass
(top-p linear, zero-variance groups excluded): that is the default here and the ``snr_top_p``
preset. The reference code scores by the unbiased reward *std* and keeps
``searchsorted(cumsum(softmax(std)), p) + 1`` groups, zero-std groups included: the
``snr_reference`` preset (``metric=reward_std, mode=softmax, include_zero=True``).

The sampler counterpart (draw mini-batches only from the top groups of a persistent buffer) is
:class:`ragen_torchrl.data.group_sampler.TopVarianceGroupSampler`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.envs.transforms import Transform

__all__ = [
    "STRATEGIES",
    "MODES",
    "METRICS",
    "ENTROPY_METRICS",
    "LOSS_SCALE_MODES",
    "FILTER_CONFIG_DEFAULTS",
    "check_filter_value",
    "select_groups",
    "group_scores",
    "SNRFilter",
    "FilterGuard",
    "ValidationStop",
    "unfiltered_stats",
    "loss_scale",
    "validate_filter_config",
    "build_filter",
]

STRATEGIES = ("top_p", "top_k", "top_k_abs", "min_p")
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
LOSS_SCALE_MODES = ("none", "linear", "sqrt")

# A group whose score is within this of 0 counts as "zero" (no signal). Matches the reference
# implementation, and is far below any reward scale we use, so float round-off of a constant
# group's std (~1e-17) is classed as zero while a genuine 1e-6 std is not.
_ZERO_TOL = 1e-10
# int(0.29 * 100) == 28 in floating point; this nudge makes top_k keep the 29 groups the user means.
_FLOOR_TOL = 1e-9


# --------------------------------------------------------------------------------------------
# selection
# --------------------------------------------------------------------------------------------
def _check_choice(name: str, got: Any, valid: Sequence[str]) -> None:
    if got not in valid:
        raise ValueError(f"unknown {name} {got!r}; valid options: {', '.join(valid)}")


def _check_number(name: str, got: Any, *, minimum: float | None = 0.0) -> float:
    # bool is an int subclass: reject it so that `value: true` in a YAML file is an error.
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        raise ValueError(f"{name} must be a number, got {got!r}")
    got = float(got)
    if not math.isfinite(got):
        raise ValueError(f"{name} must be finite, got {got!r}")
    if minimum is not None and got < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {got!r}")
    return got


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
    options): ``top_p`` in (0, 1], ``top_k`` in (0, 1] (a fraction of the groups),
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
    """
    _check_choice("strategy", strategy, STRATEGIES)
    got = _check_number(key, value, minimum=None)
    if strategy in ("top_p", "top_k"):
        ok, allowed = 0.0 < got <= 1.0, "in (0, 1]"
    elif strategy == "top_k_abs":
        ok, allowed = got >= 1.0 and got.is_integer(), "a positive integer"
    else:
        ok, allowed = 0.0 <= got <= 1.0, "in [0, 1]"
    if not ok:
        raise ValueError(f"{key} must be {allowed} for strategy {strategy}, got {value!r}")
    return got


def select_groups(
    scores,
    *,
    strategy: str = "top_p",
    value: float = 0.9,
    mode: str = "linear",
    include_zero: bool = False,
    eps: float = 0.01,
    largest: bool = True,
) -> torch.Tensor:
    """Return the indices of the groups to keep, given one score per group.

    Candidates are all groups, minus the zero-score groups (``|score| <= 1e-10``) when
    ``include_zero`` is False. They are ranked by score -- descending when ``largest`` (the method),
    ascending when not (the "smallest" ablation) -- with a stable sort, so tied groups keep their
    index order (lower index first). The strategy then keeps a prefix (or subset) of that ranking:

    * ``top_p`` / ``mode="linear"`` (recommended): keep the smallest prefix whose cumulative score
      reaches ``value * sum(candidate scores) - eps``; the prefix stops at the first score ``<= 0``;
      if the threshold is never reached (e.g. every score is 0) nothing is kept.
    * ``top_p`` / ``mode="softmax"`` (the paper's main-table runs): ``probs = softmax(scores)``
      (``softmax(-scores)`` when not ``largest``) in ranking order; keep
      ``searchsorted(cumsum(probs), value) + 1`` groups, at most the number of candidates.
      Scale-dependent: multiplying the rewards by 10 changes the selection.
    * ``top_p`` with ``value >= 1`` keeps every candidate (both modes).
    * ``top_k``: keep ``max(1, int(value * num_groups))`` groups, ``num_groups`` counting *all*
      groups (zero-score ones included), at most the number of candidates.
    * ``top_k_abs``: keep ``max(1, int(value))`` groups, at most the number of candidates.
    * ``min_p`` (``value`` in [0, 1]): when ``largest``, keep groups with
      ``score >= value * max``; when not, keep ``score <= min / value``. Meant for non-negative
      scores (std, variance, entropy, length).

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
        eps: slack subtracted from the top_p linear threshold, so that round-off cannot make a
            full prefix miss a threshold it mathematically reaches.
        largest: rank descending (keep high scores) or ascending (keep low scores).

    Returns:
        A ``torch.long`` tensor of kept group indices **in ranking order** (best first; ties by
        lower index). Sort it if you need index order. Empty when nothing is kept.

    Raises:
        ValueError: NaN or infinite scores, a scores tensor with more than one dimension, an
            unknown ``strategy``/``mode``, or a negative ``value``/``eps``.

    Examples:
        >>> import torch
        >>> select_groups(torch.tensor([0.5, 0.0, 2.0, 1.0]))  # 0.9 * 3.5 - 0.01 = 3.14
        tensor([2, 3, 0])
        >>> select_groups(torch.tensor([0.5, 0.0, 2.0, 1.0]), strategy="top_k", value=0.5)
        tensor([2, 3])
        >>> select_groups(torch.zeros(3))  # no group carries signal
        tensor([], dtype=torch.int64)
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
        nonzero = scores.abs() > _ZERO_TOL
        scores, candidates = scores[nonzero], candidates[nonzero]
    num_candidates = scores.numel()
    if num_candidates == 0:
        return empty

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
        threshold = value * float(scores.sum()) - eps
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

    # min_p: the small tolerance keeps the max (or min) itself when value == 1.
    if largest:
        keep = ranked_scores >= value * float(ranked_scores.max()) - _ZERO_TOL
    else:
        bound = float(ranked_scores.min()) / value if value > 0 else math.inf
        keep = ranked_scores <= bound + _ZERO_TOL
    return ranked[keep]


# --------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------
def _per_row(name: str, values, num_rows: int) -> torch.Tensor:
    """One float64 value per trajectory; accepts (N,), (N, 1) or (N, 1, 1) (LLM reward shape)."""
    values = torch.as_tensor(values)
    if values.numel() != num_rows:
        raise ValueError(
            f"{name} must hold one value per trajectory ({num_rows}), got shape "
            f"{tuple(values.shape)}; reduce per-step/per-token values to one per trajectory first"
        )
    values = values.reshape(num_rows).to(torch.float64)
    if torch.isnan(values).any():
        raise ValueError(f"{name} contains NaN")
    return values


def _segment_moments(values: torch.Tensor, inverse: torch.Tensor, num_groups: int):
    """Per-group count, mean and unbiased variance (0 for a group of one)."""
    count = torch.zeros(num_groups, dtype=torch.float64, device=values.device)
    count.index_add_(0, inverse, torch.ones_like(values))
    total = torch.zeros_like(count).index_add_(0, inverse, values)
    mean = total / count
    # Two-pass (deviations from the group mean) rather than E[x^2] - E[x]^2: a constant group then
    # has exactly zero variance, which the zero-score test relies on.
    deviation = values - mean[inverse]
    squares = torch.zeros_like(count).index_add_(0, inverse, deviation * deviation)
    variance = torch.where(count > 1, squares / (count - 1).clamp_min(1), torch.zeros_like(count))
    return count, mean, variance


def group_scores(
    returns,
    group_ids,
    metric: str = "reward_variance",
    entropy=None,
    lengths=None,
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
    num_rows = group_ids.numel()
    returns = _per_row("returns", returns, num_rows)
    ids, inverse = torch.unique(group_ids, sorted=True, return_inverse=True)
    num_groups = ids.numel()

    if metric in ("reward_std", "reward_variance", "reward_mean"):
        values = returns
    elif metric in ENTROPY_METRICS:
        if entropy is None:
            raise ValueError(f"metric {metric!r} needs per-trajectory entropy values (got None)")
        values = _per_row("entropy", entropy, num_rows)
    else:
        if lengths is None:
            raise ValueError(f"metric {metric!r} needs per-trajectory lengths (got None)")
        values = _per_row("lengths", lengths, num_rows)

    _, mean, variance = _segment_moments(values, inverse.to(values.device), num_groups)
    if metric in ("reward_std", "entropy_std"):
        return ids, variance.sqrt()
    if metric in ("reward_variance", "entropy_variance"):
        return ids, variance
    return ids, mean


# --------------------------------------------------------------------------------------------
# the transform
# --------------------------------------------------------------------------------------------
def _group_codes(value, num_rows: int) -> torch.Tensor:
    """Map a group-id column (tensor, or non-tensor such as strings) to long codes per row."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 0 and num_rows == 0:
            return torch.empty(0, dtype=torch.long)
        if value.shape[:1] != (num_rows,):
            raise ValueError(f"group id column has shape {tuple(value.shape)}, expected ({num_rows}, ...)")
        flat = value.reshape(num_rows, -1)
        # (N, T) batches repeat the id along time; anything else is not a prompt group.
        if flat.shape[1] != 1 and not bool((flat == flat[:, :1]).all()):
            raise ValueError("group id must be constant within a trajectory")
        flat = flat[:, 0]
        if flat.is_floating_point():
            raise ValueError(f"group ids must be integers or strings, got dtype {flat.dtype}")
        return flat.long()
    items = value.tolist() if hasattr(value, "tolist") else list(value)
    codes: dict[Any, int] = {}
    return torch.tensor([codes.setdefault(item, len(codes)) for item in items], dtype=torch.long)


class SNRFilter(Transform):
    """Keep the prompt groups whose within-group reward variance carries the most signal.

    A replay-buffer **write-time** transform (TorchRL calls ``_inv_call`` from ``rb.extend``). It
    receives a TensorDict of trajectory records (batch dimension 0 = trajectories; a lazy stack
    with ragged or non-tensor entries is fine), groups the rows by ``group_key``, scores every group
    with :func:`group_scores`, selects groups with :func:`select_groups` and keeps the selected
    groups *whole* (all their rows, in their original order). It returns ``None`` -- "write
    nothing" -- when no group is kept, and passes ``None`` on.

    **Order among write-time transforms.** The filter must see the raw episode returns of the whole
    batch and must run *before* anything that normalises or costs per sample (group advantage,
    behaviour/reference log-probs, critic values). A :class:`~torchrl.envs.transforms.Compose`
    runs write-time transforms **in reverse order**, so list the filter *last*::

        Compose(advantage_transform, SNRFilter())  # extend() runs SNRFilter, then the advantage

    Any transform listed after the filter runs before it and may hand it ``None``; the filter then
    returns ``None`` and leaves ``last_stats`` untouched.

    **Direct calls and sampling.** ``filt(td)`` (``forward``) and ``_call`` apply the same filter,
    so the transform also works outside a buffer. But ``rb.sample()`` calls ``forward`` on every
    sampled mini-batch, where re-filtering partial groups would be wrong. ``filter_on_forward``
    decides: ``True`` always filters, ``False`` never does, and ``None`` (default) filters until the
    instance has been used as a write-time transform (``_inv_call``), after which ``forward`` passes
    data through unchanged.

    ``last_stats`` (floats) after each filtering call: ``num_groups``, ``kept_groups``,
    ``kept_ratio`` (kept / groups), ``num_trajectories``, ``kept_trajectories``,
    ``zero_variance_groups`` (reward std <= 1e-10), ``in_group_std_mean``/``_max`` (reward std over
    all groups), ``kept_in_group_std_mean``/``_max`` (over kept groups, 0 when none),
    ``empty_after_filter`` (0/1) and ``heterogeneity`` = Std(RV)/Mean(RV), RV the unbiased
    within-group reward variance, Std the population std over groups (0 when Mean(RV) is 0).
    Filtering helps when heterogeneity is large; near 0 it discards data uniformly.
    ``last_row_mask`` is the boolean mask of kept input rows.

    Args:
        metric, strategy, value, mode, include_zero, eps, largest: see :func:`group_scores` and
            :func:`select_groups`; ``value`` must lie in its strategy's range
            (:func:`check_filter_value`). Defaults are the paper's recommended rule (RAGEN-2
            §3.3: reward variance, top_p 0.9 linear, zero-variance groups excluded; the
            ``snr_top_p`` preset). The reference code's rule is ``metric="reward_std",
            mode="softmax", include_zero=True`` (the ``snr_reference`` preset).

    Keyword Args:
        group_key: prompt-group id per trajectory (integers or strings). Defaults to ``"group_id"``.
        return_key: raw episode return per trajectory. Defaults to ``"episode_return"``.
        entropy_key: per-trajectory entropy, one float per trajectory (shape ``(N,)``, e.g. the
            mean token entropy of its generated tokens), read only by the
            :data:`ENTROPY_METRICS`. Defaults to ``"entropy"``.
        length_key: per-trajectory length, read only by ``metric="length"``. Defaults to
            ``"num_tokens"``.
        filter_on_forward: see above.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(
        ...     group_id=torch.tensor([0, 0, 1, 1, 2, 2]),
        ...     episode_return=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 2.0]),
        ...     batch_size=[6],
        ... )
        >>> filt = SNRFilter()  # variance: group 0 -> 0.5, group 1 -> 0, group 2 -> 2.0
        >>> filt(td)["group_id"]  # threshold 0.9 * 2.5 - 0.01 = 2.24: groups 2 then 0
        tensor([0, 0, 2, 2])
        >>> filt.last_stats["kept_groups"], filt.last_stats["zero_variance_groups"]
        (2.0, 1.0)
    """

    def __init__(
        self,
        metric: str = "reward_variance",
        strategy: str = "top_p",
        value: float = 0.9,
        mode: str = "linear",
        include_zero: bool = False,
        eps: float = 0.01,
        largest: bool = True,
        *,
        group_key="group_id",
        return_key="episode_return",
        entropy_key="entropy",
        length_key="num_tokens",
        filter_on_forward: bool | None = None,
    ):
        _check_choice("metric", metric, METRICS)
        value = check_filter_value(strategy, value)
        value, eps = _check_selection_args(strategy, value, mode, eps)
        for name, flag in (("include_zero", include_zero), ("largest", largest)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be a bool, got {flag!r}")
        if filter_on_forward not in (None, True, False):
            raise ValueError(f"filter_on_forward must be None, True or False, got {filter_on_forward!r}")
        in_keys = [group_key, return_key]
        if metric in ENTROPY_METRICS:
            in_keys.append(entropy_key)
        elif metric == "length":
            in_keys.append(length_key)
        super().__init__(in_keys=in_keys, out_keys=[])
        self.metric = metric
        self.strategy = strategy
        self.value = value
        self.mode = mode
        self.include_zero = include_zero
        self.eps = eps
        self.largest = largest
        self.group_key = group_key
        self.return_key = return_key
        self.entropy_key = entropy_key
        self.length_key = length_key
        self.filter_on_forward = filter_on_forward
        self.last_stats: dict[str, float] = {}
        self.last_row_mask: torch.Tensor | None = None
        self._used_at_write_time = False

    @classmethod
    def from_config(cls, cfg: Mapping, **kwargs) -> SNRFilter | None:
        """Build from a ``filter`` config node (see :func:`build_filter`); None when disabled.

        Examples:
            >>> SNRFilter.from_config({"enabled": True, "strategy": "top_k", "value": 0.25}).value
            0.25
            >>> SNRFilter.from_config({"enabled": False}) is None
            True
        """
        return build_filter(cfg, **kwargs)

    # -- the pure part ---------------------------------------------------------------------------
    def _read(self, td: TensorDictBase, key) -> Any:
        if key not in td.keys(include_nested=True):
            raise KeyError(
                f"SNRFilter: key {key!r} not found in the trajectory records "
                f"(keys: {sorted(map(str, td.keys(include_nested=True)))})"
            )
        return td.get(key)

    def row_mask(self, td: TensorDictBase) -> tuple[torch.Tensor, dict[str, float]]:
        """Return the boolean mask of rows to keep and the statistics, without indexing ``td``.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> td = TensorDict(group_id=torch.tensor([5, 5, 9, 9]),
            ...                 episode_return=torch.tensor([0.0, 1.0, 1.0, 1.0]), batch_size=[4])
            >>> SNRFilter().row_mask(td)[0]
            tensor([ True,  True, False, False])
        """
        if td.batch_dims == 0:
            raise ValueError("SNRFilter needs a batch of trajectories (batch_dims >= 1), got a 0-d batch")
        num_rows = td.batch_size[0]
        # One scalar per trajectory: the bookkeeping runs on CPU whatever device the batch is on.
        codes = _group_codes(self._read(td, self.group_key), num_rows).cpu()
        returns = _per_row(str(self.return_key), self._read(td, self.return_key), num_rows).cpu()
        entropy = lengths = None
        if self.metric in ENTROPY_METRICS:
            entropy = torch.as_tensor(self._read(td, self.entropy_key)).cpu()
        elif self.metric == "length":
            lengths = torch.as_tensor(self._read(td, self.length_key)).cpu()
        ids, scores = group_scores(returns, codes, self.metric, entropy=entropy, lengths=lengths)
        kept = select_groups(
            scores,
            strategy=self.strategy,
            value=self.value,
            mode=self.mode,
            include_zero=self.include_zero,
            eps=self.eps,
            largest=self.largest,
        )
        # Reward statistics are logged whatever the selection metric is.
        _, inverse = torch.unique(codes, sorted=True, return_inverse=True)
        _, _, reward_var = _segment_moments(returns, inverse, ids.numel())
        kept_group = torch.zeros(ids.numel(), dtype=torch.bool)
        kept_group[kept] = True
        mask = kept_group[inverse] if num_rows else torch.zeros(0, dtype=torch.bool)
        return mask, _filter_stats(reward_var, kept_group, mask)

    def filter(self, td: TensorDictBase | None) -> TensorDictBase | None:
        """Drop the unselected groups; ``None`` in or nothing kept gives ``None``.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> td = TensorDict(group_id=torch.tensor([0, 0]), episode_return=torch.ones(2),
            ...                 batch_size=[2])
            >>> SNRFilter().filter(td) is None  # a constant group has no signal
            True
        """
        if td is None:
            return None
        mask, stats = self.row_mask(td)
        self.last_stats = stats
        self.last_row_mask = mask
        if not bool(mask.any()):
            return None
        if bool(mask.all()):
            return td
        # Integer indexing (not a boolean mask) keeps lazy stacks lazy and ragged entries intact.
        return td[torch.nonzero(mask).flatten()]

    # -- the torchrl hooks -------------------------------------------------------------------------
    def _inv_call(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        self._used_at_write_time = True
        return self.filter(tensordict)

    def forward(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        if self.filter_on_forward is False or (self.filter_on_forward is None and self._used_at_write_time):
            return tensordict
        return self.filter(tensordict)

    def _call(self, next_tensordict: TensorDictBase | None) -> TensorDictBase | None:
        return self.filter(next_tensordict)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(metric={self.metric}, strategy={self.strategy}, "
            f"value={self.value}, mode={self.mode}, include_zero={self.include_zero}, "
            f"largest={self.largest})"
        )


def _filter_stats(reward_var: torch.Tensor, kept_group: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
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
        "zero_variance_groups": float((std <= _ZERO_TOL).sum()),
        "in_group_std_mean": float(std.mean()) if num_groups else 0.0,
        "in_group_std_max": float(std.max()) if num_groups else 0.0,
        "kept_in_group_std_mean": float(kept_std.mean()) if kept_groups else 0.0,
        "kept_in_group_std_max": float(kept_std.max()) if kept_groups else 0.0,
        "empty_after_filter": 0.0 if kept_groups else 1.0,
        "heterogeneity": rv_std / rv_mean if rv_mean > 0 else 0.0,
    }


# --------------------------------------------------------------------------------------------
# training-loop helpers
# --------------------------------------------------------------------------------------------
def loss_scale(kept_ratio: float, mode: str = "none") -> float:
    """Factor to multiply the policy loss (or the advantages) by, from the kept-group ratio.

    ``none`` -> 1, ``linear`` -> ratio, ``sqrt`` -> sqrt(ratio). Scaling damps the update when
    aggressive filtering leaves only a few groups.

    Examples:
        >>> loss_scale(0.25, "none"), loss_scale(0.25, "linear"), loss_scale(0.25, "sqrt")
        (1.0, 0.25, 0.5)
    """
    _check_choice("loss_scale mode", mode, LOSS_SCALE_MODES)
    ratio = _check_number("kept_ratio", kept_ratio)
    if ratio > 1.0:
        raise ValueError(f"kept_ratio must be in [0, 1], got {kept_ratio!r}")
    if mode == "none":
        return 1.0
    return ratio if mode == "linear" else math.sqrt(ratio)


def unfiltered_stats(returns, group_ids) -> dict[str, float]:
    """The statistics :class:`SNRFilter` logs, for a batch that is used whole (no filter).

    RAGEN-2 (arXiv 2604.06268, §4 setup) applies its early stops to the unfiltered baseline too,
    so a run with ``filter=none`` still needs :class:`FilterGuard`'s input. This computes the same
    keys as :attr:`SNRFilter.last_stats` from the raw episode returns with every group kept:
    ``kept_ratio`` 1, ``empty_after_filter`` 0 (1 only for a batch with no trajectory at all), and
    the reward statistics (``in_group_std_mean``, ``zero_variance_groups``, ``heterogeneity``, ...)
    exactly as the filter computes them. Feed the result to :meth:`FilterGuard.update`.

    Args:
        returns: one raw episode return per trajectory, shape (N,) (or (N, 1) / (N, 1, 1)).
        group_ids: prompt-group id per trajectory: an integer tensor of shape (N,) (or (N, T)
            constant along T), or a sequence of hashables such as strings.

    Examples:
        >>> import torch
        >>> s = unfiltered_stats(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]))
        >>> s["kept_ratio"], s["empty_after_filter"], round(s["in_group_std_mean"], 4)  # (0.7071 + 0) / 2
        (1.0, 0.0, 0.3536)
    """
    returns_t = torch.as_tensor(returns)
    num_rows = returns_t.shape[0] if returns_t.ndim else 1
    codes = _group_codes(group_ids, num_rows).cpu()
    values = _per_row("returns", returns_t, codes.numel()).cpu()
    ids, inverse = torch.unique(codes, sorted=True, return_inverse=True)
    _, _, reward_var = _segment_moments(values, inverse, ids.numel())
    kept_group = torch.ones(ids.numel(), dtype=torch.bool)
    return _filter_stats(reward_var, kept_group, torch.ones(codes.numel(), dtype=torch.bool))


class FilterGuard:
    """Stop rules of SNR-aware filtering, fed with :attr:`SNRFilter.last_stats` every iteration.

    RAGEN-2 (arXiv 2604.06268) applies these stops to every arm, the unfiltered baseline
    included: without a filter, feed :func:`unfiltered_stats` instead of ``last_stats``.

    * **Empty selection**: an iteration that keeps no group is skipped by the trainer; after
      ``max_consecutive_empty`` consecutive empty iterations training stops (0 disables).
    * **Reward-variance collapse**: ``base`` = mean ``in_group_std_mean`` over the first ``warmup``
      non-empty iterations; training stops once the last ``patience`` **non-empty** iterations all
      have ``in_group_std_mean < ratio * base``. Empty iterations (nothing kept, no update) enter
      neither the warm-up nor the window, so a run of skipped iterations cannot trip the rule on its
      own. A base of 0 disables the rule.

    :meth:`update` returns a stop reason string, or ``None`` to go on; the first reason is kept in
    :attr:`stop_reason`. The validation-success stop is :class:`ValidationStop`.

    Args:
        max_consecutive_empty: empty iterations in a row that stop training (0 = never).
            Defaults to 5.

    Keyword Args:
        collapse_stop: enable the reward-variance collapse rule. Defaults to True.
        warmup: non-empty iterations averaged into the base. Defaults to 10.
        patience: non-empty iterations in the window. Defaults to 10.
        ratio: the collapse threshold as a fraction of the base. Defaults to 0.1.

    Examples:
        >>> guard = FilterGuard(max_consecutive_empty=2, collapse_stop=False)
        >>> empty = {"empty_after_filter": 1.0, "in_group_std_mean": 0.0}
        >>> guard.update(empty) is None
        True
        >>> guard.update(empty)
        'empty_selection: 2 consecutive iterations kept no group'
    """

    def __init__(
        self,
        max_consecutive_empty: int = 5,
        *,
        collapse_stop: bool = True,
        warmup: int = 10,
        patience: int = 10,
        ratio: float = 0.1,
    ):
        for name, got, low in (
            ("max_consecutive_empty", max_consecutive_empty, 0),
            ("warmup", warmup, 1),
            ("patience", patience, 1),
        ):
            if isinstance(got, bool) or not isinstance(got, int) or got < low:
                raise ValueError(f"{name} must be an int >= {low}, got {got!r}")
        if not isinstance(collapse_stop, bool):
            raise ValueError(f"collapse_stop must be a bool, got {collapse_stop!r}")
        self.max_consecutive_empty = max_consecutive_empty
        self.collapse_stop = collapse_stop
        self.warmup = warmup
        self.patience = patience
        self.ratio = _check_number("ratio", ratio)
        self.consecutive_empty = 0
        self.base_std: float | None = None
        self.stop_reason: str | None = None
        self._warmup_values: list[float] = []
        self._window: deque[float] = deque(maxlen=patience)

    @classmethod
    def from_config(cls, cfg: Mapping) -> FilterGuard:
        """Build from a ``filter`` config node, whether or not the filter is ``enabled``.

        Examples:
            >>> FilterGuard.from_config({"max_consecutive_empty": 3}).max_consecutive_empty
            3
            >>> FilterGuard.from_config({"enabled": False}).collapse_stop  # filter=none still stops
            True
        """
        cfg = validate_filter_config(cfg)
        collapse = cfg["collapse_stop"]
        return cls(
            cfg["max_consecutive_empty"],
            collapse_stop=collapse["enabled"],
            warmup=collapse["warmup"],
            patience=collapse["patience"],
            ratio=collapse["ratio"],
        )

    def update(self, stats: Mapping[str, float]) -> str | None:
        """Record one iteration's filter statistics; return a stop reason or ``None``.

        ``stats`` needs ``empty_after_filter`` and ``in_group_std_mean``
        (:attr:`SNRFilter.last_stats` or :func:`unfiltered_stats`).
        """
        missing = [k for k in ("empty_after_filter", "in_group_std_mean") if k not in stats]
        if missing:
            raise KeyError(f"FilterGuard.update needs SNRFilter.last_stats keys {missing}")
        empty = bool(stats["empty_after_filter"])
        std = float(stats["in_group_std_mean"])
        self.consecutive_empty = self.consecutive_empty + 1 if empty else 0

        reason = None
        # RAGEN-2 / reference: the collapse window counts only non-empty iterations.
        if self.collapse_stop and not empty:
            if self.base_std is None:
                self._warmup_values.append(std)
                if len(self._warmup_values) == self.warmup:
                    self.base_std = sum(self._warmup_values) / self.warmup
            self._window.append(std)
            limit = self.ratio * self.base_std if self.base_std else None
            if limit is not None and len(self._window) == self.patience and all(v < limit for v in self._window):
                reason = (
                    f"reward_variance_collapse: in-group std below {self.ratio} x base "
                    f"({self.base_std:.4g}) for {self.patience} consecutive non-empty iterations"
                )
        if self.max_consecutive_empty and self.consecutive_empty >= self.max_consecutive_empty:
            reason = f"empty_selection: {self.consecutive_empty} consecutive iterations kept no group"
        if reason is not None and self.stop_reason is None:
            self.stop_reason = reason
        return reason

    def metrics(self) -> dict[str, float]:
        """Counters to log each iteration (``stop/...`` in the trainer).

        ``consecutive_empty``; ``collapse_base_std`` (NaN until the warm-up is done) and
        ``collapse_window_below`` (how many of the current window's non-empty iterations are below
        ``ratio * base``; the stop fires when it reaches ``patience``).

        Examples:
            >>> g = FilterGuard(warmup=1, patience=2)
            >>> _ = g.update({"empty_after_filter": 0.0, "in_group_std_mean": 1.0})
            >>> _ = g.update({"empty_after_filter": 0.0, "in_group_std_mean": 0.05})
            >>> g.metrics()
            {'consecutive_empty': 0.0, 'collapse_base_std': 1.0, 'collapse_window_below': 1.0}
        """
        base = self.base_std
        below = sum(v < self.ratio * base for v in self._window) if base else 0
        return {
            "consecutive_empty": float(self.consecutive_empty),
            "collapse_base_std": float(base) if base is not None else math.nan,
            "collapse_window_below": float(below),
        }

    def state_dict(self) -> dict[str, Any]:
        """Counters to checkpoint, so a resumed run keeps its stop rules."""
        return {
            "consecutive_empty": self.consecutive_empty,
            "base_std": self.base_std,
            "stop_reason": self.stop_reason,
            "warmup_values": list(self._warmup_values),
            "window": list(self._window),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore counters saved by :meth:`state_dict`."""
        self.consecutive_empty = int(state["consecutive_empty"])
        self.base_std = state["base_std"]
        self.stop_reason = state["stop_reason"]
        self._warmup_values = [float(v) for v in state["warmup_values"]]
        self._window = deque((float(v) for v in state["window"]), maxlen=self.patience)


class ValidationStop:
    """Stop on sustained low validation success (RAGEN-2, arXiv 2604.06268, §4 setup).

    The paper stops a run on reward-variance collapse (:class:`FilterGuard`) *or* sustained low
    validation success; the reference stops when the validation success rate is below
    ``threshold`` (1%) for ``patience`` (5) consecutive validations. Call :meth:`update` once per
    validation with the success rate in [0, 1]; a validation at or above the threshold resets the
    count. Applies with and without a filter.

    Args:
        threshold: success rates strictly below this count as low. Defaults to 0.01.
        patience: consecutive low validations that stop training. Defaults to 5.

    Keyword Args:
        enabled: when False, :meth:`update` still counts but never returns a reason. Defaults to
            True.

    Examples:
        >>> stop = ValidationStop(threshold=0.01, patience=2)
        >>> stop.update(0.0) is None, stop.update(0.5) is None, stop.update(0.005) is None
        (True, True, True)
        >>> stop.update(0.0)
        'validation_success: below 0.01 for 2 consecutive validations'
    """

    def __init__(self, threshold: float = 0.01, patience: int = 5, *, enabled: bool = True):
        threshold = _check_number("val_stop.threshold", threshold)
        if threshold > 1.0:
            raise ValueError(f"val_stop.threshold must be in [0, 1], got {threshold!r}")
        _check_int("val_stop.patience", patience, 1)
        _check_bool("val_stop.enabled", enabled)
        self.threshold = threshold
        self.patience = patience
        self.enabled = enabled
        self.consecutive_low = 0
        self.last_success: float | None = None
        self.stop_reason: str | None = None

    @classmethod
    def from_config(cls, cfg: Mapping) -> ValidationStop:
        """Build from a ``filter`` config node (its ``val_stop`` entry), filter enabled or not.

        Examples:
            >>> ValidationStop.from_config({"enabled": False}).patience
            5
            >>> ValidationStop.from_config({"val_stop": {"enabled": False}}).enabled
            False
        """
        val = validate_filter_config(cfg)["val_stop"]
        return cls(val["threshold"], val["patience"], enabled=val["enabled"])

    def update(self, success: float) -> str | None:
        """Record one validation success rate; return a stop reason or ``None``."""
        success = _check_number("validation success", success)
        if success > 1.0:
            raise ValueError(f"validation success must be a rate in [0, 1], got {success!r}")
        self.last_success = success
        self.consecutive_low = self.consecutive_low + 1 if success < self.threshold else 0
        if not self.enabled or self.consecutive_low < self.patience:
            return None
        reason = f"validation_success: below {self.threshold:g} for {self.consecutive_low} consecutive validations"
        if self.stop_reason is None:
            self.stop_reason = reason
        return reason

    def metrics(self) -> dict[str, float]:
        """Counters to log after each validation.

        Examples:
            >>> s = ValidationStop()
            >>> _ = s.update(0.0)
            >>> s.metrics()
            {'val_consecutive_low': 1.0, 'val_patience': 5.0}
        """
        return {"val_consecutive_low": float(self.consecutive_low), "val_patience": float(self.patience)}

    def state_dict(self) -> dict[str, Any]:
        """Counters to checkpoint."""
        return {
            "consecutive_low": self.consecutive_low,
            "last_success": self.last_success,
            "stop_reason": self.stop_reason,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore counters saved by :meth:`state_dict`."""
        self.consecutive_low = int(state["consecutive_low"])
        self.last_success = state["last_success"]
        self.stop_reason = state["stop_reason"]


# --------------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------------
#: Defaults of the ``filter`` config node: the paper's rule (RAGEN-2 §3.3, the ``snr_top_p`` preset).
FILTER_CONFIG_DEFAULTS: dict[str, Any] = {
    "name": "snr_top_p",
    "enabled": True,
    "metric": "reward_variance",
    "strategy": "top_p",
    "value": 0.9,
    "mode": "linear",
    "include_zero": False,
    "largest": True,
    "eps": 0.01,
    "loss_scale": "none",
    "max_consecutive_empty": 5,
    "collapse_stop": {"enabled": True, "warmup": 10, "patience": 10, "ratio": 0.1},
    "val_stop": {"enabled": True, "threshold": 0.01, "patience": 5},
    "grad_snr": {"every": 0, "buckets": 6},
}


def _as_dict(node: Any, where: str) -> dict[str, Any]:
    # OmegaConf DictConfig is a Mapping; converting keeps the rest of the code plain-Python.
    if not isinstance(node, Mapping):
        raise ValueError(f"{where} must be a mapping, got {type(node).__name__}")
    return {str(k): node[k] for k in node}


def _merge_checked(node: Any, defaults: Mapping[str, Any], where: str) -> dict[str, Any]:
    node = _as_dict(node, where)
    unknown = sorted(set(node) - set(defaults))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in {where}; valid keys: {', '.join(defaults)}")
    return {**defaults, **node}


def _check_int(where: str, got: Any, low: int) -> int:
    if isinstance(got, bool) or not isinstance(got, int) or got < low:
        raise ValueError(f"{where} must be an int >= {low}, got {got!r}")
    return got


def _check_bool(where: str, got: Any) -> bool:
    if not isinstance(got, bool):
        raise ValueError(f"{where} must be true or false, got {got!r}")
    return got


def validate_filter_config(cfg: Mapping) -> dict[str, Any]:
    """Check a ``filter`` config node and return it as a plain dict with defaults filled in.

    Keys (all optional, defaults in :data:`FILTER_CONFIG_DEFAULTS`): ``name``, ``enabled``,
    ``metric``, ``strategy``, ``value``, ``mode``, ``include_zero``, ``largest``, ``eps``,
    ``loss_scale``, ``max_consecutive_empty``, ``collapse_stop: {enabled, warmup, patience,
    ratio}``, ``val_stop: {enabled, threshold, patience}``, ``grad_snr: {every, buckets}``.
    Unknown keys are errors (they are usually typos). ``value`` must lie in its strategy's range
    (:func:`check_filter_value`). The stop rules (``max_consecutive_empty``, ``collapse_stop``,
    ``val_stop``) are read whether or not the filter is ``enabled``.

    Examples:
        >>> validate_filter_config({"strategy": "top_k", "value": 0.25})["collapse_stop"]["warmup"]
        10
        >>> validate_filter_config({"stratgy": "top_k"})
        Traceback (most recent call last):
        ...
        ValueError: unknown key(s) ['stratgy'] in filter config; valid keys: name, enabled, metric, strategy, value, mode, include_zero, largest, eps, loss_scale, max_consecutive_empty, collapse_stop, val_stop, grad_snr
    """
    out = _merge_checked(cfg, FILTER_CONFIG_DEFAULTS, "filter config")
    out["collapse_stop"] = _merge_checked(
        out["collapse_stop"], FILTER_CONFIG_DEFAULTS["collapse_stop"], "filter.collapse_stop"
    )
    out["val_stop"] = _merge_checked(out["val_stop"], FILTER_CONFIG_DEFAULTS["val_stop"], "filter.val_stop")
    out["grad_snr"] = _merge_checked(out["grad_snr"], FILTER_CONFIG_DEFAULTS["grad_snr"], "filter.grad_snr")
    out["name"] = str(out["name"])
    for key in ("enabled", "include_zero", "largest"):
        _check_bool(f"filter.{key}", out[key])
    _check_choice("filter.metric", out["metric"], METRICS)
    _check_choice("filter.loss_scale", out["loss_scale"], LOSS_SCALE_MODES)
    _check_choice("filter.strategy", out["strategy"], STRATEGIES)
    out["value"] = check_filter_value(out["strategy"], out["value"], "filter.value")
    out["value"], out["eps"] = _check_selection_args(out["strategy"], out["value"], out["mode"], out["eps"])
    _check_int("filter.max_consecutive_empty", out["max_consecutive_empty"], 0)
    collapse = out["collapse_stop"]
    _check_bool("filter.collapse_stop.enabled", collapse["enabled"])
    _check_int("filter.collapse_stop.warmup", collapse["warmup"], 1)
    _check_int("filter.collapse_stop.patience", collapse["patience"], 1)
    collapse["ratio"] = _check_number("filter.collapse_stop.ratio", collapse["ratio"])
    val = out["val_stop"]
    _check_bool("filter.val_stop.enabled", val["enabled"])
    val["threshold"] = _check_number("filter.val_stop.threshold", val["threshold"])
    if val["threshold"] > 1.0:
        raise ValueError(f"filter.val_stop.threshold must be in [0, 1], got {val['threshold']!r}")
    _check_int("filter.val_stop.patience", val["patience"], 1)
    _check_int("filter.grad_snr.every", out["grad_snr"]["every"], 0)
    _check_int("filter.grad_snr.buckets", out["grad_snr"]["buckets"], 1)
    return out


def build_filter(cfg: Mapping, **kwargs) -> SNRFilter | None:
    """Build an :class:`SNRFilter` from a ``filter`` config node, or ``None`` when disabled.

    Extra keyword arguments (``group_key``, ``return_key``, ``filter_on_forward``, ...) go to the
    constructor.

    Examples:
        >>> build_filter({"enabled": True})  # the paper's rule
        SNRFilter(metric=reward_variance, strategy=top_p, value=0.9, mode=linear, include_zero=False, largest=True)
        >>> build_filter({"metric": "reward_std", "mode": "softmax", "include_zero": True})  # reference code
        SNRFilter(metric=reward_std, strategy=top_p, value=0.9, mode=softmax, include_zero=True, largest=True)
        >>> build_filter({"enabled": False}) is None
        True
    """
    cfg = validate_filter_config(cfg)
    if not cfg["enabled"]:
        return None
    return SNRFilter(
        metric=cfg["metric"],
        strategy=cfg["strategy"],
        value=cfg["value"],
        mode=cfg["mode"],
        include_zero=cfg["include_zero"],
        eps=cfg["eps"],
        largest=cfg["largest"],
        **kwargs,
    )
