"""Generate from token prompts, keeping each row's KV cache between turns.

In a multi-turn rollout a row's prompt at turn ``t + 1`` is its prompt at turn ``t``, the reply it
sampled and the env's next observation. Re-encoding the whole conversation every turn makes the
prefill grow with the turn number (by turn 5 of Sokoban a prompt is ~800 tokens, of which only
the last observation is new). :class:`TurnCachePolicy` keeps, per ``env_index``, the KV cache of
everything the model has read of that row (the prompt and the reply minus its last token, whose
keys/values ``generate`` never computes) and at the next turn encodes only the tokens after it.

One call, for ``B`` rows:

1. each row's stored token sequence is compared with its new prompt: when it is a prefix (and at
   least one token is new) its cache is reused; otherwise (a new episode, another prompt) the row
   is prefilled from scratch: every such prompt minus its last token is encoded, each distinct
   prompt once and the head they all share (the system prompt) once
   (:func:`~ragen_torchrl.models.kv_cache.row_prefix_cache`, the MI diagnostics' prefix
   encoder), as :class:`~ragen_torchrl.models.history_wrapper.HistoryTransformersWrapper` does;
2. the rows' caches are assembled into one batch cache (row ``r``'s ``c_r`` cached slots first,
   then holes) and the rows' new tokens into one left-padded block after it; the cache is one
   buffer with room for the block and ``max_new_tokens`` decoding steps, which each forward pass
   writes into in place (transformers' ``DynamicCache`` concatenates at every step and layer,
   copying the whole cache each time); the attention mask
   marks the real slots and ``generate`` takes positions from its cumulative sum, so every real
   token keeps the position it has in the row's own sequence;
3. one ``generate`` call encodes the new tokens (its first forward) and decodes; its sampling
   keywords are the policy's ``generate_kwargs`` (those of
   :func:`ragen_torchrl.collectors.hf_generate_kwargs`), so a logits processor such as
   :class:`~ragen_torchrl.models.entropy_recorder.EntropyRecorder` sees every decoding step; with
   ``sampler="inverse_cdf"`` (the default) each token is drawn by
   :class:`~ragen_torchrl.models.inverse_cdf.InverseCDFSampler` instead of ``torch.multinomial``;
4. each row's real slots are stored under its ``env_index`` (as a reference into the call's buffers:
   they are cut out only when the row's next turn reads them, so a row whose episode ends at this turn,
   every row of a single-turn task, is released without a copy), unless the total of stored tokens
   would exceed ``max_cached_tokens`` (the row then re-prefills at its next turn; the output's
   ``("turn_cache", "over_cap")`` marks them).

Besides the replies, each call writes its per-row counts into the TensorDict it returns
(:data:`~ragen_torchrl.keys.KV_COUNT_KEYS`, long ``(B,)``): ``("turn_cache", "reused")`` /
``("turn_cache", "prefilled")`` (1 when the row's stored cache was reused / the row was encoded from
scratch), ``("turn_cache", "over_cap")`` (1 when its cache was not stored because of the cap) and
``("turn_cache", "prefill_tokens")`` (the prompt tokens encoded for it: a reused row's new tokens, a
fresh row's whole prompt). The collector sums them per trajectory
(:func:`~ragen_torchrl.collectors.collect_rollouts`).

Each token attends to exactly the tokens before it at the same positions, so the logits are those
of a left-padded re-prefill up to float round-off (tested within 1e-4, greedy replies equal over
several turns). A model whose attention takes no padding mask with holes next to a cache
(:func:`~ragen_torchrl.models.kv_cache.shared_prefix_supported` is false: flash
attention, sliding windows), a prompt shorter than two tokens, or ``kv_cache=False`` use a plain
left-padded re-prefill (``kv_cache=False`` still shares the prompt head on supported models).

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from transformers import Qwen2Config, Qwen2ForCausalLM
    >>> _ = torch.manual_seed(0)  # random weights: without a seed a row may pick the end token early
    >>> model = Qwen2ForCausalLM(Qwen2Config(vocab_size=16, hidden_size=8, intermediate_size=8,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, eos_token_id=15, pad_token_id=0))
    >>> policy = TurnCachePolicy(model, generate_kwargs={"max_new_tokens": 3, "do_sample": False})
    >>> prompts = [torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 5])]
    >>> td = TensorDict({"tokens": {"prompt": torch.nested.as_nested_tensor(prompts, layout=torch.jagged)},
    ...     "env_index": torch.tensor([0, 1])}, batch_size=[2])
    >>> out = policy(td)
    >>> replies = out.get(("tokens", "response"), as_list=True)
    >>> [r.numel() for r in replies], out["turn_cache", "prefilled"].tolist()
    ([3, 3], [1, 1])
    >>> nxt = [torch.cat([p, r, torch.tensor([6, 7])]) for p, r in zip(prompts, replies)]
    >>> td = TensorDict({"tokens": {"prompt": torch.nested.as_nested_tensor(nxt, layout=torch.jagged)},
    ...     "env_index": torch.tensor([0, 1])}, batch_size=[2])
    >>> out = policy(td)   # turn 2 encodes only the reply's last token and [6, 7]
    >>> out["turn_cache", "reused"].tolist(), out["turn_cache", "prefill_tokens"].tolist()
    ([1, 1], [3, 3])
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from ..keys import KV_OVER_CAP, KV_PREFILL_TOKENS, KV_PREFILLED, KV_REUSED
from ..rollout_options import check_sampler
from .cascade_attention import ACTIVE_CACHE, CASCADE_ATTENTION, prefix_bias
from .entropy_recorder import attach_entropy_recorder
from .grouped_sdpa import SDPA_IMPLEMENTATIONS
from .inverse_cdf import inverse_cdf_generate_kwargs
from .kv_cache import context_prefix_cache, forward_kwargs, prefix_mask, row_prefix_cache, shared_prefix_supported

__all__ = ["DEFAULT_MAX_CACHED_TOKENS", "TurnCachePolicy", "check_turn_cache_settings", "reusable_length"]

#: default cap on the tokens cached across rows (``rollout.kv_cache_max_tokens``)
DEFAULT_MAX_CACHED_TOKENS = 262144


def check_turn_cache_settings(kv_cache, max_cached_tokens, *, prefix: str = "rollout.") -> None:
    """Raise ``ValueError`` naming the key unless ``kv_cache`` is a bool and ``max_cached_tokens`` an int >= 0.

    Example:
        >>> check_turn_cache_settings(True, -1)
        Traceback (most recent call last):
        ...
        ValueError: rollout.kv_cache_max_tokens must be a non-negative integer (0 = cache nothing), got -1
    """
    if not isinstance(kv_cache, bool):
        raise ValueError(f"{prefix}kv_cache must be true or false, got {kv_cache!r}")
    if isinstance(max_cached_tokens, bool) or not isinstance(max_cached_tokens, int) or max_cached_tokens < 0:
        raise ValueError(
            f"{prefix}kv_cache_max_tokens must be a non-negative integer (0 = cache nothing), got {max_cached_tokens!r}"
        )


def reusable_length(stored: torch.Tensor | None, prompt: torch.Tensor) -> int:
    """How many leading tokens of ``prompt`` a cache of ``stored`` covers: ``len(stored)`` when ``stored`` is a
    prefix of ``prompt`` with at least one token after it (``generate`` needs a token to start from), else 0.

    Example:
        >>> p = torch.tensor([1, 2, 3, 4])
        >>> reusable_length(torch.tensor([1, 2]), p), reusable_length(torch.tensor([1, 9]), p), reusable_length(p, p)
        (2, 0, 0)
    """
    if stored is None:
        return 0
    n = int(stored.numel())
    if n == 0 or n >= prompt.numel() or not torch.equal(prompt[:n], stored):
        return 0
    return n


def _layer_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys, layer.values) for layer in layers]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))  # transformers 4.x


def _stacked(cache) -> torch.Tensor:
    """``[layers, 2, B, H, S, D]``: every layer's keys and values in one tensor."""
    return torch.stack([torch.stack(kv) for kv in _layer_tensors(cache)])


