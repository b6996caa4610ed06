"""The training loop. One iteration (:meth:`Trainer.train_iteration`) is the pipeline collect ->
diagnose -> filter -> advantages -> update, each step returning ``(data, stats)``; the stats
become the iteration's scalars (:class:`~ragen_torchrl.trainer.metrics.Metrics`).

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
import copy
import logging
import os
import random
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import tensordict
import torch
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDictBase, lazy_stack

from ..collectors.grouped import collect_rollouts, turn_cache_metrics
from ..collectors.rollout_policy import build_rollout_policy
from ..data.groups import Groups
from ..diagnostics.collapse import CollapseMonitor
from ..diagnostics.grad_snr import GradSNRProbe
from ..envs import make_env
from ..envs.splits import train_level_seeds
from ..keys import (
    EPISODE_RETURN,
    GROUP_ID,
    IMAGES_TRAJECTORY,
    TRAJECTORY_REFITS,
)
from ..models.loading import (
    checkpointed_layers,
    dtype_name,
    enable_gradient_checkpointing,
    low_precision_warning,
    resolve_precision,
)
from ..models.lora import LoRASettings, adapter_state, apply_lora, load_adapter_state, merged_state_dict
from ..models.priming import prime_text
from ..models.vision import load_policy
from ..objectives import build_algorithm
from ..objectives.logprobs import make_logprob_policy
from ..transforms.snr import build_filter, keep_rows
from .budget import budget_stop, budget_totals
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
    part_seed,
    shard_bounds,
    shard_model,
    unscored_rows,
)
from .early_stop import FilterGuard, ValidationStop, loss_scale, stop_stats, unfiltered_stats
from .episode_frames import EpisodeFrames
from .evaluate import BEST_POLICY_DIR, POLICY_DIR, evaluate_policy, export_policy
from .metrics import Metrics
from .model_setup import env_kwargs, oversubscribed_threads, prepare_model
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
    summarize,
    write_scalars_csv,
)
from .stored_config import check_stored_config
from .summary import SUMMARY_FILE, write_summary
from .update import minibatch_plan, optimize, training_batch

log = logging.getLogger(__name__)


#: with ``model.lora.export_merged``: the base model with the trained adapter merged in
MERGED_POLICY_DIR = "policy_merged"


def _set_config_dtype(path: Path, state: dict[str, torch.Tensor] | None) -> Path:
    """Make the exported ``config.json``'s ``dtype`` that of the weights written (``save_pretrained`` records the
    in-memory model's parameter dtype, float32 under mixed precision), so ``from_pretrained(dtype="auto")``
    loads them as written; rewritten through a temp file and a rename."""
    import json

    dtype = next((v.dtype for v in (state or {}).values() if v.is_floating_point()), None)
    config = Path(path) / "config.json"
    if dtype is None or not config.is_file():
        return path
    data = json.loads(config.read_text(encoding="utf-8"))
    name = dtype_name(dtype)
    if data.get("dtype") != name:
        data["dtype"] = name
        data.pop("torch_dtype", None)
        tmp = config.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, config)
    return path


class _TrainedState:
    """What a checkpoint's ``model`` entry holds for this policy (its ``state_dict``): every weight, or for a
    LoRA policy the adapters only; :func:`~ragen_torchrl.trainer.checkpoint.check_model_state` compares with it."""

    def __init__(self, model: torch.nn.Module, lora: bool) -> None:
        self.model, self.lora = model, lora

    def state_dict(self) -> dict[str, torch.Tensor]:
        return adapter_state(self.model) if self.lora else self.model.state_dict()


class KeptGroups(NamedTuple):
    """What the filter step hands on: the groups the update trains on."""

    sampled: TensorDictBase  # the batch the SNR filter saw (after DAPO's dynamic sampling)
    batch: TensorDictBase  # its kept groups' rows
    groups: Groups  # the kept groups
    scale: float  # the filter's kept-ratio loss scale


class TrainingBatch(NamedTuple):
    """What the advantage step hands to :func:`~ragen_torchrl.trainer.update.optimize`."""

    batch: TensorDictBase  # the dense training batch
    plan: list[list[torch.Tensor]]  # the row indices of every mini-batch of every epoch
    on_policy_first: bool  # the first mini-batch trains on the rollout policy itself


class Trainer:
    """GRPO training of a chat policy on a TorchRL text environment.

    Args:
        cfg: composed config (see ``configs/config.yaml``).
        run_dir: where TensorBoard logs and checkpoints go. When ``cfg.trainer.resume``
            names a previous run dir, that dir is used instead and training continues
            from its last checkpoint.
    """

    def __init__(self, cfg: DictConfig, run_dir: str | os.PathLike) -> None:
        self.clock = PhaseClock(phase="setup")  # wall and CPU seconds per phase, for summary.json
        cfg = validate_config(cfg)  # typed: every field present, defaults from trainer/config_schema.py
        tensordict.set_list_to_stack(True).set()
        self.cfg = cfg
        # under torchrun: join the process group (see ragen_torchrl.trainer.distributed)
        self.dist = Distributed.from_env(str(cfg.model.device))
        self.fsdp = bool(cfg.trainer.fsdp)
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
                allow_changes=bool(cfg.trainer.resume_allow_changes),
            )
            check_checkpoint_state(resume_state, self.resumed_from)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if cfg.model.threads:
            torch.set_num_threads(int(cfg.model.threads))
            busy = oversubscribed_threads(int(cfg.model.threads)) if str(cfg.model.device) in ("auto", "cpu") else None
            if busy and not torch.cuda.is_available():
                log.warning(busy)
        self.provenance = run_provenance() if self.dist.is_main else {}  # the code and machine this run starts on
        self._seed_everything(int(cfg.seed))

        t = cfg.trainer
        self.P, self.G = int(t.prompts_per_iter), int(t.group_size)
        self.t3_enabled = bool(cfg.t3.enabled)
        self._train_envs: dict[int, Any] = {}
        try:
            self.env = self._train_env(-(-self.P // self.shards))  # one collection part's groups
            self.val_env = make_env(cfg.env.name, num_envs=int(t.val_levels), **env_kwargs(cfg.env))
            self._val_envs = {int(t.val_levels): self.val_env}
            if int(t.val_every) > 0:  # an env that refuses the periodic size fails here, not mid-run
                self._val_env(self.periodic_val_levels())
        except (TypeError, ValueError) as e:
            raise ConfigError(f"env={cfg.env.name}: {e}") from e

        self.clock.enter("warm_start")
        self.model_path = self._prepare_model()
        self.clock.enter("setup")
        # model.precision=mixed: float32 parameters (and so AdamW state), the forwards in model.dtype (autocast)
        try:
            self.precision = resolve_precision(
                self.dist.device(str(cfg.model.device)), str(cfg.model.dtype), str(cfg.model.precision)
            )
        except ValueError as e:
            raise ConfigError(str(e)) from None
        warning = low_precision_warning(self.precision, float(cfg.algo.lr), "algo.lr")
        if warning and self.dist.is_main:
            log.warning(warning)
        # processor: a vision-language model's (None for a text model); the rollouts and losses pass images with it
        self.model, self.tokenizer, self.processor = load_policy(
            self.model_path, self.dist.device(str(cfg.model.device)), dtype_name(self.precision.param_dtype)
        )
        self.gradient_checkpointing = bool(cfg.model.gradient_checkpointing)
        if self.gradient_checkpointing:  # armed here; only the training forwards checkpoint (_training_forward)
            enable_gradient_checkpointing(self.model)
        # LoRA (model.lora): adapters injected in place, the base frozen; checkpoints then hold the adapters
        self.lora = bool(cfg.model.lora.enabled)
        if self.lora:
            self.model = apply_lora(self.model, LoRASettings.from_config(cfg.model.lora))
        if resume_state is not None:  # the weights' names and shapes, before anything else is built on the model
            check_model_state(resume_state["model"], _TrainedState(self.model, self.lora), self.resumed_from)
        self.dist.broadcast_parameters(self.model)  # every rank starts from rank 0's weights
        self.model.eval()  # GRPOLoss needs eval mode so behaviour and current log-probs agree
        rcfg = cfg.rollout
        backend = str(rcfg.backend)
        # hf: generate with the training model itself; vllm: an engine fed the weights after each update
        # the full distribution unless configured (the config check refuses truncation for training)
        sampling = {k: rcfg[k] for k in ("top_k", "top_p", "min_p")}
        # the reference primes every reply with <think> (a prompt token, never trained)
        self.reply_prime = prime_text(bool(rcfg.prime_think))
        sampling["reply_prime"] = self.reply_prime
        sampling["trajectory"] = str(rcfg.trajectory)
        sampling["processor"] = self.processor
        if backend == "hf":  # the token rollout's per-row KV cache between turns
            sampling["kv_cache"] = bool(rcfg.kv_cache)
            sampling["max_cached_tokens"] = rcfg.kv_cache_max_tokens
            sampling["sampler"] = str(rcfg.sampler)
            sampling["attention"] = str(rcfg.attention)
        self.policy, self.weight_sync = build_rollout_policy(
            backend,
            self.model,
            self.tokenizer,
            max_new_tokens=rcfg.max_new_tokens,
            temperature=rcfg.temperature,
            **sampling,
        )
        self.val_policy, _ = build_rollout_policy(  # the same engine (vllm), another temperature
            backend,
            self.model,
            self.tokenizer,
            max_new_tokens=rcfg.max_new_tokens,
            temperature=t.val_temperature,
            **sampling,
            **({"engine": self.policy.model} if self.weight_sync is not None else {}),
        )
        if self.fsdp:
            # transformers syncs every generate step across ranks for a sharded model; here the
            # weights are gathered for generation, and ranks generate different lengths
            for p in (self.policy, self.val_policy):
                p.generate_kwargs["synced_gpus"] = False
        # scored at the rollout temperature: behaviour, reference and loss see the distribution sampled
        self.actor = make_logprob_policy(
            self.model,
            self.tokenizer,
            reply_prime=self.reply_prime,
            processor=self.processor,
            temperature=rcfg.temperature,
        )
        a = cfg.algo
        try:
            self.algorithm = build_algorithm(a, self.actor, self.model, self.tokenizer)
        except ValueError as e:
            raise ConfigError(f"algo={a.name}: {e}") from e
        self.loss_module = self.algorithm.loss_module
        self.ref_actor = None
        if float(a.kl_coeff) > 0:
            # a LoRA policy's reference is its own base model (adapters switched off while it scores): no copy
            ref_model = self.model if self.lora else copy.deepcopy(self.model).eval().requires_grad_(False)
            if self.fsdp and not self.lora:
                # the policy computes with FSDP2's gathered compute-dtype weights: so does its unsharded reference
                ref_model.to(self.precision.compute_dtype)
            self.ref_actor = make_logprob_policy(
                ref_model,
                self.tokenizer,
                reply_prime=self.reply_prime,
                processor=self.processor,
                temperature=rcfg.temperature,
            )
            self.ref_actor.lora_reference = self.lora
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
            self.algorithm.optimizer_param_groups(float(a.lr)), lr=float(a.lr), weight_decay=float(a.weight_decay)
        )
        self._refills = 0

        # SNR-aware filtering (RAGEN-2 §3.3): runs on the trajectory records before any
        # per-sample work (behaviour log-probs, update), so fewer kept groups = a cheaper step
        self.filter_cfg = cfg.filter  # checked by validate_config
        # filter=random_keep draws its subsets from the run seed and the iteration
        self.snr = build_filter(self.filter_cfg, seed=int(cfg.seed)) if self.filter_cfg.enabled else None
        # RAGEN-2 §4: the early stops (reward-variance collapse, sustained low validation
        # success) apply to the unfiltered baseline too, so both arms stop under the same rules
        self.guard = FilterGuard.from_config(cfg.trainer.early_stop)
        self.val_stop = ValidationStop.from_config(cfg.trainer.early_stop)
        # RAGEN-2's table metric: the best validation after training started on the full level set
        self.val_peak = ValidationPeak(levels=int(cfg.trainer.val_levels))
        self.stop_reason: str | None = None

        mi = cfg.diagnostics.mi
        self.collapse = None
        if mi.enabled and self.dist.is_main:  # a diagnostic: rank 0 computes and logs it
            # a vision-language policy's contexts hold their images (the processor scores them)
            self.collapse = CollapseMonitor(
                self.model,
                self.processor if self.processor is not None else self.tokenizer,
                num_pairs=int(mi.num_pairs),
                every=int(mi.every),
                seed=int(cfg.seed),
                method=mi.method,
                dtype=mi.dtype,
            )

        # RAGEN-2 §3.1's gradient-SNR figure, with or without a filter; its passes are not update time
        gs = cfg.diagnostics.grad_snr
        self.grad_snr = None
        if int(gs.every) > 0:
            self.grad_snr = GradSNRProbe(
                self.loss_module, self.model.parameters(), buckets=int(gs.buckets), every=int(gs.every)
            )

        self.iteration = 0
        self.history: list[dict[str, float]] = []
        purge_step = None
        if resume_state is not None:
            # the first step the resumed run logs is iteration + 1 (= stored iteration + 2):
            # anything an interrupted run logged from there on is dropped by TensorBoard
            purge_step = int(resume_state["iteration"]) + 2
        self.logger = (
            make_run_log(cfg.logger.backend, self.run_dir, purge_step=purge_step, project=str(cfg.logger.project))
            if self.dist.is_main
            else NullLogger()
        )
        if resume_state is not None:
            self._apply_checkpoint(resume_state, self.resumed_from)  # last: it restores the RNG states
            if self.weight_sync is not None:  # the engine generates from the resumed weights
                self.weight_sync.push()

    # -- setup -------------------------------------------------------------------------
    def _train_env(self, num_groups: int):
        """The training env for ``num_groups`` x G rows (T3-truncated when enabled), built once per size.

        The main batch uses P groups; DAPO's refill asks for any number of groups, and an env's
        row count is fixed at construction, so each size gets its own env.
        """
        if num_groups in self._train_envs:
            return self._train_envs[num_groups]
        cfg = self.cfg
        env = make_env(cfg.env.name, num_envs=num_groups * self.G, **env_kwargs(cfg.env))
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
                        outside_trigger=bool(t3.outside_trigger),
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
        shards = world if shards is None else int(shards)
        if self.dist.enabled and shards != world:
            raise ConfigError(
                f"rollout.shards={shards} under torchrun must equal the number of ranks ({world}), or null"
            )
        if shards > int(cfg.trainer.prompts_per_iter):
            raise ConfigError(
                f"{shards} collection parts (rollout.shards, or the number of ranks) for trainer.prompts_per_iter="
                f"{cfg.trainer.prompts_per_iter} groups: every part needs at least one group"
            )
        if self.fsdp and str(cfg.rollout.backend) == "vllm":
            raise ConfigError(
                "rollout.backend=vllm with trainer.fsdp=true is not supported: the weight push needs whole weights"
            )
        if self.fsdp and not self.dist.enabled:
            raise ConfigError(
                "trainer.fsdp=true shards the model across ranks: launch with torchrun --nproc_per_node=N"
            )
        if self.fsdp and int(cfg.diagnostics.grad_snr.every) > 0:
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

    def _collect(self, seeds: list[int], stream: int = 0) -> TensorDictBase:
        """Groups for ``seeds``, played in :attr:`shards` parts (rank r plays part r), gathered in order.

        Each part samples from its own seed (:func:`~ragen_torchrl.trainer.distributed.part_seed`)
        in a forked RNG state, so the rollouts do not depend on how the parts are spread over
        processes, and the global RNG stream (mini-batch plans) stays equal on every rank.
        """
        bounds = shard_bounds(len(seeds), self.shards)
        piece = -(-self.P // self.shards)  # at most this many groups per rollout call (one env size)
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        parts = []
        for p in self.dist.own_parts(len(bounds)):
            start, end = bounds[p]
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(part_seed(int(self.cfg.seed), self.iteration, p, stream))
                for s in range(start, end, piece):
                    part = seeds[s : min(s + piece, end)]
                    parts.append(
                        collect_rollouts(
                            self._train_env(len(part)),
                            self.policy,
                            part,
                            self.G,
                            chunk_size=int(self.cfg.rollout.chunk_size),
                            group_offset=s,
                        )
                    )
        if self.dist.enabled:
            parts = [r for rank_parts in self.dist.all_gather_objects(parts) for r in rank_parts]
        if len(parts) == 1:
            return parts[0]
        return lazy_stack([r for p in parts for r in p.unbind(0)])

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
        return int(t.val_levels) if n is None else min(int(n), int(t.val_levels))

    def _val_env(self, levels: int):
        """The validation env with ``levels`` rows (its levels are the first ``levels`` of the fixed set)."""
        if levels not in self._val_envs:
            self._val_envs[levels] = make_env(self.cfg.env.name, num_envs=levels, **env_kwargs(self.cfg.env))
        return self._val_envs[levels]

    @torch.no_grad()
    def validate(
        self, step: int, *, stop_rule: bool = True, levels: int | None = None
    ) -> tuple[dict[str, float], dict[str, float]]:
        """Greedy-ish (temperature ``val_temperature``) rollouts on the fixed held-out levels.

        Runs :func:`~ragen_torchrl.trainer.evaluate.evaluate_policy` (the code path of
        ``ragen-eval``) with torch seeded to ``cfg.seed`` in a forked RNG state: every validation
        of a run plays the same levels with the same sampling noise, and training's RNG stream
        is untouched, so ``ragen-eval RUN_DIR`` reproduces the final validation exactly.
        With ``stop_rule`` the success rate feeds the sustained-low-validation stop
        (``trainer.early_stop.val_stop``); a stop reason is kept in :attr:`stop_reason`. Every validation
        after training started on the full level set updates the run's peak (:attr:`val_peak`, logged as
        ``val/peak_success`` once there is one; :mod:`~ragen_torchrl.validation_peak`). ``levels``: the
        first ``levels`` levels of the fixed set (default all ``trainer.val_levels``).

        Returns:
            ``(stats, scalars)``: the validation's statistics and the scalars it logged at ``step``
            (``val/*``, and ``stop/*`` with the stop rule).
        """
        outer = self.clock.enter("validation")
        levels = int(self.cfg.trainer.val_levels) if levels is None else int(levels)
        stats = records = None
        frames = EpisodeFrames(min(int(self.cfg.trainer.log_image_samples), levels))
        with self._gathered(), self._compute():
            if self.dist.is_main:  # rank 0 validates; every rank gets its numbers for the stop rules
                stats, records = evaluate_policy(
                    self._val_env(levels),
                    self.val_policy,
                    levels,
                    seed=int(self.cfg.seed),
                    chunk_size=int(self.cfg.rollout.chunk_size),
                    desc=f"validation (iteration {step})",
                    frames=frames,
                )
        stats = self.dist.broadcast_object(stats)
        logged = Metrics().add("val", stats)
        new_peak = self.val_peak.update(step, stats, levels=levels)
        if new_peak and self.cfg.trainer.keep_best:
            self._keep_best(step)
        if self.val_peak.success is not None:
            logged.add("val", {"peak_success": self.val_peak.success})
        if stop_rule:
            reason = self.val_stop.update(stats["success"], step)
            logged.add("stop", self.val_stop.metrics())
            if reason and not self.stop_reason:
                self.stop_reason = reason
        for k, v in logged.scalars.items():
            self.logger.log_scalar(k, v, step=step)
        n_text = int(self.cfg.trainer.log_text_samples)
        for i in range(min(n_text, records.batch_size[0]) if records is not None else 0):
            self.logger.add_text(f"val/conversation_{i}", conversation_text(records, i), global_step=step)
        if records is not None:  # visual envs: each turn's observed image next to the reply
            log_episode_images(self.logger, records, frames.frames, step)
        self.clock.enter(outer)
        return stats, logged.scalars

    # -- one iteration -------------------------------------------------------------------
    def train_iteration(self) -> dict[str, float]:
        """One iteration, as its pipeline: collect -> diagnose -> filter -> advantages -> update; its scalars.

        Each step returns ``(data, stats)``; the stats become the iteration's scalars, which
        :meth:`fit` logs. When the filter or DAPO's dynamic sampling keeps no group, the iteration
        ends after the filter step and its ``*/skipped_update`` scalar says which.
        """
        metrics = Metrics()
        with self._gathered():  # FSDP2: generation and scoring run on the gathered weights
            with self._compute():
                records, stats = self._collect_step()
            metrics.update(stats)
            metrics.update(self._diagnose(records))
            kept, stats = self._filter_step(records)
            metrics.update(stats)
            if kept is None:
                return metrics.finish()
            # the gradient-SNR probe scores every row with the loss, so it needs all behaviour log-probs
            probe = self.grad_snr is not None and self.grad_snr.should_run(self.iteration)
            self.clock.enter("update")
            with metrics.timer("update"), self._compute():  # behaviour and reference log-probs
                train, batch_stats = self._advantage_step(kept, on_policy_first=not probe)
            if probe:
                metrics.update(self._grad_snr(kept, train.batch))
        with metrics.timer("update"):
            metrics.add("train", self._update_step(train))
        # after the mini-batch means: the whole batch's count replaces theirs (train/assistant_tokens)
        metrics.add("train", batch_stats)
        if self.weight_sync is not None:  # the next rollout samples from the updated weights
            with metrics.timer("weight_sync"):
                self.weight_sync.push()
        device = next(self.model.parameters()).device
        if device.type == "cuda":  # this rank's peak since the start (what sizes a GPU run)
            metrics.add("memory", {"max_allocated_gb": torch.cuda.max_memory_allocated(device) / 2**30})
        return metrics.finish()

    def _collect_step(self) -> tuple[TensorDictBase, dict[str, float]]:
        """The iteration's P groups x G rollouts (reward-shaped) and their statistics."""
        self.clock.enter("rollout")
        metrics = Metrics()
        with metrics.timer("rollout"):
            seeds = train_level_seeds(int(self.cfg.seed), self.iteration, self.P)
            records = self.algorithm.shape_rewards(self._collect(seeds))
        metrics.add("rollout", summarize(records))
        metrics.update(turn_cache_metrics(records))  # the records of every rank
        if TRAJECTORY_REFITS in records.keys():  # token rows re-tokenised from the rendered conversation
            metrics.add("rollout", {"trajectory_refits": records.get(TRAJECTORY_REFITS).sum()})
        # rows whose env step raised (an env bug the rollout survived; see TextGameEnv), since the start
        errors = sum(getattr(getattr(e, "base_env", e), "env_error_count", 0) for e in self._train_envs.values())
        metrics.add("rollout", {"env_errors_total": self.dist.sum_floats([errors])[0]})
        return records, metrics.scalars

    def _diagnose(self, records: TensorDictBase) -> dict[str, float]:
        """Diagnostics of the batch as sampled: T3's token accounting, the MI proxies (pre-update policy)."""
        stats = {}
        if self.t3_enabled or getattr(self.val_env, "task_name", ""):
            # token accounting on every active-reasoning run, so a run without T3 is the baseline
            # of one with it (no truncation column there: nothing was truncated)
            from ..transforms.t3 import t3_token_stats

            stats.update(t3_token_stats(records, self.env.max_turn))
        self.clock.enter("diagnostics")
        if self.collapse is not None and self.collapse.should_run(self.iteration):
            images = records.get(IMAGES_TRAJECTORY, as_list=True) if self.processor is not None else None
            # diagnostics.mi.dtype=null: in the policy's compute dtype; a dtype of its own: in that dtype
            with self._compute() if self.cfg.diagnostics.mi.dtype is None else contextlib.nullcontext():
                stats.update(self.collapse(records, images=images))
        return stats

    def _filter_step(self, records: TensorDictBase) -> tuple[KeptGroups | None, dict[str, float]]:
        """DAPO's dynamic sampling, the SNR filter and the early-stop rules; ``(None, stats)``: no update.

        Every reason to skip the update ends here, in one place (the iteration line says which).
        """
        metrics = Metrics()
        # the stop rules read the batch as sampled: dynamic sampling keeps only groups with signal
        # (the group statistics of a batch are computed once, in Groups, and shared by every reader)
        sampled = groups = Groups.from_values(records.get(GROUP_ID), records.get(EPISODE_RETURN))
        skip = None
        if self.algorithm.dynamic_sampling is not None:
            self.clock.enter("rollout")  # DAPO's refills are rollouts
            records, stats = self.algorithm.dynamic_sampling(records, self._collect_more)
            metrics.update(stats)
            if records is None:
                skip = "dapo/skipped_update"  # no informative group even after the refills
            else:
                groups = Groups.from_values(records.get(GROUP_ID), records.get(EPISODE_RETURN))
        self.clock.enter("filter")
        batch, scale = records, 1.0
        if skip is None and self.snr is None:
            metrics.add("filter", unfiltered_stats(groups=groups))
        elif skip is None:
            with metrics.timer("filter"):
                mask, stats = self.snr.row_mask(records, groups, step=self.iteration)
                batch = keep_rows(records, mask)
            metrics.add("filter", stats)
            if batch is None:
                skip = "filter/skipped_update"  # nothing carries signal: skip the update rather than train on noise
            else:
                scale = loss_scale(stats["kept_ratio"], self.filter_cfg["loss_scale"])
                groups = groups.take(mask)  # whole groups: their moments stand
        self.stop_reason = self.stop_reason or self.guard.update(stop_stats(groups=sampled, skipped=skip is not None))
        metrics.add("stop", self.guard.metrics())
        if skip is not None:
            return None, metrics.update({skip: 1.0}).scalars
        return KeptGroups(records, batch, groups, scale), metrics.scalars

    def _advantage_step(self, kept: KeptGroups, on_policy_first: bool) -> tuple[TrainingBatch, dict[str, float]]:
        """The training batch of the kept groups (advantages, behaviour and reference log-probs) and
        its mini-batch plan, drawn first: with one epoch the first mini-batch trains on the policy
        that generated it (``on_policy_first``), so its rows need no behaviour pass."""
        a = self.cfg.algo
        on_policy_first = on_policy_first and bool(a.on_policy_first_minibatch) and int(a.update_epochs) == 1
        plan = minibatch_plan(kept.groups, a)
        on_policy = plan[0][0] if on_policy_first and plan and plan[0] else None
        skip, skip_ref = unscored_rows(
            plan, kept.batch.batch_size[0], self.dist.world_size, self.dist.rank, on_policy=on_policy
        )
        batch, stats = self._training_batch(
            kept.batch, kept.scale, skip_behaviour=skip, skip_reference=skip_ref, groups=kept.groups
        )
        return TrainingBatch(batch, plan, on_policy_first), stats

    def _update_step(self, train: TrainingBatch) -> dict[str, float]:
        """The optimizer steps over the training batch's mini-batches; their mean metrics."""
        self.clock.enter("update")
        return optimize(
            train.batch,
            self.loss_module,
            self.algorithm,
            self.optimizer,
            self.cfg.algo,
            plan=train.plan,
            on_policy_first=train.on_policy_first,
            dist=self.dist,
            forward_context=self._training_forward,
        )

    def _grad_snr(self, kept: KeptGroups, batch: TensorDictBase) -> dict[str, float]:
        """RAGEN-2 §3.1's gradient-SNR diagnostic, on every row of the batch the filter saw."""
        self.clock.enter("diagnostics")
        metrics = Metrics()
        with metrics.timer("grad_snr"):
            # the diagnostic needs every RV bucket, so it scores the unfiltered batch (every row of it)
            whole = batch.batch_size[0] == kept.sampled.batch_size[0] and not self.dist.enabled
            full = batch if whole else self._training_batch(kept.sampled)[0]
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

    def _collect_more(self, num_groups: int) -> TensorDictBase:
        """Fresh groups on new levels (DAPO's refill); at most P groups per rollout call."""
        self._refills += 1
        if num_groups < 1:
            return None
        seeds = train_level_seeds(int(self.cfg.seed) + 7919 * self._refills, self.iteration, num_groups)
        with self._compute():
            return self.algorithm.shape_rewards(self._collect(seeds, stream=self._refills))

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
            "guard": self.guard.state_dict(),
            "val_stop": self.val_stop.state_dict(),
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
        outer = self.clock.enter("checkpoint")
        state = self.checkpoint_state()
        path = save_rotating(state, self.ckpt_dir) if self.dist.is_main else self.ckpt_dir / LAST
        self.dist.barrier()  # no rank runs ahead of a checkpoint it may have to resume from
        self.clock.enter(outer)
        return path

    def _export_lora(self, policy_dir: Path, merged_dir: Path | None) -> Path:
        """A LoRA policy's export: ``policy_dir`` a PEFT adapter dir on the base checkpoint (with its tokenizer
        files), and with ``model.lora.export_merged`` also ``merged_dir``: the base model, adapter merged in."""
        if self.cfg.model.lora.export_merged and merged_dir is not None:
            merged = self._in_export_dtype(merged_state_dict(self.model))
            _set_config_dtype(export_policy(self.model, self.tokenizer, merged_dir, state_dict=merged), merged)
        base = str(Path(self.model_path).expanduser().resolve())
        return export_policy(self.model, self.tokenizer, policy_dir, adapter_base=base)

    def _in_export_dtype(self, state: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor] | None:
        """``state`` (``None``: the model's own) with its floating tensors in ``model.export_dtype`` (auto: the
        compute dtype ``model.dtype``), so a mixed-precision run's float32 masters export as the bf16 checkpoint
        a bf16 run would write (or as float32); ``state`` itself when the parameters are in that dtype already."""
        name = str(self.cfg.model.export_dtype)
        dtype = self.precision.compute_dtype if name == "auto" else getattr(torch, name)
        if state is None:
            if self.precision.param_dtype == dtype:
                return None  # save_pretrained writes the model as it is
            state = self.model.state_dict()
        return {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}

    def _export_policy(self, policy_dir: Path, whole: dict[str, torch.Tensor], merged_dir: Path | None = None) -> Path:
        """Rank 0: the policy as a model dir at ``policy_dir`` (``whole``: its full state dict, gathered under FSDP2)."""
        if self.lora:
            path = self._export_lora(policy_dir, merged_dir)
        else:
            whole = self._in_export_dtype(whole)
            path = _set_config_dtype(export_policy(self.model, self.tokenizer, policy_dir, state_dict=whole), whole)
        if self.processor is not None:  # a vision-language policy loads with its image processor
            self.processor.image_processor.save_pretrained(path)
        return path

    def _keep_best(self, step: int) -> None:
        """``trainer.keep_best``: the validation at ``step`` set a new peak; keep its state
        (``checkpoints/best.pt``) and export its policy (``policy_best/``), both replacing the earlier peak's.

        Called right after that validation, before any further update, so ``policy_best/`` is the policy
        that scored the peak: ``ragen-eval RUN --which best`` reproduces it. In a multi-rank run every
        rank calls this (the state is gathered) and rank 0 writes.
        """
        outer = self.clock.enter("checkpoint")
        state = self.checkpoint_state()
        # the iterations done at this validation, as a checkpoint written then stores them (the final
        # validation runs after fit counted its last iteration)
        state["iteration"] = int(step) - 1
        whole = full_model_state(self.model, sharded=self.fsdp)
        if self.dist.is_main:
            save_best(state, self.ckpt_dir)
            try:
                self._export_policy(self.run_dir / BEST_POLICY_DIR, whole)
            except (OSError, ValueError) as e:  # training goes on; checkpoints/best.pt holds the weights
                log.error("could not write the peak's policy to %s: %s", self.run_dir / BEST_POLICY_DIR, e)
        self.dist.barrier()
        self.clock.enter(outer)

    def _apply_checkpoint(self, state: dict[str, Any], path: str | os.PathLike) -> None:
        if self.lora:
            load_adapter_state(self.model, state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        else:
            load_full_state(self.model, self.optimizer, state["model"], state["optimizer"], sharded=self.fsdp)
        self.algorithm.load_state_dict(state.get("objective") or {})
        restore_rng_state(state["rng"])
        self.history = state.get("history", [])
        if state.get("guard"):
            self.guard.load_state_dict(state["guard"])
        if state.get("val_stop"):
            self.val_stop.load_state_dict(state["val_stop"])
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
        iteration) and the HParams-tab session in TensorBoard (config, provenance, final and peak metrics).
        """
        t = self.cfg.trainer
        total = int(t.total_iterations)
        val_every = int(t.val_every)
        t_start = time.time()
        self.clock.enter("other")
        val_start = None
        if self.iteration == 0:
            val_start, _ = self.validate(step=0)
            self._print(
                f"[val] iteration 0: success {val_start['success']:.3f} ± {val_start['success_stderr']:.3f}, "
                f"return {val_start['reward_mean']:.3f}, format-valid {val_start['format_valid']:.3f}",
                flush=True,
            )
        val_end = val_start
        while self.iteration < total:
            stats = self.train_iteration()
            self.clock.enter("other")
            step = self.iteration + 1
            for k, v in stats.items():
                self.logger.log_scalar(k, v, step=step)
            self.history.append({"iteration": step, **stats})
            if not self.stop_reason:  # the budget caps: a matched-steps / -rollouts / -seconds arm
                self.stop_reason = self._budget_stop()
            self._print(iteration_line(step, total, stats), flush=True)
            last = step == total
            if val_every and (step % val_every == 0) and not last:
                v, scalars = self.validate(step=step, levels=self.periodic_val_levels())
                self.history[-1].update(scalars)
                peak = f", peak {self.val_peak.success:.3f}" if self.val_peak.success is not None else ""
                self._print(
                    f"[val] iteration {step}: success {v['success']:.3f} ± {v['success_stderr']:.3f} "
                    f"({v['num_trajectories']:.0f} levels){peak}",
                    flush=True,
                )
            if self.stop_reason:
                self._print(f"[stop] {self.stop_reason}", flush=True)
                last = True
            if (int(t.save_every) and step % int(t.save_every) == 0) or last:
                self.save_checkpoint()
            self.iteration += 1
            if self.stop_reason:
                break
        if total > 0:
            val_end, scalars = self.validate(step=self.iteration, stop_rule=False)
            if self.history and self.history[-1]["iteration"] == self.iteration:
                self.history[-1].update(scalars)
        self.logger.flush()
        self.clock.enter("export")
        final_policy = None
        whole = full_model_state(self.model, sharded=self.fsdp)  # FSDP2: gathered (a collective) for rank 0
        if self.dist.is_main:
            try:
                final_policy = str(
                    self._export_policy(self.run_dir / POLICY_DIR, whole, merged_dir=self.run_dir / MERGED_POLICY_DIR)
                )
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
        self.clock.enter("other")
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

    def _budget_stop(self) -> str | None:
        """Which ``trainer.max_*`` cap the run has reached (:func:`~ragen_torchrl.trainer.budget.budget_stop`).

        The seconds are rank 0's clock on every rank, so that all ranks stop at the same iteration.
        """
        t = self.cfg.trainer
        phases = None
        if t.get("max_seconds") is not None:
            phases = self.dist.broadcast_object(self.clock.phases())
        return budget_stop(t, self.history, phases)

    def _print(self, *args: Any, **kwargs: Any) -> None:
        """Progress lines: printed by rank 0 only in a multi-rank run."""
        if self.dist.is_main:
            print(*args, **kwargs)
