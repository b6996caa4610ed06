"""DAPO's soft overlong punishment (arXiv 2503.14476, Eq. 13) as a reward transform.

A trajectory that spends ``|y|`` generated tokens (all turns together, the records'
``num_tokens``) out of a budget ``L_max`` is penalised once it enters the last ``L_cache``
tokens of the budget::

    0                                  if |y| <= L_max - L_cache
    ((L_max - L_cache) - |y|) / L_cache if L_max - L_cache < |y| <= L_max
    -1                                 if |y| > L_max

The penalty is added to ``episode_return`` (what advantages, filters and DAPO's dynamic
sampling read), so it must run right after the rollout, before any of them.

Example:
    >>> import torch
    >>> overlong_penalty(torch.tensor([0, 16, 18, 20, 21]), max_length=20, cache_length=4).tolist()
    [0.0, 0.0, -0.5, -1.0, -1.0]
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from ..keys import EPISODE_RETURN, NUM_TOKENS
from .records import RecordTransform


def overlong_penalty(num_tokens: torch.Tensor, max_length: int, cache_length: int) -> torch.Tensor:
    """Soft overlong punishment of each trajectory (float32, same shape as ``num_tokens``).

    Args:
        num_tokens: generated tokens per trajectory, ``|y|``.
        max_length: the generation budget ``L_max``.
        cache_length: the soft-punishment interval ``L_cache`` (``0 <= L_cache <= L_max``);
            0 gives a hard -1 beyond ``L_max`` and nothing below.
    """
    _check_lengths(max_length, cache_length)
    length = torch.as_tensor(num_tokens).to(torch.float32)
    soft_start = float(max_length - cache_length)
    if cache_length == 0:
        ramp = torch.zeros_like(length)
    else:
        ramp = (soft_start - length) / float(cache_length)
    penalty = torch.where(length <= soft_start, torch.zeros_like(length), ramp)
    return torch.where(length > max_length, torch.full_like(length, -1.0), penalty)


def _check_lengths(max_length: int, cache_length: int) -> None:
    if isinstance(max_length, bool) or int(max_length) != max_length or max_length < 1:
        raise ValueError(f"max_length must be a positive integer, got {max_length!r}")
    if isinstance(cache_length, bool) or int(cache_length) != cache_length or not 0 <= cache_length <= max_length:
        raise ValueError(f"cache_length must be an integer in [0, max_length={max_length}], got {cache_length!r}")


class OverlongPenalty(RecordTransform):
    """Add :func:`overlong_penalty` to ``episode_return`` of trajectory records.

    Writes the penalty to ``overlong_penalty`` as well (for logging). Applying it twice
    changes nothing: records that already hold ``overlong_penalty`` pass unchanged, so the
    transform is safe on batches that mix fresh and already-shaped rollouts (DAPO refills).
    Works when called directly, as an env-side ``_call`` and as a replay-buffer write-time
    transform (``_inv_call``); ``None`` passes through.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(episode_return=torch.tensor([1.0, 1.0]), num_tokens=torch.tensor([10, 19]), batch_size=[2])
        >>> OverlongPenalty(max_length=20, cache_length=4)(td)["episode_return"].tolist()
        [1.0, 0.25]
    """

    def __init__(
        self,
        max_length: int,
        cache_length: int,
        *,
        length_key=NUM_TOKENS,
        return_key=EPISODE_RETURN,
        penalty_key="overlong_penalty",
    ) -> None:
        _check_lengths(max_length, cache_length)
        super().__init__(in_keys=[length_key, return_key], out_keys=[return_key, penalty_key])
        self.max_length, self.cache_length = int(max_length), int(cache_length)

    def _apply(self, td: TensorDictBase | None) -> TensorDictBase | None:
        if td is None:
            return None
        length_key, return_key = self.in_keys
        penalty_key = self.out_keys[1]
        if penalty_key in td.keys(True):
            return td  # already shaped: adding the penalty twice would double-punish
        ret = td.get(return_key)
        pen = overlong_penalty(td.get(length_key), self.max_length, self.cache_length).reshape(ret.shape)
        td.set(return_key, ret + pen.to(ret.dtype))
        td.set(penalty_key, pen)
        return td
