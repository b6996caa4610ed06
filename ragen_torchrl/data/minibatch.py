"""Group-aligned mini-batches for group-relative policy updates.

GRPO-style advantages are centred within each prompt group, so the tokens every member of a
group shares (the same first observation's reply prefix, the format tokens) get advantages
that sum to zero *within the group*. When a mini-batch holds whole groups and every token
weighs the same, those pushes cancel inside each optimizer step. Row-shuffled mini-batches split
groups across steps, and with Adam's per-step normalisation the leftover push on shared tokens
is not noise that averages out: it moves the parameters every step.

Example:
    >>> import torch
    >>> groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    >>> batches = group_minibatches(groups, 4, generator=torch.Generator().manual_seed(0))
    >>> [sorted(groups[b].tolist()) for b in batches]  # whole groups in every mini-batch
    [[0, 0, 1, 1], [2, 2, 3, 3]]
"""

from __future__ import annotations

import torch

from .groups import Groups

__all__ = ["group_minibatches"]


def group_minibatches(
    group_ids: torch.Tensor | Groups, mini_batch_size: int, *, generator: torch.Generator | None = None
) -> list[torch.Tensor]:
    """Shuffle the groups and pack whole groups into mini-batches of about ``mini_batch_size`` rows.

    Groups are taken in a random order and added to the current mini-batch while it has room;
    a group larger than ``mini_batch_size`` gets a mini-batch of its own (a group is never
    split). Rows keep their relative order inside a group.

    Args:
        group_ids: ``(N,)`` (or ``(N, 1)``) integer group id of each row, or the batch's
            :class:`~ragen_torchrl.data.groups.Groups`.
        mini_batch_size: target rows per mini-batch (>= 1).
        generator: torch RNG for the group order.

    Returns:
        A list of ``LongTensor`` row indices; together they cover every row exactly once.
    """
    if mini_batch_size < 1:
        raise ValueError(f"mini_batch_size must be >= 1, got {mini_batch_size}")
    groups = group_ids if isinstance(group_ids, Groups) else Groups.from_ids(torch.as_tensor(group_ids).reshape(-1))
    if groups.num_rows == 0:
        return []
    members = groups.members()
    order = torch.randperm(groups.num_groups, generator=generator).tolist()
    batches: list[torch.Tensor] = []
    current: list[torch.Tensor] = []
    size = 0
    for g in order:
        rows = members[g]
        if current and size + rows.numel() > mini_batch_size:
            batches.append(torch.cat(current))
            current, size = [], 0
        current.append(rows)
        size += rows.numel()
    if current:
        batches.append(torch.cat(current))
    return batches
