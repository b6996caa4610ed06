"""The training loop's view of an algorithm: :class:`Algorithm`, and :func:`build_algorithm` over a registry.

:func:`build_algorithm` turns an ``algo`` config node into an :class:`Algorithm`, which
bundles everything the training loop needs for one algorithm:

* ``shape_rewards(records)``: reward shaping of fresh rollout records (DAPO's overlong
  punishment), right after every rollout, before anything reads ``episode_return``.
* ``dynamic_sampling``: ``None``, or DAPO's ``refill(records, collect_more) -> (records, stats)``.
* ``advantage(records)``: group advantage ``(N, 1, 1)`` (GRPO/DAPO/GSPO: std-normalised,
  Dr.GRPO: ``R - mean``); PPO: unchanged (GAE needs tokens and values).
* ``prepare(batch) -> (batch, stats)``: after behaviour (and reference) log-probs are attached,
  before the update. PPO computes old values, GAE advantages and value targets (and returns
  their statistics); others: identity, no statistics.
* ``loss_module``: the torchrl ``LossModule``; ``out = loss_module(minibatch)``.
* ``total_loss(out)``: the sum of every ``loss_*`` term of ``out``.
* ``metrics(out, minibatch)``: floats for logging: loss terms, and entropy / KL / clip
  fraction averaged over assistant tokens only (as the loss output's own fields).
* ``optimizer_param_groups(lr)`` / ``trainable_parameters()``: the policy's parameters at
  ``lr`` plus extra trainable ones (PPO's critic at ``algo.critic_lr``).
* ``grad_clip_groups(max_norm)``: the parameter sets whose gradient norms are clipped
  separately (PPO: the actor at ``algo.max_grad_norm``, the critic at ``algo.critic_grad_clip``).

Algorithms are looked up by ``algo.name`` in a registry, like the env registry
(:func:`ragen_torchrl.envs.make_env`): the built-in ones (:data:`ALGORITHMS`) are registered
here, and :func:`register_algorithm` adds another without editing this package;
:func:`available_algorithms` lists them all.

The losses also work on their own, on any batch that meets their input contract (see
:class:`~ragen_torchrl.objectives.base.MaskedStatsGRPOLoss`);
:func:`~ragen_torchrl.objectives.logprobs.make_logprob_policy` builds their actor and
:func:`~ragen_torchrl.objectives.logprobs.compute_behaviour_log_probs` /
:func:`~ragen_torchrl.objectives.logprobs.attach_training_data` the behaviour data.

Example:
    >>> from omegaconf import OmegaConf
    >>> from ragen_torchrl.objectives import build_algorithm
    >>> cfg = OmegaConf.create({"name": "drgrpo", "clip_epsilon": 0.2, "entropy_coeff": 0.0,
    ...                         "kl_coeff": 0.0, "max_length": 64})
    >>> obj = build_algorithm(cfg, actor=None, model=None)
    >>> type(obj.loss_module).__name__, obj.loss_module.max_length, obj.dynamic_sampling
    ('DrGRPOLoss', 64, None)
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.objectives import LossModule

from ..checks import check_choice
from ..data.groups import Groups
from ..options import AlgoOptions, algo_options
from ..transforms.advantage import GroupAdvantage
from ..transforms.overlong import OverlongPenalty
from .base import (
    MaskedStatsGRPOLoss,
    check_dual_clip,
    loss_output_metrics,
    masked_token_metrics,
)
from .dapo import CRITERIA as DS_CRITERIA
from .dapo import DAPOLoss, DynamicSampler
from .drgrpo import DrGRPOLoss
from .gspo import GSPOLoss, sequence_metrics
from .logprobs import TRAIN_ON
from .ppo import Critic, PPOLoss, prepare_ppo_batch, value_metrics

__all__ = [
    "ALGORITHMS",
    "LOSS_TERMS",
    "Algorithm",
    "AlgorithmFactory",
    "PPOAlgorithm",
    "available_algorithms",
    "build_algorithm",
    "register_algorithm",
]

LOSS_TERMS = ("loss_objective", "loss_entropy", "loss_kl_to_ref", "loss_kl_to_inference", "loss_critic")


class Algorithm:
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

    #: the token ids the update trains (``algo.train_on``): ``"generated"``, the ids the policy
    #: read and sampled; ``"retokenized"``, the decoded conversation tokenised again
    #: (:func:`~ragen_torchrl.objectives.logprobs.tokenize_conversations`)
    train_on: str = "generated"

    # -- data hooks ------------------------------------------------------------------------
    def shape_rewards(self, records: TensorDictBase | None) -> TensorDictBase | None:
        """Reward shaping of raw rollout records (idempotent; ``None`` passes)."""
        if records is None or self.reward_transform is None:
            return records
        return self.reward_transform(records)

    def advantage(self, records: TensorDictBase | None, groups: Groups | None = None) -> TensorDictBase | None:
        """Write ``advantage`` ``(N, 1, 1)`` (identity for PPO; ``None`` passes).

        ``groups``: the records' :class:`~ragen_torchrl.data.groups.Groups` when the caller already
        built them (a group-normalised advantage then reads their moments).
        """
        if records is None or self.advantage_transform is None:
            return records
        if groups is not None and isinstance(self.advantage_transform, GroupAdvantage):
            return self.advantage_transform.write(records, groups)
        return self.advantage_transform(records)

    def prepare(self, batch: TensorDictBase) -> tuple[TensorDictBase, dict[str, float]]:
        """Per-batch work after the behaviour log-probs are attached, and its statistics (identity, none here)."""
        return batch, {}

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

    def grad_clip_groups(self, max_norm: float) -> list[tuple[str, list[nn.Parameter], float]]:
        """``(name, parameters, max norm)`` of each set whose gradient norm is clipped on its own.

        One set here: every trainable parameter, clipped at ``max_norm`` (``algo.max_grad_norm``;
        0 = no clipping). Together the sets hold :meth:`trainable_parameters` exactly once.

        Example:
            >>> from torch import nn
            >>> obj = Algorithm("grpo", None, nn.Linear(2, 1))
            >>> [(name, len(params), norm) for name, params, norm in obj.grad_clip_groups(1.0)]
            [('policy', 2, 1.0)]
        """
        return [("policy", self.trainable_parameters(), float(max_norm))]

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

        The per-token statistics come from ``out.token_stats`` (a
        :class:`~ragen_torchrl.objectives.base.TokenStatsLossOutput`; a loss output without them
        gives the loss terms only). ``entropy`` / ``kl_approx`` / ``clip_fraction`` equal the loss
        output's own fields (assistant-token means; torchrl's ``GRPOLoss`` would average over padding
        too); ``token_stats`` adds ``kl_k3``, ratio and dual-clip statistics.
        """
        vals = loss_output_metrics(out)
        vals["loss"] = float(self.total_loss(out).detach())
        stash = getattr(out, "token_stats", None)
        if stash is not None and not stash.is_empty():
            stash = stash.to_dict()
            vals.update(masked_token_metrics(**stash))
            vals.update(sequence_metrics(stash))
            vals.update(value_metrics(stash))
        return vals


