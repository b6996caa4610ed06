"""Grouped multi-turn collection: G samples of each level, played to the end.

GRPO-style objectives compare the G trajectories of one prompt (RAGEN-2, arXiv 2604.06268:
"P prompt groups x G samples"), so the core data path plays ``P`` levels ``G`` times each
in one batched env and returns one record per trajectory. :func:`collect_rollouts` does
that with any torchrl LLM policy that honours the contract below, in the text envs of
:mod:`ragen_torchrl.envs` (plain or wrapped in a ``TransformedEnv``, e.g. with
:class:`~ragen_torchrl.transforms.t3.T3Truncation`).

Row layout: row ``i`` plays level ``level_seeds[i // G]`` as sample ``i % G`` of group
``i // G + group_offset``. At each turn only the rows still running are generated and
stepped; every turn adds one assistant and one user message, so those rows all hold the
same number of messages (``TransformersWrapper`` in history mode cannot batch ragged
histories). Large batches are generated in chunks of ``chunk_size`` rows.

**Policy contract.** ``policy(td)`` is called on a TensorDict of ``n`` running rows that
holds ``("history", "prompt")`` (a :class:`~torchrl.data.llm.History` per row: the
conversation so far) and the env's per-row keys (``env_index``, ``group_id``, ...). It
must return a TensorDict with the same ``n`` rows that keeps those per-row keys and adds

* ``("history", "full")``: the prompt plus one assistant message (the reply the env parses);
* ``("tokens", "response")``: the reply's generated token ids, one 1-D tensor per row
  (ragged; counted into ``num_tokens``).

torchrl's :class:`~torchrl.modules.llm.TransformersWrapper` (and ``vLLMWrapper``) with
``input_mode="history"`` and ``generate=True`` write both; :func:`make_generation_policy`
builds one. A scripted policy must write both too (e.g. ``tokenizer(reply).input_ids``);
a policy output without them raises :class:`PolicyContractError` naming the missing key.

**Token-prompt policies** (``policy.input_mode == "tokens"``, the default of
:func:`make_generation_policy`, ``rollout.trajectory=tokens``): the collector keeps each row's
trajectory as one token sequence (:mod:`~ragen_torchrl.collectors.token_trajectory`) and calls the
policy with the per-row keys plus ``("tokens", "prompt")`` (that sequence so far, one 1-D long
tensor per row) and no conversation; the policy writes only ``("tokens", "response")`` (the ids
exactly as sampled, end-of-turn included if sampled, no padding) and the collector writes
``("history", "full")`` from them. Such a policy carries ``tokenizer``, ``reply_prime`` and
optionally its (primed) ``chat_template``.
Optionally, a ``policy.entropy_recorder``
(:class:`~ragen_torchrl.models.entropy_recorder.EntropyRecorder`) fills the ``entropy`` column.

Example (a scripted policy that always answers "Right"):
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import lazy_stack
    >>> from torchrl.data.llm import History
    >>> from ragen_torchrl.envs import make_env
    >>> from ragen_torchrl.collectors import collect_rollouts
    >>> def scripted(td):
    ...     reply = History(role="assistant", content="<answer>Right</answer>")
    ...     full = td["history", "prompt"].extend(lazy_stack([reply.unsqueeze(0)] * td.shape[0]), inplace=False, dim=-1)
    ...     td.set(("history", "full"), full)
    ...     td.set(("tokens", "response"), [torch.tensor([1, 2, 3])] * td.shape[0])
    ...     return td
    >>> env = make_env("frozenlake", num_envs=2 * 3)          # P=2 levels x G=3 samples
    >>> records = collect_rollouts(env, scripted, level_seeds=[11, 12], group_size=3)
    >>> records.batch_size, records["group_id"].tolist(), records["level_seed"].tolist()
    (torch.Size([6]), [0, 0, 0, 1, 1, 1], [11, 11, 11, 12, 12, 12])
    >>> bool((records["num_tokens"] == 3 * records["num_turns"]).all())
    True
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from tensordict import TensorDict, TensorDictBase, lazy_stack
from torchrl.envs import EnvBase

from ..envs.messages import chat_dicts
from ..envs.text_env import sample_seed
from ..keys import (
    ACTION_IS_VALID,
    DONE,
    ENTROPY,
    ENV_INDEX,
    EPISODE_RETURN,
    FORMAT_VALID,
    GROUP_ID,
    HISTORY_FULL,
    HISTORY_PROMPT,
    KV_COUNT_KEYS,
    LEVEL_SEED,
    MASKS_TRAJECTORY,
    NUM_TOKENS,
    NUM_TURNS,
    REWARD,
    SAMPLE_SEED,
    SUCCESS,
    T3_RULE_FIRED,
    TOKENS_LAST_PROMPT,
    TOKENS_LAST_RESPONSE,
    TOKENS_PROMPT,
    TOKENS_RESPONSE,
    TOKENS_TRAJECTORY,
    TRAJECTORY_REFITS,
    TRUNCATED_BY_T3,
    TURN,
)
from ..models.chat_template import trainable_chat_template
from ..models.entropy_recorder import EntropyRecorder, attach_entropy_recorder
from ..models.history_wrapper import HistoryTransformersWrapper
from ..models.loading import wrapper_chat_template
from ..models.priming import primed_chat_template
from ..models.priming import reply_prime as policy_reply_prime
from ..models.turn_cache import DEFAULT_MAX_CACHED_TOKENS, TurnCachePolicy, check_turn_cache_settings
from ..models.vision import stop_token_ids
from ..rollout_options import check_attention, check_sampler, check_sampling, per_device, sampling_truncation
from .token_trajectory import TokenTrajectories, reply_histories

__all__ = [
    "POLICY_OUTPUT_KEYS",
    "PolicyContractError",
    "TokenPromptWrapper",
    "TRAJECTORY_MODES",
    "TOKEN_POLICY_OUTPUT_KEYS",
    "check_policy_output",
    "check_sampling",
    "collect_rollouts",
    "hf_generate_kwargs",
    "make_generation_policy",
    "turn_cache_metrics",
    "sampling_truncation",
    "wrapper_generate_kwargs",
]

log = logging.getLogger(__name__)

#: keys a policy must write (see the module's policy contract)
POLICY_OUTPUT_KEYS: tuple[tuple[str, str], ...] = (HISTORY_FULL, TOKENS_RESPONSE)
#: keys a token-prompt policy must write (the collector writes ``("history", "full")`` itself)
TOKEN_POLICY_OUTPUT_KEYS: tuple[tuple[str, str], ...] = (TOKENS_RESPONSE,)
#: ``rollout.trajectory``: one token sequence per row (``tokens``) or the conversation re-rendered each turn
TRAJECTORY_MODES = ("tokens", "history")

_KEY_ROLE = {
    HISTORY_FULL: "the conversation with the reply appended as one assistant message (the env parses it)",
    TOKENS_RESPONSE: "the reply's generated token ids, one 1-D tensor per row (counted into num_tokens)",
}


class PolicyContractError(ValueError):
    """A policy's output breaks :func:`collect_rollouts`' policy contract (names what is missing)."""


def check_policy_output(out, num_rows: int, keys: tuple = POLICY_OUTPUT_KEYS) -> None:
    """Raise :class:`PolicyContractError` unless ``out`` satisfies the policy contract for ``num_rows`` rows.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"history": {"full": torch.zeros(2, 1)}}, batch_size=[2])  # no tokens
        >>> try:
        ...     check_policy_output(td, 2)
        ... except PolicyContractError as e:
        ...     print(str(e).splitlines()[0])
        policy output lacks ('tokens', 'response'): the reply's generated token ids, one 1-D tensor per row (counted into num_tokens).
    """
    if not isinstance(out, TensorDictBase):
        raise PolicyContractError(f"policy returned {type(out).__name__}, expected a TensorDict with {list(keys)}")
    # membership per key: listing every nested key of a lazy stack walks all its rows (~10 ms a turn)
    present = out.keys(include_nested=True)
    for key in keys:
        if key not in present:
            raise PolicyContractError(
                f"policy output lacks {key}: {_KEY_ROLE[key]}.\n"
                "torchrl's TransformersWrapper/vLLMWrapper with input_mode='history', generate=True write it "
                "(see ragen_torchrl.collectors.make_generation_policy); a scripted policy must set "
                "('history', 'full') and ('tokens', 'response') itself, e.g. tokenizer(reply).input_ids per row"
            )
    rows = int(out.batch_size[0]) if out.batch_dims else 1
    if rows != num_rows:
        raise PolicyContractError(f"policy returned {rows} rows for {num_rows} input rows; it must keep the batch")


#: generation settings that leave the policy's distribution as it is (``None`` = off). transformers'
#: ``generate`` fills every setting not passed from the checkpoint's ``generation_config`` and then
#: from its global defaults (``top_k=50``), so each one is passed explicitly
NEUTRAL_GENERATE_KWARGS = {
    "num_beams": 1,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "min_length": 0,
    "min_new_tokens": None,
    "bad_words_ids": None,
    "sequence_bias": None,
    "suppress_tokens": None,
    "begin_suppress_tokens": None,
    "forced_bos_token_id": None,
    "forced_eos_token_id": None,
    "exponential_decay_length_penalty": None,
    "guidance_scale": None,
    "watermarking_config": None,
}
#: the sampling warpers besides temperature, top-k, top-p and min-p, switched off
NEUTRAL_SAMPLING_KWARGS = {"typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": None}


def hf_generate_kwargs(
    max_new_tokens: int, temperature: float, *, top_k: int | None = None, top_p: float = 1.0, min_p=None
) -> dict:
    """``generate_kwargs`` of :func:`make_generation_policy`: sample at ``temperature`` (0 = greedy)
    from the **full** distribution by default, every sampling setting explicit.

    ``top_k`` (``None``/0: off), ``top_p`` (1.0: off) and ``min_p`` (``None``: off) truncate it when
    set. Nothing comes from transformers' defaults (``top_k=50``) or from the checkpoint's own
    ``generation_config`` (instruct checkpoints ship ``top_k``, ``repetition_penalty``, ...): the
    behaviour log-probs and the losses score tokens with the policy's full softmax at ``temperature``,
    so the sampler must draw from that same distribution (RAGEN-2, arXiv 2604.06268, samples at temperature 1,
    top-p 1, no top-k). The vLLM backend mirrors these
    (:func:`ragen_torchrl.collectors.vllm_backend.vllm_sampling_kwargs`).

    Example:
        >>> kw = hf_generate_kwargs(64, 1.0)
        >>> {k: kw[k] for k in ("do_sample", "temperature", "top_k", "top_p", "min_p", "repetition_penalty")}
        {'do_sample': True, 'temperature': 1.0, 'top_k': 0, 'top_p': 1.0, 'min_p': None, 'repetition_penalty': 1.0}
        >>> hf_generate_kwargs(64, 0)["do_sample"], "top_k" in hf_generate_kwargs(64, 0)
        (False, False)
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    check_sampling(top_k, top_p, min_p)
    kwargs = {"max_new_tokens": int(max_new_tokens), **NEUTRAL_GENERATE_KWARGS}
    if temperature > 0:
        kwargs.update(
            do_sample=True,
            temperature=float(temperature),
            top_k=int(top_k or 0),  # 0: transformers adds no top-k warper
            top_p=float(top_p),
            min_p=None if min_p is None else float(min_p),
            **NEUTRAL_SAMPLING_KWARGS,
        )
    else:
        kwargs.update(do_sample=False)
    return kwargs


