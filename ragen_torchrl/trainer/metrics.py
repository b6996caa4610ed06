"""One iteration's scalars, collected from the pipeline steps that produce them.

Every step of :meth:`~ragen_torchrl.trainer.loop.Trainer.train_iteration` returns ``(data, stats)``;
a :class:`Metrics` turns the stats into TensorBoard tags (``metrics.add("train", {"loss": 0.1})``
records ``train/loss``) and times blocks (``with metrics.timer("update"):`` adds the block's
seconds to ``timing/update``).

Example:
    >>> m = Metrics()
    >>> m.add("filter", {"kept_ratio": 0.5}).update({"stop/consecutive_empty": 0})
    {'filter/kept_ratio': 0.5, 'stop/consecutive_empty': 0.0}
    >>> with m.timer("filter"):
    ...     pass
    >>> sorted(m.finish())
    ['filter/kept_ratio', 'stop/consecutive_empty', 'timing/filter', 'timing/total']
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping

__all__ = ["Metrics"]


class Metrics:
    """Scalars by tag, as floats; its clock starts when it is made (``timing/total``, see :meth:`finish`).

    Example:
        >>> m = Metrics()
        >>> m.add("rollout", {"success": 1}).add("rollout", {"tokens": 40.0})
        {'rollout/success': 1.0, 'rollout/tokens': 40.0}
        >>> with m.timer("update"):
        ...     pass
        >>> with m.timer("update"):  # a second block adds to the first
        ...     pass
        >>> m.scalars["timing/update"] >= 0.0
        True
    """

    def __init__(self) -> None:
        self.scalars: dict[str, float] = {}
        self._start = time.time()

    def add(self, prefix: str, stats: Mapping[str, float]) -> Metrics:
        """Record every ``key: value`` of ``stats`` as ``<prefix>/<key>``; returns ``self``."""
        return self.update({f"{prefix}/{k}": v for k, v in stats.items()})

    def update(self, tagged: Mapping[str, float]) -> Metrics:
        """Record scalars whose keys are tags already (``"rollout/kv_rows_reused"``); returns ``self``."""
        for tag, value in tagged.items():
            self.scalars[tag] = float(value)
        return self

    @contextlib.contextmanager
    def timer(self, name: str) -> Iterator[None]:
        """Add the block's wall seconds to ``timing/<name>``."""
        start = time.time()
        yield
        tag = f"timing/{name}"
        self.scalars[tag] = self.scalars.get(tag, 0.0) + time.time() - start

    def finish(self) -> dict[str, float]:
        """The scalars, with ``timing/total``: the seconds since this collector was made."""
        self.scalars["timing/total"] = time.time() - self._start
        return self.scalars

    def __repr__(self) -> str:
        return repr(self.scalars)
