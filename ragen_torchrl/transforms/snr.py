"""SNR-aware filtering (RAGEN-2 §3.3) as pure functions and a TorchRL transform.

Per training iteration the rollout holds P prompt groups x G samples. Each group is scored from the
*raw* episode returns (never from already-normalised advantages: after normalisation every group
has unit std and the signal is gone), the groups are ranked, a subset is kept *whole* and the rest
is dropped. Filtering runs before advantage computation and before the expensive per-sample work
(behaviour/reference log-probs, critic values, the update), so a smaller kept set also makes the
step cheaper.

Layers, from pure to integrated:

* :func:`~ragen_torchrl.transforms.group_selection.select_groups` /
  :func:`~ragen_torchrl.transforms.group_selection.group_scores` -- the pure statistics and selection.
* :class:`SNRFilter` -- a replay-buffer write-time transform (``_inv_call``) that drops whole
  groups from a TensorDict of trajectory records; :meth:`SNRFilter.filter` also returns the statistics.
* :func:`validate_filter_config` / :func:`build_filter` -- the Hydra ``filter`` config group.

The training-loop side (the early-stop rules ``FilterGuard`` / ``ValidationStop``, which also run
without a filter, ``unfiltered_stats`` and the kept-ratio ``loss_scale``) lives with the trainer in
:mod:`ragen_torchrl.trainer.early_stop`.

**Paper text vs reference code** (RAGEN-2, arXiv 2604.06268, §3.3). The paper's text ranks groups
by within-group reward *variance* and keeps the smallest prefix reaching ``p`` of the variance mass
(top-p linear, zero-variance groups excluded): that is the default here and the ``snr_top_p``
preset. The reference code scores by the unbiased reward *std* and keeps
``searchsorted(cumsum(softmax(std)), p) + 1`` groups, zero-std groups included: the
``snr_reference`` preset (``metric=reward_std, mode=softmax, include_zero=True``). Its linear
top-p subtracts an absolute ``eps = 0.01`` from the threshold (``eps``, 0 by default and 0.01 in
that preset). Every rule except softmax top-p and ``eps > 0`` selects the same groups when all
rewards are multiplied by a positive constant; softmax(std) is kept as the reference computes it.

**Controls** (what the filter's effect is made of): ``strategy="random"`` keeps a seeded random
subset of the groups at a fixed kept fraction and reads no reward (the ``random_keep`` preset:
"fewer groups" without "better groups"); ``strategy="top_p", value=1.0`` keeps every candidate, so
with zero-variance groups excluded it drops exactly those (the ``nonzero_variance`` preset).

The sampler counterpart (draw mini-batches only from the top groups of a persistent buffer) is
:class:`ragen_torchrl.transforms.group_sampler.TopVarianceGroupSampler`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.envs.transforms import Transform

from ..checks import check_bool
from ..data.groups import Groups
from ..keys import ENTROPY, EPISODE_RETURN, GROUP_ID, NUM_TOKENS
from ..moved_keys import moved_under
from ..options import FILTER_CONFIG_DEFAULTS
from .group_selection import (
    ENTROPY_METRICS,
    METRICS,
    STRATEGIES,
    GroupSelection,
    _check_choice,
    _check_int,
    _check_selection_args,
    check_filter_value,
    filter_stats,
    random_seed,
    scores_of,
)

LOSS_SCALE_MODES = ("none", "linear", "sqrt")

__all__ = [
    "LOSS_SCALE_MODES",
    "SNRFilter",
    "keep_rows",
    "validate_filter_config",
    "build_filter",
]


def keep_rows(td: TensorDictBase, mask: torch.Tensor) -> TensorDictBase | None:
    """The rows of ``td`` where ``mask`` is True, in order; ``td`` itself when all are, ``None`` when none is.

    Integer indexing (not a boolean mask) keeps lazy stacks lazy and ragged entries intact.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(group_id=torch.tensor([0, 0, 1, 1]), batch_size=[4])
        >>> keep_rows(td, torch.tensor([False, False, True, True]))["group_id"].tolist()
        [1, 1]
        >>> keep_rows(td, torch.ones(4, dtype=torch.bool)) is td, keep_rows(td, torch.zeros(4, dtype=torch.bool))
        (True, None)
    """
    if not bool(mask.any()):
        return None
    if bool(mask.all()):
        return td
    return td[torch.nonzero(mask).flatten()]


# --------------------------------------------------------------------------------------------
# the transform
# --------------------------------------------------------------------------------------------
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
    returns ``None``.

    **Direct calls and sampling.** ``filt(td)`` (``forward``) and ``_call`` apply the same filter,
    so the transform also works outside a buffer. But ``rb.sample()`` calls ``forward`` on every
    sampled mini-batch, where re-filtering partial groups would be wrong. ``filter_on_forward``
    decides: ``True`` always filters, ``False`` never does, and ``None`` (default) filters until the
    instance has been used as a write-time transform (``_inv_call``), after which ``forward`` passes
    data through unchanged.

    The statistics (floats) :meth:`filter` and :meth:`row_mask` return: ``num_groups``, ``kept_groups``,
    ``kept_ratio`` (kept / groups), ``num_trajectories``, ``kept_trajectories``,
    ``zero_variance_groups`` (reward std exactly 0: all returns of the group equal), ``in_group_std_mean``/``_max`` (reward std over
    all groups), ``kept_in_group_std_mean``/``_max`` (over kept groups, 0 when none),
    ``empty_after_filter`` (0/1) and ``heterogeneity`` = Std(RV)/Mean(RV), RV the unbiased
    within-group reward variance, Std the population std over groups (0 when Mean(RV) is 0).
    Filtering helps when heterogeneity is large; near 0 it discards data uniformly.

    **The random control** (``strategy="random"``): the kept groups are a random subset drawn with
    :func:`~ragen_torchrl.transforms.group_selection.random_groups`, seeded by
    :func:`~ragen_torchrl.transforms.group_selection.random_seed` of ``seed`` and the call's
    ``step`` (the trainer passes its iteration, so a run's subsets are reproducible, a resumed run
    draws the same ones, and they never depend on the rewards); a call without ``step`` (the
    torchrl hooks, the sampler) uses the number of earlier such calls of this instance.

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
        seed: the run seed the ``random`` strategy mixes with the step (an int). Defaults to 0.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(
        ...     group_id=torch.tensor([0, 0, 1, 1, 2, 2]),
        ...     episode_return=torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 2.0]),
        ...     batch_size=[6],
        ... )
        >>> filt = SNRFilter()  # variance: group 0 -> 0.5, group 1 -> 0, group 2 -> 2.0
        >>> filt(td)["group_id"]  # threshold 0.9 * 2.5 = 2.25: groups 2 then 0
        tensor([0, 0, 2, 2])
        >>> kept, stats = filt.filter(td)  # the same rule, with its statistics
        >>> stats["kept_groups"], stats["zero_variance_groups"]
        (2.0, 1.0)
        >>> rand = SNRFilter(strategy="random", value=0.5, include_zero=True, seed=3)
        >>> rand.filter(td, step=0)[1]["kept_groups"]  # 0.5 x 3 = 1.5 groups: 1 or 2, whatever the rewards
        2.0
    """

    def __init__(
        self,
        metric: str = "reward_variance",
        strategy: str = "top_p",
        value: float = 0.9,
        mode: str = "linear",
        include_zero: bool = False,
        eps: float = 0.0,
        largest: bool = True,
        *,
        group_key=GROUP_ID,
        return_key=EPISODE_RETURN,
        entropy_key=ENTROPY,
        length_key=NUM_TOKENS,
        filter_on_forward: bool | None = None,
        seed: int = 0,
    ):
        _check_choice("metric", metric, METRICS)
        self.seed = _check_int("seed", seed)
        self.selection = GroupSelection(strategy, value, mode, include_zero, eps, largest)
        if filter_on_forward not in (None, True, False):
            raise ValueError(f"filter_on_forward must be None, True or False, got {filter_on_forward!r}")
        in_keys = [group_key, return_key]
        if metric in ENTROPY_METRICS:
            in_keys.append(entropy_key)
        elif metric == "length":
            in_keys.append(length_key)
        super().__init__(in_keys=in_keys, out_keys=[])
        self.metric = metric
        self.group_key = group_key
        self.return_key = return_key
        self.entropy_key = entropy_key
        self.length_key = length_key
        self.filter_on_forward = filter_on_forward
        self._used_at_write_time = False
        self._calls = 0  # the step of a call without one (the random strategy's draws)

    # the selection settings live in one checked, frozen value; read-only here
    strategy = property(lambda self: self.selection.strategy)
    value = property(lambda self: self.selection.value)
    mode = property(lambda self: self.selection.mode)
    include_zero = property(lambda self: self.selection.include_zero)
    eps = property(lambda self: self.selection.eps)
    largest = property(lambda self: self.selection.largest)

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

    def row_mask(
        self, td: TensorDictBase, groups: Groups | None = None, *, step: int | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Return the boolean mask of rows to keep and the statistics, without indexing ``td``.

        ``groups``: the :class:`~ragen_torchrl.data.groups.Groups` of ``td``'s group ids and
        returns when the caller already built it (the trainer builds it once per batch).
        ``step``: the ``random`` strategy's step (the trainer's iteration); ``None`` counts this
        instance's calls without one. The other strategies ignore it.

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
        if groups is None:
            groups = self.groups(td)
        elif groups.num_rows != num_rows:
            raise ValueError(f"groups describe {groups.num_rows} rows, the batch has {num_rows}")
        entropy = lengths = None
        if self.metric in ENTROPY_METRICS:
            entropy = torch.as_tensor(self._read(td, self.entropy_key)).cpu()
        elif self.metric == "length":
            lengths = torch.as_tensor(self._read(td, self.length_key)).cpu()
        ids, scores = scores_of(groups, self.metric, entropy=entropy, lengths=lengths)
        if step is None:
            step, self._calls = self._calls, self._calls + 1
        kept = self.selection.select(scores, seed=random_seed(self.seed, step))
        # Reward statistics are logged whatever the selection metric is.
        kept_group = torch.zeros(ids.numel(), dtype=torch.bool)
        kept_group[kept] = True
        mask = kept_group[groups.inverse] if num_rows else torch.zeros(0, dtype=torch.bool)
        return mask, filter_stats(groups.var, kept_group, mask)

    def groups(self, td: TensorDictBase) -> Groups:
        """The :class:`~ragen_torchrl.data.groups.Groups` of ``td``'s group ids and raw returns."""
        # one scalar per trajectory: the bookkeeping runs on CPU whatever device the batch is on
        return Groups.from_values(
            self._read(td, self.group_key), self._read(td, self.return_key), name=str(self.return_key)
        )

    def filter(
        self, td: TensorDictBase | None, groups: Groups | None = None, *, step: int | None = None
    ) -> tuple[TensorDictBase | None, dict[str, float]]:
        """``(the kept groups' rows, statistics)``; ``None`` in or nothing kept gives ``None`` rows.

        The statistics are :meth:`row_mask`'s (``{}`` for ``None`` in). The torchrl hooks
        (``forward``, ``_inv_call``, ``_call``) return the rows alone.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> td = TensorDict(group_id=torch.tensor([0, 0]), episode_return=torch.ones(2),
            ...                 batch_size=[2])
            >>> kept, stats = SNRFilter().filter(td)
            >>> kept is None, stats["zero_variance_groups"]  # a constant group has no signal
            (True, 1.0)
        """
        if td is None:
            return None, {}
        mask, stats = self.row_mask(td, groups, step=step)
        return keep_rows(td, mask), stats

    # -- the torchrl hooks -------------------------------------------------------------------------
    def _inv_call(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        self._used_at_write_time = True
        return self.filter(tensordict)[0]

    def forward(self, tensordict: TensorDictBase | None) -> TensorDictBase | None:
        if self.filter_on_forward is False or (self.filter_on_forward is None and self._used_at_write_time):
            return tensordict
        return self.filter(tensordict)[0]

    def _call(self, next_tensordict: TensorDictBase | None) -> TensorDictBase | None:
        return self.filter(next_tensordict)[0]

    def __repr__(self) -> str:
        seed = f", seed={self.seed}" if self.strategy == "random" else ""
        return (
            f"{type(self).__name__}(metric={self.metric}, strategy={self.strategy}, "
            f"value={self.value}, mode={self.mode}, include_zero={self.include_zero}, "
            f"largest={self.largest}{seed})"
        )


# --------------------------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------------------------
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


def validate_filter_config(cfg: Mapping) -> dict[str, Any]:
    """Check a ``filter`` config node and return it as a plain dict with defaults filled in.

    Keys (all optional, defaults in :data:`~ragen_torchrl.options.FILTER_CONFIG_DEFAULTS`): ``name``, ``enabled``,
    ``metric``, ``strategy``, ``value``, ``mode``, ``include_zero``, ``largest``, ``eps``,
    ``loss_scale``. Unknown keys are errors (they are usually typos); a key that moved
    (:data:`~ragen_torchrl.moved_keys.MOVED_KEYS`: the early stops are ``trainer.early_stop``) is named with its new
    place. ``value`` must lie in its strategy's range (:func:`check_filter_value`).

    Examples:
        >>> validate_filter_config({"strategy": "top_k", "value": 0.25})["value"]
        0.25
        >>> validate_filter_config({"stratgy": "top_k"})
        Traceback (most recent call last):
        ...
        ValueError: unknown key(s) ['stratgy'] in filter config; valid keys: name, enabled, metric, strategy, value, mode, include_zero, largest, eps, loss_scale
        >>> validate_filter_config({"val_stop": {"patience": 3}})
        Traceback (most recent call last):
        ...
        ValueError: filter.val_stop moved to trainer.early_stop.val_stop (the stops run with or without a filter)
    """
    for key, (new, why) in moved_under("filter").items():
        if isinstance(cfg, Mapping) and key in cfg:
            raise ValueError(f"filter.{key} moved to {new} ({why})")
    out = _merge_checked(cfg, FILTER_CONFIG_DEFAULTS, "filter config")
    out["name"] = str(out["name"])
    for key in ("enabled", "include_zero", "largest"):
        check_bool(f"filter.{key}", out[key])
    _check_choice("filter.metric", out["metric"], METRICS)
    _check_choice("filter.loss_scale", out["loss_scale"], LOSS_SCALE_MODES)
    _check_choice("filter.strategy", out["strategy"], STRATEGIES)
    out["value"] = check_filter_value(out["strategy"], out["value"], "filter.value")
    out["value"], out["eps"] = _check_selection_args(out["strategy"], out["value"], out["mode"], out["eps"])
    return out


#: the :class:`SNRFilter` arguments a ``filter`` config node sets (the replay-buffer
#: ``TopVarianceGroupSampler`` takes the same ones)
_FILTER_ARGUMENTS = ("metric", "strategy", "value", "mode", "include_zero", "eps", "largest")


def filter_arguments(cfg: Mapping) -> dict[str, Any]:
    """The group-selection arguments (``metric`` ... ``largest``) of a ``filter`` config node,
    checked and with defaults filled in (:func:`validate_filter_config`).

    Examples:
        >>> filter_arguments({"strategy": "top_k", "value": 0.5})["strategy"], len(filter_arguments({}))
        ('top_k', 7)
    """
    cfg = validate_filter_config(cfg)
    return {key: cfg[key] for key in _FILTER_ARGUMENTS}


def build_filter(cfg: Mapping, **kwargs) -> SNRFilter | None:
    """Build an :class:`SNRFilter` from a ``filter`` config node, or ``None`` when disabled.

    Extra keyword arguments (``group_key``, ``return_key``, ``filter_on_forward``, ``seed``: the
    run seed of the ``random`` strategy, ...) go to the constructor.

    Examples:
        >>> build_filter({"enabled": True})  # the paper's rule
        SNRFilter(metric=reward_variance, strategy=top_p, value=0.9, mode=linear, include_zero=False, largest=True)
        >>> build_filter({"metric": "reward_std", "mode": "softmax", "include_zero": True})  # reference code
        SNRFilter(metric=reward_std, strategy=top_p, value=0.9, mode=softmax, include_zero=True, largest=True)
        >>> build_filter({"enabled": False}) is None
        True
        >>> build_filter({"strategy": "random", "value": 0.36, "include_zero": True}, seed=1)  # random_keep
        SNRFilter(metric=reward_variance, strategy=random, value=0.36, mode=linear, include_zero=True, largest=True, seed=1)
    """
    cfg = validate_filter_config(cfg)
    if not cfg["enabled"]:
        return None
    return SNRFilter(**filter_arguments(cfg), **kwargs)