def wrapper_generate_kwargs(kwargs: dict) -> dict:
    """``kwargs`` without a ``top_k`` that switches top-k off (0 or -1): torchrl's LLM wrappers refuse
    ``top_k <= 0`` in their constructor; the full settings are set on the built wrapper.

    Example:
        >>> wrapper_generate_kwargs({"top_k": 0, "top_p": 1.0}), wrapper_generate_kwargs({"top_k": 5})
        ({'top_p': 1.0}, {'top_k': 5})
    """
    return {k: v for k, v in kwargs.items() if not (k == "top_k" and (v is None or v <= 0))}


def _policy_template(tokenizer, reply_prime: str) -> str | None:
    """The checked template the policy renders with; ``None`` for a tokenizer without one and no prime
    (torchrl's wrapper then picks its own, as for any torchrl policy)."""
    if wrapper_chat_template(tokenizer) is None and not reply_prime:
        return None
    return trainable_chat_template(tokenizer, prime=reply_prime)


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


class TokenPromptWrapper(HistoryTransformersWrapper):
    """A token-prompt generation wrapper (``input_mode="tokens"``) that also answers a history prompt.

    :func:`collect_rollouts` gives it each row's trajectory as ``("tokens", "prompt")`` and no
    conversation. With a ``turn_cache`` (a :class:`~ragen_torchrl.models.turn_cache.TurnCachePolicy`,
    ``rollout.kv_cache=true``) those calls generate through it: each row's KV cache is kept between
    turns and only the new tokens are encoded; :meth:`clear` and :meth:`release` reach it. Without one,
    the wrapper re-encodes each prompt (prompt head shared). Called on a TensorDict that holds the
    conversation at ``("history", "prompt")`` (torchrl's ``env.rollout`` and ``LLMCollector``, a
    script, a diagnostic: a ``("tokens", "prompt")`` there is the previous turn's, carried over), it
    renders the histories as the history-mode wrapper does and writes ``("history", "full")`` and the
    text views too.
    """

    turn_cache: TurnCachePolicy | None = None

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

    def clear(self) -> None:
        """Forget every row's KV cache (:func:`collect_rollouts` calls it when a collection starts)."""
        if self.turn_cache is not None:
            self.turn_cache.clear()

    def release(self, env_indices) -> None:
        """Forget the KV caches of these ``env_index`` rows (their episodes finished)."""
        if self.turn_cache is not None:
            self.turn_cache.release(env_indices)


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
) -> HistoryTransformersWrapper:
    """A ``TransformersWrapper`` that samples replies (``temperature`` 0 = greedy).

    ``trajectory="tokens"`` (default, ``rollout.trajectory``): a token-prompt policy
    (``input_mode="tokens"``): :func:`collect_rollouts` keeps each row's trajectory as one token
    sequence and passes it as ``("tokens", "prompt")``, so every reply of every turn is trained as
    sampled (:mod:`~ragen_torchrl.collectors.token_trajectory`). ``"history"``: a history-mode
    wrapper that renders each row's whole conversation with the chat template at every turn.
    A token-prompt policy with ``kv_cache`` (``rollout.kv_cache``, default true) keeps each row's KV
    cache between turns (:class:`~ragen_torchrl.models.turn_cache.TurnCachePolicy`, at most
    ``max_cached_tokens`` tokens, ``rollout.kv_cache_max_tokens``, over all rows; ``policy.turn_cache``).
    ``sampler`` (``rollout.sampler``) draws each sampled token by inverse CDF (``"inverse_cdf"``,
    :class:`~ragen_torchrl.models.inverse_cdf.InverseCDFSampler`) or with ``transformers``' ``torch.multinomial``;
    ``attention`` (``rollout.attention``) decodes the first turn of rows that share a prompt with cascade
    attention (``"cascade"``) or ``transformers``' SDPA (``"sdpa"``). ``None`` (either): the model's device
    picks (:func:`~ragen_torchrl.rollout_options.per_device`: inverse CDF and cascade on the CPU, where they
    were tuned; ``multinomial`` and ``sdpa`` on an accelerator).

    It satisfies :func:`collect_rollouts`' policy contract and records each row's token
    entropy from the logits ``generate`` computes anyway (``policy.entropy_recorder``). It is a
    :class:`~ragen_torchrl.models.history_wrapper.HistoryTransformersWrapper`: torchrl's
    wrapper with the same outputs and less Python work per turn. It samples the full
    distribution unless ``top_k``/``top_p``/``min_p`` truncate it (:func:`hf_generate_kwargs`;
    a truncating policy logs a warning when built). ``reply_prime`` (``"<think>"`` for
    ``rollout.prime_think``) is appended to every prompt: generation starts after it, and the
    assistant message the env parses starts with it (:mod:`~ragen_torchrl.models.priming`).

    Example:
        >>> make_generation_policy(None, None, max_new_tokens=0)
        Traceback (most recent call last):
        ...
        ValueError: max_new_tokens must be >= 1, got 0
        >>> make_generation_policy(None, None, trajectory="text")
        Traceback (most recent call last):
        ...
        ValueError: rollout.trajectory must be one of tokens, history, got 'text'
    """
    if trajectory not in TRAJECTORY_MODES:
        raise ValueError(f"rollout.trajectory must be one of {', '.join(TRAJECTORY_MODES)}, got {trajectory!r}")
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
    policy = (TokenPromptWrapper if trajectory == "tokens" else HistoryTransformersWrapper)(
        model,
        tokenizer=tokenizer,
        chat_template=primed_chat_template(_policy_template(tokenizer, reply_prime), reply_prime),
        input_mode=trajectory,
        generate=True,
        return_log_probs=False,
        pad_output=False,
        generate_kwargs=wrapper_generate_kwargs(kwargs),
    )
    # torchrl's constructor keeps only the settings it knows (min_p, typical_p, ... are dropped):
    # set them all on the built wrapper
    policy.generate_kwargs.update(kwargs)
    policy.reply_prime = reply_prime
    policy.sampler = sampler
    truncation = sampling_truncation(top_k, top_p, min_p) if temperature > 0 else None
    if truncation is not None:
        log.warning(
            "rollouts sample a truncated distribution (%s): the behaviour log-probs and the losses use the "
            "policy's full softmax, so the samples are not drawn from the policy that is trained",
            truncation,
        )
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


