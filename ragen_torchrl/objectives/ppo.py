"""PPO with a learned critic on multi-turn trajectories (token-level and bi-level GAE).

torchrl's ``ClipPPOLoss`` is not token-mask aware on LLM data, so this builds on
``GRPOLoss``'s masked log-weight machinery (assistant tokens only, behaviour log-probs
re-padded on the left) and adds a value loss:

* **Critic** (:class:`Critic`): a ``Linear(hidden, 1)`` head either on a separate backbone
  (``critic="separate"``, the default, as verl/RAGEN: a copy of the policy's trunk, or
  another model) or on the policy's own last hidden states (``critic="head"``: no extra
  forward, but the value loss then also trains the shared trunk, i.e. the policy). The
  value of the action token at position ``t`` is ``V(prefix < t) = head(h[t-1])``, the
  same shift as the logits.
* **Token-level GAE** over the assistant tokens of the whole trajectory (observation tokens
  are skipped: the next value of an assistant token is that of the next assistant token),
  episode reward on the last assistant token, ``gamma = lambda = 1`` by default, so that
  ``A_t = R - V_t``.
* **Bi-level GAE** (optional): turns are maximal runs of assistant tokens. First a GAE over
  the turns' last tokens with ``gamma_turn`` (0.95) gives each turn a return ``G_k``; then
  a token-level GAE inside each turn, with the turn's last token terminal and rewarded
  ``G_k``.
* **Advantage whitening** (default on): over all assistant tokens of the batch, unbiased
  variance (:func:`masked_whiten`).
* **Dual-clip** (optional, ``dual_clip=c``): see
  :class:`~ragen_torchrl.objectives.base.TokenStatsMixin`.
* **Value clipping**: ``0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)``.
* The critic has its own learning rate and gradient-norm clipping, as verl's separate critic
  optimizer (see ``PPOAlgorithm.grad_clip_groups``): a large value-loss gradient does not
  shrink the actor's step. With ``critic="head"`` only the head is the critic's; the shared
  trunk is clipped with the actor. Explained variance is logged.

GAE runs once per batch in :func:`prepare_ppo_batch` (after the behaviour log-probs are
attached, before the update); it writes, aligned with ``("tokens", "full")``, ``advantage``
``[L, 1]``, ``state_value`` ``[L]`` (old values) and ``value_target`` ``[L]``: per row unpadded on
a ragged batch, ``[N, T, 1]`` / ``[N, T]`` left-padded on the dense training batch. The loss
left-pads ragged ones like the log-probs.

Example:
    >>> import torch
    >>> mask = torch.tensor([[False, True, True, False, True]])  # obs, 2 assistant, obs, 1 assistant
    >>> values = torch.tensor([[0.0, 0.2, 0.4, 0.0, 0.5]])
    >>> rewards = episode_token_rewards(mask, torch.tensor([1.0]))
    >>> adv, ret = masked_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    >>> [round(a, 4) for a in adv[0].tolist()], ret[0].tolist()   # A = R - V on assistant tokens
    ([0.0, 0.8, 0.6, 0.0, 0.5], [0.0, 1.0, 1.0, 0.0, 1.0])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import LazyStackedTensorDict, NestedKey, TensorDictBase, lazy_stack
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torchrl.objectives.llm import GRPOLoss
from torchrl.objectives.value.functional import generalized_advantage_estimate

from ..data.dense import pad_left, trim_padding
from ..keys import (
    ADVANTAGE,
    EPISODE_RETURN,
    MASKS_ASSISTANT,
    MASKS_ATTENTION,
    STATE_VALUE,
    TOKENS_FULL,
    VALUE_TARGET,
)
from .base import INPUT_CONTRACT, TokenStatsLossOutput, TokenStatsMixin

#: default keys of the old values and value targets (``PPOLoss`` reads ``tensor_keys.value``
#: / ``tensor_keys.value_target``; rename them with ``set_keys``)
VALUE_KEY = STATE_VALUE
VALUE_TARGET_KEY = VALUE_TARGET


# ----------------------------------------------------------------------------- pure math
def episode_token_rewards(mask: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` rewards: each row's episode return on its last masked token, 0 elsewhere."""
    mask = mask.bool()
    B, T = mask.shape
    rewards = torch.zeros(B, T, dtype=torch.float32, device=mask.device)
    has = mask.any(-1)
    last = T - 1 - mask.flip(-1).to(torch.int8).argmax(-1)
    rows = has.nonzero().reshape(-1)
    rewards[rows, last[rows]] = torch.as_tensor(returns, dtype=torch.float32, device=mask.device).reshape(-1)[rows]
    return rewards


