"""A run's numbers and the lines that print them: rollout statistics, the iteration line, the peak validation.

:func:`summarize` turns a batch of trajectory records into the rollout statistics every log line,
validation and ``ragen-eval`` result reports (success ± standard error, return, turns, tokens,
format-valid); :func:`iteration_line` and :func:`final_validation_line` are the console lines of an
iteration and of a run's end (:func:`skipped_update_reason`: why an iteration took no optimizer step);
:class:`ValidationPeak` keeps the run's best validation (RAGEN-2's table metric). Nothing here writes:
the run log (:mod:`ragen_torchrl.trainer.run_log`) does, and re-exports these names.

Example:
    >>> iteration_line(3, 60, {"rollout/reward_mean": 0.5, "rollout/success": 0.5, "rollout/tokens": 40.0,
    ...                        "train/loss": 0.01, "timing/total": 4.2})
    '[iter    3/60] reward +0.500 success 0.500 tokens 40 loss +0.0100 4.2s'
"""

from __future__ import annotations

import math

from tensordict import TensorDictBase

from ..keys import EPISODE_RETURN, FORMAT_VALID, NUM_TOKENS, NUM_TURNS, SUCCESS
from ..validation_peak import can_set_peak, peak_of

__all__ = ["ValidationPeak", "final_validation_line", "iteration_line", "skipped_update_reason", "summarize"]


def summarize(records: TensorDictBase) -> dict[str, float]:
    """Rollout statistics of a batch of trajectory records."""
    ret = records.get(EPISODE_RETURN).float()
    succ = records.get(SUCCESS).float()
    n = ret.numel()
    return {
        "reward_mean": ret.mean().item(),
        "reward_std": ret.std().item() if n > 1 else 0.0,
        "success": succ.mean().item(),
        "success_stderr": math.sqrt(max(succ.mean().item() * (1 - succ.mean().item()), 0.0) / max(n, 1)),
        "turns": records.get(NUM_TURNS).float().mean().item(),
        "tokens": records.get(NUM_TOKENS).float().mean().item(),
        "format_valid": records.get(FORMAT_VALID).float().mean().item(),
        "num_trajectories": float(n),
    }


def skipped_update_reason(stats: dict[str, float]) -> str | None:
    """Why an iteration took no optimizer step (``None`` when it did), from its stats.

    Example:
        >>> skipped_update_reason({"filter/skipped_update": 1.0, "filter/num_groups": 16.0,
        ...                        "filter/zero_variance_groups": 16.0})
        'the filter kept none of the 16 groups (16 with zero reward variance)'
        >>> skipped_update_reason({"train/optimizer_steps": 1.0, "train/loss": 0.5}) is None
        True
    """
    if stats.get("filter/skipped_update"):
        n = stats.get("filter/num_groups", float("nan"))
        z = stats.get("filter/zero_variance_groups", float("nan"))
        return f"the filter kept none of the {n:.0f} groups ({z:.0f} with zero reward variance)"
    if stats.get("dapo/skipped_update"):
        calls = stats.get("dynamic_sampling/extra_rollouts", 0.0)
        return f"no group carries signal after {calls:.0f} refill rollouts (DAPO dynamic sampling)"
    if stats.get("train/optimizer_steps", 1.0) == 0:
        skipped = stats.get("train/skipped_nonfinite", 0.0)
        return f"non-finite loss or gradient in all {skipped:.0f} mini-batches"
    return None


def iteration_line(step: int, total: int, stats: dict[str, float]) -> str:
    """The console line of one training iteration; a skipped update says so and why.

    Example:
        >>> stats = {"rollout/reward_mean": 0.25, "rollout/success": 0.5, "rollout/tokens": 40.0,
        ...          "timing/total": 1.25, "train/loss": -0.0123, "train/optimizer_steps": 1.0}
        >>> iteration_line(3, 10, stats)
        '[iter    3/10] reward +0.250 success 0.500 tokens 40 loss -0.0123 1.2s'
        >>> iteration_line(3, 10, {**stats, "train/optimizer_steps": 0.0, "train/skipped_nonfinite": 2.0})[53:]
        'update skipped: non-finite loss or gradient in all 2 mini-batches 1.2s'
    """
    reason = skipped_update_reason(stats)
    update = f"update skipped: {reason}" if reason else f"loss {stats.get('train/loss', float('nan')):+.4f}"
    return (
        f"[iter {step:4d}/{total}] reward {stats['rollout/reward_mean']:+.3f} "
        f"success {stats['rollout/success']:.3f} tokens {stats['rollout/tokens']:.0f} "
        f"{update} {stats['timing/total']:.1f}s"
        + (f" kept {stats['filter/kept_ratio']:.2f}" if "filter/kept_ratio" in stats else "")
    )


