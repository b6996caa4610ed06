"""Group-relative advantages (GRPO): ``(R - mean_g R) / (std_g R + eps)`` per prompt group.

Unlike torchrl's ``MCAdvantage`` this accepts ``None`` (so it can sit in a ``Compose``
after a filter that dropped everything), works on a whole batch of groups at once, and
can skip the std division (Dr.GRPO).

Group statistics are computed in float64 and a group whose returns are all equal gets
advantage exactly 0: in float32 the mean of e.g. sixteen returns of -0.1 (one invalid
turn) is off by an ulp, the std is then ~1e-8 instead of 0, and ``(R - mean) / (std + eps)``
reaches +-0.19 at G = 8-16 for a group that carries no signal at all.

Example:
    >>> import torch
    >>> adv = group_advantage(torch.tensor([1.0, 0.0, 0.5, 0.5]), torch.tensor([0, 0, 1, 1]))
    >>> [round(a, 4) for a in adv.tolist()]
    [0.7071, -0.7071, 0.0, 0.0]
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from ..data.groups import Groups
from ..keys import ADVANTAGE, EPISODE_RETURN, GROUP_ID
from .records import RecordTransform


def group_advantage(
    returns: torch.Tensor, group_ids: torch.Tensor, *, scale: str = "std", eps: float = 1e-6
) -> torch.Tensor:
    """Per-trajectory advantage relative to its prompt group.

    Args:
        returns: episode returns, shape ``(N,)`` (raw, including format penalties).
        group_ids: group of each trajectory, shape ``(N,)``.
        scale: ``"std"`` divides by the unbiased in-group std plus ``eps`` (GRPO);
            ``"none"`` keeps ``R - mean`` (Dr.GRPO).
        eps: added to the std. A group of two or more equal returns gets advantage exactly 0
            (statistics in float64; the result is float32); a group of one takes mean 0 and
            std 1, as verl and RAGEN: its advantage is its return (over ``1 + eps`` with ``"std"``).
    """
    returns = torch.as_tensor(returns).reshape(-1)
    group_ids = torch.as_tensor(group_ids).reshape(-1)
    if returns.shape != group_ids.shape:
        raise ValueError(f"returns {tuple(returns.shape)} and group_ids {tuple(group_ids.shape)} differ in shape")
    if scale not in ("std", "none"):
        raise ValueError(f"scale must be 'std' or 'none', got {scale!r}")
    if not torch.isfinite(returns.to(torch.float64)).all():
        raise ValueError("returns contain NaN or inf")
    # any id dtype (float ids included): only equality matters here
    codes = torch.unique(group_ids, return_inverse=True)[1]
    return Groups.from_values(codes, returns).advantage(scale, eps).to(returns.device)


class GroupAdvantage(RecordTransform):
    """Write ``advantage`` (shape ``(N, 1, 1)``) from ``episode_return`` and ``group_id``.

    Usable as a replay-buffer write-time transform (``_inv_call``) or called directly.
    ``None`` passes through.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(episode_return=torch.tensor([1.0, 0.0]), group_id=torch.tensor([0, 0]), batch_size=[2])
        >>> GroupAdvantage()(td)["advantage"].shape
        torch.Size([2, 1, 1])
    """

    def __init__(
        self,
        *,
        scale: str = "std",
        eps: float = 1e-6,
        return_key=EPISODE_RETURN,
        group_key=GROUP_ID,
        advantage_key=ADVANTAGE,
    ) -> None:
        super().__init__(in_keys=[return_key, group_key], out_keys=[advantage_key])
        group_advantage(torch.zeros(1), torch.zeros(1), scale=scale)  # validate early
        self.scale, self.eps = scale, eps

    def _apply(self, td: TensorDictBase | None) -> TensorDictBase | None:
        if td is None:
            return None
        return self.write(td)

    def write(self, td: TensorDictBase, groups: Groups | None = None) -> TensorDictBase:
        """Set ``advantage`` on ``td`` (in place), from ``groups`` when the caller already built them.

        Example:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> td = TensorDict(episode_return=torch.tensor([1.0, 0.0]), group_id=torch.tensor([0, 0]), batch_size=[2])
            >>> g = Groups.from_values(td["group_id"], td["episode_return"])
            >>> GroupAdvantage(scale="none").write(td, g)["advantage"].reshape(-1).tolist()
            [0.5, -0.5]
        """
        ret_key, grp_key = self.in_keys
        if groups is None:
            adv = group_advantage(td.get(ret_key), td.get(grp_key), scale=self.scale, eps=self.eps)
        else:
            if groups.num_rows != td.batch_size[0]:
                raise ValueError(f"groups describe {groups.num_rows} rows, the batch has {td.batch_size[0]}")
            adv = groups.advantage(self.scale, self.eps)
        td.set(self.out_keys[0], adv.reshape(-1, 1, 1).to(td.device or adv.device))
        return td