#: the per-trajectory turn-cache counts of a record (:data:`~ragen_torchrl.keys.KV_COUNT_KEYS`), logged per
#: iteration summed over the records, as ``rollout/<name>``
TURN_CACHE_METRICS = dict(
    zip(("kv_rows_reused", "kv_rows_prefilled", "kv_rows_over_cap", "kv_prefill_tokens"), KV_COUNT_KEYS)
)


def turn_cache_metrics(records: TensorDictBase) -> dict[str, float]:
    """The turn-cache counts of one iteration's records summed over them, named ``rollout/kv_...``
    (``{}`` when the policy had no turn cache: the records hold no counts).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> counts = {("turn_cache", "reused"): torch.tensor([3, 4]), ("turn_cache", "prefilled"): torch.tensor([1, 1]),
        ...           ("turn_cache", "over_cap"): torch.tensor([0, 1]), ("turn_cache", "prefill_tokens"): torch.tensor([50, 60])}
        >>> turn_cache_metrics(TensorDict(counts, batch_size=[2]))
        {'rollout/kv_rows_reused': 7.0, 'rollout/kv_rows_prefilled': 2.0, 'rollout/kv_rows_over_cap': 1.0, \
'rollout/kv_prefill_tokens': 110.0}
        >>> turn_cache_metrics(TensorDict(batch_size=[2]))
        {}
    """
    if KV_COUNT_KEYS[0] not in records.keys(include_nested=True):
        return {}
    return {f"rollout/{tag}": float(records.get(key).sum()) for tag, key in TURN_CACHE_METRICS.items()}


