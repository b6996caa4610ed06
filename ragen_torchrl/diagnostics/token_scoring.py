"""Teacher-forced log-probabilities and entropies of padded token batches.

The pieces every :func:`~ragen_torchrl.diagnostics.cross_scoring.cross_score` method shares:
the per-row log-likelihood of the valid positions (log-softmax in
at least float32), the mean token entropy of the rows scored under their own context, and the
dtype a model runs in.

Example:
    >>> import torch
    >>> _score_dtype(torch.bfloat16), _score_dtype(torch.float64)
    (torch.float32, torch.float64)
"""

from __future__ import annotations

import copy

import torch

from .entropy import token_entropy


def _score_dtype(dtype: torch.dtype) -> torch.dtype:
    """Scores are float32, float64 for a float64 model (so that its precision is not lost)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _token_log_probs(logits: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Per-row sum of ``log softmax(logits)[target]`` over valid positions.

    Log-softmax in at least float32 whatever the model dtype: bf16 logsumexp over a vocabulary loses
    about two decimal digits, which would swamp the differences the MI proxies look at.
    ``logits`` is ``[R, T, V]``, ``targets`` / ``valid`` (bool) ``[R, T]``. Padded positions
    are zeroed with ``where`` rather than multiplied by 0, so a non-finite logit there (e.g.
    an fp16 overflow on a pad token) cannot turn the sum into NaN.
    """
    logits = logits.to(_score_dtype(logits.dtype))
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    lp = picked - torch.logsumexp(logits, dim=-1)
    return torch.where(valid, lp, torch.zeros_like(lp)).sum(-1)


def _model_dtype(model: torch.nn.Module) -> torch.dtype:
    try:
        return next(model.parameters()).dtype
    except StopIteration:  # parameter-less wrapper
        return torch.float32


def _scoring_model(model: torch.nn.Module, dtype: torch.dtype | str | None) -> torch.nn.Module:
    """``model`` itself, or a float copy of it in ``dtype`` (a dtype or its name) when that differs."""
    if dtype is None:
        return model
    resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
        raise ValueError(f"dtype must be a floating torch dtype or its name, got {dtype!r}")
    if resolved == _model_dtype(model):
        return model
    # a throw-away copy: casting the policy in place would touch optimizer-held tensors
    return copy.deepcopy(model).to(resolved)


def _own_entropy(ent, logits, valid, ii, jj, ent_cols) -> None:
    """Write the reasoning's mean token entropy for the rows scored under their own context."""
    if ent_cols is None:
        return
    own = (ent_cols[ii] == jj).nonzero().reshape(-1)
    if own.numel():
        own_dev = own.to(logits.device)
        ent[ii[own]] = token_entropy(logits[own_dev], valid[own_dev]).cpu()