def final_validation_line(val_start: dict | None, val_end: dict, seconds: float, peak: dict | None = None) -> str:
    """The line a run prints at its end: validation success at the start and at the end, and the peak.

    ``peak`` is :meth:`ValidationPeak.as_dict` (the paper's table metric: the best validation of the run).

    Example:
        >>> start = {"success": 0.25, "success_stderr": 0.02}
        >>> end = {"success": 0.5, "success_stderr": 0.03, "num_trajectories": 256}
        >>> final_validation_line(start, end, 61.0)
        'validation success: start 0.250 ± 0.020 -> end 0.500 ± 0.030 (256 levels, 61s)'
        >>> final_validation_line(None, end, 61.0)
        'validation success at the end: 0.500 ± 0.030'
        >>> peak = {"success": 0.625, "stderr": 0.061, "iteration": 40, "levels": 64}
        >>> final_validation_line(start, end, 61.0, peak)[-52:]
        '256 levels, 61s), peak 0.625 ± 0.061 at iteration 40'
    """
    if val_start is None:
        line = f"validation success at the end: {val_end['success']:.3f} ± {val_end['success_stderr']:.3f}"
    else:
        line = (
            f"validation success: start {val_start['success']:.3f} ± {val_start['success_stderr']:.3f} -> "
            f"end {val_end['success']:.3f} ± {val_end['success_stderr']:.3f} "
            f"({val_end.get('num_trajectories', 0):.0f} levels, {seconds:.0f}s)"
        )
    if peak:
        line += f", peak {peak['success']:.3f} ± {peak['stderr']:.3f} at iteration {peak['iteration']}"
    return line


class ValidationPeak:
    """The best validation success of a run and when it happened (RAGEN-2's table metric).

    RAGEN-2 (arXiv 2604.06268) reports the **peak** validation success over training; the trainer
    feeds every validation (at the start, every ``trainer.val_every`` iterations, at the end) to
    :meth:`update`, and those that :func:`~ragen_torchrl.validation_peak.can_set_peak` (after iteration 0,
    on all ``levels`` of the fixed set) compete for it: a periodic validation on fewer levels
    (``trainer.val_every_levels``) never sets it. The first validation reaching the maximum keeps it (a
    tie does not move the peak to a later iteration).

    Args:
        levels: the full validation set's size (``trainer.val_levels``).

    Example:
        >>> peak = ValidationPeak(levels=8)
        >>> [peak.update(it, {"success": s, "success_stderr": 0.1}, levels=n)
        ...  for it, s, n in [(0, 0.75, 8), (10, 0.5, 8), (20, 0.875, 4), (30, 0.5, 8), (40, 0.625, 8)]]
        [False, True, False, False, True]
        >>> peak.as_dict()
        {'success': 0.625, 'stderr': 0.1, 'iteration': 40, 'levels': 8}
    """

    def __init__(self, levels: int) -> None:
        self.full_levels = int(levels)
        self.success: float | None = None
        self.stderr: float | None = None
        self.iteration: int | None = None
        self.levels: int | None = None

    def update(self, iteration: int, stats: dict, levels: int) -> bool:
        """Record one validation's stats (``success``, ``success_stderr``) on ``levels`` levels; True on a new peak."""
        success = float(stats["success"])
        current = [] if self.success is None else [(self.iteration, self.success, self.levels)]
        best = peak_of([*current, (int(iteration), success, int(levels))], self.full_levels)
        if best is None or best == (self.iteration, self.success):
            return False
        self.success, self.iteration = success, int(iteration)
        self.stderr = float(stats.get("success_stderr", math.nan))
        self.levels = int(levels)
        return True

    def as_dict(self) -> dict | None:
        """``{"success", "stderr", "iteration", "levels"}``, or ``None`` while no validation could set the peak."""
        if self.success is None:
            return None
        return {"success": self.success, "stderr": self.stderr, "iteration": self.iteration, "levels": self.levels}

    def state_dict(self) -> dict | None:
        """What a checkpoint keeps (a resumed run continues the same peak)."""
        return self.as_dict()

    def load_state_dict(self, state: dict | None) -> None:
        """Restore :meth:`state_dict` (``None``: no peak yet); a stored peak that cannot set it here is dropped."""
        self.__init__(self.full_levels)
        if state and can_set_peak(int(state["iteration"]), int(state["levels"]), self.full_levels):
            self.success, self.stderr = float(state["success"]), float(state["stderr"])
            self.iteration, self.levels = int(state["iteration"]), int(state["levels"])