def _sequences(out) -> torch.Tensor:
    """The ids ``generate`` returned, whether as a tensor or as an output with ``sequences``
    (``return_dict_in_generate``, which torchrl's wrapper sets in the ``generate_kwargs`` it shares)."""
    return out if isinstance(out, torch.Tensor) else out.sequences


class _BufferLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys/values are the first slots of preallocated ``[B, H, capacity, D]`` buffers:
    :meth:`update` copies only the new slots where ``DynamicLayer`` concatenates (copying the whole cache)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, filled: int) -> None:
        super().__init__()
        self.device = keys.device
        self.key_buffer, self.value_buffer = keys, values
        self.keys, self.values = keys[..., :filled, :], values[..., :filled, :]
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = self.keys.shape[-2]
        end = n + key_states.shape[-2]
        if not self.holds(end):
            # longer than the buffer, or a cache method rebuilt the keys (batch selection, reordering):
            # a bigger buffer, started from the current keys/values
            grow = max(end, 2 * self.key_buffer.shape[-2])
            self.key_buffer = self.keys.new_empty((*self.keys.shape[:-2], grow, self.keys.shape[-1]))
            self.value_buffer = self.values.new_empty((*self.values.shape[:-2], grow, self.values.shape[-1]))
            self.key_buffer[..., :n, :] = self.keys
            self.value_buffer[..., :n, :] = self.values
        self.key_buffer[..., n:end, :] = key_states
        self.value_buffer[..., n:end, :] = value_states
        self.keys, self.values = self.key_buffer[..., :end, :], self.value_buffer[..., :end, :]
        return self.keys, self.values

    def holds(self, length: int) -> bool:
        """Whether the keys/values are still the buffers' first slots and the buffers hold ``length`` slots."""
        buf = self.key_buffer
        return (
            length <= buf.shape[-2]
            and self.keys.data_ptr() == buf.data_ptr()
            and self.values.data_ptr() == self.value_buffer.data_ptr()
            and self.keys.shape[:-2] == buf.shape[:-2]
        )


