"""The training loop. One iteration (:meth:`Trainer.run_iteration`, :mod:`.iteration`) is the pipeline
collect -> diagnose -> select -> plan -> score -> update, each step returning ``(data, stats)`` and its
decision (skip the update, stop the run) rather than keeping it; :meth:`Trainer.fit` acts on the decisions
(the stop rules: :mod:`.stops`) and charges every block to a phase of the run's clock (:mod:`.phases`).

:class:`Trainer` is driven by a composed Hydra config (``configs/config.yaml``); the CLI
(``ragen-train``) is a thin wrapper. It can also be used directly::

    from hydra import compose, initialize_config_dir
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["trainer=smoke"])
    summary = Trainer(cfg, run_dir="outputs/my_run").fit()

Everything is logged through torchrl's logger of ``logger.backend`` (TensorBoard under ``run_dir/tb`` by
default; :class:`~ragen_torchrl.trainer.run_log.RunLog`); checkpoints go to ``run_dir/checkpoints/last.pt``,
the one before to ``prev.pt`` (fsync-ed, verified, then renamed: see :mod:`ragen_torchrl.trainer.checkpoint`),
and with ``trainer.keep_best`` the state and the policy of the peak validation to ``checkpoints/best.pt`` and
``policy_best/``. A resumed run reopens the TensorBoard writer with ``purge_step`` at its first re-run
iteration (the CSV log drops those rows), so the steps an interrupted run logged after its last checkpoint
are not counted twice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import tensordict
import torch
from omegaconf import DictConfig, OmegaConf

from ..diagnostics.collapse import CollapseMonitor
from ..diagnostics.grad_snr import GradSNRProbe
from ..envs import make_env
from ..models.loading import (
    checkpointed_layers,
    dtype_name,
    enable_gradient_checkpointing,
    low_precision_warning,
    resolve_precision,
)
from ..models.lora import LoRASettings, adapter_state, apply_lora, load_adapter_state
from ..models.vision import load_policy
from ..objectives import build_algorithm
from ..transforms.snr import build_filter
from .budget import budget_totals
from .checkpoint import (
    LAST,
    check_checkpoint_state,
    check_model_state,
    check_resume_config,
    load_latest,
    restore_rng_state,
    rng_state,
    save_best,
    save_rotating,
)
from .config import validate_config
from .config_checks import ConfigError
from .config_paths import check_run_dir
from .distributed import (
    Distributed,
    fsdp_mixed_precision,
    full_model_state,
    full_state,
    gathered,
    load_full_state,
    shard_model,
)
from .episode_frames import EpisodeFrames
from .evaluate import BEST_POLICY_DIR, POLICY_DIR, evaluate_policy
from .final_eval import final_eval_of_run
from .iteration import IterationSteps
from .metrics import Metrics
from .model_setup import env_kwargs, oversubscribed_threads, prepare_model
from .phases import phase
from .policies import logprob_policy, reference_policy, rollout_policies
from .policy_export import MERGED_POLICY_DIR, write_policy
from .provenance import PhaseClock, load_average, run_provenance, run_totals
from .run_dir import lock_run_dir
from .run_log import (
    SCALARS_FILE,
    NullLogger,
    ValidationPeak,
    conversation_text,
    final_validation_line,
    hparam_metrics,
    iteration_line,
    log_episode_images,
    make_run_log,
    run_hparams,
    write_scalars_csv,
)
from .stops import StopRules
from .stored_config import check_stored_config
from .summary import SUMMARY_FILE, write_summary

__all__ = ["MERGED_POLICY_DIR", "Trainer"]

log = logging.getLogger(__name__)


class _TrainedState:
    """What a checkpoint's ``model`` entry holds for this policy (its ``state_dict``): every weight, or for a
    LoRA policy the adapters only; :func:`~ragen_torchrl.trainer.checkpoint.check_model_state` compares with it."""

    def __init__(self, model: torch.nn.Module, lora: bool) -> None:
        self.model, self.lora = model, lora

    def state_dict(self) -> dict[str, torch.Tensor]:
        return adapter_state(self.model) if self.lora else self.model.state_dict()


class Trainer(IterationSteps):
    """GRPO training of a chat policy on a TorchRL text environment.

    Args:
        cfg: composed config (see ``configs/config.yaml``).
        run_dir: where TensorBoard logs and checkpoints go. When ``cfg.trainer.resume``
            names a previous run dir, that dir is used instead and training continues
            from its last checkpoint.

    The iteration's steps are :class:`~ragen_torchrl.trainer.iteration.IterationSteps`; :attr:`stop_reason`
    is why the last :meth:`fit` ended before ``trainer.total_iterations`` (``None``: it did not), set by
    :meth:`fit` only.
    """

    def __init__(self, cfg: DictConfig, run_dir: str | os.PathLike) -> None:
        self.clock = PhaseClock(phase="setup")  # wall and CPU seconds per phase, for summary.json
        cfg = validate_config(cfg)  # typed: every field present, defaults from trainer/config_schema.py
        tensordict.set_list_to_stack(True).set()
        self.cfg = cfg
        # under torchrun: join the process group (see ragen_torchrl.trainer.distributed)
        self.dist = Distributed.from_env(cfg.model.device)
        self.fsdp = cfg.trainer.fsdp
        self.shards = self._check_distributed()
        run_dir = self.dist.broadcast_object(str(run_dir))  # rank 0's (Hydra names each rank's by its clock)
        resume = cfg.trainer.resume
        if not resume:
            # a read-only run dir is a config error now, not a traceback after the warm start
            check_run_dir(run_dir, "run_dir")
        self.run_dir = Path(resume if resume else run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        # before a resume reads or cleans the dir: a second process on it exits 2
        self.run_lock = lock_run_dir(self.run_dir) if self.dist.is_main else None
        self.resumed_from: Path | None = None
        resume_state = None
        if resume:
            # before any model is built: a missing/damaged checkpoint, a refused config change or
            # contents of the wrong type are config errors (exit 2), not a traceback after the warm start
            resume_state, self.resumed_from = load_latest(self.ckpt_dir, what=f"trainer.resume={resume}")
            check_resume_config(
                check_stored_config(resume_state.get("config") or {}, self.resumed_from),
                OmegaConf.to_container(cfg, resolve=True),
                allow_changes=cfg.trainer.resume_allow_changes,
            )
            check_checkpoint_state(resume_state, self.resumed_from)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if cfg.model.threads:
            torch.set_num_threads(cfg.model.threads)
            busy = oversubscribed_threads(cfg.model.threads) if cfg.model.device in ("auto", "cpu") else None
            if busy and not torch.cuda.is_available():
                log.warning(busy)
        self.provenance = run_provenance() if self.dist.is_main else {}  # the code and machine this run starts on
        self._seed_everything(cfg.seed)

        t = cfg.trainer
        self.prompts_per_iter, self.group_size = t.prompts_per_iter, t.group_size
        self.t3_enabled = cfg.t3.enabled
        self._train_envs: dict[int, Any] = {}
        try:
            self.env = self._train_env(-(-self.prompts_per_iter // self.shards))  # one collection part's groups
            self.val_env = make_env(cfg.env.name, num_envs=t.val_levels, **env_kwargs(cfg.env))
            self._val_envs = {t.val_levels: self.val_env}
            if t.val_every > 0:  # an env that refuses the periodic size fails here, not mid-run
                self._val_env(self.periodic_val_levels())
        except (TypeError, ValueError) as e:
            raise ConfigError(f"env={cfg.env.name}: {e}") from e

        with phase(self.clock, "warm_start"):
            self.model_path = self._prepare_model()
        # model.precision=mixed: float32 parameters (and so AdamW state), the forwards in model.dtype (autocast)
        try:
            self.precision = resolve_precision(self.dist.device(cfg.model.device), cfg.model.dtype, cfg.model.precision)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        warning = low_precision_warning(self.precision, cfg.algo.lr, "algo.lr")
        if warning and self.dist.is_main:
            log.warning(warning)
        # processor: a vision-language model's (None for a text model); the rollouts and losses pass images with it
        self.model, self.tokenizer, self.processor = load_policy(
            self.model_path, self.dist.device(cfg.model.device), dtype_name(self.precision.param_dtype)
        )
        self.gradient_checkpointing = cfg.model.gradient_checkpointing
        if self.gradient_checkpointing:  # armed here; only the training forwards checkpoint (_training_forward)
            enable_gradient_checkpointing(self.model)
        # LoRA (model.lora): adapters injected in place, the base frozen; checkpoints then hold the adapters
        self.lora = cfg.model.lora.enabled
        if self.lora:
            self.model = apply_lora(self.model, LoRASettings.from_config(cfg.model.lora))
        if resume_state is not None:  # the weights' names and shapes, before anything else is built on the model
            check_model_state(resume_state["model"], _TrainedState(self.model, self.lora), self.resumed_from)
        self.dist.broadcast_parameters(self.model)  # every rank starts from rank 0's weights
        self.model.eval()  # GRPOLoss needs eval mode so behaviour and current log-probs agree
        # hf: generate with the training model itself; vllm: an engine fed the weights after each update
        self.policy, self.val_policy, self.weight_sync = rollout_policies(
            cfg, self.model, self.tokenizer, self.processor, fsdp=self.fsdp
        )
        # scored at the rollout temperature: behaviour, reference and loss see the distribution sampled
        self.actor = logprob_policy(cfg, self.model, self.tokenizer, self.processor)
        a = cfg.algo
        try:
            self.algorithm = build_algorithm(a, self.actor, self.model, self.tokenizer)
        except ValueError as e:
            raise ConfigError(f"algo={a.name}: {e}") from e
        self.ref_actor = None
        if a.kl_coeff > 0:
            self.ref_actor = reference_policy(
                cfg,
                self.model,
                self.tokenizer,
                self.processor,
                lora=self.lora,
                fsdp=self.fsdp,
                dtype=self.precision.compute_dtype,
            )
        if self.fsdp:
            # in place, before the optimizer sees the (now sharded) parameters; mixed precision: float32 shards
            # gathered in the compute dtype, gradients reduced in float32
            shard_model(self.model, fsdp_mixed_precision(self.precision.param_dtype, self.precision.compute_dtype))
            # the shared-prefix pass backpropagates through KV-cache tensors, which are no module
            # outputs: FSDP2 would not gather a layer's weights again before that backward
            self.loss_module.shared_prefix = False
        if self.gradient_checkpointing and self.loss_module.shared_prefix:
            # the shared-prefix pass writes a KV cache, which a checkpointed layer cannot keep: it would run
            # unchecked (objectives/shared_prefix.py); the padded pass, checkpointed, keeps far fewer activations
            log.info("model.gradient_checkpointing: the loss scores with the padded pass (algo.shared_prefix off)")
            self.loss_module.shared_prefix = False
        self.optimizer = torch.optim.AdamW(
            self.algorithm.optimizer_param_groups(a.lr), lr=a.lr, weight_decay=a.weight_decay
        )
        self._refills = 0

        # SNR-aware filtering (RAGEN-2 §3.3): runs on the trajectory records before any
        # per-sample work (behaviour log-probs, update), so fewer kept groups = a cheaper step
        self.filter_cfg = cfg.filter  # checked by validate_config
        # filter=random_keep draws its subsets from the run seed and the iteration
        self.snr = build_filter(self.filter_cfg, seed=cfg.seed) if self.filter_cfg.enabled else None
        # RAGEN-2 §4: the early stops (reward-variance collapse, sustained low validation
        # success) apply to the unfiltered baseline too, so both arms stop under the same rules
        self.stops = StopRules(cfg.trainer)
        # RAGEN-2's table metric: the best validation after training started on the full level set
        self.val_peak = ValidationPeak(levels=t.val_levels)
        self.stop_reason: str | None = None

        mi = cfg.diagnostics.mi
        self.collapse = None
        if mi.enabled and self.dist.is_main:  # a diagnostic: rank 0 computes and logs it
            # a vision-language policy's contexts hold their images (the processor scores them)
            self.collapse = CollapseMonitor(
                self.model,
                self.processor if self.processor is not None else self.tokenizer,
                num_pairs=mi.num_pairs,
                every=mi.every,
                seed=cfg.seed,
                method=mi.method,
                dtype=mi.dtype,
            )

        # RAGEN-2 §3.1's gradient-SNR figure, with or without a filter; its passes are not update time
        gs = cfg.diagnostics.grad_snr
        self.grad_snr = None
        if gs.every > 0:
            self.grad_snr = GradSNRProbe(self.loss_module, self.model.parameters(), buckets=gs.buckets, every=gs.every)

        self.iteration = 0
        self.history: list[dict[str, float]] = []
        purge_step = None
        if resume_state is not None:
            # the first step the resumed run logs is iteration + 1 (= stored iteration + 2):
            # anything an interrupted run logged from there on is dropped by TensorBoard
            purge_step = int(resume_state["iteration"]) + 2
        self.logger = (
            make_run_log(cfg.logger.backend, self.run_dir, purge_step=purge_step, project=cfg.logger.project)
            if self.dist.is_main
            else NullLogger()
        )
        if resume_state is not None:
            self._apply_checkpoint(resume_state, self.resumed_from)  # last: it restores the RNG states
            if self.weight_sync is not None:  # the engine generates from the resumed weights
                self.weight_sync.push()

    @property
    def loss_module(self):
        """The algorithm's torchrl loss (``algorithm.loss_module``)."""
        return self.algorithm.loss_module

    # -- setup -------------------------------------------------------------------------
    def _train_env(self, num_groups: int):
        """The training env for ``num_groups`` x G rows (T3-truncated when enabled), built once per size.

        The main batch uses P groups; DAPO's refill asks for any number of groups, and an env's
        row count is fixed at construction, so each size gets its own env.
        """
        if num_groups in self._train_envs:
            return self._train_envs[num_groups]
        cfg = self.cfg
        env = make_env(cfg.env.name, num_envs=num_groups * self.group_size, **env_kwargs(cfg.env))
        if self.t3_enabled:
            from ..transforms.t3 import T3Truncation

            t3 = cfg.t3
            # training env only: validation always runs untruncated
            try:
                env = env.append_transform(
                    T3Truncation(
                        cfg.env.name,
                        k=t3.k,
                        cumulative=t3.cumulative,
                        outside_trigger=t3.outside_trigger,
                        rule=t3.rule,
                    )
                )
            except ValueError as e:
                raise ConfigError(f"t3: {e}") from e
        self._train_envs[num_groups] = env
        return env

    def _check_distributed(self) -> int:
        """The number of collection parts; the multi-rank settings a run cannot use, as config errors."""
        cfg, world = self.cfg, self.dist.world_size
        shards = cfg.rollout.shards
        shards = world if shards is None else shards
        if self.dist.enabled and shards != world:
            raise ConfigError(
                f"rollout.shards={shards} under torchrun must equal the number of ranks ({world}), or null"
            )
        if shards > cfg.trainer.prompts_per_iter:
            raise ConfigError(
                f"{shards} collection parts (rollout.shards, or the number of ranks) for trainer.prompts_per_iter="
                f"{cfg.trainer.prompts_per_iter} groups: every part needs at least one group"
            )
        if self.fsdp and cfg.rollout.backend == "vllm":
            raise ConfigError(
                "rollout.backend=vllm with trainer.fsdp=true is not supported: the weight push needs whole weights"
            )
        if self.fsdp and not self.dist.enabled:
            raise ConfigError(
                "trainer.fsdp=true shards the model across ranks: launch with torchrun --nproc_per_node=N"
            )
        if self.fsdp and cfg.diagnostics.grad_snr.every > 0:
            raise ConfigError(
                "diagnostics.grad_snr needs whole gradients per rank; it is not available with trainer.fsdp=true"
            )
        return shards

    def _gathered(self):
        """FSDP2: the full weights on every rank for a block of rank-dependent forwards (else a no-op)."""
        return gathered(self.model, enabled=self.fsdp)

    def _compute(self):
        """The block's forwards in the compute dtype: :func:`torch.autocast` under ``model.precision=mixed``
        with a lower ``model.dtype`` (else a no-op; under FSDP2 its mixed precision policy casts instead).

        Generation runs under it too, rather than on a separate bf16 copy of the weights: the torchrl
        wrappers, the turn-cache policy, the vLLM weight push and FSDP2's gathered weights all hold the one
        model, and within one autocast block each float32 weight is cast once and cached, so a collection
        reads a compute-dtype copy made from the weights of this iteration, after the last update (what a
        copy refreshed once per iteration would hold). Frozen weights (a LoRA base) are cast per call.
        """
        return self.precision.autocast(enabled=not self.fsdp)

    @contextlib.contextmanager
    def _training_forward(self):
        """One loss forward: in the compute dtype (:meth:`_compute`), its decoder layers checkpointed under
        ``model.gradient_checkpointing`` (the backward, outside the block, recomputes their activations)."""
        with self._compute(), checkpointed_layers(self.model, enabled=self.gradient_checkpointing):
            yield

    @staticmethod
    def _seed_everything(seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % (1 << 32))
        torch.manual_seed(seed)

    def _prepare_model(self) -> str:
        # rank 0 builds (and caches) the starting policy first; the others then find it in the cache
        if not self.dist.is_main:
            self.dist.barrier()
        path = prepare_model(self.cfg, self.val_env)
        if self.dist.is_main:
            self.dist.barrier()
        return path

    # -- evaluation ----------------------------------------------------------------------
    def periodic_val_levels(self) -> int:
        """Levels of the validations every ``trainer.val_every`` iterations: the first
        ``trainer.val_every_levels`` of the fixed set (all ``trainer.val_levels`` when null or larger)."""
        t = self.cfg.trainer
        n = t.val_every_levels
        return t.val_levels if n is None else min(n, t.val_levels)

    def _val_env(self, levels: int):
        """The validation env with ``levels`` rows (its levels are the first ``levels`` of the fixed set)."""
        if levels not in self._val_envs:
            self._val_envs[levels] = make_env(self.cfg.env.name, num_envs=levels, **env_kwargs(self.cfg.env))
        return self._val_envs[levels]

    @torch.no_grad()
    def validate(self, step: int, *, levels: int | None = None) -> tuple[dict[str, float], dict[str, float]]:
        """Greedy-ish (temperature ``val_temperature``) rollouts on the fixed held-out levels.

        Runs :func:`~ragen_torchrl.trainer.evaluate.evaluate_policy` (the code path of
        ``ragen-eval``) with torch seeded to ``cfg.seed`` in a forked RNG state: every validation
        of a run plays the same levels with the same sampling noise, and training's RNG stream
        is untouched, so ``ragen-eval RUN_DIR`` reproduces the final validation exactly.
        Every validation after training started on the full level set updates the run's peak
        (:attr:`val_peak`, logged as ``val/peak_success`` once there is one; :mod:`~ragen_torchrl.validation_peak`).
        ``levels``: the first ``levels`` levels of the fixed set (default all ``trainer.val_levels``).
        The sustained-low-validation stop reads the stats in :meth:`fit` (:meth:`_validation_stop`).

        Returns:
            ``(stats, scalars)``: the validation's statistics and the scalars it logged at ``step`` (``val/*``).
        """
        t = self.cfg.trainer
        levels = t.val_levels if levels is None else levels
        stats = records = None
        frames = EpisodeFrames(min(t.log_image_samples, levels))
        with phase(self.clock, "validation"):
            with self._gathered(), self._compute():
                if self.dist.is_main:  # rank 0 validates; every rank gets its numbers for the stop rules
                    stats, records = evaluate_policy(
                        self._val_env(levels),
                        self.val_policy,
                        levels,
                        seed=self.cfg.seed,
                        chunk_size=self.cfg.rollout.chunk_size,
                        desc=f"validation (iteration {step})",
                        frames=frames,
                    )
            stats = self.dist.broadcast_object(stats)
            logged = Metrics().add("val", stats)
            if self.val_peak.update(step, stats, levels=levels) and t.keep_best:
                self._keep_best(step)
            if self.val_peak.success is not None:
                logged.add("val", {"peak_success": self.val_peak.success})
            self._log_scalars(logged.scalars, step)
            for i in range(min(t.log_text_samples, records.batch_size[0]) if records is not None else 0):
                self.logger.add_text(f"val/conversation_{i}", conversation_text(records, i), global_step=step)
            if records is not None:  # visual envs: each turn's observed image next to the reply
                log_episode_images(self.logger, records, frames.frames, step)
        return stats, logged.scalars

    def _validation_stop(self, stats: dict[str, float], step: int) -> tuple[str | None, dict[str, float]]:
        """The sustained-low-validation rule on the validation at ``step``: ``(reason or None, scalars)``, its
        counters, logged at ``step`` (``stop/*``)."""
        reason, counters = self.stops.after_validation(stats["success"], step)
        scalars = self._log_scalars(Metrics().add("stop", counters).scalars, step)
        return reason, scalars

    def _log_scalars(self, scalars: dict[str, float], step: int) -> dict[str, float]:
        for k, v in scalars.items():
            self.logger.log_scalar(k, v, step=step)
        return scalars

    # -- checkpoints ---------------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
        """Everything a resumed run needs to continue exactly as an uninterrupted one.

        With FSDP2 the full (unsharded) model and optimizer states are gathered to CPU through
        ``torch.distributed.checkpoint``'s state-dict API (a collective: every rank calls this), so
        a checkpoint is one file that any number of ranks, or ``ragen-eval``, can load.
        """
        if self.lora:  # the adapters are all that trains: the base weights are the model_path's
            model_state, optim_state = adapter_state(self.model), self.optimizer.state_dict()
        else:
            model_state, optim_state = full_state(self.model, self.optimizer, sharded=self.fsdp)
        return {
            "iteration": self.iteration,
            "model": model_state,
            "optimizer": optim_state,
            "rng": rng_state(),
            "history": self.history,
            **self.stops.state_dict(),  # "guard", "val_stop"
            "val_peak": self.val_peak.state_dict(),
            "objective": self.algorithm.state_dict(),
            "collapse": self.collapse.state_dict() if self.collapse is not None else None,
            # DAPO's refill counter seeds the refill levels: without it a resumed run draws others
            "refills": self._refills,
            "model_path": self.model_path,
            "clock": self.clock.state_dict(),
            "scalars": self.logger.scalars,  # every scalar logged so far: scalars.csv of a resumed run
            "config": OmegaConf.to_container(self.cfg, resolve=True),
        }

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/last.pt`` (the previous one kept as ``prev.pt``); returns its path.

        fsync-ed, verified to load, then renamed (:func:`~ragen_torchrl.trainer.checkpoint.save_rotating`).
        In a multi-rank run every rank calls this and rank 0 writes.
        """
        with phase(self.clock, "checkpoint"):
            state = self.checkpoint_state()
            path = save_rotating(state, self.ckpt_dir) if self.dist.is_main else self.ckpt_dir / LAST
            self.dist.barrier()  # no rank runs ahead of a checkpoint it may have to resume from
        return path

    def _export_policy(
        self, policy_dir: Path, whole: dict[str, torch.Tensor] | None, merged_dir: Path | None = None
    ) -> Path:
        """Rank 0: the policy as a model dir at ``policy_dir`` (``whole``: its full state dict, gathered under
        FSDP2), in ``model.export_dtype``; a LoRA policy as an adapter dir, with ``model.lora.export_merged``
        also ``merged_dir`` (:func:`~ragen_torchrl.trainer.policy_export.write_policy`)."""
        lora_base = str(Path(self.model_path).expanduser().resolve()) if self.lora else None
        return write_policy(
            policy_dir,
            self.model,
            self.tokenizer,
            state=whole,
            precision=self.precision,
            dtype_option=self.cfg.model.export_dtype,
            processor=self.processor,
            lora_base=lora_base,
            merged_dir=merged_dir if self.cfg.model.lora.export_merged else None,
        )

    def _keep_best(self, step: int) -> None:
        """``trainer.keep_best``: the validation at ``step`` set a new peak; keep its state
        (``checkpoints/best.pt``) and export its policy (``policy_best/``), both replacing the earlier peak's.

        Called right after that validation, before any further update, so ``policy_best/`` is the policy
        that scored the peak: ``ragen-eval RUN --which best`` reproduces it. In a multi-rank run every
        rank calls this (the state is gathered) and rank 0 writes.
        """
        with phase(self.clock, "checkpoint"):
            state = self.checkpoint_state()
            # the iterations done at this validation, as a checkpoint written then stores them (the final
            # validation runs after fit counted its last iteration)
            state["iteration"] = step - 1
            whole = full_model_state(self.model, sharded=self.fsdp)
            if self.dist.is_main:
                save_best(state, self.ckpt_dir)
                try:
                    self._export_policy(self.run_dir / BEST_POLICY_DIR, whole)
                except (OSError, ValueError) as e:  # training goes on; checkpoints/best.pt holds the weights
                    log.error("could not write the peak's policy to %s: %s", self.run_dir / BEST_POLICY_DIR, e)
            self.dist.barrier()

    def _apply_checkpoint(self, state: dict[str, Any], path: str | os.PathLike) -> None:
        if self.lora:
            load_adapter_state(self.model, state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        else:
            load_full_state(self.model, self.optimizer, state["model"], state["optimizer"], sharded=self.fsdp)
        self.algorithm.load_state_dict(state.get("objective") or {})
        restore_rng_state(state["rng"])
        self.history = state.get("history", [])
        self.stops.load_state_dict(state)
        self.val_peak.load_state_dict(state.get("val_peak"))
        if self.collapse is not None and state.get("collapse"):
            self.collapse.load_state_dict(state["collapse"])
        self._refills = int(state.get("refills", 0))
        self.clock.load_state_dict(state.get("clock"))
        self.logger.load_scalars(state.get("scalars"))
        self.iteration = int(state["iteration"]) + 1
        log.info("resumed from %s at iteration %d", path, self.iteration)

    # -- main loop -----------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train for ``trainer.total_iterations``; returns the run summary, also written to ``summary.json``.

        At the end (also after an early stop) the final validation runs, the trained policy is
        written as a Hugging Face model dir ``<run_dir>/policy`` (loadable with ``from_pretrained``
        and as ``model.name_or_path``), then ``<run_dir>/summary.json``
        (:func:`~ragen_torchrl.trainer.summary.write_summary`: config, start/end validation, the
        peak validation (``val_peak``), every scalar logged per iteration, seconds, ``trainer.total_iterations``, stop reason, policy dir,
        provenance, seconds per phase, training totals), ``<run_dir>/scalars.csv`` (every logged scalar per
        iteration) and the HParams-tab session in TensorBoard (config, provenance, final and peak metrics). With
        ``trainer.final_eval.levels > 0`` the exported policies are evaluated first (:mod:`.final_eval`).
        """
        t = self.cfg.trainer
        total = t.total_iterations
        t_start = time.time()
        self.clock.enter("other")  # the loop's own time; every block below charges its phase
        val_start = None
        if self.iteration == 0:
            val_start, _ = self.validate(step=0)
            self._validation_stop(val_start, step=0)  # checked, not counted: iteration 0 is before training
            self._print(
                f"[val] iteration 0: success {val_start['success']:.3f} ± {val_start['success_stderr']:.3f}, "
                f"return {val_start['reward_mean']:.3f}, format-valid {val_start['format_valid']:.3f}",
                flush=True,
            )
        val_end = val_start
        stop = None
        while self.iteration < total:
            stats, stop = self.run_iteration()
            step = self.iteration + 1
            self._log_scalars(stats, step)
            self.history.append({"iteration": step, **stats})
            # the first reason wins: the iteration's batch, the budget caps (a matched-steps / -rollouts /
            # -seconds arm), then the validation after it; rank 0's clock on every rank, so all ranks stop together
            stop = stop or self.stops.after_iteration(
                self.history, phases=lambda: self.dist.broadcast_object(self.clock.phases())
            )
            self._print(iteration_line(step, total, stats), flush=True)
            last = step == total
            if t.val_every and (step % t.val_every == 0) and not last:
                v, scalars = self.validate(step=step, levels=self.periodic_val_levels())
                val_stop, stop_scalars = self._validation_stop(v, step)
                stop = stop or val_stop
                self.history[-1].update({**scalars, **stop_scalars})
                peak = f", peak {self.val_peak.success:.3f}" if self.val_peak.success is not None else ""
                self._print(
                    f"[val] iteration {step}: success {v['success']:.3f} ± {v['success_stderr']:.3f} "
                    f"({v['num_trajectories']:.0f} levels){peak}",
                    flush=True,
                )
            if stop:
                self._print(f"[stop] {stop}", flush=True)
                last = True
            if (t.save_every and step % t.save_every == 0) or last:
                self.save_checkpoint()
            self.iteration += 1
            if stop:
                break
        self.stop_reason = stop
        if total > 0:
            val_end, scalars = self.validate(step=self.iteration)
            if self.history and self.history[-1]["iteration"] == self.iteration:
                self.history[-1].update(scalars)
        self.logger.flush()
        final_policy = None
        with phase(self.clock, "export"):
            whole = full_model_state(self.model, sharded=self.fsdp)  # FSDP2: gathered (a collective) for rank 0
            if self.dist.is_main:
                try:
                    policy = self._export_policy(
                        self.run_dir / POLICY_DIR, whole, merged_dir=self.run_dir / MERGED_POLICY_DIR
                    )
                    final_policy = str(policy)
                except (OSError, ValueError) as e:  # the summary is still written; it says there is no policy
                    log.error("could not write the final policy to %s: %s", self.run_dir / POLICY_DIR, e)
            summary = {
                "config": OmegaConf.to_container(self.cfg, resolve=True),
                "val_start": val_start,
                "val_end": val_end,
                "val_peak": self.val_peak.as_dict(),
                "history": self.history,
                "seconds": time.time() - t_start,
                "iterations": total,  # as configured; an early stop shows in stop_reason and the history
                "stop_reason": self.stop_reason,
                "run_dir": str(self.run_dir),
                "final_policy": final_policy,
                "provenance": {**self.provenance, "load_start": self.clock.load_start, "load_end": load_average()},
                "totals": {**run_totals(self.history), **budget_totals(self.history, self.clock.phases())},
            }
        if t.final_eval.levels > 0:  # the exported policies on many held-out levels, per level
            summary["final_eval"] = self._final_eval()
        summary["phases"] = self.clock.phases()
        if self.dist.is_main:
            write_summary(self.run_dir / SUMMARY_FILE, **summary)
            write_scalars_csv(self.run_dir / SCALARS_FILE, self.logger.scalars)
            self.logger.log_hparams(run_hparams(summary), hparam_metrics(summary), step=self.iteration)
            self.logger.close()  # a W&B / MLflow run ends here
        self.dist.barrier()  # the run's files are written before any rank returns
        if val_end is not None:
            self._print(final_validation_line(val_start, val_end, summary["seconds"], summary["val_peak"]), flush=True)
        return summary

    def _final_eval(self) -> dict[str, Any] | None:
        """Rank 0 runs :func:`~ragen_torchrl.trainer.final_eval.final_eval_of_run` (its two files); a failure is
        logged, not raised: the run's summary is still written, and ``ragen-eval RUN --final-eval`` redoes it."""
        result = None
        with phase(self.clock, "final_eval"):
            if self.dist.is_main:
                try:
                    device = self.dist.device(self.cfg.model.device)
                    result = final_eval_of_run(self.cfg, self.run_dir, device=device, echo=self._print)
                except Exception:  # noqa: BLE001 - the training's results are kept whatever the evaluation hits
                    log.exception("the final evaluation failed; redo it with ragen-eval %s --final-eval", self.run_dir)
            return self.dist.broadcast_object(result)

    def _print(self, *args: Any, **kwargs: Any) -> None:
        """Progress lines: printed by rank 0 only in a multi-rank run."""
        if self.dist.is_main:
            print(*args, **kwargs)
