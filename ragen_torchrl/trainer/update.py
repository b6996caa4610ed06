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

import contextlib
from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDictBase, lazy_stack

from ..data.minibatch import group_minibatches
from ..keys import ADVANTAGE, GROUP_ID, LOG_PROBS_FULL, REF_LOG_PROBS_FULL
from ..objectives.grpo import attach_training_data, compute_behaviour_log_probs

__all__ = ["minibatch_plan", "optimize", "scale_advantages", "training_batch"]


def scale_advantages(batch: TensorDictBase, scale: float) -> TensorDictBase:
    """Multiply every row's ``advantage`` by ``scale`` (rows may be ragged, e.g. PPO's per-token GAE)."""
    return lazy_stack([row.set(ADVANTAGE, row.get(ADVANTAGE) * scale) for row in batch.unbind(0)])


def minibatch_plan(group_ids: torch.Tensor, algo: Mapping) -> list[list[torch.Tensor]]:
    """The row indices of every mini-batch of every epoch (``algo.ppo_epochs`` lists).

    Mini-batches hold whole prompt groups (``algo.minibatch="group"``, the default: group-centred
    advantages then cancel on the tokens a group shares, see :mod:`ragen_torchrl.data.minibatch`)
    or random rows (``"row"``). Drawn up front, so the rows of the first, exactly on-policy
    mini-batch are known before the behaviour pass; nothing between draws uses the RNG, so the
    plan equals one drawn epoch by epoch.

    Example:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> plan = minibatch_plan(torch.tensor([0, 0, 1, 1]), {"mini_batch_size": 2, "ppo_epochs": 2})
        >>> len(plan), [sorted(mb.tolist()) for mb in plan[0]] in ([[0, 1], [2, 3]], [[2, 3], [0, 1]])
        (2, True)
    """
    ids = torch.as_tensor(group_ids).reshape(-1)
    n = ids.numel()
    mb = min(int(algo["mini_batch_size"]), n)
    grouped = str(algo.get("minibatch", "group")) == "group"
    plan = []
    for _epoch in range(int(algo["ppo_epochs"])):
        if grouped:
            plan.append(group_minibatches(ids, mb))
        else:
            order = torch.randperm(n)
            plan.append([order[start : start + mb] for start in range(0, n, mb)])
    return plan


def training_batch(
    records: TensorDictBase,
    objective: Any,
    actor: Any,
    ref_actor: Any = None,
    scale: float = 1.0,
    *,
    skip_behaviour: torch.Tensor | None = None,
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
        skip_behaviour: rows whose behaviour log-probs are not computed (only tokenised): the
            rows of the first mini-batch when :func:`optimize` runs it on-policy.

    Returns:
        ``(batch, behaviour)``: the batch the loss reads and the behaviour log-prob output.
    """
    batch = objective.advantage(records)
    behaviour = compute_behaviour_log_probs(actor, batch, skip=skip_behaviour)
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
    batch: TensorDictBase,
    loss_module: Any,
    objective: Any,
    optimizer: torch.optim.Optimizer,
    algo: Mapping,
    *,
    plan: list[list[torch.Tensor]] | None = None,
    on_policy_first: bool = False,
) -> dict[str, float]:
    """Optimizer steps over the mini-batches of ``plan`` (default: :func:`minibatch_plan`); mean metrics.

    A non-finite loss or gradient norm never steps: the step is skipped and counted in
    ``skipped_nonfinite``. With ``on_policy_first`` the first mini-batch of the first epoch runs
    inside the loss's ``current_as_behaviour()``: the policy has not changed since the rollout,
    so its behaviour log-probs are the loss forward's own (detached) and need not be in the batch.

    Returns:
        The objective's metrics, ``loss`` and ``grad_norm`` averaged over the steps taken, plus
        ``optimizer_steps`` and ``skipped_nonfinite``.
    """
    if plan is None:
        plan = minibatch_plan(batch.get(GROUP_ID), algo)
    sums: dict[str, float] = {}
    steps = skipped = 0
    max_norm = float(algo.max_grad_norm) or float("inf")
    for epoch, batches in enumerate(plan):
        for k, idx in enumerate(batches):
            minibatch = batch[idx]
            on_policy = on_policy_first and epoch == 0 and k == 0 and hasattr(loss_module, "current_as_behaviour")
            with loss_module.current_as_behaviour() if on_policy else contextlib.nullcontext():
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
            for key, v in vals.items():
                sums[key] = sums.get(key, 0.0) + v
    metrics = {key: v / max(steps, 1) for key, v in sums.items()}
    metrics["optimizer_steps"] = float(steps)
    metrics["skipped_nonfinite"] = float(skipped)
    return metrics