class PPOAlgorithm(Algorithm):
    """PPO: GAE in :meth:`prepare`; the critic has its own optimizer group, lr and gradient clipping.

    As verl (actor and critic each with their own optimizer, lr and ``grad_clip``), the actor's
    and the critic's gradient norms are clipped separately, so a large value-loss gradient does
    not shrink the policy's step. With a value head on the policy trunk (``algo.critic=head``)
    the critic set is the head alone: the trunk is the policy's, so the value loss's gradient on
    it is clipped with the policy's, at ``algo.max_grad_norm``.

    Args:
        critic_lr: the critic group's learning rate (``algo.critic_lr``).
        critic_grad_clip: the critic's max gradient norm (``algo.critic_grad_clip``; 0 = no
            clipping); ``None``: the actor's ``max_norm`` given to :meth:`grad_clip_groups`.
    """

    def __init__(
        self,
        name: str,
        loss_module: PPOLoss,
        model: nn.Module,
        *,
        critic_lr: float,
        gae: dict[str, Any],
        chunk_size: int = 32,
        critic_grad_clip: float | None = None,
        **kwargs,
    ) -> None:
        super().__init__(name, loss_module, model, **kwargs)
        self.critic: Critic = loss_module.critic
        self.critic_lr = float(critic_lr)
        self.critic_grad_clip = None if critic_grad_clip is None else float(critic_grad_clip)
        self.gae = dict(gae)
        self.chunk_size = int(chunk_size)

    def prepare(self, batch: TensorDictBase) -> tuple[TensorDictBase, dict[str, float]]:
        """Old values, GAE advantages (``[L, 1]`` per row) and value targets; the statistics of
        :func:`~ragen_torchrl.objectives.ppo.prepare_ppo_batch`."""
        backbone = None if self.critic.backbone is not None else self.model.base_model
        keys = self.loss_module.tensor_keys  # renamed with loss_module.set_keys(...)
        return prepare_ppo_batch(
            batch,
            self.critic,
            backbone=backbone,
            chunk_size=self.chunk_size,
            return_key=keys.episode_return,
            advantage_key=keys.advantage,
            value_key=keys.value,
            value_target_key=keys.value_target,
            tokens_key=keys.action,
            **self.gae,
        )

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.critic.parameters()

    def optimizer_param_groups(self, lr: float) -> list[dict[str, Any]]:
        critic = [p for p in self.critic.parameters() if p.requires_grad]
        return super().optimizer_param_groups(lr) + [{"params": critic, "lr": self.critic_lr, "name": "critic"}]

    def grad_clip_groups(self, max_norm: float) -> list[tuple[str, list[nn.Parameter], float]]:
        """The policy's parameters at ``max_norm``, the critic's at ``critic_grad_clip``."""
        policy = [p for p in self.model.parameters() if p.requires_grad]
        critic = [p for p in self.critic.parameters() if p.requires_grad]
        critic_norm = float(max_norm) if self.critic_grad_clip is None else self.critic_grad_clip
        return [("policy", policy, float(max_norm)), ("critic", critic, critic_norm)]

    def state_dict(self) -> dict[str, Any]:
        return {"critic": self.critic.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])


