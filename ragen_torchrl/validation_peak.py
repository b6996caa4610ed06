"""The peak validation success of a run (RAGEN-2's table metric), defined once for the trainer and the reports.

A validation **can set the peak** when it ran after training started (iteration > 0: the validation before
training measures the warm start, not training) and played the **full** fixed validation set (the levels of the
start and final validations, ``trainer.val_levels``). Periodic validations on the first
``trainer.val_every_levels`` levels are logged and feed the low-success stop, but never set the peak: a
maximum over noisier, smaller level sets is biased up, and by a different amount in arms with a different
number of validations. With ``trainer=paper`` (every validation on all 512 levels) every validation after
the start can set it; with the CPU default (periodic validations on 128 levels) only the final one does, so
the peak is the final validation.

The trainer's :class:`~ragen_torchrl.trainer.run_log.ValidationPeak` (``val_peak`` in ``summary.json``,
``val/peak_success``) and ``ragen-report``'s peak (:func:`~ragen_torchrl.reporting.run_metrics.peak_success`) both
use :func:`peak_of`.

Example:
    >>> # (iteration, success, levels): the start, two 128-level periodic validations, the final on 512
    >>> peak_of([(0, 0.60, 512), (10, 0.70, 128), (20, 0.55, 128), (30, 0.58, 512)], full_levels=512)
    (30, 0.58)
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["can_set_peak", "peak_of"]


def can_set_peak(iteration: int, levels: int | float | None, full_levels: int | float | None) -> bool:
    """Whether a validation at ``iteration`` on ``levels`` levels can set the peak.

    It must come after training started (``iteration > 0``) and play ``full_levels`` levels; a level count
    that was not recorded (``None``, on either side) is taken to be the full set.

    Example:
        >>> can_set_peak(0, 512, 512), can_set_peak(10, 128, 512), can_set_peak(60, 512, 512), can_set_peak(10, None, 512)
        (False, False, True, True)
    """
    if int(iteration) <= 0:
        return False
    if levels is None or full_levels is None:
        return True
    return int(levels) == int(full_levels)


def peak_of(
    points: Iterable[tuple[int, float, int | float | None]], full_levels: int | float | None
) -> tuple[int, float] | None:
    """``(iteration, success)`` of the best validation that :func:`can_set_peak`, the earliest on ties.

    ``points``: ``(iteration, success, levels)`` per validation, in any order; non-finite successes are
    skipped. ``None`` when no validation can set the peak.

    Example:
        >>> peak_of([(20, 0.7, 8), (10, 0.7, 8), (30, 0.5, 8)], 8), peak_of([(0, 0.9, 8)], 8)
        ((10, 0.7), None)
    """
    best: tuple[int, float] | None = None
    for iteration, success, levels in sorted(points, key=lambda p: p[0]):
        success = float(success)
        if not math.isfinite(success) or not can_set_peak(iteration, levels, full_levels):
            continue
        if best is None or success > best[1]:
            best = (int(iteration), success)
    return best
