"""Policy objectives on torchrl's ``GRPOLoss``: GRPO, Dr.GRPO, DAPO, GSPO and PPO with a critic.

:func:`build_objective` turns an ``algo`` config node into an :class:`Objective`, which
bundles everything the training loop needs for one algorithm:

* ``shape_rewards(records)``: reward shaping of fresh rollout records (DAPO's overlong
  punishment), right after every rollout, before anything reads ``episode_return``.
* ``dynamic_sampling``: ``None``, or DAPO's ``refill(records, collect_more) -> (records, stats)``.
* ``advantage(records)``: group advantage ``(N, 1, 1)`` (GRPO/DAPO/GSPO: std-normalised,
  Dr.GRPO: ``R - mean``); PPO: unchanged (GAE needs tokens and values).
* ``prepare(batch)``: after behaviour (and reference) log-probs are attached, before the
  update. PPO computes old values, GAE advantages and value targets; others: identity.
  Statistics go to ``prepare_stats``.
* ``loss_module``: the torchrl ``LossModule``; ``out = loss_module(minibatch)``.
* ``total_loss(out)``: the sum of every ``loss_*`` term of ``out``.
* ``metrics(out, minibatch)``: floats for logging: loss terms, and entropy / KL / clip
  fraction averaged over assistant tokens only (as the loss output's own fields).

The losses also work on their own, on any batch that meets their input contract (see
:class:`MaskedStatsGRPOLoss`); :func:`make_logprob_policy` builds their actor and
:func:`compute_behaviour_log_probs` / :func:`attach_training_data` the behaviour data.
* ``optimizer_param_groups(lr)`` / ``trainable_parameters()``: the policy's parameters at
  ``lr`` plus extra trainable ones (PPO's critic at ``algo.critic_lr``).

Example:
    >>> from omegaconf import OmegaConf
    >>> cfg = OmegaConf.create({"name": "drgrpo", "clip_epsilon": 0.2, "entropy_coeff": 0.0,
    ...                         "kl_coeff": 0.0, "max_length": 64})
    >>> obj = build_objective(cfg, actor=None, model=None)
    >>> type(obj.loss_module).__name__, obj.loss_module.max_length, obj.dynamic_sampling
    ('DrGRPOLoss', 64, None)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import LossModule

from ..transforms.advantage import GroupAdvantage
from ..transforms.overlong import OverlongPenalty
from .dapo import CRITERIA as DS_CRITERIA
from .dapo import DAPOLoss, DynamicSampler, informative_groups
from .drgrpo import DrGRPOLoss
from .grpo import (
    attach_training_data,
    compute_behaviour_log_probs,
    make_grpo_loss,
    make_logprob_policy,
    training_view,
)
from .gspo import GSPOLoss, sequence_log_ratio, sequence_metrics
from .metrics import (
    DEFAULT_ENTROPY_COEFF,
    REF_LOG_PROBS_KEY,
    MaskedStatsGRPOLoss,
    TokenStatsMixin,
    check_dual_clip,
    dual_clip_gain,
    loss_output_metrics,
    masked_token_metrics,
)
from .ppo import (
    Critic,
    PPOLoss,
    PPOLossOutput,
    bilevel_gae,
    masked_gae,
    masked_whiten,
    prepare_ppo_batch,
    value_metrics,
)

ALGORITHMS = ("grpo", "drgrpo", "dapo", "gspo", "ppo")
LOSS_TERMS = ("loss_objective", "loss_entropy", "loss_kl_to_ref", "loss_kl_to_inference", "loss_critic")

__all__ = [
    # the training-loop bundle
    "ALGORITHMS",
    "LOSS_TERMS",
    "Objective",
    "PPOObjective",
    "build_objective",
    # losses (torchrl LossModules) and their defaults
    "MaskedStatsGRPOLoss",
    "DrGRPOLoss",
    "DAPOLoss",
    "GSPOLoss",
    "PPOLoss",
    "PPOLossOutput",
    "Critic",
    "TokenStatsMixin",
    "DEFAULT_ENTROPY_COEFF",
    "REF_LOG_PROBS_KEY",
    "make_grpo_loss",
    # log-prob plumbing: score conversations, attach behaviour data
    "make_logprob_policy",
    "compute_behaviour_log_probs",
    "attach_training_data",
    "training_view",
    # data hooks and pure functions
    "DynamicSampler",
    "informative_groups",
    "prepare_ppo_batch",
    "masked_gae",
    "bilevel_gae",
    "masked_whiten",
    "sequence_log_ratio",
    "dual_clip_gain",
    "check_dual_clip",
    # metrics
    "masked_token_metrics",
    "loss_output_metrics",
    "sequence_metrics",
    "value_metrics",
]


class Objective:
    """One algorithm's loss and data hooks (see the module docstring for the call order).

    Args:
        name: algorithm name.
        loss_module: the torchrl loss.
        model: the policy model (its parameters form the first optimizer group).
        advantage_transform: ``records -> records`` writing ``advantage`` (``None``: identity).
        reward_transform: ``records -> records`` shaping ``episode_return`` (``None``: identity).
        dynamic_sampling: ``None`` or a :class:`~ragen_torchrl.objectives.dapo.DynamicSampler`.
    """

    def __init__(
        self,
        name: str,
        loss_module: LossModule,
        model: nn.Module | None,
        *,
        advantage_transform: Callable[[TensorDictBase], TensorDictBase] | None = None,
        reward_transform: Callable[[TensorDictBase], TensorDictBase] | None = None,
        dynamic_sampling: DynamicSampler | None = None,
    ) -> None:
        self.name = name
        self.loss_module = loss_module
        self.model = model
        self.advantage_transform = advantage_transform
        self.reward_transform = reward_transform
        self.dynamic_sampling = dynamic_sampling
        self.prepare_stats: dict[str, float] = {}

    # -- data hooks ------------------------------------------------------------------------
    def shape_rewards(self, records: TensorDictBase | None) -> TensorDictBase | None:
        """Reward shaping of raw rollout records (idempotent; ``None`` passes)."""
        if records is None or self.reward_transform is None:
            return records
        return self.reward_transform(records)

    def advantage(self, records: TensorDictBase | None) -> TensorDictBase | None:
        """Write ``advantage`` ``(N, 1, 1)`` (identity for PPO; ``None`` passes)."""
        if records is None or self.advantage_transform is None:
            return records
        return self.advantage_transform(records)

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """Per-batch work after the behaviour log-probs are attached (identity here)."""
        self.prepare_stats = {}
        return batch

    # -- parameters ------------------------------------------------------------------------
    def parameters(self) -> Iterator[nn.Parameter]:
        """Trainable parameters beyond the policy model's (none here)."""
        return iter(())

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Everything the optimizer updates (for gradient clipping)."""
        own = [p for p in self.model.parameters() if p.requires_grad] if self.model is not None else []
        return own + [p for p in self.parameters() if p.requires_grad]

    def optimizer_param_groups(self, lr: float) -> list[dict[str, Any]]:
        """Optimizer parameter groups: the policy at ``lr`` (+ extra groups in subclasses)."""
        params = [p for p in self.model.parameters() if p.requires_grad] if self.model is not None else []
        return [{"params": params, "lr": float(lr), "name": "policy"}]

    def state_dict(self) -> dict[str, Any]:
        """State of the extra trainable modules (empty here); the policy is checkpointed by the loop."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            raise ValueError(f"{self.name} has no extra state to load, got keys {list(state)}")

    # -- loss and logging --------------------------------------------------------------------
    def total_loss(self, out) -> torch.Tensor:
        """Sum of every ``loss_*`` term of a loss output."""
        terms = [getattr(out, k, None) for k in LOSS_TERMS]
        terms = [t.sum() for t in terms if t is not None]
        if not terms:
            raise ValueError("the loss output holds no loss_* term")
        return torch.stack(terms).sum()

    def metrics(self, out, minibatch: TensorDictBase | None = None) -> dict[str, float]:
        """Loss terms and ``ESS`` from ``out``; entropy, KL and clip fraction over assistant tokens.

        Reads the per-token tensors stashed by the most recent ``loss_module`` forward, so
        call it right after computing ``out``. ``entropy`` / ``kl_approx`` /
        ``clip_fraction`` equal the loss output's own fields (assistant-token means; torchrl's
        ``GRPOLoss`` would average over padding too); the stash adds ``kl_k3``, ratio and
        dual-clip statistics.
        """
        vals = loss_output_metrics(out)
        vals["loss"] = float(self.total_loss(out).detach())
        stash = getattr(self.loss_module, "token_stats", None)
        if stash:
            vals.update(masked_token_metrics(**stash))
            vals.update(sequence_metrics(stash))
            vals.update(value_metrics(stash))
        return vals


