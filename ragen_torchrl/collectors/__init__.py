"""Data collection: G samples per level, played to the end (:mod:`.grouped`), with the rollout
policy of either generation backend (:mod:`.vllm_backend`: ``hf`` or ``vllm``).

Example:
    >>> from ragen_torchrl.collectors import collect_rollouts, make_generation_policy, make_rollout_policy
    >>> callable(collect_rollouts) and callable(make_generation_policy) and callable(make_rollout_policy)
    True
"""

# their public names are the package's (vllm_backend imports vLLM only when an engine is built)
from . import grouped, vllm_backend
from .grouped import *  # noqa: F403
from .vllm_backend import *  # noqa: F403

__all__ = [*grouped.__all__, *vllm_backend.__all__]