def turn_ends(mask: torch.Tensor) -> torch.Tensor:
    """Last token of each maximal run of masked (assistant) tokens: the end of each turn."""
    mask = mask.bool()
    nxt = torch.cat([mask[..., 1:], torch.zeros_like(mask[..., :1])], -1)
    return mask & ~nxt


def masked_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float,
    lam: float,
    episode_ends: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE along the masked positions of each row, skipping the unmasked ones.

    Args:
        rewards, values, mask: ``[B, T]``. Only masked positions are read.
        gamma, lam: discount and GAE lambda.
        episode_ends: ``[B, T]`` bool; a masked position marked here is terminal (its next
            value is 0 and no advantage flows back across it). Default: the last masked
            position of each row.

    Returns ``(advantage, value_target)``, ``[B, T]``, zero off the mask. Uses torchrl's
    ``generalized_advantage_estimate`` on the rows compacted to their masked positions.
    """
    mask = mask.bool()
    B, T = mask.shape
    adv = torch.zeros_like(values, dtype=torch.float32)
    ret = torch.zeros_like(values, dtype=torch.float32)
    counts = mask.sum(-1)
    n = int(counts.max()) if B else 0
    if n == 0:
        return adv, ret
    # masked positions first, in their original order (stable sort), then the rest
    order = torch.argsort((~mask).to(torch.int8), dim=-1, stable=True)[:, :n]
    steps = torch.arange(n, device=mask.device)
    valid = steps[None] < counts[:, None]
    zero = torch.zeros((), dtype=torch.float32, device=mask.device)
    r = torch.where(valid, rewards.float().gather(1, order), zero)
    v = torch.where(valid, values.float().gather(1, order), zero)
    last = valid & (steps[None] == (counts[:, None] - 1))
    ends = last if episode_ends is None else (episode_ends.bool().gather(1, order) & valid) | last
    # padding steps are their own finished episodes: nothing flows into real steps
    ends = ends | ~valid
    next_v = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], 1)
    a, tgt = generalized_advantage_estimate(
        gamma, lam, v[..., None], next_v[..., None], r[..., None], ends[..., None], ends[..., None]
    )
    adv.scatter_(1, order, torch.where(valid, a[..., 0], zero))
    ret.scatter_(1, order, torch.where(valid, tgt[..., 0], zero))
    return adv, ret


def bilevel_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float,
    lam: float,
    turn_gamma: float,
    turn_lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bi-level GAE: turn level (``turn_gamma``, ``turn_lam``), then token level inside turns.

    Turn level: over the turns' last tokens ``e_k``, ``delta_k = r(e_k) + turn_gamma V(e_{k+1})
    - V(e_k)``; the turn return is ``G_k = A_k + V(e_k)``. Token level: each turn is an
    episode whose last token earns ``G_k`` (other tokens keep their own reward) with
    (``gamma``, ``lam``). With ``gamma = lam = 1``: ``A_t = G_k - V_t`` for the tokens of turn k.
    """
    ends = turn_ends(mask)
    _, turn_return = masked_gae(rewards, values, ends, gamma=turn_gamma, lam=turn_lam)
    token_rewards = torch.where(ends, turn_return, rewards.float())
    return masked_gae(token_rewards, values, mask, gamma=gamma, lam=lam, episode_ends=ends)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8, *, unbiased: bool = True) -> torch.Tensor:
    """``(x - mean) / sqrt(var + eps)`` over the masked entries; 0 off the mask.

    ``unbiased=True`` (default) uses the unbiased variance ``sum (x - mean)^2 / (n - 1)``,
    as verl's ``masked_whiten`` (``masked_var(..., unbiased=True)``) that RAGEN's PPO calls;
    ``False`` gives the population variance (``/ n``). A single masked entry whitens to 0.

    Example:
        >>> import torch
        >>> x = torch.tensor([[1.0, 9.0, 2.0, 3.0]])
        >>> mask = torch.tensor([[True, False, True, True]])       # mean 2, unbiased var 1
        >>> [round(v, 4) for v in masked_whiten(x, mask, eps=0.0).tolist()[0]]
        [-1.0, 0.0, 0.0, 1.0]
    """
    mask = mask.bool()
    if not mask.any():
        return torch.zeros_like(x)
    vals = x[mask].double()
    n = vals.numel()
    mean = vals.mean()
    var = ((vals - mean) ** 2).sum() / (n - 1 if unbiased and n > 1 else n)
    scale = torch.rsqrt(var + eps)
    return torch.where(mask, ((x.double() - mean) * scale).to(x.dtype), torch.zeros_like(x))