# ----------------------------------------------------------------------------- config helpers
def _clip(value, default):
    if value is None:
        return default
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    vals = tuple(float(v) for v in value)
    if len(vals) != 2:
        raise ValueError(f"algo.clip_epsilon must be a number or a pair (low, high), got {value!r}")
    return vals


def _reward_transform(opts: AlgoOptions) -> OverlongPenalty | None:
    """DAPO's overlong punishment when ``algo.overlong.enabled`` (any algorithm may turn it on)."""
    overlong = opts.overlong
    if not overlong.enabled:
        return None
    max_length = overlong.max_length or opts.max_length
    if max_length is None:
        raise ValueError("algo.overlong needs max_length (or algo.max_length): the generation budget")
    return OverlongPenalty(int(max_length), int(overlong.cache_length))


def _common(opts: AlgoOptions) -> tuple[dict[str, Any], float, OverlongPenalty | None]:
    """What every built-in algorithm reads: ``(loss kwargs, adv_eps, reward transform)``.

    The loss kwargs: entropy bonus, KL to the reference, dual clip, assistant-only masking
    and the optional ``aggregation`` override.
    """
    entropy_coeff = float(opts.entropy_coeff)
    kl_coeff = float(opts.kl_coeff or 0.0)
    common = dict(
        dual_clip=check_dual_clip(opts.dual_clip),
        entropy_bonus=entropy_coeff > 0,
        entropy_coeff=entropy_coeff,
        kl_to_ref_coeff=kl_coeff if kl_coeff > 0 else None,
        masking_strategy="rlhf",  # assistant tokens only: observations are never trained
    )
    if opts.aggregation is not None:
        common["aggregation"] = str(opts.aggregation)
    return common, float(opts.adv_eps), _reward_transform(opts)


