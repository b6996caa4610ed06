"""One training iteration, as its steps: :class:`IterationSteps`, which
:class:`~ragen_torchrl.trainer.loop.Trainer` is built on.

:meth:`IterationSteps.run_iteration` is the pipeline collect -> diagnose -> select -> plan -> score ->
update. Each step returns what it made and its statistics, ``(data, stats)``, and the steps that decide
return their decision rather than keep it: the selection says whether and why the update is skipped
(:class:`Selection`), the stop rules whether the run should end (:class:`IterationOutcome`); the stats
become the iteration's scalars (:class:`~ragen_torchrl.trainer.metrics.Metrics`). Every step's time goes to
one phase of the run's clock and, for the training phases, to the iteration's ``timing/*`` scalars through the
one context manager :func:`~ragen_torchrl.trainer.phases.phase`.

What an iteration changes besides its return value: the policy and optimizer (the update), the stop rules'
counters (:class:`~ragen_torchrl.trainer.stops.StopRules`), DAPO's refill counter ``_refills`` (it seeds the
refill levels and is checkpointed) and the global RNG stream (the mini-batch plan).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from tensordict import TensorDictBase, lazy_stack

from ..collectors.grouped import collect_rollouts, turn_cache_metrics
from ..data.groups import Groups
from ..envs.splits import train_level_seeds
from ..keys import EPISODE_RETURN, GROUP_ID, IMAGES_TRAJECTORY, TRAJECTORY_REFITS
from ..transforms.snr import keep_rows
from .distributed import part_seed, shard_bounds, unscored_rows
from .early_stop import loss_scale, unfiltered_stats
from .metrics import Metrics
from .phases import phase
from .run_log import summarize
from .update import minibatch_plan, optimize, training_batch

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from ..objectives import Algorithm
    from .distributed import Distributed
    from .provenance import PhaseClock
    from .stops import StopRules

__all__ = ["IterationOutcome", "IterationSteps", "KeptGroups", "MinibatchPlan", "Selection"]


class KeptGroups(NamedTuple):
    """The groups the update trains on, as the selection step hands them on."""

    unfiltered: TensorDictBase  # every row the SNR filter saw: the batch as DAPO's dynamic sampling left it
    batch: TensorDictBase  # the kept groups' rows
    groups: Groups  # the kept groups
    scale: float  # the filter's kept-ratio loss scale


class Selection(NamedTuple):
    """The selection step's decision: what the update trains on, or why there is no update."""

    kept: KeptGroups | None  # None exactly when ``skip`` names a reason
    skip: str | None  # the scalar that records a skipped update: "dapo/skipped_update" or "filter/skipped_update"


class MinibatchPlan(NamedTuple):
    """The update's mini-batches, drawn before the training batch is scored."""

    minibatches: list[list[torch.Tensor]]  # the row indices of every mini-batch of every epoch
    on_policy_first: bool  # the first mini-batch trains on the rollout policy itself (no behaviour pass)


class IterationOutcome(NamedTuple):
    """What :meth:`IterationSteps.run_iteration` returns."""

    scalars: dict[str, float]  # the iteration's scalars, which fit logs
    stop: str | None  # the stop reason the iteration's batch gave the collapse / empty-selection rules, or None


