"""Token-entropy metrics of the reasoning (the *within-input* diversity axis).

Entropy is what most RL recipes monitor; RAGEN-2 shows it can stay high while the reasoning
stops depending on the input (template collapse). These metrics are logged next to the MI
proxies of :mod:`ragen_torchrl.diagnostics.mi` so the two axes can be compared, and the
per-sequence values feed the entropy ablation metrics of the SNR filter.

Example:
    >>> import torch
    >>> from ragen_torchrl.diagnostics.entropy import token_entropy, entropy_metrics
    >>> logits = torch.zeros(2, 3, 4)                     # uniform over 4 tokens
    >>> mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    >>> h = token_entropy(logits, mask)                   # log 4 for every sequence
    >>> [round(v, 4) for v in h.tolist()]
    [1.3863, 1.3863]
    >>> entropy_metrics(h, torch.tensor([0, 1]))["reasoning_token_entropy_group_std"]
    0.0
"""

from __future__ import annotations

import torch

__all__ = ["entropy_metrics", "token_entropy"]


def token_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence mean entropy of the next-token distribution over masked positions.

    Args:
        logits: ``[B, T, V]`` next-token logits (any float dtype; computed in float32).
        mask: ``[B, T]`` bool (or 0/1) tensor, True at the positions to average (e.g. the
            positions that predict reasoning tokens).

    Returns:
        ``[B]`` float32 tensor, ``mean_{t: mask} H(softmax(logits[b, t]))`` in nats. A row with
        no masked position is ``NaN`` (not 0, which would read as a collapsed policy);
        :func:`entropy_metrics` skips such rows.

    Example:
        >>> import torch
        >>> logits = torch.tensor([[[0.0, 0.0], [0.0, -1e9]]])  # log 2, then 0 nats
        >>> token_entropy(logits, torch.tensor([[True, True]])).tolist()
        [0.3465735912322998]
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, T, V], got shape {tuple(logits.shape)}")
    if mask.shape != logits.shape[:2]:
        raise ValueError(f"mask shape {tuple(mask.shape)} != logits [B, T] {tuple(logits.shape[:2])}")
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    # H = -sum p log p; p * logp is 0 * -inf = nan only for -inf logits, so zero those terms.
    plogp = torch.exp(logp) * logp
    ent = -torch.nan_to_num(plogp, nan=0.0).sum(-1)  # [B, T]
    m = mask.to(ent.dtype)
    count = m.sum(-1)
    return (ent * m).sum(-1) / count  # 0/0 -> NaN for empty rows, by design


def entropy_metrics(per_seq_entropy: torch.Tensor, group_ids: torch.Tensor) -> dict[str, float]:
    """Batch-level reasoning-entropy metrics.

    Args:
        per_seq_entropy: ``[B]`` per-sequence mean token entropy (:func:`token_entropy`);
            NaN entries (no reasoning tokens) are ignored.
        group_ids: ``[B]`` prompt-group id of every sequence.

    Returns:
        ``reasoning_token_entropy_mean``: mean over sequences;
        ``reasoning_token_entropy_group_std``: population std (ddof = 0) across groups of the
        group-mean entropy (0 for a single group). Both NaN when no entry is finite.

    Example:
        >>> import torch
        >>> out = entropy_metrics(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1]))
        >>> out["reasoning_token_entropy_mean"], out["reasoning_token_entropy_group_std"]
        (3.0, 1.5)
    """
    h = torch.as_tensor(per_seq_entropy).detach().float().cpu().flatten()
    g = torch.as_tensor(group_ids).detach().cpu().long().flatten()
    if h.numel() != g.numel():
        raise ValueError(f"per_seq_entropy has {h.numel()} entries but group_ids has {g.numel()}")
    keep = torch.isfinite(h)
    h, g = h[keep], g[keep]
    if h.numel() == 0:
        nan = float("nan")
        return {"reasoning_token_entropy_mean": nan, "reasoning_token_entropy_group_std": nan}
    _, inv = torch.unique(g, return_inverse=True)
    n_groups = int(inv.max()) + 1
    sums = torch.zeros(n_groups).index_add_(0, inv, h)
    counts = torch.zeros(n_groups).index_add_(0, inv, torch.ones_like(h))
    group_mean = sums / counts
    return {
        "reasoning_token_entropy_mean": float(h.mean()),
        "reasoning_token_entropy_group_std": float(group_mean.std(unbiased=False)),
    }