def _build_critic(opts: AlgoOptions, model: nn.Module) -> Critic:
    # default separate: a value head on the policy trunk lets the value loss train the policy
    mode = str(opts.critic)
    if model is None:
        raise ValueError("PPO needs the policy model to build its critic")
    param = next(model.parameters())
    if mode == "head":
        critic = Critic(int(model.config.hidden_size))
    elif mode == "separate":
        if opts.critic_path:
            from transformers import AutoModel

            backbone = AutoModel.from_pretrained(str(opts.critic_path), dtype=param.dtype)
        else:
            # the policy's own starting trunk, trained separately from here on
            backbone = copy.deepcopy(model.base_model)
        backbone.requires_grad_(True)
        critic = Critic(int(backbone.config.hidden_size), backbone=backbone)
    else:
        raise ValueError(f"algo.critic must be 'head' or 'separate', got {mode!r}")
    return critic.to(param.device)


# ----------------------------------------------------------------------------- built-in algorithms
# the loss classes already default to REF_LOG_PROBS_KEY: where the loop stores the frozen
# reference policy's log-probs (aligned with the tokens)
def _grpo(opts: AlgoOptions, actor, model, tokenizer=None) -> Algorithm:
    common, adv_eps, reward_transform = _common(opts)
    common.setdefault("aggregation", "prompt_mean")
    loss = MaskedStatsGRPOLoss(actor, clip_epsilon=_clip(opts.clip_epsilon, 0.2), **common)
    advantage = GroupAdvantage(scale="std", eps=adv_eps)
    return Algorithm("grpo", loss, model, advantage_transform=advantage, reward_transform=reward_transform)


def _drgrpo(opts: AlgoOptions, actor, model, tokenizer=None) -> Algorithm:
    common, adv_eps, reward_transform = _common(opts)
    if opts.max_length is None:
        raise ValueError("algo.max_length (L_max, the generation budget of a trajectory) is required for drgrpo")
    clip = _clip(opts.clip_epsilon, 0.2)
    loss = DrGRPOLoss(actor, max_length=int(opts.max_length), clip_epsilon=clip, **common)
    advantage = GroupAdvantage(scale="none", eps=adv_eps)  # Dr.GRPO: R - mean, no std
    return Algorithm("drgrpo", loss, model, advantage_transform=advantage, reward_transform=reward_transform)


def _dapo(opts: AlgoOptions, actor, model, tokenizer=None) -> Algorithm:
    common, adv_eps, reward_transform = _common(opts)
    loss = DAPOLoss(actor, clip_epsilon=_clip(opts.clip_epsilon, (0.2, 0.28)), **common)
    ds = opts.dynamic_sampling
    sampler = None
    if ds.enabled:
        sampler = DynamicSampler(
            max_extra_rollouts=int(ds.max_extra_rollouts),
            oversample=float(ds.oversample),
            tol=float(ds.tol),
            criterion=check_choice("algo.dynamic_sampling.criterion", str(ds.criterion), DS_CRITERIA),
            reward_transform=reward_transform,
        )
    return Algorithm(
        "dapo",
        loss,
        model,
        advantage_transform=GroupAdvantage(scale="std", eps=adv_eps),
        reward_transform=reward_transform,
        dynamic_sampling=sampler,
    )


def _gspo(opts: AlgoOptions, actor, model, tokenizer=None) -> Algorithm:
    common, adv_eps, reward_transform = _common(opts)
    loss = GSPOLoss(actor, clip_epsilon=_clip(opts.clip_epsilon, (3e-4, 4e-4)), **common)
    advantage = GroupAdvantage(scale="std", eps=adv_eps)
    return Algorithm("gspo", loss, model, advantage_transform=advantage, reward_transform=reward_transform)


