"""Data collection: G samples per level, played to the end (:mod:`.grouped`).

Example:
    >>> from ragen_torchrl.collectors import collect_rollouts, make_generation_policy
    >>> callable(collect_rollouts) and callable(make_generation_policy)
    True
"""

# one module for now: its public names are the package's
from .grouped import *  # noqa: F403
from .grouped import __all__  # noqa: F401