def _buffer_cache(buffer: torch.Tensor, filled: int) -> DynamicCache:
    """A ``DynamicCache`` over ``buffer`` (``[layers, 2, B, H, capacity, D]``, its first ``filled`` slots
    filled) whose steps write their keys/values in place.

    ``DynamicCache`` grows each layer with ``torch.cat`` at every decoding step; here every layer's
    keys/values are views of ``buffer`` and a step copies only its new slots. It is a ``DynamicCache``
    (``generate`` treats it as one: no compilation, the same masks and positions).

    Example:
        >>> buf = torch.zeros(1, 2, 1, 1, 4, 2)
        >>> cache = _buffer_cache(buf, 1)
        >>> k, v = cache.update(torch.ones(1, 1, 2, 2), torch.ones(1, 1, 2, 2), 0)
        >>> k.shape[-2], cache.get_seq_length(), buf[0, 0, 0, 0, :, 0].tolist()
        (3, 3, [0.0, 1.0, 1.0, 0.0])
    """
    cache = DynamicCache()
    Cache.__init__(cache, layers=[_BufferLayer(buffer[i, 0], buffer[i, 1], filled) for i in range(buffer.shape[0])])
    return cache


class _PrefixSharingLayer(_BufferLayer):
    """A :class:`_BufferLayer` over each row's own slots only; the prefixes its rows share are kept once per
    prefix (``prefix_keys``/``prefix_values``, ``[C, H, P, D]``, additive mask of their real slots
    ``prefix_mask``) and read by :func:`~ragen_torchrl.models.cascade_attention.cascade_attention`. The
    sequence length it reports counts the prefix slots, so ``generate``'s positions and masks cover
    ``[prefix | own slots]``. Its own slots hold no padding (each row's last prompt token and its reply)."""

    def __init__(self, keys, values, prefix_keys, prefix_values, prefix_mask, group_rows, row_place) -> None:
        super().__init__(keys, values, 0)
        self.prefix_keys, self.prefix_values, self.prefix_mask = prefix_keys, prefix_values, prefix_mask
        self.group_rows, self.row_place = group_rows, row_place

    def get_seq_length(self) -> int:
        return self.prefix_keys.shape[-2] + self.keys.shape[-2]

    def get_mask_sizes(self, query, *args) -> tuple[int, int]:
        # transformers 5 passes the query length, 4.x the query's cache positions
        n = query if isinstance(query, int) else int(query.shape[0])
        return self.get_seq_length() + n, 0