def _ppo(opts: AlgoOptions, actor, model, tokenizer=None) -> Algorithm:
    common, _, reward_transform = _common(opts)  # PPO's advantage is GAE (in prepare), not the group one
    critic = _build_critic(opts, model)
    loss = PPOLoss(
        actor,
        critic,
        policy_model=model,
        clip_epsilon=_clip(opts.clip_epsilon, 0.2),
        value_clip=None if opts.value_clip is None else float(opts.value_clip),
        value_coeff=float(opts.value_coeff),
        **common,
    )
    gae = dict(
        gamma=float(opts.gamma),
        lam=float(opts.lam),
        bi_level=bool(opts.bi_level),
        turn_gamma=float(opts.turn_gamma),
        turn_lam=float(opts.turn_lam),
        whiten=bool(opts.whiten_advantages),
    )
    return PPOAlgorithm(
        "ppo",
        loss,
        model,
        critic_lr=float(opts.critic_lr),
        critic_grad_clip=opts.critic_grad_clip,
        gae=gae,
        chunk_size=int(opts.critic_chunk_size),
        reward_transform=reward_transform,
    )


# ----------------------------------------------------------------------------- the registry
_OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(AlgoOptions))

AlgorithmFactory = Callable[..., Algorithm]
"""``factory(algo_cfg, actor, model, tokenizer=None) -> Algorithm``: what :func:`register_algorithm` takes."""

_REGISTRY: dict[str, AlgorithmFactory] = {
    "grpo": _grpo,
    "drgrpo": _drgrpo,
    "dapo": _dapo,
    "gspo": _gspo,
    "ppo": _ppo,
}

_BUILT_IN = dict(_REGISTRY)
ALGORITHMS = tuple(_REGISTRY)
"""The built-in algorithms; :func:`available_algorithms` also lists those registered later."""