def token_prompt_template(policy) -> str | None:
    """The chat template (prime included) a token-prompt policy's trajectories are rendered with.

    A policy is a token-prompt policy when its ``input_mode`` is ``"tokens"``; it carries the
    ``tokenizer`` to render with, optionally its ``chat_template`` (with the prime, as
    :func:`make_generation_policy` builds it; else the tokenizer's own, see
    :func:`~ragen_torchrl.models.loading.wrapper_chat_template`) and its ``reply_prime``.

    Example:
        >>> class Policy:
        ...     input_mode, tokenizer, chat_template, reply_prime = "tokens", None, "T", "<think>"
        >>> token_prompt_template(Policy())[:1]
        'T'
    """
    template = getattr(policy, "chat_template", None)
    if template is None:
        template = primed_chat_template(wrapper_chat_template(policy.tokenizer), policy_reply_prime(policy))
    return template


def _token_prompts(td: TensorDictBase, prompts: list[torch.Tensor]) -> TensorDictBase:
    """``td``'s per-row keys as a lazy stack whose rows hold their token prompts (ragged: set row by row).

    The conversation is left out: a token-prompt policy reads the ids (and :class:`TokenPromptWrapper`
    renders a ``("history", "prompt")`` it is given, as torchrl's own loops give it)."""
    td = lazy_stack(list(td.exclude(HISTORY_PROMPT[0]).unbind(0)))
    for row, ids in zip(td.tensordicts, prompts):
        row.set(TOKENS_PROMPT, ids)
    return td


