"""The trainer's level schedule, and the grouped collection it runs on.

Collection itself (P levels x G samples, played to the end) is the public
:mod:`ragen_torchrl.collectors.grouped`; its names are re-exported here so that
``from ragen_torchrl.trainer.rollout import collect_rollouts`` keeps working. This module
owns only which levels the trainer plays: training seeds drawn per iteration, fixed
validation seeds, disjoint from each other.

Example:
    >>> import tensordict
    >>> tensordict.set_list_to_stack(True).set()
    >>> from ragen_torchrl.trainer.rollout import train_level_seeds, VAL_SEED_OFFSET
    >>> seeds = train_level_seeds(seed=0, iteration=3, num_groups=4)
    >>> len(seeds), all(s < VAL_SEED_OFFSET for s in seeds)
    (4, True)
"""

from __future__ import annotations

import random

from ..collectors.grouped import (  # noqa: F401  (re-exported: the trainer's and tests' import path)
    PolicyContractError,
    _generate,
    _generate_part,
    _response_lengths,
    check_policy_output,
    collect_rollouts,
    make_generation_policy,
)

__all__ = [
    "VAL_SEED_OFFSET",
    "collect_rollouts",
    "make_generation_policy",
    "train_level_seeds",
    "val_level_seeds",
]

#: training levels use seeds in [0, 2**30); validation levels [2**30, 2**30 + n);
#: demonstrations [2**31, 2**31 + 2**30): the three sets never overlap
VAL_SEED_OFFSET = 1 << 30


def train_level_seeds(seed: int, iteration: int, num_groups: int) -> list[int]:
    """Level seeds of one training iteration (a pure function of seed and iteration, so resuming reproduces them)."""
    rng = random.Random(seed * 1_000_003 + iteration)
    return [rng.randrange(VAL_SEED_OFFSET) for _ in range(num_groups)]


def val_level_seeds(num_levels: int) -> list[int]:
    """The fixed validation levels (disjoint from training seeds)."""
    return [VAL_SEED_OFFSET + i for i in range(num_levels)]
