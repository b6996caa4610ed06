"""One context manager for a block of the run: :func:`phase` charges it to a phase of the run's
:class:`~ragen_torchrl.trainer.provenance.PhaseClock` (``summary.json``'s ``phases``, what
``trainer.max_seconds`` counts) and, given an iteration's :class:`~ragen_torchrl.trainer.metrics.Metrics`,
adds its seconds to ``timing/<name>`` (the iteration's scalars), so the two are switched together.

On leaving the block the clock goes back to the phase it was in (a validation in the middle of the
loop hands the clock back to the loop), whether the block ended or raised.

Example:
    >>> from ragen_torchrl.trainer.metrics import Metrics
    >>> from ragen_torchrl.trainer.provenance import PhaseClock
    >>> clock, metrics = PhaseClock(phase="other"), Metrics()
    >>> with phase(clock, "update", metrics):
    ...     with phase(clock, "checkpoint"):  # the clock's only: the update's timing includes it
    ...         pass
    >>> with phase(clock, "diagnostics", metrics, timing="grad_snr"):
    ...     pass
    >>> clock.phase, sorted(metrics.scalars)
    ('other', ['timing/grad_snr', 'timing/update'])
    >>> list(clock.phases())
    ['other', 'update', 'checkpoint', 'diagnostics', 'total']
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .metrics import Metrics
from .provenance import PhaseClock

__all__ = ["phase"]


@contextlib.contextmanager
def phase(clock: PhaseClock, name: str, metrics: Metrics | None = None, *, timing: str | None = None) -> Iterator[None]:
    """Charge the block to the clock's phase ``name`` (then back to the phase before); with ``metrics``, also
    add its wall seconds to ``timing/<timing>`` (``timing`` defaults to ``name``; a second block adds to the first).
    """
    outer = clock.enter(name)
    try:
        with metrics.timer(timing or name) if metrics is not None else contextlib.nullcontext():
            yield
    finally:
        clock.enter(outer)
