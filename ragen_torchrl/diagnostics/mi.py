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
* :func:`~ragen_torchrl.diagnostics.mi_sampling.sample_first_turn_pairs` / :func:`~ragen_torchrl.diagnostics.mi_sampling.sample_trajectory_uniform_pairs` choose which
  (trajectory, turn) pairs and which prompt columns enter the matrix -- pairs with empty
  reasoning are dropped *before* sampling, and :func:`~ragen_torchrl.diagnostics.mi_sampling.reasoning_valid_rate` gives the valid rate
  to log -- and :func:`~ragen_torchrl.diagnostics.mi_sampling.equivalence_from_keys` marks columns whose prompts are identical. They
  live in :mod:`ragen_torchrl.diagnostics.mi_sampling`.

The matrix itself comes from :func:`ragen_torchrl.diagnostics.cross_scoring.cross_score`.

Defaults of the reference implementation (used by the trainer): compute the proxies every
:data:`DEFAULT_MI_EVERY` = 5 iterations on :data:`~ragen_torchrl.diagnostics.mi_sampling.DEFAULT_MI_NUM_PAIRS` = 64 pairs, on the
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
from collections.abc import Sequence
from typing import Any

import torch

__all__ = [
    "DEFAULT_MI_EVERY",
    "RETRIEVAL_KS",
    "ZSCORE_EPS",
    "MIProxyTracker",
    "mi_proxies",
]

#: Compute the MI proxies every this many training iterations (reference default).
DEFAULT_MI_EVERY = 5
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
            identical prompts (see :func:`~ragen_torchrl.diagnostics.mi_sampling.equivalence_from_keys`), so retrieving any of them
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