class _StoredSlots:
    """One row's stored keys/values, ``[layers, 2, H, len, D]``, read out of a call's buffers when first used.

    ``pieces`` are ``(source, row, slots)``: row ``row`` of ``source`` at the slot indices ``slots``,
    concatenated in order; ``source`` is a ``[layers, 2, rows, H, S, D]`` tensor or a list of per-layer
    ``(keys, values)``, each ``[rows, H, S, D]`` (the prefixes of a prefix-sharing call, never stacked
    unless a row is read). Most rows end their episode at the turn that stored them (every row of a
    single-turn task) and are released unread, so the gather, a copy of the row's whole cache, is made
    only for the rows that continue. The sources (views of the call's buffers) stay alive until the rows
    that reference them are released or read.

    Example:
        >>> src = torch.arange(24.0).reshape(1, 2, 2, 1, 6, 1)  # 1 layer, keys and values, 2 rows, 6 slots
        >>> s = _StoredSlots([(src, 1, torch.tensor([0, 2])), (src, 0, torch.tensor([5]))])
        >>> s.shape, s.tensor().reshape(-1).tolist()  # keys 6, 8, 5; values 18, 20, 17
        ((1, 2, 1, 3, 1), [6.0, 8.0, 5.0, 18.0, 20.0, 17.0])
        >>> layers = [(src[0, 0], src[0, 1])]  # the same source as per-layer (keys, values)
        >>> _StoredSlots([(layers, 1, torch.tensor([1]))]).tensor().reshape(-1).tolist()
        [7.0, 19.0]
    """

    __slots__ = ("pieces", "shape")

    def __init__(self, pieces: list[tuple[torch.Tensor | list, int, torch.Tensor]]) -> None:
        self.pieces = pieces
        like = self.like()
        layers = pieces[0][0].shape[0] if isinstance(pieces[0][0], torch.Tensor) else len(pieces[0][0])
        length = sum(int(slots.numel()) for _, _, slots in pieces)
        self.shape = (layers, 2, like.shape[-3], length, like.shape[-1])

    def like(self) -> torch.Tensor:
        """A tensor of the stored dtype and device (for ``new_empty``)."""
        src = self.pieces[0][0]
        return src if isinstance(src, torch.Tensor) else src[0][0]

    def tensor(self) -> torch.Tensor:
        """The row's keys/values, ``[layers, 2, H, len, D]`` (a new tensor)."""
        parts = []
        for src, row, slots in self.pieces:
            if isinstance(src, torch.Tensor):
                parts.append(src[:, :, row].index_select(-2, slots.to(src.device)))
            else:  # per-layer (keys, values): only this row's slots are copied
                slots = slots.to(src[0][0].device)
                parts.append(torch.stack([torch.stack((k[row], v[row])).index_select(-2, slots) for k, v in src]))
        return parts[0] if len(parts) == 1 else torch.cat(parts, -2)


