"""One policy update: the training batch (advantages, behaviour and reference log-probs) and the
optimizer steps over its mini-batches.

Pure functions of their arguments, so the :class:`~ragen_torchrl.trainer.loop.Trainer` reads as
its pipeline and a user can run an update on a batch they built.

The training batch is one dense, left-padded TensorDict (:mod:`ragen_torchrl.data.dense`), built
once: mini-batches and micro-batches index it.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> b = TensorDict(advantage=torch.tensor([[[1.0]], [[-2.0]]]), batch_size=[2])
    >>> scale_advantages(b, 0.5)["advantage"].reshape(-1).tolist()
    [0.5, -1.0]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.modules.llm import TransformersWrapper

from ..data.groups import Groups
from ..data.minibatch import group_minibatches
from ..keys import ADVANTAGE, GROUP_ID, LOG_PROBS_FULL, MASKS_ASSISTANT, REF_LOG_PROBS_FULL
from ..models.lora import reference_scope
from ..objectives.logprobs import attach_training_data, behaviour_batch
from ..options import algo_options
from .distributed import Distributed, local_rows, loss_unit, share_weight, unit_count

__all__ = [
    "clip_grad_norms",
    "micro_batches",
    "minibatch_plan",
    "norms_as_metrics",
    "optimize",
    "scale_advantages",
    "scores_shared_prefixes",
    "training_batch",
]


def scale_advantages(batch: TensorDictBase, scale: float) -> TensorDictBase:
    """Multiply the dense training batch's ``advantage`` by ``scale`` (one multiply, per-row or per-token)."""
    return batch.set(ADVANTAGE, batch.get(ADVANTAGE) * scale)


def minibatch_plan(group_ids: torch.Tensor | Groups, algo: Mapping) -> list[list[torch.Tensor]]:
    """The row indices of every mini-batch of every epoch (``algo.update_epochs`` lists).

    Mini-batches hold whole prompt groups (``algo.mini_batch_by="group"``, the default: group-centred
    advantages then cancel on the tokens a group shares, see :mod:`ragen_torchrl.data.minibatch`)
    or random rows (``"row"``). Drawn up front, so the rows of the first, exactly on-policy
    mini-batch are known before the behaviour pass; nothing between draws uses the RNG, so the
    plan equals one drawn epoch by epoch.

    Example:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> plan = minibatch_plan(torch.tensor([0, 0, 1, 1]), {"mini_batch_size": 2, "update_epochs": 2, "mini_batch_by": "group"})
        >>> len(plan), [sorted(mb.tolist()) for mb in plan[0]] in ([[0, 1], [2, 3]], [[2, 3], [0, 1]])
        (2, True)
    """
    groups = group_ids if isinstance(group_ids, Groups) else Groups.from_ids(torch.as_tensor(group_ids).reshape(-1))
    n = groups.num_rows
    mb = min(int(algo["mini_batch_size"]), n)
    grouped = str(algo["mini_batch_by"]) == "group"
    plan = []
    for _epoch in range(int(algo["update_epochs"])):
        if grouped:
            plan.append(group_minibatches(groups, mb))
        else:
            order = torch.randperm(n)
            plan.append([order[start : start + mb] for start in range(0, n, mb)])
    return plan


def scores_shared_prefixes(loss_module: Any) -> bool:
    """Whether ``loss_module`` scores only assistant tokens with shared prompts run once.

    The behaviour and reference passes then do the same (their other positions are never read).

    Example:
        >>> from ragen_torchrl.objectives import build_algorithm
        >>> scores_shared_prefixes(build_algorithm({"name": "grpo"}, None, None).loss_module), scores_shared_prefixes(object())
        (True, False)
    """
    return all(
        bool(getattr(loss_module, name, False)) for name in ("score_stored_tokens", "compact_logits", "shared_prefix")
    )