class PPOObjective(Objective):
    """PPO: GAE in :meth:`prepare`, critic parameters in their own optimizer group."""

    def __init__(
        self,
        name: str,
        loss_module: PPOLoss,
        model: nn.Module,
        *,
        critic_lr: float,
        gae: dict[str, Any],
        chunk_size: int = 32,
        **kwargs,
    ) -> None:
        super().__init__(name, loss_module, model, **kwargs)
        self.critic: Critic = loss_module.critic
        self.critic_lr = float(critic_lr)
        self.gae = dict(gae)
        self.chunk_size = int(chunk_size)

    def prepare(self, batch: TensorDictBase) -> TensorDictBase:
        """Old values, GAE advantages (``[L, 1]`` per row) and value targets."""
        backbone = None if self.critic.backbone is not None else self.model.base_model
        batch, self.prepare_stats = prepare_ppo_batch(
            batch, self.critic, backbone=backbone, chunk_size=self.chunk_size, **self.gae
        )
        return batch

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.critic.parameters()

    def optimizer_param_groups(self, lr: float) -> list[dict[str, Any]]:
        critic = [p for p in self.critic.parameters() if p.requires_grad]
        return super().optimizer_param_groups(lr) + [{"params": critic, "lr": self.critic_lr, "name": "critic"}]

    def state_dict(self) -> dict[str, Any]:
        return {"critic": self.critic.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])


