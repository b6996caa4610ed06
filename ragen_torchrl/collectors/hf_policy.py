"""The ``hf`` rollout policy (``rollout.backend=hf``, the default): transformers' ``generate`` on the training model.

:func:`make_generation_policy` builds it in either mode of ``rollout.trajectory``: a
:class:`TokenPromptWrapper` (``tokens``, with the per-row KV cache of
:class:`~ragen_torchrl.models.turn_cache.TurnCachePolicy` under ``rollout.kv_cache``) or an
:class:`HFRolloutPolicy` (``history``). Both declare
:class:`~ragen_torchrl.collectors.policy_protocol.RolloutPolicy` (the token one
:class:`~ragen_torchrl.collectors.policy_protocol.TokenPromptPolicy`).

Example:
    >>> make_generation_policy(None, None, trajectory="text")
    Traceback (most recent call last):
    ...
    ValueError: rollout.trajectory must be one of tokens, history, got 'text'
"""

from __future__ import annotations

from tensordict import TensorDictBase

from ..keys import HISTORY_PROMPT
from ..models.entropy_recorder import EntropyRecorder, attach_entropy_recorder
from ..models.history_wrapper import HistoryTransformersWrapper
from ..models.turn_cache import DEFAULT_MAX_CACHED_TOKENS, TurnCachePolicy, check_turn_cache_settings
from ..models.vision import stop_token_ids
from ..rollout_options import check_attention, check_sampler, per_device
from .generation import (
    build_generating_wrapper,
    check_trajectory,
    hf_generate_kwargs,
    token_policy_template,
    warn_if_truncated,
)
from .policy_protocol import RolloutPolicy, TokenPromptPolicy

__all__ = ["HFRolloutPolicy", "TokenPromptWrapper", "make_generation_policy"]


def pads_with_end_of_turn(model, tokenizer) -> bool:
    """Whether ``tokenizer``'s pad id is one of the ids generation stops at (the model's generation config's
    end ids, else the tokenizer's eos): SmolLM2, Qwen2.5 and Llama-3 checkpoints are published so.

    Example:
        >>> class Tok:
        ...     pad_token_id, eos_token_id = 2, 2
        >>> pads_with_end_of_turn(None, Tok())
        True
    """
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        return False
    try:
        return int(pad) in stop_token_ids(model, tokenizer)
    except ValueError:  # no end id at all: nothing for the pad id to be confused with
        return False


class HFRolloutPolicy(HistoryTransformersWrapper, RolloutPolicy):
    """:func:`make_generation_policy`'s history-mode policy (``rollout.trajectory=history``): a
    :class:`~ragen_torchrl.models.history_wrapper.HistoryTransformersWrapper` that declares
    :class:`~ragen_torchrl.collectors.policy_protocol.RolloutPolicy` (it renders each row's conversation
    at every turn; ``entropy_recorder`` is attached by the builder). :meth:`clear` and :meth:`release`
    reach a ``turn_cache`` when there is one (:class:`TokenPromptWrapper`)."""

    owns_trajectories = False
    entropy_recorder: EntropyRecorder | None = None
    reply_prime = ""
    turn_cache: TurnCachePolicy | None = None

    def clear(self) -> None:
        """Forget every row's KV cache (:func:`~ragen_torchrl.collectors.collect_rollouts` calls it when a
        collection starts)."""
        if self.turn_cache is not None:
            self.turn_cache.clear()

    def release(self, env_indices) -> None:
        """Forget the KV caches of these ``env_index`` rows (their episodes finished)."""
        if self.turn_cache is not None:
            self.turn_cache.release(env_indices)


class TokenPromptWrapper(HFRolloutPolicy, TokenPromptPolicy):
    """A token-prompt generation wrapper (``input_mode="tokens"``) that also answers a history prompt.

    :func:`~ragen_torchrl.collectors.collect_rollouts` gives it each row's trajectory as
    ``("tokens", "prompt")`` and no conversation. With a ``turn_cache`` (a
    :class:`~ragen_torchrl.models.turn_cache.TurnCachePolicy`, ``rollout.kv_cache=true``) those calls
    generate through it: each row's KV cache is kept between turns and only the new tokens are encoded;
    :meth:`clear` and :meth:`release` reach it. Without one, the wrapper re-encodes each prompt (prompt
    head shared). Called on a TensorDict that holds the conversation at ``("history", "prompt")``
    (torchrl's ``env.rollout`` and ``LLMCollector``, a script, a diagnostic: a ``("tokens", "prompt")``
    there is the previous turn's, carried over), it renders the histories as the history-mode wrapper
    does and writes ``("history", "full")`` and the text views too.
    """

    def forward(self, tensordict: TensorDictBase, *args, **kwargs) -> TensorDictBase:
        if self.input_mode != "tokens":
            return super().forward(tensordict, *args, **kwargs)
        if HISTORY_PROMPT not in tensordict.keys(include_nested=True):
            if self.turn_cache is not None:
                return self.turn_cache(tensordict)
            return super().forward(tensordict, *args, **kwargs)
        saved = self.input_mode, self.input_key, self.in_keys, self.out_keys
        self.input_mode, self.input_key, self.in_keys = "history", HISTORY_PROMPT, [HISTORY_PROMPT]
        # what the history-mode wrapper writes: its text and history views too
        self.out_keys = [*self.out_keys, *(k for k in (self.text_key, self.history_key) if k not in self.out_keys)]
        try:
            return super().forward(tensordict, *args, **kwargs)
        finally:
            self.input_mode, self.input_key, self.in_keys, self.out_keys = saved