def register_algorithm(name: str, factory: AlgorithmFactory) -> AlgorithmFactory:
    """Register ``factory(algo_cfg, actor, model, tokenizer=None) -> Algorithm`` under ``name``.

    :func:`build_algorithm` then builds it for ``algo.name: <name>`` (matched lower-case), passing
    the ``algo`` node as given: the factory reads its own keys (the built-in algorithms get the node
    merged onto :class:`~ragen_torchrl.options.AlgoOptions`, where an unknown key is an error).
    Registering an existing name replaces its factory. Returns ``factory``.

    Example:
        >>> from ragen_torchrl.objectives import (MaskedStatsGRPOLoss, Algorithm, available_algorithms,
        ...                                       build_algorithm, register_algorithm)
        >>> def no_clip_grpo(algo_cfg, actor, model, tokenizer=None):  # GRPO without the upper clip
        ...     loss = MaskedStatsGRPOLoss(actor, clip_epsilon=(0.2, 1e6), masking_strategy="rlhf",
        ...                                entropy_coeff=float(algo_cfg.get("entropy_coeff", 0.0)))
        ...     return Algorithm("no_clip_grpo", loss, model)
        >>> _ = register_algorithm("no_clip_grpo", no_clip_grpo)
        >>> "no_clip_grpo" in available_algorithms()
        True
        >>> obj = build_algorithm({"name": "no_clip_grpo", "entropy_coeff": 0.01}, actor=None, model=None)
        >>> obj.name, obj.loss_module.entropy_coeff
        ('no_clip_grpo', 0.01)
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"an algorithm name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise TypeError(f"the factory of algorithm {name!r} must be callable, got {factory!r}")
    _REGISTRY[name.lower()] = factory
    return factory


def available_algorithms() -> list[str]:
    """Names :func:`build_algorithm` accepts: the built-in ones, then registered ones, in registration order.

    Example:
        >>> from ragen_torchrl.objectives import available_algorithms
        >>> available_algorithms()[:5]
        ['grpo', 'drgrpo', 'dapo', 'gspo', 'ppo']
    """
    return list(_REGISTRY)


def build_algorithm(algo_cfg, actor, model, tokenizer=None) -> Algorithm:
    """The :class:`Algorithm` of ``algo_cfg.name`` (one of :func:`available_algorithms`; default ``grpo``).

    Args:
        algo_cfg: the ``algo`` config node (``configs/algo/*.yaml``), a plain dict with some of its keys
            (the others get their :class:`~ragen_torchrl.options.AlgoOptions` default) or
            an ``AlgoOptions``.
        actor: the log-prob ``TransformersWrapper`` (``make_logprob_policy``).
        model: the policy model inside ``actor`` (optimizer groups, PPO's critic).
        tokenizer: unused by the built-in algorithms; passed on to every factory.

    Raises:
        ValueError: an unknown name (the message lists the valid ones), an unknown key or a bad option.

    Common keys: ``clip_epsilon`` (number or ``[low, high]``), ``entropy_coeff``,
    ``kl_coeff`` (> 0 reads reference log-probs from ``REF_LOG_PROBS_KEY`` =
    ``("ref_log_probs", "full")``, every loss class's default ``ref_log_probs`` key),
    ``adv_eps``, ``aggregation`` (optional override), ``train_on`` (``generated``, the default:
    train the ids the policy sampled; ``retokenized``: the decoded conversation tokenised again,
    as RAGEN's reference does), ``shared_prefix`` (default true: a prompt
    shared by several rows of a mini-batch runs through the model once, same losses up to
    round-off; :mod:`~ragen_torchrl.objectives.shared_prefix`), ``overlong`` (``enabled``,
    ``max_length`` (default ``algo.max_length``), ``cache_length``), ``dual_clip``
    (``None`` = off, or ``c > 1``: verl's dual-clip for ``A < 0``, the reference uses 3;
    token-level losses only, not GSPO). DAPO: ``dynamic_sampling`` (``enabled``,
    ``criterion`` ``success`` | ``return``, ``max_extra_rollouts``, ``oversample``, ``tol``).
    PPO: ``critic`` (``separate``, the default: its own trunk; ``head``: a head on the
    policy trunk), ``critic_path``, ``critic_lr``, ``critic_grad_clip``, ``value_clip``, ``value_coeff``, GAE keys,
    ``whiten_advantages``.

    Example:
        >>> from ragen_torchrl.objectives import build_algorithm
        >>> obj = build_algorithm({"name": "dapo", "max_length": 16}, actor=None, model=None)
        >>> obj.name, type(obj.loss_module).__name__, obj.dynamic_sampling is not None
        ('dapo', 'DAPOLoss', True)
        >>> build_algorithm({"name": "reinforce"}, actor=None, model=None)
        Traceback (most recent call last):
        ...
        ValueError: unknown algo.name 'reinforce'; choose one of grpo, drgrpo, dapo, gspo, ppo
    """
    if isinstance(algo_cfg, AlgoOptions):
        name = algo_cfg.name
    else:
        name = algo_cfg["name"] if "name" in algo_cfg else AlgoOptions.name
    name = str(name).lower()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown algo.name {name!r}; choose one of {', '.join(available_algorithms())}") from None
    if factory is _BUILT_IN.get(name):
        opts = algo_options(algo_cfg)
        algorithm = factory(opts, actor, model, tokenizer)
    else:  # a registered algorithm reads the node as given (its own keys too)
        algorithm = factory(algo_cfg, actor, model, tokenizer)
        if not isinstance(algo_cfg, AlgoOptions):
            algo_cfg = {k: v for k, v in algo_cfg.items() if k in _OPTION_NAMES}
        opts = algo_options(algo_cfg)
    algorithm.train_on = check_choice("algo.train_on", opts.train_on, TRAIN_ON)
    if not isinstance(opts.shared_prefix, bool):
        raise ValueError(f"algo.shared_prefix must be true or false, got {opts.shared_prefix!r}")
    algorithm.loss_module.shared_prefix = opts.shared_prefix
    return algorithm