# ----------------------------------------------------------------------------- factory
def _clip(value, default):
    if value is None:
        return default
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    vals = tuple(float(v) for v in value)
    if len(vals) != 2:
        raise ValueError(f"algo.clip_epsilon must be a number or a pair (low, high), got {value!r}")
    return vals


def _choice(value, allowed, key: str) -> str:
    value = str(value)
    if value not in allowed:
        raise ValueError(f"{key} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _node(cfg, key) -> dict[str, Any]:
    sub = cfg.get(key)
    if sub is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(sub):
            return OmegaConf.to_container(sub, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return dict(sub)


def _build_critic(cfg, model: nn.Module) -> Critic:
    # default separate: a value head on the policy trunk lets the value loss train the policy
    mode = str(cfg.get("critic", "separate"))
    if model is None:
        raise ValueError("PPO needs the policy model to build its critic")
    param = next(model.parameters())
    if mode == "head":
        critic = Critic(int(model.config.hidden_size))
    elif mode == "separate":
        path = cfg.get("critic_path")
        if path:
            from transformers import AutoModel

            backbone = AutoModel.from_pretrained(str(path), dtype=param.dtype)
        else:
            # the policy's own starting trunk, trained separately from here on
            backbone = copy.deepcopy(model.base_model)
        backbone.requires_grad_(True)
        critic = Critic(int(backbone.config.hidden_size), backbone=backbone)
    else:
        raise ValueError(f"algo.critic must be 'head' or 'separate', got {mode!r}")
    return critic.to(param.device)


def build_objective(algo_cfg, actor, model, tokenizer=None) -> Objective:
    """The :class:`Objective` of ``algo_cfg.name`` (one of :data:`ALGORITHMS`).

    Args:
        algo_cfg: the ``algo`` config node (``ragen_torchrl/configs/algo/*.yaml``) or a plain dict.
        actor: the log-prob ``TransformersWrapper`` (``make_logprob_policy``).
        model: the policy model inside ``actor`` (optimizer groups, PPO's critic).
        tokenizer: unused today; part of the signature so objectives that need it can.

    Common keys: ``clip_epsilon`` (number or ``[low, high]``), ``entropy_coeff``,
    ``kl_coeff`` (> 0 reads reference log-probs from :data:`REF_LOG_PROBS_KEY` =
    ``("ref_log_probs", "full")``, every loss class's default ``ref_log_probs`` key),
    ``adv_eps``, ``aggregation`` (optional override), ``overlong`` (``enabled``,
    ``max_length`` (default ``algo.max_length``), ``cache_length``), ``dual_clip``
    (``None`` = off, or ``c > 1``: verl's dual-clip for ``A < 0``, the reference uses 3;
    token-level losses only, not GSPO). DAPO: ``dynamic_sampling`` (``enabled``,
    ``criterion`` ``success`` | ``return``, ``max_extra_rollouts``, ``oversample``, ``tol``).
    PPO: ``critic`` (``separate``, the default: its own trunk; ``head``: a head on the
    policy trunk), ``critic_path``, ``critic_lr``, ``value_clip``, ``value_coeff``, GAE keys,
    ``whiten_advantages``.
    """
    name = str(algo_cfg.get("name", "grpo")).lower()
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algo.name {name!r}; choose one of {', '.join(ALGORITHMS)}")
    entropy_coeff = float(algo_cfg.get("entropy_coeff", DEFAULT_ENTROPY_COEFF))
    kl_coeff = float(algo_cfg.get("kl_coeff", 0.0) or 0.0)
    adv_eps = float(algo_cfg.get("adv_eps", 1e-6))
    aggregation = algo_cfg.get("aggregation")
    common = dict(
        dual_clip=check_dual_clip(algo_cfg.get("dual_clip")),
        entropy_bonus=entropy_coeff > 0,
        entropy_coeff=entropy_coeff,
        kl_to_ref_coeff=kl_coeff if kl_coeff > 0 else None,
        masking_strategy="rlhf",  # assistant tokens only: observations are never trained
    )
    if aggregation is not None:
        common["aggregation"] = str(aggregation)
    std_adv = GroupAdvantage(scale="std", eps=adv_eps)

    overlong = _node(algo_cfg, "overlong")
    reward_transform = None
    if overlong.get("enabled", False):
        max_length = overlong.get("max_length") or algo_cfg.get("max_length")
        if max_length is None:
            raise ValueError("algo.overlong needs max_length (or algo.max_length): the generation budget")
        reward_transform = OverlongPenalty(int(max_length), int(overlong.get("cache_length", 0)))

    kwargs: dict[str, Any] = {"reward_transform": reward_transform}
    if name == "grpo":
        common.setdefault("aggregation", "prompt_mean")
        loss = MaskedStatsGRPOLoss(actor, clip_epsilon=_clip(algo_cfg.get("clip_epsilon"), 0.2), **common)
        kwargs["advantage_transform"] = std_adv
    elif name == "drgrpo":
        max_length = algo_cfg.get("max_length")
        if max_length is None:
            raise ValueError("algo.max_length (L_max, the generation budget of a trajectory) is required for drgrpo")
        loss = DrGRPOLoss(
            actor, max_length=int(max_length), clip_epsilon=_clip(algo_cfg.get("clip_epsilon"), 0.2), **common
        )
        kwargs["advantage_transform"] = GroupAdvantage(scale="none", eps=adv_eps)
    elif name == "dapo":
        loss = DAPOLoss(actor, clip_epsilon=_clip(algo_cfg.get("clip_epsilon"), (0.2, 0.28)), **common)
        kwargs["advantage_transform"] = std_adv
        ds = _node(algo_cfg, "dynamic_sampling")
        if ds.get("enabled", True):
            kwargs["dynamic_sampling"] = DynamicSampler(
                max_extra_rollouts=int(ds.get("max_extra_rollouts", 3)),
                oversample=float(ds.get("oversample", 1.0)),
                tol=float(ds.get("tol", 1e-6)),
                criterion=_choice(ds.get("criterion", "success"), DS_CRITERIA, "algo.dynamic_sampling.criterion"),
                reward_transform=reward_transform,
            )
    elif name == "gspo":
        loss = GSPOLoss(actor, clip_epsilon=_clip(algo_cfg.get("clip_epsilon"), (3e-4, 4e-4)), **common)
        kwargs["advantage_transform"] = std_adv
    else:  # ppo
        critic = _build_critic(algo_cfg, model)
        value_clip = algo_cfg.get("value_clip", 0.5)
        loss = PPOLoss(
            actor,
            critic,
            policy_model=model,
            clip_epsilon=_clip(algo_cfg.get("clip_epsilon"), 0.2),
            value_clip=None if value_clip is None else float(value_clip),
            value_coeff=float(algo_cfg.get("value_coeff", 1.0)),
            **common,
        )
        gae = dict(
            gamma=float(algo_cfg.get("gamma", 1.0)),
            lam=float(algo_cfg.get("lam", 1.0)),
            bi_level=bool(algo_cfg.get("bi_level", False)),
            turn_gamma=float(algo_cfg.get("turn_gamma", 0.95)),
            turn_lam=float(algo_cfg.get("turn_lam", 1.0)),
            whiten=bool(algo_cfg.get("whiten_advantages", True)),
        )
        objective: Objective = PPOObjective(
            name,
            loss,
            model,
            critic_lr=float(algo_cfg.get("critic_lr", algo_cfg.get("lr", 1e-5))),
            gae=gae,
            chunk_size=int(algo_cfg.get("critic_chunk_size", 32)),
            **kwargs,
        )
    if name != "ppo":
        objective = Objective(name, loss, model, **kwargs)
    # the loss classes already default to REF_LOG_PROBS_KEY: where the loop stores the frozen
    # reference policy's log-probs (per row, unpadded)
    return objective