def training_batch(
    records: TensorDictBase,
    algorithm: Any,
    actor: Any,
    ref_actor: Any = None,
    scale: float = 1.0,
    *,
    skip_behaviour: torch.Tensor | None = None,
    skip_reference: torch.Tensor | None = None,
    groups: Groups | None = None,
) -> tuple[TensorDictBase, dict[str, float]]:
    """Advantage, behaviour (and reference) log-probs and the algorithm's own preparation.

    Args:
        records: the trajectory records of the kept groups.
        algorithm: the :class:`~ragen_torchrl.objectives.Algorithm` (advantage, prepare).
        actor: the log-prob wrapper of the policy (behaviour log-probs).
        ref_actor: the log-prob wrapper of the frozen reference model, or None (no KL term).
        scale: the filter's kept-ratio loss scaling; it multiplies the advantages, i.e. the
            policy-gradient (task) term only, as RAGEN-2's reference does; entropy, KL and critic
            terms keep their weight.
        skip_behaviour: rows whose behaviour log-probs are not computed (only tokenised): the
            rows of the first mini-batch when :func:`optimize` runs it on-policy, and in a
            multi-rank run the rows other ranks train on.
        skip_reference: rows whose reference log-probs are not computed (another rank's rows).
        groups: the records' :class:`~ragen_torchrl.data.groups.Groups` (group-normalised
            advantages read their moments); built from the records when None.

    Returns:
        ``(batch, stats)``: the dense training batch the loss reads (left-padded ``[N, T]``
        token columns and one value per row, :mod:`ragen_torchrl.data.dense`) and its statistics:
        the algorithm's preparation's (PPO's value statistics), ``loss_scale`` (``scale``),
        ``trajectories`` (rows) and ``assistant_tokens`` (the tokens the loss trains on).
    """
    records = algorithm.advantage(records, groups)
    shared = scores_shared_prefixes(algorithm.loss_module)
    train_on = getattr(algorithm, "train_on", "generated")
    behaviour = behaviour_batch(actor, records, skip=skip_behaviour, shared_prefix=shared, train_on=train_on)
    batch = attach_training_data(records, behaviour)
    if ref_actor is not None:
        scored = batch if isinstance(ref_actor, TransformersWrapper) else records
        with reference_scope(ref_actor):  # a LoRA policy's reference: its base model, adapters off
            ref = behaviour_batch(ref_actor, scored, skip=skip_reference, shared_prefix=shared)
        batch.set(REF_LOG_PROBS_FULL, ref.get(LOG_PROBS_FULL))
    batch, prepared = algorithm.prepare(batch)
    if scale != 1.0:
        batch = scale_advantages(batch, scale)
    tokens = sum(int(m.sum()) for m in behaviour.get(MASKS_ASSISTANT, as_list=True))
    stats = {"loss_scale": scale, **prepared, "trajectories": batch.batch_size[0], "assistant_tokens": tokens}
    return batch, {k: float(v) for k, v in stats.items()}