def _response_lengths(out: TensorDictBase) -> list[int]:
    return [len(t) for t in out.get(TOKENS_RESPONSE, as_list=True)]


def _generate_part(
    policy, td: TensorDictBase, keys: tuple = POLICY_OUTPUT_KEYS
) -> tuple[TensorDictBase, torch.Tensor | None, torch.Tensor | None]:
    rec: EntropyRecorder | None = getattr(policy, "entropy_recorder", None)
    if rec is not None:
        rec.clear()
    out = policy(td)
    check_policy_output(out, int(td.batch_size[0]), keys)
    if rec is None or rec.num_steps == 0:
        return out, None, None
    sums, counts = rec.row_sums(_response_lengths(out))
    return out, sums, counts


def _generate(
    policy, td: TensorDictBase, chunk_size: int, keys: tuple = POLICY_OUTPUT_KEYS
) -> tuple[TensorDictBase, torch.Tensor | None, torch.Tensor | None]:
    """Generate replies in chunks; also the per-row entropy sums and counts when recorded."""
    n = td.batch_size[0]
    if n <= chunk_size:
        return _generate_part(policy, td, keys)
    parts = [_generate_part(policy, td[i : i + chunk_size], keys) for i in range(0, n, chunk_size)]
    out = lazy_stack([row for part in parts for row in part[0].unbind(0)])
    if any(p[1] is None for p in parts):
        return out, None, None
    return out, torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])