def make_generation_policy(
    model,
    tokenizer,
    *,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float = 1.0,
    min_p: float | None = None,
    reply_prime: str = "",
    trajectory: str = "tokens",
    kv_cache: bool = True,
    max_cached_tokens: int = DEFAULT_MAX_CACHED_TOKENS,
    sampler: str | None = None,
    attention: str | None = None,
) -> HFRolloutPolicy:
    """A ``TransformersWrapper`` that samples replies (``temperature`` 0 = greedy).

    ``trajectory="tokens"`` (default, ``rollout.trajectory``): a token-prompt policy
    (``input_mode="tokens"``, a :class:`TokenPromptWrapper`): :func:`~ragen_torchrl.collectors.collect_rollouts`
    keeps each row's trajectory as one token sequence and passes it as ``("tokens", "prompt")``, so every
    reply of every turn is trained as sampled (:mod:`~ragen_torchrl.collectors.token_trajectory`).
    ``"history"``: a history-mode wrapper (an :class:`HFRolloutPolicy`) that renders each row's whole
    conversation with the chat template at every turn.
    A token-prompt policy with ``kv_cache`` (``rollout.kv_cache``, default true) keeps each row's KV
    cache between turns (:class:`~ragen_torchrl.models.turn_cache.TurnCachePolicy`, at most
    ``max_cached_tokens`` tokens, ``rollout.kv_cache_max_tokens``, over all rows; ``policy.turn_cache``).
    ``sampler`` (``rollout.sampler``) draws each sampled token by inverse CDF (``"inverse_cdf"``,
    :class:`~ragen_torchrl.models.inverse_cdf.InverseCDFSampler`) or with ``transformers``' ``torch.multinomial``;
    ``attention`` (``rollout.attention``) decodes the first turn of rows that share a prompt with cascade
    attention (``"cascade"``) or ``transformers``' SDPA (``"sdpa"``). ``None`` (either): the model's device
    picks (:func:`~ragen_torchrl.rollout_options.per_device`: inverse CDF and cascade on the CPU, where they
    were tuned; ``multinomial`` and ``sdpa`` on an accelerator).

    It satisfies :func:`~ragen_torchrl.collectors.collect_rollouts`' policy contract and records each
    row's token entropy from the logits ``generate`` computes anyway (``policy.entropy_recorder``). It is a
    :class:`~ragen_torchrl.models.history_wrapper.HistoryTransformersWrapper`: torchrl's
    wrapper with the same outputs and less Python work per turn. It samples the full
    distribution unless ``top_k``/``top_p``/``min_p`` truncate it
    (:func:`~ragen_torchrl.collectors.generation.hf_generate_kwargs`; a truncating policy logs a warning
    when built). ``reply_prime`` (``"<think>"`` for ``rollout.prime_think``) is appended to every prompt:
    generation starts after it, and the assistant message the env parses starts with it
    (:mod:`~ragen_torchrl.models.priming`).

    Example:
        >>> make_generation_policy(None, None, max_new_tokens=0)
        Traceback (most recent call last):
        ...
        ValueError: max_new_tokens must be >= 1, got 0
    """
    check_trajectory(trajectory)
    check_turn_cache_settings(kv_cache, max_cached_tokens)
    device = str(getattr(model, "device", "cpu"))
    sampler = per_device(device, "inverse_cdf", "multinomial") if sampler is None else sampler
    attention = per_device(device, "cascade", "sdpa") if attention is None else attention
    check_sampler(sampler)
    check_attention(attention)
    if (trajectory != "tokens" or not kv_cache) and pads_with_end_of_turn(model, tokenizer):
        # torchrl's generate wrapper tells padding from tokens by the pad id: it would cut every sampled end-of-turn
        raise ValueError(
            "this checkpoint pads with its end-of-turn token, which torchrl's generation wrapper "
            "(rollout.trajectory=history or rollout.kv_cache=false) drops from every reply; use the defaults "
            "rollout.trajectory=tokens rollout.kv_cache=true, which cut replies at their own end token"
        )
    kwargs = hf_generate_kwargs(max_new_tokens, temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    policy = build_generating_wrapper(
        TokenPromptWrapper if trajectory == "tokens" else HFRolloutPolicy,
        model,
        tokenizer,
        chat_template=token_policy_template(tokenizer, reply_prime),
        input_mode=trajectory,
        sampling=kwargs,
        reply_prime=reply_prime,
    )
    # torchrl's constructor keeps only the settings it knows (min_p, typical_p, ... are dropped):
    # set them all on the built wrapper
    policy.generate_kwargs.update(kwargs)
    policy.sampler = sampler
    warn_if_truncated(top_k, top_p, min_p, temperature)
    # per-trajectory token entropy for the SNR filter's entropy ablations, read off the
    # logits generate computes anyway (no extra forward pass)
    policy.entropy_recorder = attach_entropy_recorder(policy)
    if trajectory == "tokens" and kv_cache:
        turn_cache = TurnCachePolicy(
            model,
            kv_cache=True,
            max_cached_tokens=max_cached_tokens,
            sampler=sampler,
            cascade=attention == "cascade",
        )
        # one dict: the same sampling settings and the same entropy recorder on both paths
        turn_cache.generate_kwargs = policy.generate_kwargs
        # a plain attribute, not a submodule: the wrapper's state_dict and modules stay the model's
        object.__setattr__(policy, "turn_cache", turn_cache)
    return policy