def micro_batches(rows: torch.Tensor, micro_batch_size: int | None) -> list[torch.Tensor]:
    """``rows`` dealt round-robin into ``ceil(len / micro_batch_size)`` micro-batches (one without a size).

    Round-robin, as mini-batch rows are dealt to ranks (:func:`~ragen_torchrl.trainer.distributed.local_rows`):
    one process with ``micro_batch_size = n / N`` runs exactly the forwards of N ranks.

    Example:
        >>> [m.tolist() for m in micro_batches(torch.tensor([4, 5, 6, 7, 8]), 2)]
        [[4, 7], [5, 8], [6]]
    """
    rows = torch.as_tensor(rows).reshape(-1)
    if not micro_batch_size or rows.numel() <= micro_batch_size:
        return [rows]
    count = -(-rows.numel() // int(micro_batch_size))
    return [rows[j::count] for j in range(count)]


def optimize(
    batch: TensorDictBase,
    algorithm: Any,
    optimizer: torch.optim.Optimizer,
    algo: Mapping,
    *,
    plan: list[list[torch.Tensor]] | None = None,
    on_policy_first: bool = False,
    dist: Distributed | None = None,
    forward_context: Callable[[], contextlib.AbstractContextManager] | None = None,
) -> dict[str, float]:
    """Optimizer steps of ``algorithm``'s loss (its ``loss_module``) over the mini-batches of ``plan`` (default:
    :func:`minibatch_plan`); mean metrics.

    A non-finite loss or gradient norm never steps: the step is skipped and counted in
    ``skipped_nonfinite``. With ``on_policy_first`` the first mini-batch of the first epoch runs
    inside the loss's ``current_as_behaviour()``: the policy has not changed since the rollout,
    so its behaviour log-probs are the loss forward's own (detached) and need not be in the batch.

    Each mini-batch may run as several forward/backward passes whose gradients add up to the
    mini-batch's: over ranks (``dist``: each takes its rows, :func:`~ragen_torchrl.trainer.distributed.local_rows`)
    and over micro-batches of ``algo.micro_batch_size`` rows (:func:`micro_batches`). Each pass's
    loss is weighted by its share of the mini-batch's aggregation unit (rows, or assistant tokens
    for ``token_mean``), so the sum is the gradient of the whole mini-batch's loss.

    Gradient norms are clipped per set of :meth:`~ragen_torchrl.objectives.Algorithm.grad_clip_groups`
    (PPO: actor at ``algo.max_grad_norm``, critic at ``algo.critic_grad_clip``), see
    :func:`clip_grad_norms`; a non-finite norm in any set skips the step.

    ``forward_context``: a new context for each loss forward (the backward runs outside it), e.g.
    mixed precision's autocast and activation checkpointing
    (:meth:`~ragen_torchrl.models.loading.Precision.autocast`,
    :func:`~ragen_torchrl.models.loading.checkpointed_layers`); default: none.

    Returns:
        The algorithm's metrics, ``loss`` and ``grad_norm`` (the policy's, before clipping; PPO
        adds ``critic_grad_norm``) averaged over the steps taken, plus
        ``optimizer_steps`` and ``skipped_nonfinite``. Metrics of a split mini-batch are the
        share-weighted sums of its passes' values.
    """
    if plan is None:
        plan = minibatch_plan(batch.get(GROUP_ID), algo)
    loss_module = algorithm.loss_module
    dist = dist or Distributed()
    forward_context = forward_context or contextlib.nullcontext
    opts = algo_options(algo)
    micro = opts.micro_batch_size
    split = dist.enabled or bool(micro)
    unit = loss_unit(loss_module) if split else "rows"
    params = algorithm.trainable_parameters()
    sharded = any(_is_dtensor(p) for p in params)  # FSDP2: every rank must run as many forwards
    sums: dict[str, float] = {}
    steps = skipped = 0
    clip_groups = algorithm.grad_clip_groups(float(opts.max_grad_norm))
    for epoch, batches in enumerate(plan):
        for k, idx in enumerate(batches):
            on_policy = on_policy_first and epoch == 0 and k == 0 and hasattr(loss_module, "current_as_behaviour")
            optimizer.zero_grad(set_to_none=True)
            if split:
                finite, vals = _accumulate(
                    batch, idx, loss_module, algorithm, dist, micro, unit, on_policy, sharded, forward_context
                )
            else:
                minibatch = batch[idx]
                with forward_context(), loss_module.current_as_behaviour() if on_policy else contextlib.nullcontext():
                    out = loss_module(minibatch)
                    loss = algorithm.total_loss(out)
                finite = bool(torch.isfinite(loss))
                if finite:
                    loss.backward()
                    vals = algorithm.metrics(out, minibatch)
                    vals.update(loss=loss.item())
            if not finite:
                # never step on a NaN/inf loss: the weights would be corrupted (every rank skips)
                skipped += 1
                optimizer.zero_grad(set_to_none=True)
                continue
            if dist.enabled:
                # FSDP2-sharded parameters (DTensors) were reduce-scattered by FSDP itself
                dist.average_gradients(p for p in params if not _is_dtensor(p))
            norms = clip_grad_norms(clip_groups)
            if not all(torch.isfinite(n) for n in norms.values()):
                skipped += 1
                optimizer.zero_grad(set_to_none=True)
                continue
            optimizer.step()
            steps += 1
            vals.update(norms_as_metrics(norms))
            for key, v in vals.items():
                sums[key] = sums.get(key, 0.0) + v
    metrics = {key: v / max(steps, 1) for key, v in sums.items()}
    metrics["optimizer_steps"] = float(steps)
    metrics["skipped_nonfinite"] = float(skipped)
    return metrics


def clip_grad_norms(groups: list[tuple[str, list[torch.Tensor], float]]) -> dict[str, torch.Tensor]:
    """Clip each ``(name, parameters, max_norm)`` set's gradient norm on its own; ``{name: norm before}``.

    ``max_norm = 0`` leaves a set unclipped. Separate sets, as separate optimizers would
    (verl's actor and critic): a large gradient in one set does not shrink the others' steps.

    Example:
        >>> a, b = torch.zeros(2, requires_grad=True), torch.zeros(1, requires_grad=True)
        >>> a.grad, b.grad = torch.tensor([3.0, 4.0]), torch.tensor([100.0])
        >>> norms = clip_grad_norms([("policy", [a], 10.0), ("critic", [b], 1.0)])
        >>> {k: round(v.item(), 3) for k, v in norms.items()}, a.grad.tolist(), b.grad.tolist()
        ({'policy': 5.0, 'critic': 100.0}, [3.0, 4.0], [1.0])
    """
    norms = {}
    for name, params, max_norm in groups:
        norm = torch.nn.utils.clip_grad_norm_(params, float(max_norm) or float("inf"))
        norms[name] = norm.full_tensor() if _is_dtensor(norm) else norm
    return norms


def norms_as_metrics(norms: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """``grad_norm`` for the policy's set, ``<name>_grad_norm`` for the others (e.g. ``critic_grad_norm``).

    Example:
        >>> norms_as_metrics({"policy": torch.tensor(2.0), "critic": torch.tensor(30.0)})
        {'grad_norm': 2.0, 'critic_grad_norm': 30.0}
    """
    return {("grad_norm" if name == "policy" else f"{name}_grad_norm"): float(n) for name, n in norms.items()}


def _accumulate(
    batch,
    idx,
    loss_module,
    algorithm,
    dist: Distributed,
    micro,
    unit: str,
    on_policy: bool,
    sharded: bool,
    forward_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> tuple[bool, dict[str, float]]:
    """Gradients of one mini-batch from this rank's micro-batches; ``(finite on every rank, metrics)``.

    Collectives are called the same number of times on every rank whatever its share: one unit
    total before, one finiteness vote and one metric sum after (FSDP2 also pads the micro-batch
    count, since each of its forwards is a collective).
    """
    mine = local_rows(idx, dist.world_size, dist.rank)
    total = dist.sum_floats([unit_count(batch, mine, unit, MASKS_ASSISTANT)])[0]
    parts = micro_batches(mine, micro) if mine.numel() else []
    weights = [share_weight(unit_count(batch, m, unit, MASKS_ASSISTANT), total) for m in parts]
    count = len(parts)
    if sharded:
        count = int(dist.max_int(count))
    if not parts and count == 0:
        count = 1  # a rank with no rows still joins the backward's collectives
    while len(parts) < count:
        # nothing left here: a row at weight 0 keeps this rank in step with the others
        parts.append(torch.as_tensor(idx).reshape(-1)[:1])
        weights.append(0.0)
    model = getattr(algorithm, "model", None)
    sync = getattr(model, "set_requires_gradient_sync", None) if sharded else None
    finite = True
    acc: dict[str, float] = {}
    for j, (rows, w) in enumerate(zip(parts, weights)):
        minibatch = batch[rows]
        if sync is not None:
            sync(j == len(parts) - 1)  # FSDP2 reduce-scatters once, after the last micro-batch
        with forward_context(), loss_module.current_as_behaviour() if on_policy else contextlib.nullcontext():
            out = loss_module(minibatch)
            loss = algorithm.total_loss(out)
        if not bool(torch.isfinite(loss)):
            finite = False
            loss = loss.nan_to_num(0.0, 0.0, 0.0) * 0.0  # still backward: FSDP2 ranks stay in step
        # x world size: the gradient average over ranks then equals the whole mini-batch's sum
        (loss * (w * dist.world_size)).backward()
        vals = algorithm.metrics(out, minibatch)  # also at weight 0: every rank has the same keys
        vals["loss"] = loss.item()
        for key, v in vals.items():
            acc[key] = acc.get(key, 0.0) + w * float(v)
    finite = dist.all_true(finite)
    if dist.enabled and finite:
        names = sorted(acc)
        acc = dict(zip(names, dist.sum_floats(acc.get(n, 0.0) for n in names)))
    return finite, acc


def _is_dtensor(t) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch built without distributed
        return False
    return isinstance(t, DTensor)
