"""Data collection: G samples per level, played to the end (:mod:`.grouped`).

Example:
    >>> from ragen_torchrl.collectors import collect_rollouts, make_generation_policy
    >>> callable(collect_rollouts) and callable(make_generation_policy)
    True
"""

from .grouped import (
    POLICY_OUTPUT_KEYS,
    PolicyContractError,
    check_policy_output,
    collect_rollouts,
    make_generation_policy,
)

__all__ = [
    "POLICY_OUTPUT_KEYS",
    "PolicyContractError",
    "check_policy_output",
    "collect_rollouts",
    "make_generation_policy",
]