class IterationSteps:
    """The steps of one training iteration. :class:`~ragen_torchrl.trainer.loop.Trainer` sets up what they read
    (below) and the blocks they run in (``_gathered``, ``_compute``, ``_training_forward``, ``_train_env``)."""

    cfg: DictConfig  # the validated config
    clock: PhaseClock  # the run's phase clock
    dist: Distributed
    iteration: int  # the iterations done so far (seeds this one's levels)
    prompts_per_iter: int  # P prompt groups per iteration
    group_size: int  # G rollouts per group
    shards: int  # collection parts
    policy: Any  # the training rollout policy
    weight_sync: Any  # pushes the updated weights to the rollout engine (vllm), else None
    model: torch.nn.Module
    actor: Any  # the log-prob policy that scores the behaviour (and the loss)
    ref_actor: Any  # the KL reference's log-prob policy, or None
    algorithm: Algorithm
    optimizer: torch.optim.Optimizer
    snr: Any  # the SNR filter, or None
    filter_cfg: DictConfig
    stops: StopRules
    collapse: Any  # the MI diagnostic, or None
    grad_snr: Any  # the gradient-SNR probe, or None
    t3_enabled: bool
    env: Any  # one collection part's training env (its max_turn)
    val_env: Any
    processor: Any  # a vision-language policy's processor, else None
    _train_envs: dict[int, Any]  # the training envs by group count (their env-error counts)
    _refills: int  # DAPO refills so far (seeds the refill levels)

    def train_iteration(self) -> dict[str, float]:
        """One iteration's scalars: :meth:`run_iteration` without its stop decision (which :meth:`fit` acts on)."""
        return self.run_iteration().scalars

    def run_iteration(self) -> IterationOutcome:
        """One iteration, as its pipeline: collect -> diagnose -> select -> plan -> score -> update.

        When DAPO's dynamic sampling or the filter keeps no group, the iteration ends after the selection and
        its ``*/skipped_update`` scalar says which. The stop rules read the batch as collected, every iteration.
        """
        metrics = Metrics()
        with self._gathered():  # FSDP2: generation and scoring run on the gathered weights
            with self._compute():
                records, stats = self._collect_step()
            metrics.update(stats)
            metrics.update(self._diagnose_step(records))
            # the stop rules read the batch as collected (dynamic sampling keeps only groups with signal); the
            # group statistics of a batch are computed once, in Groups, and shared by every reader
            collected = Groups.from_values(records.get(GROUP_ID), records.get(EPISODE_RETURN))
            selection, stats = self._select_step(records, collected)
            metrics.update(stats)
            stop, stats = self.stops.after_selection(collected, skipped=selection.skip is not None)
            metrics.add("stop", stats)
            if selection.skip is not None:
                return IterationOutcome(metrics.update({selection.skip: 1.0}).finish(), stop)
            kept = selection.kept
            # the gradient-SNR probe scores every row with the loss, so it needs all behaviour log-probs
            probe = self.grad_snr is not None and self.grad_snr.should_run(self.iteration)
            with phase(self.clock, "update", metrics), self._compute():
                plan = self._plan_step(kept, on_policy_first=not probe)
                batch, batch_stats = self._score_step(kept, plan)
            if probe:
                metrics.update(self._grad_snr_step(kept, batch))
        with phase(self.clock, "update", metrics):
            metrics.add("train", self._update_step(batch, plan))
        # after the mini-batch means: the whole batch's count replaces theirs (train/assistant_tokens)
        metrics.add("train", batch_stats)
        if self.weight_sync is not None:  # the next rollout samples from the updated weights
            with phase(self.clock, "update", metrics, timing="weight_sync"):
                self.weight_sync.push()
        device = next(self.model.parameters()).device
        if device.type == "cuda":  # this rank's peak since the start (what sizes a GPU run)
            metrics.add("memory", {"max_allocated_gb": torch.cuda.max_memory_allocated(device) / 2**30})
        return IterationOutcome(metrics.finish(), stop)

    def _collect_step(self) -> tuple[TensorDictBase, dict[str, float]]:
        """The iteration's P groups x G rollouts (reward-shaped) and their statistics."""
        metrics = Metrics()
        with phase(self.clock, "rollout", metrics):
            seeds = train_level_seeds(self.cfg.seed, self.iteration, self.prompts_per_iter)
            records = self.algorithm.shape_rewards(self._collect(seeds))
        metrics.add("rollout", summarize(records))
        metrics.update(turn_cache_metrics(records))  # the records of every rank
        if TRAJECTORY_REFITS in records.keys():  # token rows re-tokenised from the rendered conversation
            metrics.add("rollout", {"trajectory_refits": records.get(TRAJECTORY_REFITS).sum()})
        # rows whose env step raised (an env bug the rollout survived; see TextGameEnv), since the start
        errors = sum(getattr(getattr(e, "base_env", e), "env_error_count", 0) for e in self._train_envs.values())
        metrics.add("rollout", {"env_errors_total": self.dist.sum_floats([errors])[0]})
        return records, metrics.scalars

    def _diagnose_step(self, records: TensorDictBase) -> dict[str, float]:
        """Diagnostics of the batch as collected: T3's token accounting, the MI proxies (pre-update policy)."""
        stats = {}
        with phase(self.clock, "diagnostics"):
            if self.t3_enabled or getattr(self.val_env, "task_name", ""):
                # token accounting on every active-reasoning run, so a run without T3 is the baseline
                # of one with it (no truncation column there: nothing was truncated)
                from ..transforms.t3 import t3_token_stats

                stats.update(t3_token_stats(records, self.env.max_turn))
            if self.collapse is not None and self.collapse.should_run(self.iteration):
                images = records.get(IMAGES_TRAJECTORY, as_list=True) if self.processor is not None else None
                # diagnostics.mi.dtype=null: in the policy's compute dtype; a dtype of its own: in that dtype
                with self._compute() if self.cfg.diagnostics.mi.dtype is None else contextlib.nullcontext():
                    stats.update(self.collapse(records, images=images))
        return stats

    def _select_step(self, records: TensorDictBase, collected: Groups) -> tuple[Selection, dict[str, float]]:
        """The groups the update trains on: DAPO's dynamic sampling (refills included), then the SNR filter.

        ``collected``: the Groups of ``records``. Every reason to skip the update is decided here (the
        iteration line says which).
        """
        metrics, groups = Metrics(), collected
        if self.algorithm.dynamic_sampling is not None:
            with phase(self.clock, "rollout"):  # DAPO's refills are rollouts
                records, stats = self.algorithm.dynamic_sampling(records, self._collect_more)
            metrics.update(stats)
            if records is None:  # no informative group even after the refills
                return Selection(None, "dapo/skipped_update"), metrics.scalars
            groups = Groups.from_values(records.get(GROUP_ID), records.get(EPISODE_RETURN))
        if self.snr is None:
            with phase(self.clock, "filter"):
                stats = unfiltered_stats(groups=groups)
            metrics.add("filter", stats)
            return Selection(KeptGroups(records, records, groups, 1.0), None), metrics.scalars
        with phase(self.clock, "filter", metrics):
            mask, stats = self.snr.row_mask(records, groups, step=self.iteration)
            batch = keep_rows(records, mask)
        metrics.add("filter", stats)
        if batch is None:  # nothing carries signal: skip the update rather than train on noise
            return Selection(None, "filter/skipped_update"), metrics.scalars
        scale = loss_scale(stats["kept_ratio"], self.filter_cfg["loss_scale"])
        # whole groups: their moments stand
        return Selection(KeptGroups(records, batch, groups.take(mask), scale), None), metrics.scalars

    def _plan_step(self, kept: KeptGroups, on_policy_first: bool) -> MinibatchPlan:
        """The update's mini-batches of the kept groups, drawn before anything is scored: with one epoch the first
        mini-batch trains on the policy that generated it (``on_policy_first``), so its rows need no behaviour pass."""
        a = self.cfg.algo
        on_policy_first = on_policy_first and a.on_policy_first_minibatch and a.update_epochs == 1
        return MinibatchPlan(minibatch_plan(kept.groups, a), on_policy_first)

    def _score_step(self, kept: KeptGroups, plan: MinibatchPlan) -> tuple[TensorDictBase, dict[str, float]]:
        """The kept groups' training batch: advantages, behaviour and reference log-probs, for the rows this rank
        trains on (none of the behaviour ones for the on-policy first mini-batch); its statistics."""
        first = plan.minibatches[0][0] if plan.on_policy_first and plan.minibatches and plan.minibatches[0] else None
        skip, skip_ref = unscored_rows(
            plan.minibatches, kept.batch.batch_size[0], self.dist.world_size, self.dist.rank, on_policy=first
        )
        return self._training_batch(
            kept.batch, kept.scale, skip_behaviour=skip, skip_reference=skip_ref, groups=kept.groups
        )

    def _update_step(self, batch: TensorDictBase, plan: MinibatchPlan) -> dict[str, float]:
        """The optimizer steps over the training batch's mini-batches; their mean metrics."""
        return optimize(
            batch,
            self.algorithm,
            self.optimizer,
            self.cfg.algo,
            plan=plan.minibatches,
            on_policy_first=plan.on_policy_first,
            dist=self.dist,
            forward_context=self._training_forward,
        )

    def _grad_snr_step(self, kept: KeptGroups, batch: TensorDictBase) -> dict[str, float]:
        """RAGEN-2 §3.1's gradient-SNR diagnostic, on every row of the batch the filter saw."""
        metrics = Metrics()
        with phase(self.clock, "diagnostics", metrics, timing="grad_snr"):
            # the diagnostic needs every RV bucket, so it scores the unfiltered batch (every row of it)
            whole = batch.batch_size[0] == kept.unfiltered.batch_size[0] and not self.dist.enabled
            full = batch if whole else self._training_batch(kept.unfiltered)[0]
            metrics.update(self.grad_snr(full))
        return metrics.scalars

    def _training_batch(
        self, records: TensorDictBase, scale: float = 1.0, skip_behaviour=None, skip_reference=None, groups=None
    ) -> tuple[TensorDictBase, dict[str, float]]:
        return training_batch(
            records,
            self.algorithm,
            self.actor,
            self.ref_actor,
            scale,
            skip_behaviour=skip_behaviour,
            skip_reference=skip_reference,
            groups=groups,
        )

    # -- collection ----------------------------------------------------------------------
    def _collect_more(self, num_groups: int) -> TensorDictBase | None:
        """Fresh groups on new levels (DAPO's refill); at most P groups per rollout call."""
        self._refills += 1
        if num_groups < 1:
            return None
        seeds = train_level_seeds(self.cfg.seed + 7919 * self._refills, self.iteration, num_groups)
        with self._compute():
            return self.algorithm.shape_rewards(self._collect(seeds, stream=self._refills))

    def _collect(self, seeds: list[int], stream: int = 0) -> TensorDictBase:
        """Groups for ``seeds``, played in :attr:`shards` parts (rank r plays part r), gathered in order.

        Each part samples from its own seed (:func:`~ragen_torchrl.trainer.distributed.part_seed`)
        in a forked RNG state, so the rollouts do not depend on how the parts are spread over
        processes, and the global RNG stream (mini-batch plans) stays equal on every rank.
        """
        bounds = shard_bounds(len(seeds), self.shards)
        per_call = -(-self.prompts_per_iter // self.shards)  # at most this many groups per rollout call (one env size)
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        collected: list[Any] = []
        for p in self.dist.own_parts(len(bounds)):
            start, end = bounds[p]
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(part_seed(self.cfg.seed, self.iteration, p, stream))
                for s in range(start, end, per_call):
                    call_seeds = seeds[s : min(s + per_call, end)]
                    collected.append(
                        collect_rollouts(
                            self._train_env(len(call_seeds)),
                            self.policy,
                            call_seeds,
                            self.group_size,
                            chunk_size=self.cfg.rollout.chunk_size,
                            group_offset=s,
                        )
                    )
        if self.dist.enabled:
            collected = [r for rank_records in self.dist.all_gather_objects(collected) for r in rank_records]
        if len(collected) == 1:
            return collected[0]
        return lazy_stack([r for records in collected for r in records.unbind(0)])
