"""Gradient-SNR diagnostic behind SNR-aware filtering (RAGEN-2 §3.1).

The paper's argument: the task (policy-gradient) term's gradient norm grows with a prompt's
within-group reward variance (RV), while the regularisers' (KL, entropy) gradient norms stay flat
across RV. Low-RV groups therefore contribute mostly regulariser "noise" to the update. To
reproduce the figure: put the groups of a batch into RV quantile buckets (:func:`rv_buckets`),
build each loss term per bucket, and measure the gradient norm of every term per bucket
(:func:`bucket_grad_norms`). :class:`GradSNRProbe` does both on a training batch with any loss
module (the trainer runs it every ``diagnostics.grad_snr.every`` iterations, with or without a
filter).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from ..checks import check_int

__all__ = ["GradSNRProbe", "rv_buckets", "bucket_grad_norms"]


def rv_buckets(group_variances, num_buckets: int = 6) -> torch.Tensor:
    """Assign every group to a reward-variance quantile bucket ``0 .. num_buckets - 1``.

    With ``n`` groups, a group whose value has ``r`` groups strictly below it goes to bucket
    ``floor(r * num_buckets / n)``. So bucket ``b`` holds the quantile range
    ``[b / num_buckets, (b + 1) / num_buckets)``, buckets are non-decreasing in the variance, and:

    * tied values always share a bucket (they share ``r``), so a mass of zero-variance groups
      all lands in bucket 0 and some higher buckets can be empty;
    * with fewer groups than buckets, the groups spread over the bucket range (3 groups in 6
      buckets -> buckets 0, 2, 4), keeping a bucket's meaning comparable across batches.

    Args:
        group_variances: 1-D tensor (or sequence), one finite value per group.
        num_buckets: number of quantile buckets (>= 1).

    Returns:
        A ``torch.long`` tensor, one bucket index per group (empty for empty input).

    Examples:
        >>> import torch
        >>> rv_buckets(torch.tensor([0.0, 0.1, 0.2, 0.3, 0.4, 0.5]), num_buckets=3)
        tensor([0, 0, 1, 1, 2, 2])
        >>> rv_buckets(torch.tensor([0.0, 0.0, 0.0, 1.0]), num_buckets=2)  # ties share bucket 0
        tensor([0, 0, 0, 1])
    """
    check_int("num_buckets", num_buckets, minimum=1)
    values = torch.as_tensor(group_variances)
    if values.ndim > 1:
        raise ValueError(f"group_variances must be 1-D, got shape {tuple(values.shape)}")
    values = values.reshape(-1).to(torch.float64)
    if not torch.isfinite(values).all():
        raise ValueError("group_variances must be finite (no NaN or inf)")
    n = values.numel()
    if n == 0:
        return torch.empty(0, dtype=torch.long, device=values.device)
    # searchsorted(left) in the sorted values = number of values strictly smaller = min rank.
    rank = torch.searchsorted(torch.sort(values).values, values)
    return torch.div(rank * num_buckets, n, rounding_mode="floor").clamp_max(num_buckets - 1)


def bucket_grad_norms(
    params: Iterable[torch.Tensor],
    losses_by_bucket: Mapping[int, Mapping[str, torch.Tensor]],
) -> dict[str, float]:
    """L2 norm of each loss term's gradient, per bucket.

    For each bucket ``b`` and named scalar loss ``name`` (e.g. ``task``, ``entropy``, ``kl``), this
    computes ``torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)`` and the
    global L2 norm over all parameters (unused parameters count as zero gradient; a loss that does
    not depend on any parameter has norm 0). The graph is retained so the caller can reuse it; no
    ``.grad`` field is touched.

    Args:
        params: the parameters to differentiate (those that do not require grad are skipped).
        losses_by_bucket: ``{bucket: {name: scalar loss}}``.

    Returns:
        ``{"grad_snr/bucket{b}/{name}_grad_norm": norm}`` for every bucket and name.

    Examples:
        >>> import torch
        >>> w = torch.tensor([3.0, 4.0], requires_grad=True)
        >>> bucket_grad_norms([w], {0: {"task": (w * w).sum() / 2}})  # grad = w, |w| = 5
        {'grad_snr/bucket0/task_grad_norm': 5.0}
    """
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ValueError("bucket_grad_norms needs at least one parameter that requires grad")
    out: dict[str, float] = {}
    for bucket, losses in losses_by_bucket.items():
        for name, loss in losses.items():
            if loss.numel() != 1:
                raise ValueError(f"loss {name!r} of bucket {bucket} must be a scalar, got shape {tuple(loss.shape)}")
            key = f"grad_snr/bucket{bucket}/{name}_grad_norm"
            if not loss.requires_grad:
                out[key] = 0.0
                continue
            grads = torch.autograd.grad(loss.reshape(()), params, retain_graph=True, allow_unused=True)
            squared = sum(float(g.detach().double().pow(2).sum()) for g in grads if g is not None)
            out[key] = squared**0.5
    return out


class GradSNRProbe:
    """Per-bucket gradient norms of a loss module's terms on a training batch (RAGEN-2 §3.1).

    The batch's prompt groups are put into ``buckets`` reward-variance quantile buckets
    (:func:`rv_buckets`); for each bucket the loss module runs on that bucket's rows and the
    gradient norm of each of its terms (``task`` = ``loss_objective``, and ``entropy`` /
    ``kl`` when the module reports them) is measured (:func:`bucket_grad_norms`). Nothing is
    stepped and no ``.grad`` is touched.

    Args:
        loss_module: a loss whose output has ``loss_objective`` (and optionally
            ``loss_entropy`` / ``loss_kl_to_ref``) for a batch of rows.
        params: the parameters to differentiate (those without ``requires_grad`` are skipped).
        buckets: number of reward-variance quantile buckets (RAGEN-2: 6).
        every: run on iterations ``it`` with ``it % every == 0``; 0 = never.
        return_key / group_key: where the batch holds each row's episode return and group id.

    Example:
        >>> import torch
        >>> from types import SimpleNamespace
        >>> from tensordict import TensorDict
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> def loss(td):  # task loss sum(advantage * w): its gradient is the advantages' sum times 1
        ...     return SimpleNamespace(loss_objective=(td["adv"].sum() * w).sum(), loss_entropy=None, loss_kl_to_ref=None)
        >>> batch = TensorDict({"ret": torch.tensor([0.0, 0.0, 0.0, 2.0]), "gid": torch.tensor([0, 0, 1, 1]),
        ...                     "adv": torch.tensor([0.0, 0.0, -1.0, 1.0])}, batch_size=[4])
        >>> probe = GradSNRProbe(loss, [w], buckets=2, every=10, return_key="ret", group_key="gid")
        >>> probe.should_run(20), probe.should_run(3)
        (True, False)
        >>> sorted(probe(batch).items())  # group 0 (RV 0) -> bucket 0, group 1 (RV 2) -> bucket 1
        [('grad_snr/bucket0/reward_variance', 0.0), ('grad_snr/bucket0/task_grad_norm', 0.0), ('grad_snr/bucket1/reward_variance', 2.0), ('grad_snr/bucket1/task_grad_norm', 0.0)]
    """

    def __init__(self, loss_module, params, buckets: int = 6, every: int = 10, return_key=None, group_key=None):
        from ..keys import EPISODE_RETURN, GROUP_ID

        check_int("diagnostics.grad_snr.every", every, minimum=0)
        check_int("diagnostics.grad_snr.buckets", buckets, minimum=1)
        self.loss_module, self.buckets, self.every = loss_module, buckets, every
        self.params = [p for p in params if p.requires_grad]
        self.return_key = return_key if return_key is not None else EPISODE_RETURN
        self.group_key = group_key if group_key is not None else GROUP_ID

    def should_run(self, iteration: int) -> bool:
        """True on the iterations the probe runs (never when ``every`` is 0)."""
        return bool(self.every) and iteration % self.every == 0

    def __call__(self, batch) -> dict[str, float]:
        """``grad_snr/bucket{b}/{task,entropy,kl}_grad_norm`` and ``.../reward_variance`` (the bucket's mean RV)."""
        from ..transforms.group_selection import group_scores

        gid = batch.get(self.group_key).reshape(-1)
        ids, rv = group_scores(batch.get(self.return_key), gid, "reward_variance")
        buckets = rv_buckets(rv, self.buckets)
        row_bucket = buckets[torch.searchsorted(ids, gid)]
        out: dict[str, float] = {}
        for b in row_bucket.unique().tolist():
            rows = (row_bucket == b).nonzero().reshape(-1)
            res = self.loss_module(batch[rows])
            terms = {"task": res.loss_objective.sum()}
            if getattr(res, "loss_entropy", None) is not None:
                terms["entropy"] = res.loss_entropy.sum()
            if getattr(res, "loss_kl_to_ref", None) is not None:
                terms["kl"] = res.loss_kl_to_ref.sum()
            out.update(bucket_grad_norms(self.params, {b: terms}))
            out[f"grad_snr/bucket{b}/reward_variance"] = float(rv[buckets == b].mean())
        return out