def _groups_of(slot: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(group_rows [n, M], row_place [B])`` for rows reading prefix ``slot[r]``: each prefix's rows, padded
    with its first row, and each row's flat place ``c * M + j``.

    Example:
        >>> _groups_of(torch.tensor([1, 0, 1]), 2)
        (tensor([[1, 1],
                [0, 2]]), tensor([2, 0, 3]))
    """
    counts = torch.bincount(slot, minlength=n)
    width = int(counts.max())
    group_rows = torch.empty((n, width), dtype=torch.long)
    row_place = torch.empty_like(slot)
    for c in range(n):
        rows = torch.nonzero(slot == c).reshape(-1)
        group_rows[c] = rows[0] if rows.numel() else 0
        group_rows[c, : rows.numel()] = rows
        row_place[rows] = c * width + torch.arange(rows.numel())
    return group_rows, row_place


@contextlib.contextmanager
def _cascade_attention(model, cache):
    """Run ``model`` with :data:`~ragen_torchrl.models.cascade_attention.CASCADE_ATTENTION` reading ``cache``."""
    config = model.config
    saved = config._attn_implementation
    token = ACTIVE_CACHE.set(cache)
    config._attn_implementation = CASCADE_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = saved
        ACTIVE_CACHE.reset(token)


class TurnCachePolicy(TensorDictModuleBase):
    """Samples a reply for each row's token prompt, reusing the row's KV cache from its previous turn.

    Reads ``("tokens", "prompt")`` (each row's full prompt, ragged 1-D long tensors) and ``env_index``
    (the row's slot in the env: the cache key); writes ``("tokens", "response")``: each row's sampled ids
    exactly as sampled (the end-of-turn token included when sampled, nothing after it). See the module
    docstring for how the cache is reused.

    Args:
        model: a ``transformers`` causal LM.
        generate_kwargs: ``model.generate`` keywords (sampling settings, ``max_new_tokens``; eos/pad ids
            default to the model's ``generation_config``), passed as given.
        kv_cache: keep each row's cache between calls (``rollout.kv_cache``).
        max_cached_tokens: cap on the tokens stored across rows (``rollout.kv_cache_max_tokens``).
        record_entropy: attach an :class:`~ragen_torchrl.models.entropy_recorder.EntropyRecorder`
            (``policy.entropy_recorder``), as :func:`ragen_torchrl.collectors.make_generation_policy` does.
        sampler: ``"inverse_cdf"`` (draw each token with
            :class:`~ragen_torchrl.models.inverse_cdf.InverseCDFSampler`) or ``"multinomial"``
            (``transformers``' ``torch.multinomial``): the same distribution, different seeded streams
            (``rollout.sampler``).
        cascade: when every row of a call is at its first turn and rows share prompts (a GRPO group),
            keep each shared prompt's keys/values once and decode with cascade attention
            (:mod:`~ragen_torchrl.models.cascade_attention`; ``sdpa`` models only): the same attention up to
            float round-off, each prompt read once per step instead of once per row.

    The stored caches belong to the weights that computed them: when a parameter has been written since
    (an optimizer step), the next call clears them. Each call returns its per-row counts with the replies
    (``("turn_cache", ...)``, see the module docstring); ``cached_tokens`` is the number of tokens stored now.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        generate_kwargs: dict | None = None,
        kv_cache: bool = True,
        max_cached_tokens: int = DEFAULT_MAX_CACHED_TOKENS,
        record_entropy: bool = False,
        sampler: str = "inverse_cdf",
        cascade: bool = True,
        prompt_key: tuple[str, str] = ("tokens", "prompt"),
        response_key: tuple[str, str] = ("tokens", "response"),
        env_index_key: str = "env_index",
    ) -> None:
        super().__init__()
        check_turn_cache_settings(kv_cache, max_cached_tokens)
        check_sampler(sampler)
        self.sampler = sampler
        self.cascade = bool(cascade)
        self.model = model
        self.generate_kwargs = dict(generate_kwargs or {})
        self.kv_cache = kv_cache
        self.max_cached_tokens = max_cached_tokens
        self.prompt_key, self.response_key, self.env_index_key = prompt_key, response_key, env_index_key
        self.in_keys = [prompt_key, env_index_key]
        self.out_keys = [response_key]
        #: env_index -> (the tokens the cache covers, its [layers, 2, H, len, D] keys/values, gathered when read)
        self._store: dict[int, tuple[torch.Tensor, _StoredSlots]] = {}
        #: tokens stored now, over every row (bounded by ``max_cached_tokens``)
        self.cached_tokens = 0
        self._weights_seen = self._weights_version()
        self.entropy_recorder = attach_entropy_recorder(self) if record_entropy else None

    # ------------------------------------------------------------------ cache bookkeeping
    def release(self, env_indices: Iterable[int]) -> None:
        """Forget the caches of these rows (finished episodes).

        Example:
            >>> from transformers import Qwen2Config, Qwen2ForCausalLM
            >>> p = TurnCachePolicy(Qwen2ForCausalLM(Qwen2Config(vocab_size=8, hidden_size=8, intermediate_size=8,
            ...     num_hidden_layers=1, num_attention_heads=2)))
            >>> p.release([3]); p.cached_tokens
            0
        """
        for e in env_indices:
            entry = self._store.pop(int(e), None)
            if entry is not None:
                self.cached_tokens -= int(entry[0].numel())

    def clear(self) -> None:
        """Forget every row's cache (a new collection)."""
        self._store.clear()
        self.cached_tokens = 0

    def _weights_version(self) -> int:
        # every in-place write to a parameter (an optimizer step, load_state_dict) bumps its version counter
        return sum(p._version for p in self.model.parameters())

    def cached_rows(self) -> list[int]:
        """The ``env_index`` of every row with a stored cache."""
        return sorted(self._store)

    def stored_cache(self, env_index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens row ``env_index``'s stored cache covers and its keys/values, ``[layers, 2, H, len, D]``
        (a copy, gathered now; ``KeyError`` for a row without one)."""
        tokens, slots = self._store[int(env_index)]
        return tokens, slots.tensor()

    # ------------------------------------------------------------------ generation
    def _eos_ids(self) -> set[int]:
        eos = self.generate_kwargs.get("eos_token_id", getattr(self.model.generation_config, "eos_token_id", None))
        if eos is None:
            return set()
        return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}

    def _pad_id(self) -> int:
        pad = self.generate_kwargs.get("pad_token_id", getattr(self.model.generation_config, "pad_token_id", None))
        if pad is None:
            eos = sorted(self._eos_ids())
            pad = eos[0] if eos else 0
        return int(pad)

    def _sampling_kwargs(self) -> dict:
        """``generate_kwargs`` as :attr:`sampler` draws (read at each call: the dict may be shared and updated)."""
        if self.sampler == "multinomial":
            return self.generate_kwargs
        return inverse_cdf_generate_kwargs(self.generate_kwargs, generation_config=self.model.generation_config)

    def _replies(self, new: torch.Tensor) -> list[torch.Tensor]:
        """Each row's generated ids up to and including its first end-of-sequence token."""
        eos = self._eos_ids()
        out = []
        for row in new.cpu():
            n = row.numel()
            if eos:
                hits = torch.nonzero(torch.isin(row, torch.tensor(sorted(eos)))).reshape(-1)
                if hits.numel():
                    n = int(hits[0]) + 1
            out.append(row[:n].clone())
        return out

    def _plain_generate(self, prompts: Sequence[torch.Tensor], device) -> list[torch.Tensor]:
        """Left-padded re-prefill of the whole prompts (the fallback)."""
        width = max(int(p.numel()) for p in prompts)
        ids = torch.full((len(prompts), width), self._pad_id(), dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, width - p.numel() :] = p
            mask[r, width - p.numel() :] = 1
        out = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **self._sampling_kwargs())
        return self._replies(_sequences(out)[:, width:])

    def _cache_usable(self, prompts: Sequence[torch.Tensor]) -> bool:
        return (
            shared_prefix_supported(self.model)
            and min(int(p.numel()) for p in prompts) >= 2
            and not any(k in self.generate_kwargs for k in ("past_key_values", "cache", "cache_implementation"))
        )

    @torch.no_grad()
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        prompts = [
            torch.as_tensor(p).to("cpu", torch.long).reshape(-1) for p in tensordict.get(self.prompt_key, as_list=True)
        ]
        env_index = [int(e) for e in torch.as_tensor(tensordict.get(self.env_index_key)).reshape(-1).tolist()]
        if len(env_index) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(env_index)} {self.env_index_key} values")
        if len(set(env_index)) != len(env_index):
            raise ValueError(f"{self.env_index_key} must be distinct across the rows of one call, got {env_index}")
        if not prompts:
            raise ValueError("no rows to generate for")
        if min(int(p.numel()) for p in prompts) == 0:
            raise ValueError("every prompt needs at least one token")
        device = next(self.model.parameters()).device
        version = self._weights_version()
        if version != self._weights_seen:  # the stored keys/values belong to the old weights
            self.clear()
            self._weights_seen = version
        over_cap = torch.zeros(len(prompts), dtype=torch.long)
        if self._cache_usable(prompts):
            replies, reuse = self._cached_generate(prompts, env_index, device, over_cap)
        else:
            self.release(env_index)
            reuse = [0] * len(prompts)
            replies = self._plain_generate(prompts, device)
        reused = torch.tensor([int(k > 0) for k in reuse], dtype=torch.long)
        tensordict.set(self.response_key, torch.nested.as_nested_tensor(replies, layout=torch.jagged))
        tensordict.set(KV_REUSED, reused)
        tensordict.set(KV_PREFILLED, 1 - reused)
        tensordict.set(KV_OVER_CAP, over_cap)
        tensordict.set(
            KV_PREFILL_TOKENS, torch.tensor([int(p.numel()) - k for p, k in zip(prompts, reuse, strict=True)])
        )
        return tensordict

    def _cached_generate(
        self, prompts: list[torch.Tensor], env_index: list[int], device, over_cap: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[int]]:
        """The replies and each row's reused cache length (0: encoded from scratch); marks ``over_cap``."""
        reuse = [reusable_length(self._store.get(e, (None,))[0], p) for e, p in zip(env_index, prompts, strict=True)]
        fresh = [r for r, k in enumerate(reuse) if k == 0]
        # cached slots per row: the reused cache, or the fresh prompt minus its last token
        cached = [k if k else int(p.numel()) - 1 for k, p in zip(reuse, prompts, strict=True)]
        prefix_layers: list[tuple[torch.Tensor, torch.Tensor]] = []
        if fresh:
            slot_of: dict[bytes, int] = {}
            row_context = [slot_of.setdefault(prompts[r].numpy().tobytes(), len(slot_of)) for r in fresh]
            contexts: list[torch.Tensor] = [torch.empty(0)] * len(slot_of)
            for r, c in zip(fresh, row_context, strict=True):
                contexts[c] = prompts[r]
            if len(fresh) == len(prompts) and len(contexts) < len(prompts) and self._cascade_usable():
                return self._cascade_generate(prompts, env_index, contexts, row_context, device, over_cap), reuse
            prefix_cache, _, _ = row_prefix_cache(self.model, contexts, row_context)
            prefix_layers = _layer_tensors(prefix_cache)  # [fresh rows, H, plen, D], real slots first
            del prefix_cache
            ref = prefix_layers[0][0]
            n_layers, heads, dim = len(prefix_layers), ref.shape[1], ref.shape[-1]
        else:
            stored = self._store[env_index[0]][1]  # [layers, 2, H, len, D]
            n_layers, heads, dim = stored.shape[0], stored.shape[2], stored.shape[-1]
            ref = stored.like()
        batch, width = len(prompts), max(cached)
        block = max(int(p.numel()) - c for p, c in zip(prompts, cached, strict=True))
        # room for the new tokens and every decoding step: generate writes them in place (_buffer_cache)
        kv = ref.new_empty((n_layers, 2, batch, heads, width + block + self._max_new_tokens(), dim))
        if prefix_layers:
            rows = torch.tensor(fresh, device=kv.device)
            plen = prefix_layers[0][0].shape[-2]
            for layer, (keys, values) in enumerate(prefix_layers):
                # under bf16 autocast keys leave the rotary embedding in float32 and values the projection in bf16
                kv[layer, 0, :, :, :plen].index_copy_(0, rows, keys.to(kv.dtype))
                kv[layer, 1, :, :, :plen].index_copy_(0, rows, values.to(kv.dtype))
        del prefix_layers, ref
        for r, k in enumerate(reuse):
            if k:
                kv[:, :, r, :, :k] = self._store[env_index[r]][1].tensor()
        for r, c in enumerate(cached):  # holes: masked, but read by the attention (finite values)
            kv[:, :, r, :, c:width].zero_()

        # [cached slots, then holes | new tokens, left-padded]; generate reads the ids after the cache
        ids = torch.full((batch, width + block), self._pad_id(), dtype=torch.long)
        mask = torch.zeros((batch, width + block), dtype=torch.long)
        for r, (p, c) in enumerate(zip(prompts, cached, strict=True)):
            n = int(p.numel()) - c
            ids[r, width + block - n :] = p[c:]
            mask[r, :c] = 1
            mask[r, width + block - n :] = 1
        cache = _buffer_cache(kv, width)
        kwargs = {**self._sampling_kwargs(), forward_kwargs(self.model)[0]: cache}
        out = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
        start = width + block
        replies = self._replies(_sequences(out)[:, start:])
        for e in env_index:
            self.release([e])
        if self.kv_cache:
            grown = self._grown(kv, cache)
            heads = [[(grown, r, torch.nonzero(mask[r]).reshape(-1))] for r in range(batch)]
            self._store_rows(grown, heads, start, prompts, replies, env_index, over_cap)
        return replies, reuse

    def _cascade_usable(self) -> bool:
        return self.cascade and getattr(self.model.config, "_attn_implementation", None) in SDPA_IMPLEMENTATIONS

    def _cascade_generate(self, prompts, env_index, contexts, row_context, device, over_cap) -> list[torch.Tensor]:
        """Every row at its first turn, rows sharing prompts: each distinct prompt (minus its last token) is
        cached once and every row decodes over it with cascade attention; the rows' own slots (the prompt's
        last token and the reply) go to a buffer of their own."""
        base, slot, lens, plen = context_prefix_cache(self.model, contexts, row_context)
        prefixes = [(k[..., :plen, :], v[..., :plen, :]) for k, v in _layer_tensors(base)]
        del base
        ref = prefixes[0][0]
        bias = prefix_bias(prefix_mask(lens, plen).bool().to(ref.device), ref.dtype)
        group_rows, row_place = (x.to(ref.device) for x in _groups_of(slot.cpu(), len(contexts)))
        batch, heads, dim = len(prompts), ref.shape[1], ref.shape[-1]
        kv = ref.new_empty((len(prefixes), 2, batch, heads, 1 + self._max_new_tokens(), dim))
        layers = [
            _PrefixSharingLayer(kv[i, 0], kv[i, 1], keys, values, bias, group_rows, row_place)
            for i, (keys, values) in enumerate(prefixes)
        ]
        cache = DynamicCache()
        Cache.__init__(cache, layers=layers)
        # [prefix slots | the prompt's last token]; generate reads the ids after the prefix
        ids = torch.full((batch, plen + 1), self._pad_id(), dtype=torch.long)
        ids[:, -1] = torch.stack([p[-1] for p in prompts])
        mask = torch.cat([prefix_mask(lens[slot].cpu(), plen), torch.ones(batch, 1, dtype=torch.long)], 1)
        kwargs = {**self._sampling_kwargs(), forward_kwargs(self.model)[0]: cache}
        with _cascade_attention(self.model, cache):
            out = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
        replies = self._replies(_sequences(out)[:, plen + 1 :])
        for e in env_index:
            self.release([e])
        if self.kv_cache:
            # each row: its prefix's real slots, its own first slot (the prompt's last token), then its reply's
            own = self._grown(kv, cache, own_slots=True)
            real = torch.nonzero(prefix_mask(lens.cpu(), plen))
            real = [real[real[:, 0] == c, 1] for c in range(len(contexts))]
            first = torch.zeros(1, dtype=torch.long)
            heads = [[(prefixes, c, real[c]), (own, r, first)] for r, c in enumerate(slot.tolist())]
            self._store_rows(own, heads, 1, prompts, replies, env_index, over_cap)
        return replies

    @staticmethod
    def _grown(kv: torch.Tensor, cache, own_slots: bool = False) -> torch.Tensor:
        """``[layers, 2, B, H, len, D]``: the cache after generating (the buffer ``kv`` it was built on, unless
        a layer outgrew it); ``own_slots``: the rows' own slots of a prefix-sharing cache only."""
        layers = getattr(cache, "layers", [])
        seq = layers[0].keys.shape[-2] if own_slots else cache.get_seq_length()
        in_place = all(
            isinstance(layer, _BufferLayer) and layer.key_buffer.data_ptr() == kv[i, 0].data_ptr() and layer.holds(seq)
            for i, layer in enumerate(layers)
        )
        return kv[..., :seq, :] if layers and in_place else _stacked(cache)

    def _max_new_tokens(self) -> int:
        n = self.generate_kwargs.get("max_new_tokens", getattr(self.model.generation_config, "max_new_tokens", None))
        return int(n or 0)

    def _store_rows(self, grown, heads, start, prompts, replies, env_index, over_cap: torch.Tensor) -> None:
        """Store each row's real slots (prompt and reply minus its last token): ``heads[r]``, the pieces
        (:class:`_StoredSlots`) holding its prompt's slots before ``start``, then slots ``start`` onwards of
        ``grown`` (``[layers, 2, B, H, len, D]``, the call's cache); a row over the cap is marked in ``over_cap``."""
        width = grown.shape[-2]
        for r, (p, reply, e) in enumerate(zip(prompts, replies, env_index, strict=True)):
            keep = int(reply.numel()) - 1
            if start + keep > width:  # a cache class that grew differently: nothing trustworthy to keep
                continue
            tokens = torch.cat([p, reply[:keep]])
            if self.cached_tokens + tokens.numel() > self.max_cached_tokens:
                over_cap[r] = 1
                continue
            self._store[e] = (tokens, _StoredSlots([*heads[r], (grown, r, torch.arange(start, start + keep))]))
            self.cached_tokens += int(tokens.numel())
