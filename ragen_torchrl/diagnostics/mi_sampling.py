"""Which (trajectory, turn) pairs and prompt columns enter an MI cross-scoring matrix.

The pure sampling half of the MI diagnostic (:mod:`ragen_torchrl.diagnostics.mi` turns the
scored matrix into the proxies):

* :func:`sample_first_turn_pairs` (columns = prompt groups, pairs from turn 0) and
  :func:`sample_trajectory_uniform_pairs` (a trajectory, then one of its turns, uniformly) pick
  the pairs and columns -- pairs with empty reasoning are dropped *before* sampling (RAGEN-2,
  arXiv 2604.06268, App. D), and :func:`reasoning_valid_rate` gives the valid rate to log;
* :func:`equivalence_from_keys` marks columns whose prompts are identical.

Example:
    >>> import torch
    >>> s = sample_first_turn_pairs(torch.tensor([4, 4, 9]), 8)
    >>> s.traj_idx.tolist(), s.true_cols.tolist(), s.col_traj_idx.tolist()
    ([0, 1, 2], [0, 0, 1], [0, 2])
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import torch

__all__ = [
    "DEFAULT_MI_NUM_PAIRS",
    "PairSample",
    "equivalence_from_keys",
    "reasoning_valid_rate",
    "sample_first_turn_pairs",
    "sample_trajectory_uniform_pairs",
]

#: Number of (x, z) pairs scored per MI computation (reference default).
DEFAULT_MI_NUM_PAIRS = 64


class PairSample(NamedTuple):
    """Pairs and columns chosen for one cross-scoring matrix.

    Pair ``i`` is reasoning ``z`` of turn ``turn_idx[i]`` of trajectory ``traj_idx[i]``; its
    true column is ``true_cols[i]``. Column ``j``'s prompt ``x_j`` is the context of turn
    ``col_turn_idx[j]`` of trajectory ``col_traj_idx[j]`` (any representative will do for
    first-turn sampling, where every trajectory of a group shares the same first prompt).
    Several columns may name the same (trajectory, turn) (trajectory-uniform sampling keeps
    one column per draw); they are equivalent columns.
    """

    traj_idx: torch.Tensor  #: [M] long
    turn_idx: torch.Tensor  #: [M] long
    true_cols: torch.Tensor  #: [M] long, in [0, N)
    col_traj_idx: torch.Tensor  #: [N] long
    col_turn_idx: torch.Tensor  #: [N] long


def _as_bool_vector(name: str, value: Any, length: int) -> torch.Tensor:
    t = torch.as_tensor(value)
    if t.dim() != 1 or t.numel() != length:
        raise ValueError(f"{name} must be 1-D of length {length}, got shape {tuple(t.shape)}")
    return t.detach().cpu().bool()


def _valid_turn_mask(turns: torch.Tensor, valid_turns: Any) -> torch.Tensor:
    """``[B, T_max]`` bool: turn ``k`` of trajectory ``b`` exists and has non-empty reasoning."""
    t_max = int(turns.max()) if turns.numel() else 0
    exists = torch.arange(t_max).unsqueeze(0) < turns.unsqueeze(1)
    if valid_turns is None:
        return exists
    if isinstance(valid_turns, torch.Tensor):
        v = valid_turns.detach().cpu().bool()
        if v.dim() != 2 or v.shape[0] != turns.numel():
            raise ValueError(f"valid_turns must be a [B, T] mask with B = {turns.numel()}, got shape {tuple(v.shape)}")
    else:  # one sequence of flags per trajectory (ragged)
        rows = [list(r) for r in valid_turns]
        if len(rows) != turns.numel():
            raise ValueError(f"valid_turns has {len(rows)} rows, expected {turns.numel()}")
        v = torch.zeros(turns.numel(), max([len(r) for r in rows] + [t_max]), dtype=torch.bool)
        for i, r in enumerate(rows):
            v[i, : len(r)] = torch.tensor([bool(x) for x in r], dtype=torch.bool)
    if v.shape[1] < t_max:
        raise ValueError(f"valid_turns has {v.shape[1]} columns, fewer than the {t_max} turns of the batch")
    return v[:, :t_max] & exists


def reasoning_valid_rate(turns_per_traj: torch.Tensor, valid_turns: Any, scheme: str = "trajectory") -> float:
    """Share of the pairs a sampling scheme could draw whose reasoning is non-empty.

    RAGEN-2 (arXiv 2604.06268, App. D) drops pairs with empty reasoning and logs the valid rate.
    This is the probability that the scheme's draw, *before* dropping empty reasoning, lands on a
    non-empty one -- computed exactly rather than estimated from the sampled pairs:

    * ``"first_turn"``: the share of trajectories whose first turn has non-empty reasoning;
    * ``"trajectory"``: the mean over trajectories of (valid turns / turns).

    Trajectories without any turn are not counted (neither scheme can draw them); 0.0 when none
    has a turn.

    Args:
        turns_per_traj: ``[B]`` number of turns of every trajectory.
        valid_turns: ``[B, T]`` bool mask (or one sequence of flags per trajectory): turn ``k``
            of trajectory ``b`` has non-empty reasoning. ``None`` = every turn is valid.
        scheme: ``"first_turn"`` or ``"trajectory"``.

    Example:
        >>> import torch
        >>> turns = torch.tensor([2, 3, 1, 0])
        >>> valid = [[True, False], [False, False, True], [False], []]
        >>> round(reasoning_valid_rate(turns, valid), 4)   # (1/2 + 1/3 + 0) / 3
        0.2778
        >>> round(reasoning_valid_rate(turns, valid, "first_turn"), 4)   # 1 of 3
        0.3333
    """
    if scheme not in ("first_turn", "trajectory"):
        raise ValueError(f"scheme must be 'first_turn' or 'trajectory', got {scheme!r}")
    turns = torch.as_tensor(turns_per_traj).detach().cpu().long()
    mask = _valid_turn_mask(turns, valid_turns)
    has_turn = turns > 0
    if not bool(has_turn.any()):
        return 0.0
    if scheme == "first_turn":
        return float(mask[has_turn, 0].double().mean())
    return float((mask[has_turn].sum(1).double() / turns[has_turn].double()).mean())


def sample_first_turn_pairs(
    group_ids: torch.Tensor,
    num_pairs: int = DEFAULT_MI_NUM_PAIRS,
    generator: torch.Generator | None = None,
    valid: torch.Tensor | None = None,
) -> PairSample:
    """First-turn sampling: columns are the prompt groups, pairs come from turn 0.

    Every trajectory of a prompt group starts from the same level, so its first-turn context
    is the group's prompt; the columns are therefore the distinct groups of the batch (all of
    them, not only those that received a pair, so chance is ``1/P`` as in the paper), each
    represented by its first trajectory. ``min(num_pairs, B)`` trajectories are drawn
    uniformly *without* replacement; pair ``i`` uses turn 0 and its group's column.

    **Empty reasoning is dropped before sampling** (RAGEN-2 App. D: "pairs with empty
    reasoning are dropped"). With ``valid`` given, only trajectories whose first turn has
    non-empty reasoning are drawn (``min(num_pairs, #valid)`` pairs, all of them scored), and
    the columns are the groups that still hold at least one such trajectory, each represented by
    its first valid one. Dropping *after* sampling instead would score fewer pairs and keep
    columns that no pair can come from, shifting ``N``, ``log N``, chance and the marginal
    exactly when format failures rise. Log the valid rate with :func:`reasoning_valid_rate`.

    Args:
        group_ids: ``[B]`` integer group id of every trajectory (any values).
        num_pairs: number of pairs ``M`` wanted (default 64).
        generator: optional ``torch.Generator`` for reproducible draws.
        valid: optional ``[B]`` bool, trajectory ``b``'s first turn has non-empty reasoning.
            ``None`` = all valid (same draws as an all-True mask).

    Raises:
        ValueError: empty or non-1-D ``group_ids``, ``num_pairs < 1``, a ``valid`` of the wrong
            shape, or no valid trajectory at all.

    Example:
        >>> import torch
        >>> s = sample_first_turn_pairs(torch.tensor([7, 7, 3, 3]), 3, torch.Generator().manual_seed(0))
        >>> s.col_traj_idx.tolist(), s.turn_idx.tolist()
        ([0, 2], [0, 0, 0])
        >>> bool((s.col_traj_idx[s.true_cols] // 2 == s.traj_idx // 2).all())
        True
        >>> v = torch.tensor([True, False, False, False])   # group 3 has no reasoning left
        >>> s = sample_first_turn_pairs(torch.tensor([7, 7, 3, 3]), 3, valid=v)
        >>> s.traj_idx.tolist(), s.col_traj_idx.tolist()   # 1 pair, 1 column
        ([0], [0])
    """
    groups = torch.as_tensor(group_ids)
    if groups.dim() != 1 or groups.numel() == 0:
        raise ValueError(f"group_ids must be a non-empty 1-D tensor, got shape {tuple(groups.shape)}")
    if num_pairs < 1:
        raise ValueError(f"num_pairs must be >= 1, got {num_pairs}")
    groups = groups.detach().cpu().long()
    b = groups.numel()
    ok = torch.ones(b, dtype=torch.bool) if valid is None else _as_bool_vector("valid", valid, b)
    candidates = torch.nonzero(ok).flatten()  # increasing trajectory index
    if candidates.numel() == 0:
        raise ValueError("no trajectory has non-empty first-turn reasoning to sample")
    # Columns: groups with a valid trajectory, in order of their first valid trajectory, so
    # column j is stable for a given batch layout.
    uniq, inverse = torch.unique(groups[candidates], return_inverse=True)
    first_pos = torch.full((uniq.numel(),), b, dtype=torch.long).scatter_reduce(0, inverse, candidates, reduce="amin")
    order = torch.argsort(first_pos)  # sorted-unique index -> appearance rank
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel())
    col_traj = first_pos[order]
    pick = torch.randperm(candidates.numel(), generator=generator)[: min(num_pairs, candidates.numel())]
    pick = torch.sort(pick).values
    traj = candidates[pick]
    return PairSample(
        traj_idx=traj,
        turn_idx=torch.zeros_like(traj),
        true_cols=rank[inverse[pick]],
        col_traj_idx=col_traj,
        col_turn_idx=torch.zeros_like(col_traj),
    )


def sample_trajectory_uniform_pairs(
    turns_per_traj: torch.Tensor,
    num_pairs: int = DEFAULT_MI_NUM_PAIRS,
    generator: torch.Generator | None = None,
    valid_turns: Any = None,
) -> PairSample:
    """Trajectory-uniform sampling: a trajectory uniformly, then one of its turns uniformly.

    Draws are i.i.d. (with replacement), so short trajectories are not under-represented
    the way uniform-over-turns sampling would make them. **Each draw is its own column**
    (``N = num_pairs``, ``true_cols = arange(num_pairs)``), also when two draws hit the same
    (trajectory, turn): as RAGEN-2's reference, identical prompts are *equivalent* columns
    (mark them with :func:`equivalence_from_keys`: retrieving any of them is a hit and the
    chance level is the mean share of columns equivalent to a row's own), while ``log N`` and
    the marginal ``logsumexp_j l[i, j] - log N`` run over all ``num_pairs`` columns, i.e. over
    the prompts as drawn. Merging repeated draws would make ``N`` random (about 40 for 64
    draws over 64 one-turn trajectories) and weigh a prompt drawn twice like one drawn once.
    Identical prompts need scoring only once (the columns are copies; the
    :class:`~ragen_torchrl.diagnostics.collapse.CollapseMonitor` scores each distinct one
    once). Trajectories with 0 turns are never drawn.

    **Empty reasoning is dropped before sampling** (RAGEN-2 App. D): with ``valid_turns``
    given, the pool is the (trajectory, turn) pairs with non-empty reasoning; a trajectory is
    drawn uniformly among those with at least one such turn, then one of *its valid turns*
    uniformly. All ``num_pairs`` pairs are then scorable and no column is left without a
    pair. Log the valid rate with :func:`reasoning_valid_rate`.

    Args:
        turns_per_traj: ``[B]`` integer number of turns of every trajectory.
        num_pairs: number of pairs ``M`` (default 64).
        generator: optional ``torch.Generator``.
        valid_turns: optional ``[B, T]`` bool mask (``T`` >= the longest trajectory; entries
            past a trajectory's turns are ignored) or one sequence of flags per trajectory:
            turn ``k`` of trajectory ``b`` has non-empty reasoning. ``None`` = all valid (same
            draws as an all-True mask).

    Raises:
        ValueError: bad shapes, ``num_pairs < 1``, negative turn counts, or no valid turn.

    Example:
        >>> import torch
        >>> s = sample_trajectory_uniform_pairs(torch.tensor([1, 1]), 4, torch.Generator().manual_seed(0))
        >>> s.true_cols.tolist(), torch.equal(s.col_traj_idx, s.traj_idx)   # 4 draws, 4 columns
        ([0, 1, 2, 3], True)
        >>> s = sample_trajectory_uniform_pairs(torch.tensor([2, 1]), 4, valid_turns=[[False, True], [False]])
        >>> s.turn_idx.tolist(), s.col_traj_idx.tolist(), s.col_turn_idx.tolist()   # one valid pair, 4 copies
        ([1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1])
    """
    turns = torch.as_tensor(turns_per_traj)
    if turns.dim() != 1 or turns.numel() == 0:
        raise ValueError(f"turns_per_traj must be a non-empty 1-D tensor, got shape {tuple(turns.shape)}")
    if num_pairs < 1:
        raise ValueError(f"num_pairs must be >= 1, got {num_pairs}")
    turns = turns.detach().cpu().long()
    if int(turns.min()) < 0:
        raise ValueError("turns_per_traj must be >= 0")
    mask = _valid_turn_mask(turns, valid_turns)  # [B, T_max]
    n_valid = mask.sum(1)
    eligible = torch.nonzero(n_valid > 0).flatten()
    if eligible.numel() == 0:
        raise ValueError("no trajectory has a turn with non-empty reasoning to sample")
    pick = torch.randint(eligible.numel(), (num_pairs,), generator=generator)
    traj = eligible[pick]
    # Uniform k in [0, V_b) over the V_b valid turns: floor(u * V_b) with u in [0, 1); the turn
    # is the k-th valid one (the k-th turn itself when every turn is valid).
    u = torch.rand(num_pairs, generator=generator, dtype=torch.float64)
    k = torch.minimum((u * n_valid[traj]).long(), n_valid[traj] - 1)
    rows = mask[traj]  # [M, T_max]
    turn = ((rows.cumsum(1) == (k + 1).unsqueeze(1)) & rows).long().argmax(1)
    return PairSample(
        traj_idx=traj,
        turn_idx=turn,
        true_cols=torch.arange(num_pairs),
        col_traj_idx=traj.clone(),
        col_turn_idx=turn.clone(),
    )


def equivalence_from_keys(keys: Sequence[Hashable]) -> torch.Tensor:
    """Map column contents to class ids so identical prompts share an id.

    Args:
        keys: one hashable per column, e.g. ``tuple(prompt_token_ids.tolist())``.

    Returns:
        ``[N]`` long tensor of class ids numbered by first appearance; pass it to
        :func:`mi_proxies` as ``col_equivalence``.

    Example:
        >>> equivalence_from_keys([(1, 2), (3,), (1, 2)]).tolist()
        [0, 1, 0]
    """
    ids: dict[Hashable, int] = {}
    return torch.tensor([ids.setdefault(k, len(ids)) for k in keys], dtype=torch.long)
