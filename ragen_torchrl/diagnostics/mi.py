"""Mutual-information proxies for template collapse (RAGEN-2 §2.3, App. D).

Template collapse is the regime where the policy's reasoning ``Z`` stays diverse (high
``H(Z|X)``) but stops depending on the input ``X`` (low ``I(X;Z)``). Entropy cannot see it;
in-batch *cross-scoring* can: score every sampled reasoning ``z_i`` against every prompt
``x_j`` of the batch with the current policy and ask how much better the true prompt explains
it than the average prompt does.

This module is the pure, model-free half of the diagnostic:

* :func:`mi_proxies` turns an ``M x N`` cross-scoring matrix ``l[i, j]`` (mean per-token
  ``log p(z_i | x_j)``) into the proxy family (MI estimate, conditional / marginal entropy,
  MI z-score, retrieval accuracy @1/2/4/8 with chance levels), optionally also from the
  per-sequence sums (keys with the ``_seq`` suffix).
* :class:`MIProxyTracker` adds ``mi_zscore_ema`` (z-score whose denominator is an EMA of the
  spread of the marginal) across training iterations.
* :func:`sample_first_turn_pairs` / :func:`sample_trajectory_uniform_pairs` choose which
  (trajectory, turn) pairs and which prompt columns enter the matrix -- pairs with empty
  reasoning are dropped *before* sampling, and :func:`reasoning_valid_rate` gives the valid rate
  to log -- and :func:`equivalence_from_keys` marks columns whose prompts are identical.

The matrix itself comes from :func:`ragen_torchrl.diagnostics.cross_scoring.cross_score`.

Defaults of the reference implementation (used by the trainer): compute the proxies every
:data:`DEFAULT_MI_EVERY` = 5 iterations on :data:`DEFAULT_MI_NUM_PAIRS` = 64 pairs, on the
batch *before* SNR filtering, scored by the pre-update policy.

The proxies are in log-likelihood units of the scorer; they are not exact Shannon
quantities (RAGEN-2, arXiv 2604.06268, App. D).

Example:
    >>> import torch
    >>> from ragen_torchrl.diagnostics.mi import mi_proxies
    >>> l = torch.full((3, 3), -1e4).fill_diagonal_(0.0)   # z_i identifies x_i exactly
    >>> out = mi_proxies(l, torch.arange(3))
    >>> out["retrieval_accuracy"], round(out["mi_estimate"], 4), round(out["mi_upper_bound"], 4)
    (1.0, 1.0986, 1.0986)
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import torch

__all__ = [
    "DEFAULT_MI_EVERY",
    "DEFAULT_MI_NUM_PAIRS",
    "RETRIEVAL_KS",
    "ZSCORE_EPS",
    "MIProxyTracker",
    "PairSample",
    "equivalence_from_keys",
    "mi_proxies",
    "reasoning_valid_rate",
    "sample_first_turn_pairs",
    "sample_trajectory_uniform_pairs",
]

#: Compute the MI proxies every this many training iterations (reference default).
DEFAULT_MI_EVERY = 5
#: Number of (x, z) pairs scored per MI computation (reference default).
DEFAULT_MI_NUM_PAIRS = 64
#: The ``k`` of the ``retrieval_accuracy@k`` family (``k = 1`` is ``retrieval_accuracy``).
RETRIEVAL_KS = (1, 2, 4, 8)
#: Added to the spread of the marginal in the z-score denominator (paper: 1e-3).
ZSCORE_EPS = 1e-3


# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


def _as_matrix(name: str, value: Any) -> torch.Tensor:
    t = torch.as_tensor(value)
    if t.dim() != 2:
        raise ValueError(f"{name} must be a 2-D [M, N] matrix, got shape {tuple(t.shape)}")
    if t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"{name} must have at least one row and one column, got {tuple(t.shape)}")
    if not t.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if not bool(torch.isfinite(t).all()):
        # NaN / inf would silently poison every mean below; fail loudly instead.
        raise ValueError(f"{name} contains NaN or infinite entries")
    # float64: logsumexp of entries around -1e4 and differences of near-equal means are
    # where float32 loses digits, and these matrices are tiny.
    return t.detach().to(device="cpu", dtype=torch.float64)


def _as_index_vector(name: str, value: Any, length: int, upper: int | None) -> torch.Tensor:
    t = torch.as_tensor(value)
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor, got dtype {t.dtype}")
    if t.numel() != length:
        raise ValueError(f"{name} has length {t.numel()}, expected {length}")
    t = t.detach().to(device="cpu", dtype=torch.long)
    if upper is not None and t.numel() and (int(t.min()) < 0 or int(t.max()) >= upper):
        raise ValueError(f"{name} entries must lie in [0, {upper}), got min {int(t.min())} max {int(t.max())}")
    return t


# --------------------------------------------------------------------------------------------
# retrieval with ties and equivalent columns
# --------------------------------------------------------------------------------------------


def _miss_probability(pool: torch.Tensor, bad: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """P(all ``draws`` items drawn without replacement from ``pool`` items are ``bad``).

    ``= C(bad, draws) / C(pool, draws) = prod_{q < draws} (bad - q) / (pool - q)``, elementwise;
    ``draws`` is at most 8 here so the product loop is short. Exactly 0 when ``draws > bad``.
    """
    pool = pool.to(torch.float64)
    bad = bad.to(torch.float64)
    draws = draws.to(torch.float64)
    out = torch.ones_like(pool)
    max_draws = int(draws.max()) if draws.numel() else 0
    for q in range(max_draws):
        active = draws > q
        factor = ((bad - q).clamp(min=0.0) / (pool - q).clamp(min=1.0)).where(active, torch.ones_like(pool))
        out = out * factor
    return out


def _retrieval(
    scores: torch.Tensor, true_cols: torch.Tensor, equiv: torch.Tensor, ks: Sequence[int]
) -> dict[int, tuple[float, float]]:
    """Tie-aware retrieval accuracy and its chance level for every ``k`` in ``ks``.

    A row is a hit at ``k`` when a column equivalent to its true column (the true column
    included) is among its ``k`` best-scored columns. Ties are broken uniformly at random and
    the *expected* hit is returned (a fractional hit), so the result is deterministic and a
    row that is constant across columns scores exactly chance.

    Let ``t*`` be the best score among the equivalent columns ``E_i``, ``a`` the number of
    non-equivalent columns strictly above ``t*``, ``b`` the non-equivalent columns tied at
    ``t*`` and ``e`` the equivalent columns tied at ``t*``. With ``r = k - a`` free slots left
    for the tie block (filled in random order):
    ``hit = 0`` if ``r <= 0`` else ``1 - C(b, r) / C(b + e, r)``.
    For ``k = 1`` and no equivalences this is ``1 / (#tied maxima)`` when the true column
    attains the row max and 0 otherwise.

    Chance (scores exchangeable across columns) for a row with ``n_i = |E_i|``:
    ``1 - C(N - n_i, k) / C(N, k)``, averaged over rows; ``k/N`` (capped at 1) without
    equivalences and ``n_i / N`` for ``k = 1``.
    """
    m, n = scores.shape
    row_cls = equiv[true_cols]  # [M]
    in_class = equiv.unsqueeze(0) == row_cls.unsqueeze(1)  # [M, N] column equivalent to truth
    n_equiv = in_class.sum(1)  # [M], >= 1 (the true column itself)
    best_equiv = scores.masked_fill(~in_class, float("-inf")).amax(1, keepdim=True)  # t*
    above = ((scores > best_equiv) & ~in_class).sum(1)  # a
    tied_other = ((scores == best_equiv) & ~in_class).sum(1)  # b
    tied_equiv = ((scores == best_equiv) & in_class).sum(1)  # e
    out: dict[int, tuple[float, float]] = {}
    for k in ks:
        k_eff = min(k, n)  # k capped at N: @8 with 3 columns is @3
        free = (k_eff - above).clamp(min=0)
        miss = _miss_probability(tied_other + tied_equiv, tied_other, free)
        hit = torch.where(free > 0, 1.0 - miss, torch.zeros_like(miss))
        kk = torch.full_like(n_equiv, k_eff)
        chance = 1.0 - _miss_probability(torch.full_like(n_equiv, n), n - n_equiv, kk)
        out[k] = (float(hit.mean()), float(chance.mean()))
    return out


def _family(mat: torch.Tensor, true_cols: torch.Tensor, equiv: torch.Tensor) -> dict[str, float]:
    m, n = mat.shape
    rows = torch.arange(m)
    matched = mat[rows, true_cols]
    # marginal_i = log (1/N) sum_j p(z_i | x_j): the likelihood of z_i under a prompt drawn
    # uniformly from the batch, i.e. the in-batch estimate of log p(z_i).
    marginal = torch.logsumexp(mat, dim=1) - math.log(n)
    gap = matched - marginal  # pointwise MI proxy; <= log N by construction
    marginal_std = float(marginal.std(unbiased=False))  # population std (paper)
    out = {
        "mi_estimate": float(gap.mean()),
        "mi_upper_bound": math.log(n),
        "conditional_entropy": float(-matched.mean()),
        "reasoning_entropy": float(-marginal.mean()),
        "mi_zscore": float((gap / (marginal_std + ZSCORE_EPS)).mean()),
        "marginal_std": marginal_std,
    }
    for k, (acc, chance) in _retrieval(mat, true_cols, equiv, RETRIEVAL_KS).items():
        tag = "" if k == 1 else f"@{k}"
        out[f"retrieval_accuracy{tag}"] = acc
        out[f"retrieval_chance{tag}"] = chance
        out[f"retrieval_above_chance{tag}"] = acc - chance
    return out


def mi_proxies(
    cross_log_probs: torch.Tensor,
    true_cols: torch.Tensor,
    *,
    seq_log_probs: torch.Tensor | None = None,
    col_equivalence: torch.Tensor | None = None,
) -> dict[str, float]:
    """Compute the MI-proxy family from an in-batch cross-scoring matrix.

    Args:
        cross_log_probs: ``[M, N]`` float matrix, ``l[i, j]`` = mean per-token
            ``log p(z_i | x_j)`` of reasoning ``i`` under prompt column ``j``.
        true_cols: ``[M]`` integer tensor, ``c(i)``: the column holding pair ``i``'s own prompt.
        seq_log_probs: optional ``[M, N]`` matrix of per-sequence *sums* of the same
            log-probs; when given, every key below is also returned with a ``_seq`` suffix
            (``mi_estimate_seq``, ``retrieval_accuracy@2_seq``, ...) computed from it.
        col_equivalence: optional ``[N]`` integer class ids; columns sharing an id have
            identical prompts (see :func:`equivalence_from_keys`), so retrieving any of them
            counts as a hit and the chance level is raised accordingly.

    Returns:
        ``dict[str, float]`` with, for ``matched_i = l[i, c(i)]`` and
        ``marginal_i = logsumexp_j l[i, j] - log N``:

        * ``mi_estimate`` = ``mean_i(matched_i - marginal_i)``; ``mi_upper_bound`` = ``log N``.
        * ``conditional_entropy`` = ``-mean(matched)`` (``H(Z|X)`` proxy);
          ``reasoning_entropy`` = ``-mean(marginal)`` (``H(Z)`` proxy).
        * ``mi_zscore`` = ``mean_i((matched_i - marginal_i) / (std(marginal) + 1e-3))``,
          population std; ``marginal_std`` is that std (the tracker's EMA input).
        * ``retrieval_accuracy`` and ``retrieval_accuracy@{2,4,8}``: fraction of rows whose
          true column (or an equivalent one) is among the ``k`` best columns, ``k`` capped at
          ``N``. Ties are broken uniformly at random and the expected hit is counted (a
          constant row scores exactly chance).
        * ``retrieval_chance[@k]``: mean over rows of ``1 - C(N - n_i, k) / C(N, k)`` with
          ``n_i`` the number of columns equivalent to the true one (itself included), the
          exact hit probability of a random ranking. It is ``1/N`` (``min(1, k/N)``) when all
          columns differ and ``mean_i n_i / N`` for ``k = 1``. (It is *not*
          ``min(1, k * n_i / N)``, which overstates chance when equivalent columns collide.)
        * ``retrieval_above_chance[@k]`` = accuracy - chance.
        * ``num_pairs`` = ``M``, ``num_columns`` = ``N`` (not repeated with ``_seq``).

    Raises:
        ValueError: non-2-D or empty matrix, NaN / inf entries, ``true_cols`` of the wrong
            length or out of ``[0, N)``, ``seq_log_probs`` / ``col_equivalence`` of the wrong
            shape.

    Example:
        >>> import torch
        >>> l = torch.tensor([[-1.0, -3.0], [-2.0, -2.0]])
        >>> out = mi_proxies(l, torch.tensor([0, 1]))
        >>> out["retrieval_accuracy"]   # row 0 hit, row 1 tie: half a hit
        0.75
        >>> out["num_pairs"], out["num_columns"]
        (2, 2)
    """
    mat = _as_matrix("cross_log_probs", cross_log_probs)
    m, n = mat.shape
    cols = _as_index_vector("true_cols", true_cols, m, n)
    if col_equivalence is None:
        equiv = torch.arange(n)
    else:
        equiv = _as_index_vector("col_equivalence", col_equivalence, n, None)
    out: dict[str, float] = _family(mat, cols, equiv)
    out["num_pairs"] = m
    out["num_columns"] = n
    if seq_log_probs is not None:
        seq = _as_matrix("seq_log_probs", seq_log_probs)
        if seq.shape != mat.shape:
            raise ValueError(f"seq_log_probs has shape {tuple(seq.shape)}, expected {tuple(mat.shape)}")
        out.update({f"{k}_seq": v for k, v in _family(seq, cols, equiv).items()})
    return out


class MIProxyTracker:
    """Stateful wrapper around :func:`mi_proxies` that adds ``mi_zscore_ema``.

    ``std(marginal)`` is noisy from one 64-pair batch to the next, which makes the per-step
    z-score jump around; ``mi_zscore_ema`` divides the same mean MI gap by an exponential
    moving average (``decay`` = 0.9) of that std instead. The first call initialises the EMA
    to the current std (so the first ``mi_zscore_ema`` equals ``mi_zscore``); later calls
    update ``ema = decay * ema + (1 - decay) * std`` *before* using it. When
    ``seq_log_probs`` is passed, ``mi_zscore_ema_seq`` is tracked with its own EMA.

    Example:
        >>> import torch
        >>> tracker = MIProxyTracker()
        >>> l = torch.tensor([[-1.0, -3.0], [-2.5, -0.5]])
        >>> out = tracker(l, torch.tensor([0, 1]))
        >>> out["mi_zscore_ema"] == out["mi_zscore"]
        True
        >>> tracker.state_dict()["num_updates"]
        1
    """

    def __init__(self, decay: float = 0.9, eps: float = ZSCORE_EPS) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        self.decay = float(decay)
        self.eps = float(eps)
        self.ema_std: float | None = None
        self.ema_std_seq: float | None = None
        self.num_updates = 0

    def _update_ema(self, old: float | None, value: float) -> float:
        return value if old is None else self.decay * old + (1.0 - self.decay) * value

    def __call__(
        self,
        cross_log_probs: torch.Tensor,
        true_cols: torch.Tensor,
        *,
        seq_log_probs: torch.Tensor | None = None,
        col_equivalence: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """Compute :func:`mi_proxies` and the EMA z-score(s); same arguments."""
        out = mi_proxies(
            cross_log_probs,
            true_cols,
            seq_log_probs=seq_log_probs,
            col_equivalence=col_equivalence,
        )
        # mean_i(gap_i / d) == mean_i(gap_i) / d for a shared denominator d.
        self.ema_std = self._update_ema(self.ema_std, out["marginal_std"])
        out["mi_zscore_ema"] = out["mi_estimate"] / (self.ema_std + self.eps)
        if seq_log_probs is not None:
            self.ema_std_seq = self._update_ema(self.ema_std_seq, out["marginal_std_seq"])
            out["mi_zscore_ema_seq"] = out["mi_estimate_seq"] / (self.ema_std_seq + self.eps)
        self.num_updates += 1
        return out

    update = __call__

    def state_dict(self) -> dict[str, Any]:
        """Plain-Python state for checkpoints (restored by :meth:`load_state_dict`)."""
        return {
            "decay": self.decay,
            "eps": self.eps,
            "ema_std": self.ema_std,
            "ema_std_seq": self.ema_std_seq,
            "num_updates": self.num_updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the EMA state written by :meth:`state_dict`."""
        self.decay = float(state["decay"])
        self.eps = float(state["eps"])
        self.ema_std = state["ema_std"]
        self.ema_std_seq = state["ema_std_seq"]
        self.num_updates = int(state["num_updates"])


# --------------------------------------------------------------------------------------------
# which pairs and columns to score
# --------------------------------------------------------------------------------------------


class PairSample(NamedTuple):
    """Pairs and columns chosen for one cross-scoring matrix.

    Pair ``i`` is reasoning ``z`` of turn ``turn_idx[i]`` of trajectory ``traj_idx[i]``; its
    true column is ``true_cols[i]``. Column ``j``'s prompt ``x_j`` is the context of turn
    ``col_turn_idx[j]`` of trajectory ``col_traj_idx[j]`` (any representative will do for
    first-turn sampling, where every trajectory of a group shares the same first prompt).
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
    the way uniform-over-turns sampling would make them. Each pair is its own column (its
    own context ``x``), except that repeated draws of the same (trajectory, turn) are merged
    into one column, so the matrix never holds two copies of one prompt *by construction*
    and every column holds at least one pair. (Different turns can still render identical
    contexts; mark those with :func:`equivalence_from_keys`.) Trajectories with 0 turns are
    never drawn.

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
        >>> len(s.traj_idx), len(s.col_traj_idx) <= 2   # 4 draws over 2 distinct pairs
        (4, True)
        >>> s = sample_trajectory_uniform_pairs(torch.tensor([2, 1]), 4, valid_turns=[[False, True], [False]])
        >>> s.turn_idx.tolist(), s.col_traj_idx.tolist(), s.col_turn_idx.tolist()   # one valid pair
        ([1, 1, 1, 1], [0], [1])
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
    width = int(turns.max()) + 1
    key = traj * width + turn  # unique id per (trajectory, turn)
    uniq, inverse = torch.unique(key, return_inverse=True)
    return PairSample(
        traj_idx=traj,
        turn_idx=turn,
        true_cols=inverse,
        col_traj_idx=uniq // width,
        col_turn_idx=uniq % width,
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