def clipped_value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token ``0.5 * max((V - R)^2, (V_clip - R)^2)``, ``V_clip = V_old + clamp(V - V_old, -c, c)``.

    Returns ``(loss, clipped)``; ``clipped`` marks tokens where the clipped branch is the
    larger one (the gradient there is 0). ``clip=None`` gives the plain squared error.
    """
    err = (values - returns) ** 2
    if clip is None:
        return 0.5 * err, torch.zeros_like(err, dtype=torch.bool)
    v_clip = old_values + (values - old_values).clamp(-clip, clip)
    err_clip = (v_clip - returns) ** 2
    return 0.5 * torch.maximum(err, err_clip), err_clip > err


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var(R - V) / Var(R)`` over the masked tokens (NaN when the returns are constant)."""
    mask = mask.bool()
    if not mask.any():
        return float("nan")
    r, v = returns.detach().float()[mask], values.detach().float()[mask]
    var_r = r.var(unbiased=False)
    if var_r <= 1e-12:
        return float("nan")
    return float(1 - (r - v).var(unbiased=False) / var_r)


# ----------------------------------------------------------------------------- critic
class Critic(nn.Module):
    """Token values ``V(prefix < t)`` from a backbone's last hidden states and a linear head.

    Args:
        hidden_size: width of the backbone's hidden states.
        backbone: a separate trunk (an HF base model: ``backbone(input_ids=...,
            attention_mask=...).last_hidden_state``), or ``None`` for a head on the policy's
            own hidden states (the loss captures them from the policy forward; pass the
            policy's trunk to :meth:`forward` to evaluate values without the loss).

    The head starts at zero (``V = 0``): the first advantages are then the plain returns,
    and a random head cannot inject noise into the policy gradient before it has learned.

    Example:
        >>> import torch
        >>> critic = Critic(hidden_size=4)
        >>> critic.values_from_hidden(torch.randn(2, 3, 4)).shape
        torch.Size([2, 3])
    """

    def __init__(self, hidden_size: int, backbone: nn.Module | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def values_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[B, T, H]`` hidden states -> ``[B, T]`` values; position ``t`` uses ``h[t-1]`` (``V = 0`` at 0)."""
        v = self.head(hidden.to(self.head.weight.dtype)).squeeze(-1)
        return torch.cat([torch.zeros_like(v[:, :1]), v[:, :-1]], 1)

    def forward(
        self, tokens: torch.Tensor, attention_mask: torch.Tensor, backbone: nn.Module | None = None
    ) -> torch.Tensor:
        trunk = self.backbone if self.backbone is not None else backbone
        if trunk is None:
            raise ValueError("this critic is a head on the policy: pass the policy's trunk as `backbone`")
        hidden = trunk(input_ids=tokens, attention_mask=attention_mask.long()).last_hidden_state
        return self.values_from_hidden(hidden)


def _left_padded_inputs(tokens: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    attn = pad_sequence(
        [torch.ones_like(t, dtype=torch.bool) for t in tokens],
        batch_first=True,
        padding_value=False,
        padding_side="left",
    )
    ids = pad_sequence(tokens, batch_first=True, padding_value=0, padding_side="left")
    return ids, attn


@torch.no_grad()
def compute_values(
    critic: Critic, tokens: list[torch.Tensor], *, backbone: nn.Module | None = None, chunk_size: int = 32
) -> list[torch.Tensor]:
    """Values of every token of every row (unpadded ``[L_i]`` float32), in chunks.

    Inputs are left-padded like the policy's log-prob wrapper pads them, so the values
    match those the loss computes on the same tokens.
    """
    device = critic.head.weight.device
    out: list[torch.Tensor] = []
    for start in range(0, len(tokens), chunk_size):
        chunk = [t.to(device) for t in tokens[start : start + chunk_size]]
        ids, attn = _left_padded_inputs(chunk)
        v = critic(ids, attn, backbone=backbone).float()
        out.extend(v[i, v.shape[1] - len(t) :] for i, t in enumerate(chunk))
    return out


def prepare_ppo_batch(
    batch: TensorDictBase,
    critic: Critic,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    bi_level: bool = False,
    turn_gamma: float = 0.95,
    turn_lam: float = 1.0,
    whiten: bool = True,
    backbone: nn.Module | None = None,
    chunk_size: int = 32,
    return_key: NestedKey = EPISODE_RETURN,
    advantage_key: NestedKey = ADVANTAGE,
    value_key: NestedKey = STATE_VALUE,
    value_target_key: NestedKey = VALUE_TARGET,
    tokens_key: NestedKey = TOKENS_FULL,
    mask_key: NestedKey = MASKS_ASSISTANT,
) -> tuple[TensorDictBase, dict[str, float]]:
    """Old values, GAE advantages and value targets for a batch with behaviour data attached.

    Reads per row ``("tokens", "full")``, ``("masks", "all_assistant_mask")`` and
    ``episode_return``; writes ``advantage`` ``[L, 1]``, ``state_value`` ``[L]`` and
    ``value_target`` ``[L]`` per row (on a dense batch: ``[N, T, 1]`` / ``[N, T]``, left-padded
    with 0 like the log-probs) (the ``*_key`` arguments rename them; defaults from
    :mod:`ragen_torchrl.keys`, and ``PPOAlgorithm.prepare`` passes its loss's ``tensor_keys``).
    ``whiten`` standardises the advantages over all assistant tokens of the batch with the
    unbiased variance (as verl/RAGEN's PPO does: ``masked_whiten``). Returns ``(batch, stats)``.
    """
    dense = not isinstance(batch, LazyStackedTensorDict)
    if dense:  # the dense training batch: each row's real tokens are the attention mask's
        real = batch.get(MASKS_ATTENTION).bool()
        tokens = [t[r] for t, r in zip(batch.get(tokens_key), real)]
        masks = [m.bool()[r] for m, r in zip(batch.get(mask_key), real)]
    else:
        tokens = batch.get(tokens_key, as_list=True)
        masks = [m.bool() for m in batch.get(mask_key, as_list=True)]
    values = compute_values(critic, tokens, backbone=backbone, chunk_size=chunk_size)
    lengths = [len(t) for t in tokens]
    # right padding is fine here: GAE only reads masked positions, in order
    V = pad_sequence([v.cpu() for v in values], batch_first=True)
    M = pad_sequence([m.cpu() for m in masks], batch_first=True, padding_value=False)
    R = episode_token_rewards(M, batch.get(return_key).reshape(-1).float().cpu())
    if bi_level:
        adv, target = bilevel_gae(R, V, M, gamma=gamma, lam=lam, turn_gamma=turn_gamma, turn_lam=turn_lam)
    else:
        adv, target = masked_gae(R, V, M, gamma=gamma, lam=lam)
    raw = adv
    if whiten:
        adv = masked_whiten(adv, M)
    stats = {
        "ppo/old_value_mean": float(V[M].mean()) if M.any() else 0.0,
        "ppo/value_target_mean": float(target[M].mean()) if M.any() else 0.0,
        "ppo/advantage_raw_mean": float(raw[M].mean()) if M.any() else 0.0,
        "ppo/advantage_raw_std": float(raw[M].std()) if int(M.sum()) > 1 else 0.0,
        "ppo/explained_variance_old": explained_variance(V, target, M),
    }
    if dense:
        width = real.shape[1]
        device = batch.get(tokens_key).device
        batch.set(advantage_key, pad_left([adv[i, :L, None] for i, L in enumerate(lengths)], 0.0, width).to(device))
        batch.set(value_key, pad_left([V[i, :L] for i, L in enumerate(lengths)], 0.0, width).to(device))
        batch.set(value_target_key, pad_left([target[i, :L] for i, L in enumerate(lengths)], 0.0, width).to(device))
        return batch, stats
    rows = []
    for i, (row, L) in enumerate(zip(batch.unbind(0), lengths)):
        device = tokens[i].device
        row.set(advantage_key, adv[i, :L, None].to(device))
        row.set(value_key, V[i, :L].to(device))
        row.set(value_target_key, target[i, :L].to(device))
        rows.append(row)
    return lazy_stack(rows), stats


# ----------------------------------------------------------------------------- loss
class PPOLossOutput(TokenStatsLossOutput):
    """GRPO-style output plus the critic terms."""

    loss_critic: torch.Tensor | None = None
    explained_variance: torch.Tensor | None = None
    value_clip_fraction: torch.Tensor | None = None


class PPOLoss(TokenStatsMixin, GRPOLoss):
    """Clipped PPO on token-level advantages plus a (clipped) value loss.

    Args:
        actor_network: the log-prob ``TransformersWrapper``.
        critic: a :class:`Critic`. Without its own backbone, its head reads the last hidden
            states of the policy forward that computes the log-probs (captured with a
            forward pre-hook on the policy's output embedding, removed after each call).
        policy_model: the HF model inside ``actor_network`` (head mode only; default
            ``actor_network.model``).
        value_clip: value clipping range ``c`` (``None`` = no clipping).
        value_coeff: weight of the value loss in the total loss.
        aggregation: ``"token_mean"`` (default), ``"prompt_mean"`` or ``"none"``; applies
            to the policy, entropy, KL and value terms alike.
        **kwargs: forwarded to ``GRPOLoss``.

    Inputs per row (see :func:`prepare_ppo_batch`): ``advantage`` ``[L, 1]``,
    ``state_value`` ``[L]``, ``value_target`` ``[L]``, plus the usual GRPO inputs.
    Besides GRPOLoss's keys, ``set_keys`` renames ``value`` (old values, default
    ``"state_value"``), ``value_target`` (``"value_target"``), ``episode_return`` (what
    ``PPOAlgorithm.prepare`` reads, ``"episode_return"``) and ``attention_mask``
    (``("masks", "all_attention_mask")``), e.g. ``loss.set_keys(value="old_values")``.
    """

    @dataclass
    class _AcceptedKeys(TokenStatsMixin._AcceptedKeys):
        """GRPO's keys plus the critic's (defaults from :mod:`ragen_torchrl.keys`)."""

        value: NestedKey = STATE_VALUE
        value_target: NestedKey = VALUE_TARGET
        episode_return: NestedKey = EPISODE_RETURN
        attention_mask: NestedKey = MASKS_ATTENTION

    default_keys = _AcceptedKeys

    output_type = PPOLossOutput

    def __init__(
        self,
        actor_network,
        critic: Critic,
        *,
        policy_model: nn.Module | None = None,
        value_clip: float | None = 0.5,
        value_coeff: float = 1.0,
        aggregation: str = "token_mean",
        **kwargs,
    ) -> None:
        super().__init__(actor_network, aggregation=aggregation, **kwargs)
        self.critic = critic
        if critic.backbone is None:
            # the value head reads the LM head's input at every position: keep the full logits pass
            self.compact_logits = False
            policy_model = policy_model if policy_model is not None else getattr(actor_network, "model", None)
            if policy_model is None or policy_model.get_output_embeddings() is None:
                raise ValueError(
                    "critic='head' needs the policy model (with an output embedding) to read hidden states"
                )
        # not registered as a submodule: the actor already owns it (no duplicate parameters)
        self.__dict__["_policy_model"] = policy_model
        self.value_clip = None if value_clip is None else float(value_clip)
        self.value_coeff = float(value_coeff)

    def _padded(self, td: TensorDictBase, key, dtype=torch.float32) -> torch.Tensor:
        x = td.get(key, as_padded_tensor=True, padding_side="left", padding_value=0)
        return x.to(dtype)

    def forward(self, tensordict: TensorDictBase) -> PPOLossOutput:
        td = trim_padding(tensordict).copy()
        keys = self.tensor_keys
        key = keys.advantage
        present = set(td.keys(True))
        for k in (key, keys.value, keys.value_target):
            if k not in present:
                raise KeyError(f"{k!r} missing: run Algorithm.prepare (values and GAE) on the batch before the loss")
        # token-level advantages of a ragged batch are unpadded per row: pad them on the left, like the log-probs
        adv = td.get(key, as_padded_tensor=True, padding_side="left", padding_value=0.0)
        td.set(key, adv if adv.ndim == 3 else adv.unsqueeze(-1))

        captured: dict[str, torch.Tensor] = {}
        hook = None
        if self.critic.backbone is None:

            def grab(_module, args, kwargs):
                captured["hidden"] = args[0] if args else kwargs["input"]

            hook = self._policy_model.get_output_embeddings().register_forward_pre_hook(grab, with_kwargs=True)
        try:
            out = super().forward(td)
        finally:
            if hook is not None:
                hook.remove()

        mask = out.token_stats["mask"]
        if self.critic.backbone is None:
            hidden = captured.get("hidden")
            if hidden is None or hidden.shape[:2] != mask.shape:
                raise RuntimeError(
                    "critic='head' could not read the policy's hidden states as [B, T, H] "
                    f"(got {None if hidden is None else tuple(hidden.shape)}, mask {tuple(mask.shape)}); "
                    "the log-prob wrapper must run the model on padded inputs (pad_model_input=True)"
                )
            values = self.critic.values_from_hidden(hidden)
        else:
            # -1 (never a token id) marks a ragged batch's left padding; the attention mask a dense one's
            tokens = td.get(keys.action, as_padded_tensor=True, padding_side="left", padding_value=-1)
            attn = tokens != -1
            if keys.attention_mask in td.keys(True):
                attn = (
                    attn
                    & td.get(
                        keys.attention_mask, as_padded_tensor=True, padding_side="left", padding_value=False
                    ).bool()
                )
            values = self.critic(torch.where(attn, tokens, torch.zeros_like(tokens)), attn)
        old = self._padded(td, keys.value).to(values.device)
        target = self._padded(td, keys.value_target).to(values.device)
        if old.shape != values.shape or target.shape != values.shape:
            raise ValueError(
                f"stored values {tuple(old.shape)} / targets {tuple(target.shape)} do not line up "
                f"with the tokens {tuple(values.shape)}: run Algorithm.prepare on this batch"
            )
        per_token, vclipped = clipped_value_loss(values, old, target, self.value_clip)
        loss_critic = self.value_coeff * self._aggregate_loss_value(per_token.unsqueeze(-1), mask, tensordict=td)
        out.token_stats.update(
            {"values": values.detach(), "old_values": old, "value_target": target, "value_clipped": vclipped}
        )
        m = mask.to(values.dtype)
        out.loss_critic = loss_critic
        out.explained_variance = torch.tensor(explained_variance(values, target, mask))
        out.value_clip_fraction = (vclipped.to(m.dtype) * m).sum() / m.sum().clamp_min(1)
        return out


PPOLoss.__doc__ += INPUT_CONTRACT


def value_metrics(stash: dict[str, torch.Tensor]) -> dict[str, float]:
    """Critic diagnostics over the assistant tokens of the last PPO forward."""
    if "values" not in stash:
        return {}
    mask = stash["mask"].bool()
    if not mask.any():
        return {}
    v, t = stash["values"][mask], stash["value_target"][mask]
    return {
        "value_mean": float(v.mean()),
        "value_target_mean": float(t.mean()),
        "value_clip_fraction": float(stash["value_clipped"][mask].float().mean()),
        "explained_variance": explained_variance(stash["values"], stash["value_target"], mask),
    }
