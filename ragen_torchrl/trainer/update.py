"""One policy update: the training batch (advantages, behaviour and reference log-probs) and the
optimizer steps over its mini-batches.

Pure functions of their arguments, so the :class:`~ragen_torchrl.trainer.loop.Trainer` reads as
its pipeline and a user can run an update on a batch they built.

Example:
    >>> import torch
    >>> from tensordict import TensorDict, lazy_stack
    >>> b = lazy_stack([TensorDict(advantage=torch.ones(2, 1)), TensorDict(advantage=-torch.ones(3, 1))])
    >>> [a.reshape(-1).tolist() for a in scale_advantages(b, 0.5).get("advantage", as_list=True)]
    [[0.5, 0.5], [-0.5, -0.5, -0.5]]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase, lazy_stack

from ..data.minibatch import group_minibatches
from ..keys import ADVANTAGE, GROUP_ID, LOG_PROBS_FULL, REF_LOG_PROBS_FULL
from ..objectives.grpo import attach_training_data, compute_behaviour_log_probs

__all__ = ["optimize", "scale_advantages", "training_batch"]


def scale_advantages(batch: TensorDictBase, scale: float) -> TensorDictBase:
    """Multiply every row's ``advantage`` by ``scale`` (rows may be ragged, e.g. PPO's per-token GAE)."""
    return lazy_stack([row.set(ADVANTAGE, row.get(ADVANTAGE) * scale) for row in batch.unbind(0)])


def training_batch(
    records: TensorDictBase, objective: Any, actor: Any, ref_actor: Any = None, scale: float = 1.0
) -> tuple[TensorDictBase, TensorDictBase]:
    """Advantage, behaviour (and reference) log-probs and the algorithm's own preparation.

    Args:
        records: the trajectory records of the kept groups.
        objective: the :class:`~ragen_torchrl.objectives.Objective` (advantage, prepare).
        actor: the log-prob wrapper of the policy (behaviour log-probs).
        ref_actor: the log-prob wrapper of the frozen reference model, or None (no KL term).
        scale: the filter's kept-ratio loss scaling; it multiplies the advantages, i.e. the
            policy-gradient (task) term only, as RAGEN-2's reference does; entropy, KL and critic
            terms keep their weight.

    Returns:
        ``(batch, behaviour)``: the batch the loss reads and the behaviour log-prob output.
    """
    batch = objective.advantage(records)
    behaviour = compute_behaviour_log_probs(actor, batch)
    batch = attach_training_data(batch, behaviour)
    if ref_actor is not None:
        ref = compute_behaviour_log_probs(ref_actor, batch)
        batch = lazy_stack(
            [row.set(REF_LOG_PROBS_FULL, r.get(LOG_PROBS_FULL)) for row, r in zip(batch.unbind(0), ref.unbind(0))]
        )
    batch = objective.prepare(batch)
    if scale != 1.0:
        batch = scale_advantages(batch, scale)
    return batch, behaviour


def optimize(
    batch: TensorDictBase, loss_module: Any, objective: Any, optimizer: torch.optim.Optimizer, algo: Mapping
) -> dict[str, float]:
    """``algo.ppo_epochs`` passes of optimizer steps over mini-batches of ``batch``; mean metrics.

    Mini-batches hold whole prompt groups (``algo.minibatch="group"``, the default: group-centred
    advantages then cancel on the tokens a group shares, see :mod:`ragen_torchrl.data.minibatch`)
    or random rows (``"random"``). A non-finite loss or gradient norm never steps: the step is
    skipped and counted in ``skipped_nonfinite``.

    Returns:
        The objective's metrics, ``loss`` and ``grad_norm`` averaged over the steps taken, plus
        ``optimizer_steps`` and ``skipped_nonfinite``.
    """
    n = batch.batch_size[0]
    mb = min(int(algo.mini_batch_size), n)
    sums: dict[str, float] = {}
    steps = skipped = 0
    grouped = str(algo.get("minibatch", "group")) == "group"
    max_norm = float(algo.max_grad_norm) or float("inf")
    for _epoch in range(int(algo.ppo_epochs)):
        if grouped:
            batches = group_minibatches(batch.get(GROUP_ID), mb)
        else:
            order = torch.randperm(n)
            batches = [order[start : start + mb] for start in range(0, n, mb)]
        for idx in batches:
            minibatch = batch[idx]
            out = loss_module(minibatch)
            loss = objective.total_loss(out)
            optimizer.zero_grad(set_to_none=True)
            if not torch.isfinite(loss):
                # never step on a NaN/inf loss: the weights would be corrupted
                skipped += 1
                continue
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(objective.trainable_parameters(), max_norm)
            if not torch.isfinite(grad_norm):
                skipped += 1
                optimizer.zero_grad(set_to_none=True)
                continue
            optimizer.step()
            steps += 1
            vals = objective.metrics(out, minibatch)
            vals.update(loss=loss.item(), grad_norm=grad_norm.item())
            for k, v in vals.items():
                sums[k] = sums.get(k, 0.0) + v
    metrics = {k: v / max(steps, 1) for k, v in sums.items()}
    metrics["optimizer_steps"] = float(steps)
    metrics["skipped_nonfinite"] = float(skipped)
    return metrics