@torch.no_grad()
def collect_rollouts(
    env: EnvBase,
    policy: Callable[[TensorDictBase], TensorDictBase],
    level_seeds: list[int],
    group_size: int,
    *,
    chunk_size: int = 128,
    group_offset: int = 0,
) -> TensorDictBase:
    """Play ``len(level_seeds) * group_size`` episodes to the end, ``group_size`` per level.

    Args:
        env: a text env of :mod:`ragen_torchrl.envs` (or a ``TransformedEnv`` around one)
            with exactly ``len(level_seeds) * group_size`` rows (``num_envs``).
        policy: any callable honouring the module's policy contract (writes
            ``("history", "full")`` and ``("tokens", "response")``).
        level_seeds: one level per group.
        group_size: G, the samples per level.
        chunk_size: most rows generated in one policy call.
        group_offset: added to the group ids (to keep ids unique across calls).

    Returns a lazily stacked TensorDict with one row per trajectory:
    ``("history", "full")`` (the whole conversation), ``group_id``, ``level_seed``,
    ``episode_return`` (rewards plus format penalties), ``success``, ``num_turns``,
    ``num_tokens`` (generated tokens), ``format_valid`` (fraction of valid turns) and
    ``truncated_by_t3`` (set when a :class:`~ragen_torchrl.transforms.t3.T3Truncation`
    on the env cut the episode: the stall rule fired and the forced answer was not a success),
    ``t3_rule_fired`` (the stall rule fired at some turn, whatever the forced answer) and
    ``entropy`` (mean next-token entropy of the policy over the trajectory's generated
    tokens, recorded during generation when the policy comes from
    :func:`make_generation_policy`; 0 for a policy that does not record it).
    When the policy also reports the prompt ids it generated from (``("tokens", "prompt")``, as
    torchrl's wrappers do), ``("tokens", "last_prompt")`` and ``("tokens", "last_response")``
    hold each row's ids of its last turn. A token-prompt policy's records also hold
    ``("tokens", "trajectory")`` and ``("masks", "trajectory_assistant")`` (each row's whole token
    sequence and its sampled positions: what the update trains with ``algo.train_on=generated``,
    :func:`~ragen_torchrl.objectives.logprobs.tokenize_conversations`) and ``trajectory_refits``.
    A policy that reports per-row turn-cache counts (:data:`~ragen_torchrl.keys.KV_COUNT_KEYS`, a
    :class:`~ragen_torchrl.models.turn_cache.TurnCachePolicy`) has them summed over each trajectory's turns.
    A policy with ``owns_trajectories`` (:class:`~ragen_torchrl.collectors.vl_policy.VLRolloutPolicy`)
    gives each finished row's entries itself (``policy.trajectory(env_index)``, before ``release``).

    Raises:
        ValueError: no level, ``group_size < 1``, or an env of the wrong size.
        PolicyContractError: the policy's output lacks a contract key.

    See the module docstring for an example.
    """
    if group_size < 1 or not level_seeds:
        raise ValueError(f"need at least one level and group_size >= 1, got {len(level_seeds)} levels, G={group_size}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    n = len(level_seeds) * group_size
    env_rows = int(env.batch_size[0]) if len(env.batch_size) else 1
    if env_rows != n:
        raise ValueError(
            f"collect_rollouts: {len(level_seeds)} levels x G={group_size} = {n} rows, but the env has {env_rows} "
            f"rows (num_envs); build the env with num_envs={n}"
        )
    levels = torch.tensor([s for s in level_seeds for _ in range(group_size)], dtype=torch.long)
    groups = torch.arange(len(level_seeds)).repeat_interleave(group_size) + group_offset
    samples = torch.tensor([sample_seed(s, g) for s in level_seeds for g in range(group_size)], dtype=torch.long)
    td = env.reset(TensorDict({LEVEL_SEED: levels, GROUP_ID: groups, SAMPLE_SEED: samples}, batch_size=[n]))
    returns = torch.zeros(n)
    success = torch.zeros(n, dtype=torch.bool)
    turns = torch.zeros(n, dtype=torch.long)
    tokens = torch.zeros(n, dtype=torch.long)
    valid_turns = torch.zeros(n)
    t3_cut = torch.zeros(n, dtype=torch.bool)
    t3_fired = torch.zeros(n, dtype=torch.bool)
    ent_sum = torch.zeros(n, dtype=torch.float64)
    ent_count = torch.zeros(n, dtype=torch.long)
    final: list = [None] * n
    # the ids the policy read and wrote at each row's last turn (when it reports its prompt ids)
    last_prompt: list = [None] * n
    last_response: list = [None] * n
    traj = None
    # a policy that keeps per-row state between turns (TurnCachePolicy's KV caches) starts afresh and
    # frees each row when its episode ends; any other callable is left as it is
    clear, release = getattr(policy, "clear", None), getattr(policy, "release", None)
    if callable(clear):
        clear()
    if getattr(policy, "input_mode", None) == "tokens":
        # one token sequence per row: the policy reads it, the update trains it (module token_trajectory)
        traj = TokenTrajectories(policy.tokenizer, token_prompt_template(policy), n, prime=policy_reply_prime(policy))
        traj.start(td[ENV_INDEX].tolist(), chat_dicts(td.get(HISTORY_PROMPT)))
    final_ids: list = [None] * n
    final_mask: list = [None] * n
    kv_counts: dict = {}  # the turn-cache counts of each row, summed over its turns
    # a policy that keeps each row's trajectory itself (VLRolloutPolicy) hands it over when the episode ends
    owned: list = [None] * n if getattr(policy, "owns_trajectories", False) else None
    while td is not None and td.batch_size[0] > 0:
        if traj is None:
            out, h_sum, h_count = _generate(policy, td, chunk_size)
        else:
            rows = td[ENV_INDEX].tolist()
            out, h_sum, h_count = _generate(
                policy, _token_prompts(td, traj.prompts(rows)), chunk_size, TOKEN_POLICY_OUTPUT_KEYS
            )
            replies = out.get(TOKENS_RESPONSE, as_list=True)
            traj.add_replies(rows, replies)
            prompt_texts = [traj.prompt_texts[r] for r in rows]
            out.set(
                HISTORY_FULL,
                reply_histories(policy.tokenizer, prompt_texts, replies, td.get(HISTORY_PROMPT), traj.prime),
            )
        nxt = env.step(out)["next"]
        idx = nxt[ENV_INDEX]
        if h_sum is not None:
            ent_sum.index_add_(0, idx, h_sum)
            ent_count.index_add_(0, idx, h_count)
        returns[idx] += nxt[REWARD].reshape(-1)
        turns[idx] = nxt[TURN]
        valid_turns[idx] += nxt[ACTION_IS_VALID].float()
        if TRUNCATED_BY_T3 in nxt.keys():
            t3_cut[idx] |= nxt[TRUNCATED_BY_T3].reshape(-1)
        if T3_RULE_FIRED in nxt.keys():
            t3_fired[idx] |= nxt[T3_RULE_FIRED].reshape(-1)
        if KV_COUNT_KEYS[0] in out.keys(include_nested=True):
            for key in KV_COUNT_KEYS:
                kv_counts.setdefault(key, torch.zeros(n, dtype=torch.long)).index_add_(0, idx, out.get(key).reshape(-1))
        response_ids = out.get(TOKENS_RESPONSE, as_list=True)
        tokens[idx] += torch.tensor([len(t) for t in response_ids], dtype=torch.long)
        done = nxt[DONE].reshape(-1)
        finished = done.nonzero().reshape(-1).tolist()
        reports_prompt = finished and TOKENS_PROMPT in out.keys(include_nested=True)
        prompt_ids = out.get(TOKENS_PROMPT, as_list=True) if reports_prompt else None
        full = out.get(HISTORY_FULL)
        for row in finished:
            i = int(idx[row])
            final[i] = full[row]
            success[i] = bool(nxt[SUCCESS][row])
            if prompt_ids is not None:
                last_prompt[i] = prompt_ids[row].reshape(-1).to("cpu", torch.long)
                last_response[i] = response_ids[row].reshape(-1).to("cpu", torch.long)
            if traj is not None:
                final_ids[i], final_mask[i] = traj.trajectory(i)
            if owned is not None:
                owned[i] = policy.trajectory(i)
        if finished and callable(release):
            release([int(idx[row]) for row in finished])
        running = (~done).nonzero().reshape(-1)
        td = nxt[running] if running.numel() else None
        if traj is not None and td is not None:
            traj.add_env_turns(idx[running].tolist(), chat_dicts(full[running]), chat_dicts(td.get(HISTORY_PROMPT)))
    records = TensorDict(
        {
            GROUP_ID: groups,
            LEVEL_SEED: levels,
            EPISODE_RETURN: returns,
            SUCCESS: success,
            NUM_TURNS: turns,
            NUM_TOKENS: tokens,
            FORMAT_VALID: valid_turns / turns.clamp_min(1),
            TRUNCATED_BY_T3: t3_cut,
            T3_RULE_FIRED: t3_fired,
            ENTROPY: (ent_sum / ent_count.clamp_min(1)).float(),
        },
        batch_size=[n],
    ).to_lazystack(0)
    records.set(HISTORY_FULL, lazy_stack(final))
    for key, counts in kv_counts.items():
        records.set(key, counts)
    if all(p is not None for p in last_prompt):
        for row, p, r in zip(records.tensordicts, last_prompt, last_response):
            row.set(TOKENS_LAST_PROMPT, p)
            row.set(TOKENS_LAST_RESPONSE, r)
    if traj is not None:
        records.set(TRAJECTORY_REFITS, traj.refits)
        for row, ids, mask in zip(records.tensordicts, final_ids, final_mask):
            row.set(TOKENS_TRAJECTORY, ids)
            row.set(MASKS_TRAJECTORY, mask)
    if owned is not None:
        for row, entries in zip(records.tensordicts, owned):
            for key, value in entries.items():
                row.set(key, value)
    return records
