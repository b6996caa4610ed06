"""Stop rules and loss scaling of SNR-aware training (RAGEN-2, arXiv 2604.06268, §3.3 and §4 setup).

* :class:`FilterGuard` -- stop after too many empty selections, or on reward-variance collapse
  (base = mean in-group std of the first non-empty iterations; stop when the last ones are all
  below a fraction of it). Runs in both arms: :func:`unfiltered_stats` feeds it when no filter is
  configured, so ``filter=none`` stops under the same rule as ``filter=snr_top_p``.
* :func:`stop_stats` -- what :class:`FilterGuard` reads each iteration: the rollout batch as
  sampled (before DAPO's dynamic sampling or the filter drop groups) and whether the update ran.
* :class:`ValidationStop` -- stop on sustained low validation success.
* :func:`loss_scale` -- the optional kept-ratio scale of the task term.

They read the statistics that :meth:`SNRFilter.filter <ragen_torchrl.transforms.snr.SNRFilter.filter>`
returns or, in the trainer, :func:`stop_stats`, and are configured by the ``trainer.early_stop``
config node (with or without a filter).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

import torch

from ..checks import UNKNOWN_OPTION, check_bool, check_choice, check_int, check_number
from ..data.groups import Groups
from ..transforms.group_selection import filter_stats
from ..transforms.snr import LOSS_SCALE_MODES
from .config_schema import CollapseStopConfig, EarlyStopConfig, ValStopConfig

__all__ = ["FilterGuard", "ValidationStop", "loss_scale", "stop_stats", "unfiltered_stats"]


def loss_scale(kept_ratio: float, mode: str = "none") -> float:
    """Factor to multiply the policy loss (or the advantages) by, from the kept-group ratio.

    ``none`` -> 1, ``linear`` -> ratio, ``sqrt`` -> sqrt(ratio). Scaling damps the update when
    aggressive filtering leaves only a few groups.

    Examples:
        >>> loss_scale(0.25, "none"), loss_scale(0.25, "linear"), loss_scale(0.25, "sqrt")
        (1.0, 0.25, 0.5)
    """
    check_choice("loss_scale mode", mode, LOSS_SCALE_MODES, message=UNKNOWN_OPTION)
    ratio = check_number("kept_ratio", kept_ratio, minimum=0.0)
    if ratio > 1.0:
        raise ValueError(f"kept_ratio must be in [0, 1], got {kept_ratio!r}")
    if mode == "none":
        return 1.0
    return ratio if mode == "linear" else math.sqrt(ratio)


def unfiltered_stats(returns=None, group_ids=None, *, groups: Groups | None = None) -> dict[str, float]:
    """The statistics :class:`SNRFilter` logs, for a batch that is used whole (no filter).

    RAGEN-2 (arXiv 2604.06268, §4 setup) applies its early stops to the unfiltered baseline too,
    so a run with ``filter=none`` still needs :class:`FilterGuard`'s input. This computes the same
    keys as the statistics of :meth:`SNRFilter.filter` from the raw episode returns with every group kept:
    ``kept_ratio`` 1, ``empty_after_filter`` 0 (1 only for a batch with no trajectory at all), and
    the reward statistics (``in_group_std_mean``, ``zero_variance_groups``, ``heterogeneity``, ...)
    exactly as the filter computes them. Feed the result to :meth:`FilterGuard.update`.

    Args:
        returns: one raw episode return per trajectory, shape (N,) (or (N, 1) / (N, 1, 1)).
        group_ids: prompt-group id per trajectory: an integer tensor of shape (N,) (or (N, T)
            constant along T), or a sequence of hashables such as strings.
        groups: instead of ``returns`` and ``group_ids``, their
            :class:`~ragen_torchrl.data.groups.Groups` (the trainer builds it once per batch).

    Examples:
        >>> import torch
        >>> s = unfiltered_stats(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]))
        >>> s["kept_ratio"], s["empty_after_filter"], round(s["in_group_std_mean"], 4)  # (0.7071 + 0) / 2
        (1.0, 0.0, 0.3536)
    """
    if groups is None:
        groups = Groups.from_values(group_ids, returns)
    kept_group = torch.ones(groups.num_groups, dtype=torch.bool)
    return filter_stats(groups.var, kept_group, torch.ones(groups.num_rows, dtype=torch.bool))


def stop_stats(returns=None, group_ids=None, *, skipped: bool, groups: Groups | None = None) -> dict[str, float]:
    """The input of :meth:`FilterGuard.update` for one iteration.

    ``in_group_std_mean`` is read from the rollout batch **as sampled**: ``returns`` and
    ``group_ids`` must be taken before DAPO's dynamic sampling (arXiv 2503.14476) drops the
    constant groups and refills the batch with informative ones, which would keep the statistic
    up however far the reward variance collapses. ``empty_after_filter`` is 1 when the iteration's
    update was skipped for lack of signal, whichever step found none (dynamic sampling or the SNR
    filter), so those iterations count toward ``max_consecutive_empty``. ``groups``: the
    :class:`~ragen_torchrl.data.groups.Groups` of ``returns`` and ``group_ids``, when already built.

    Examples:
        >>> import torch
        >>> s = stop_stats(torch.tensor([1.0, 1.0, 0.5, 0.0]), torch.tensor([0, 0, 1, 1]), skipped=True)
        >>> round(s["in_group_std_mean"], 4), s["empty_after_filter"]  # (0 + std{0.5, 0}) / 2
        (0.1768, 1.0)
    """
    stats = unfiltered_stats(returns, group_ids, groups=groups)
    return {"in_group_std_mean": stats["in_group_std_mean"], "empty_after_filter": 1.0 if skipped else 0.0}


class FilterGuard:
    """Stop rules of SNR-aware filtering, fed with the statistics of :meth:`SNRFilter.filter` every iteration.

    RAGEN-2 (arXiv 2604.06268) applies these stops to every arm, the unfiltered baseline
    included: without a filter, feed :func:`unfiltered_stats` instead. The
    trainer feeds :func:`stop_stats`: the rollout batch before DAPO's dynamic sampling, and
    whether the update was skipped (by dynamic sampling or the filter).

    * **Empty selection**: an iteration that keeps no group is skipped by the trainer; after
      ``max_consecutive_empty`` consecutive empty iterations training stops (0 disables).
    * **Reward-variance collapse**: ``base`` = mean ``in_group_std_mean`` over the first ``warmup``
      non-empty iterations; training stops once the last ``patience`` **non-empty** iterations after
      the warm-up all have ``in_group_std_mean < ratio * base`` (the window starts empty when the base is
      set, as in the reference, so the earliest stop is at non-empty iteration ``warmup + patience``). Empty iterations (nothing kept, no update) enter
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
        # the defaults are the config schema's (trainer.early_stop): one definition of each number
        max_consecutive_empty: int = EarlyStopConfig.max_consecutive_empty,
        *,
        collapse_stop: bool = CollapseStopConfig.enabled,
        warmup: int = CollapseStopConfig.warmup,
        patience: int = CollapseStopConfig.patience,
        ratio: float = CollapseStopConfig.ratio,
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
        self.ratio = check_number("ratio", ratio, minimum=0.0)
        self.consecutive_empty = 0
        self.base_std: float | None = None
        self.stop_reason: str | None = None
        self._warmup_values: list[float] = []
        self._window: deque[float] = deque(maxlen=patience)

    @classmethod
    def from_config(cls, cfg: Mapping) -> FilterGuard:
        """Build from a ``trainer.early_stop`` config node (keys it leaves out keep their defaults).

        Examples:
            >>> FilterGuard.from_config({"max_consecutive_empty": 3}).max_consecutive_empty
            3
            >>> FilterGuard.from_config({"collapse_stop": {"enabled": False, "warmup": 2}}).warmup
            2
        """
        collapse = dict(cfg.get("collapse_stop") or {})
        kwargs = {k: collapse[k] for k in ("warmup", "patience", "ratio") if k in collapse}
        if "enabled" in collapse:
            kwargs["collapse_stop"] = collapse["enabled"]
        if "max_consecutive_empty" in cfg:
            kwargs["max_consecutive_empty"] = cfg["max_consecutive_empty"]
        return cls(**kwargs)

    def update(self, stats: Mapping[str, float]) -> str | None:
        """Record one iteration's filter statistics; return a stop reason or ``None``.

        ``stats`` needs ``empty_after_filter`` and ``in_group_std_mean``
        (:meth:`SNRFilter.filter`'s statistics or :func:`unfiltered_stats`).
        """
        missing = [k for k in ("empty_after_filter", "in_group_std_mean") if k not in stats]
        if missing:
            raise KeyError(f"FilterGuard.update needs the filter statistics {missing}")
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
                # as the reference: the window starts empty once the base is set, so the warm-up
                # iterations that made the base never count as collapsed (earliest stop: warmup + patience)
                self._window.clear()
            else:
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
    validation with the success rate in [0, 1] and its iteration; a validation at or above the threshold
    resets the count. The validation before training (iteration 0) is not counted: the reference only logs
    it, so a run that never succeeds stops at the ``patience``-th validation after training started.
    Applies with and without a filter.

    Args:
        threshold: success rates strictly below this count as low. Defaults to 0.01.
        patience: consecutive low validations that stop training. Defaults to 5.

    Keyword Args:
        enabled: when False, :meth:`update` still counts but never returns a reason. Defaults to
            True.

    Examples:
        >>> stop = ValidationStop(threshold=0.01, patience=2)
        >>> stop.update(0.0, 0) is None, stop.update(0.0, 10) is None, stop.update(0.5, 20) is None
        (True, True, True)
        >>> stop.update(0.005, 30) is None, stop.update(0.0, 40)
        (True, 'validation_success: below 0.01 for 2 consecutive validations')
    """

    def __init__(
        self,
        threshold: float = ValStopConfig.threshold,
        patience: int = ValStopConfig.patience,
        *,
        enabled: bool = ValStopConfig.enabled,
    ):
        threshold = check_number("val_stop.threshold", threshold, minimum=0.0)
        if threshold > 1.0:
            raise ValueError(f"val_stop.threshold must be in [0, 1], got {threshold!r}")
        check_int("val_stop.patience", patience, minimum=1)
        check_bool("val_stop.enabled", enabled)
        self.threshold = threshold
        self.patience = patience
        self.enabled = enabled
        self.consecutive_low = 0
        self.stop_reason: str | None = None

    @classmethod
    def from_config(cls, cfg: Mapping) -> ValidationStop:
        """Build from a ``trainer.early_stop`` config node (its ``val_stop`` entry; defaults for what it leaves out).

        Examples:
            >>> ValidationStop.from_config({}).patience
            5
            >>> ValidationStop.from_config({"val_stop": {"enabled": False}}).enabled
            False
        """
        val = dict(cfg.get("val_stop") or {})
        return cls(**{k: val[k] for k in ("threshold", "patience", "enabled") if k in val})

    def update(self, success: float, iteration: int) -> str | None:
        """Record the validation success rate at ``iteration``; return a stop reason or ``None``.

        Iteration 0 (before training) is checked but not counted.
        """
        success = check_number("validation success", success, minimum=0.0)
        if success > 1.0:
            raise ValueError(f"validation success must be a rate in [0, 1], got {success!r}")
        if check_int("validation iteration", iteration, minimum=0) == 0:
            return None
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
            >>> _ = s.update(0.0, 10)
            >>> s.metrics()
            {'val_consecutive_low': 1.0, 'val_patience': 5.0}
        """
        return {"val_consecutive_low": float(self.consecutive_low), "val_patience": float(self.patience)}

    def state_dict(self) -> dict[str, Any]:
        """Counters to checkpoint."""
        return {
            "consecutive_low": self.consecutive_low,
            "stop_reason": self.stop_reason,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore counters saved by :meth:`state_dict`."""
        self.consecutive_low = int(state["consecutive_low"])
        self.stop_reason = state["stop_reason"]
