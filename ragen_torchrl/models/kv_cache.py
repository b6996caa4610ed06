"""KV-cache helpers shared by generation, the loss's shared-prefix pass and the MI cross-scoring.

Distinct contexts are encoded once (:func:`prefix_passes`: a head shared by all prefixes of a pass
encoded only once; :func:`row_prefix_cache`: one cache row per batch row), and later passes run on
top of row-selected copies of that cache (:func:`select_cache`: the base cache is never modified).
Users: the MI cross-scoring (:mod:`ragen_torchrl.diagnostics.cross_scoring`), the loss's shared
prompt pass (:mod:`ragen_torchrl.objectives.shared_prefix`) and generation that reuses each row's
cache (:mod:`ragen_torchrl.models.history_wrapper`, :mod:`ragen_torchrl.models.turn_cache`).
Also here: the ``transformers`` 4.x / 5.x differences in the cache keyword and output attribute
(:func:`forward_kwargs`, :func:`output_cache`) and whether a model's attention takes the
custom masks these passes need (:func:`shared_prefix_supported`).

Example:
    >>> import torch
    >>> prefix_mask(torch.tensor([4, 2]), 3).tolist()   # real cached slots x_j[:-1]
    [[1, 1, 1], [1, 0, 0]]
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from typing import Any

import torch

from .grouped_sdpa import SDPA_IMPLEMENTATIONS

__all__ = [
    "common_prefix_len",
    "context_chunks",
    "context_prefix_cache",
    "forward_kwargs",
    "model_device",
    "output_cache",
    "pad_right",
    "prefix_mask",
    "prefix_passes",
    "row_prefix_cache",
    "select_cache",
    "shared_prefix_supported",
]

# Any valid token id works for padding: padded positions are masked out (or, in the cached
# prefix, causally invisible to real tokens and masked in the second pass).
_PAD_ID = 0


def pad_right(seqs: Sequence[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token sequences into ``[B, max_len]`` ids, with each row's length.

    Example:
        >>> import torch
        >>> ids, lengths = pad_right([torch.tensor([5, 6, 7]), torch.tensor([8])], torch.device("cpu"))
        >>> ids.tolist(), lengths.tolist()
        ([[5, 6, 7], [8, 0, 0]], [3, 1])
    """
    lengths = torch.tensor([int(s.numel()) for s in seqs], dtype=torch.long)
    width = int(lengths.max()) if len(seqs) else 0
    ids = torch.full((len(seqs), width), _PAD_ID, dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : s.numel()] = s
    return ids.to(device), lengths.to(device)


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s parameters (CPU for a parameter-less wrapper).

    Example:
        >>> import torch
        >>> model_device(torch.nn.Linear(2, 2))
        device(type='cpu')
    """
    try:
        return next(model.parameters()).device
    except StopIteration:  # parameter-less wrapper
        return torch.device("cpu")


def shared_prefix_supported(model: torch.nn.Module) -> bool:
    """Whether ``model``'s attention applies an arbitrary mask next to a KV cache.

    The shared-prefix passes hand the model a padding mask with holes or a custom 4-D tree mask,
    which the ``sdpa`` and ``eager`` attention implementations of ``transformers`` apply as given;
    flash-attention kernels take no arbitrary mask, and sliding-window layers would not get their
    window.

    Example:
        >>> from transformers import Qwen2Config, Qwen2ForCausalLM
        >>> shared_prefix_supported(Qwen2ForCausalLM(Qwen2Config(vocab_size=8, hidden_size=8,
        ...     intermediate_size=8, num_hidden_layers=1, num_attention_heads=2)))
        True
    """
    config = getattr(model, "config", None)
    if config is None:
        return False
    if getattr(config, "_attn_implementation", None) not in (*SDPA_IMPLEMENTATIONS, "eager", None):
        return False
    layer_types = getattr(config, "layer_types", None) or ()
    if any("sliding" in str(t) for t in layer_types):
        return False
    return not (getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None))


def forward_kwargs(model: torch.nn.Module) -> tuple[str, bool]:
    """Name of the cache keyword and whether ``logits_to_keep`` is accepted.

    transformers 5.x renamed ``past_key_values`` to ``cache`` (the old name still works with
    a deprecation warning); 4.x only knows ``past_key_values``. Wrappers with ``**kwargs``
    signatures get the old name, which both major versions accept.
    """
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}
    cache_name = "cache" if "cache" in params else "past_key_values"
    return cache_name, "logits_to_keep" in params


def output_cache(out: Any) -> Any:
    cache = getattr(out, "cache", None)  # transformers >= 5
    if cache is None:
        cache = getattr(out, "past_key_values", None)
    return cache


_PLAIN_LAYERS = ("DynamicLayer", "DynamicSlidingWindowLayer")


def _rows_of(t: torch.Tensor, index: torch.Tensor, prefix_len: int) -> torch.Tensor:
    """Rows ``index`` of a ``[B, H, S, D]`` cache tensor, cut to ``prefix_len`` slots.

    When every row comes from the same context the result is an ``expand`` view: no copy
    at all (the forward pass's ``torch.cat`` with the new keys is then the only copy).
    """
    t = t[:, :, :prefix_len]
    first = int(index[0])
    if bool((index == first).all()):
        return t[first : first + 1].expand(index.numel(), *t.shape[1:])
    return t.index_select(0, index)


def select_cache(cache: Any, index: torch.Tensor, prefix_len: int) -> Any:
    """A new cache whose batch row ``r`` is row ``index[r]`` of ``cache``; ``cache`` is untouched.

    The forward pass appends the reasoning's keys/values to the cache it is given, so the
    base cache (one row per context) must not be handed over itself: plain dynamic caches are
    shallow-copied with expanded / gathered tensors (see :func:`_rows_of`); any other cache
    class (hybrid, indexer or recurrent layers, whose extra per-row state we do not know
    about) goes through a deep copy and its own ``batch_select_indices``.
    """
    layers = getattr(cache, "layers", None)
    if layers is not None and all(type(layer).__name__ in _PLAIN_LAYERS for layer in layers):
        new = copy.copy(cache)  # transformers >= 4.56: per-layer objects
        new.layers = []
        for layer in layers:
            nl = copy.copy(layer)
            keys = getattr(layer, "keys", None)
            if isinstance(keys, torch.Tensor) and keys.dim() == 4:
                nl.keys = _rows_of(keys, index, prefix_len)
                nl.values = _rows_of(layer.values, index, prefix_len)
            new.layers.append(nl)
        return new
    if type(cache).__name__ == "DynamicCache" and hasattr(cache, "key_cache"):  # 4.x
        new = copy.copy(cache)
        new.key_cache = [_rows_of(k, index, prefix_len) for k in cache.key_cache]
        new.value_cache = [_rows_of(v, index, prefix_len) for v in cache.value_cache]
        return new
    if isinstance(cache, tuple):  # legacy tuple-of-(key, value) caches
        return tuple(tuple(_rows_of(t, index, prefix_len) for t in layer) for layer in cache)
    if prefix_len != cache.get_seq_length():
        raise NotImplementedError(
            f"cannot trim a {type(cache).__name__} cache; use method='naive' or equal-length contexts"
        )
    sel = copy.deepcopy(cache)
    sel.batch_select_indices(index)
    return sel


def common_prefix_len(seqs: Sequence[torch.Tensor]) -> int:
    """Number of leading tokens shared by every sequence."""
    n = min(int(t.numel()) for t in seqs)
    if n == 0:
        return 0
    stacked = torch.stack([t[:n] for t in seqs])
    same = (stacked == stacked[:1]).all(0)
    return n if bool(same.all()) else int((~same).nonzero()[0])


def _checked_cache(out: Any) -> Any:
    cache = output_cache(out)
    if cache is None:
        raise RuntimeError("model did not return a KV cache; use method='naive'")
    return cache


def prefix_passes(model, contexts, batch_size, has_logits_to_keep, cache_name):
    """Encode the context prefixes ``x_j[:-1]``, longest first, up to ``batch_size`` per pass.

    Yields ``(cols, lens, base, last_tok)``: the context indices of the pass (sorted by
    length, descending), their lengths, the KV cache of their right-padded prefixes (``None``
    when every context is one token long) and their last tokens. A head shared by all the
    prefixes of a pass is encoded once. The last context token is
    scored together with the reasoning (it produces the logits of ``z_0``), so only
    ``x[:-1]`` is cached: no ragged per-context logit row has to be gathered from the prefix
    pass (a ``[B, |x|, V]`` tensor for real vocabularies).
    """
    device = model_device(model)
    ctx_len = torch.tensor([c.numel() for c in contexts])
    # Sorted by length so contexts of similar length share passes (little padding).
    ctx_order = torch.argsort(ctx_len, descending=True, stable=True)
    for p0 in range(0, len(contexts), batch_size):
        cols = ctx_order[p0 : p0 + batch_size]
        lens = ctx_len[cols].to(device)
        width = int(lens.max()) - 1
        last_tok = torch.stack([contexts[j][-1] for j in cols.tolist()]).to(device)
        base = None
        if width > 0:
            prefixes = [contexts[j][:-1] for j in cols.tolist()]
            kwargs = {"logits_to_keep": 1} if has_logits_to_keep else {}
            # No attention mask: with right padding every real prefix token only attends to
            # real tokens before it (causal), so its keys/values are exact; the pads get finite
            # garbage keys/values that the reasoning pass masks out. (A padding mask here would
            # leave all-masked query rows for 1-token contexts, whose undefined outputs would
            # then leak into the cache through later layers.)
            # Chat-templated contexts share a long head (system prompt, instructions): it is
            # encoded once, and each context's rest on top of it (right-padded the same way).
            shared = common_prefix_len(prefixes) if len(prefixes) > 1 else 0
            if shared >= 2:
                out = model(input_ids=prefixes[0][:shared].unsqueeze(0).to(device), use_cache=True, **kwargs)
                head = select_cache(
                    _checked_cache(out), torch.zeros(len(prefixes), dtype=torch.long, device=device), shared
                )
                del out
                rest = [p[shared:] for p in prefixes]
                rest_ids, _ = pad_right(rest, device)
                if rest_ids.shape[1] == 0:  # the prefixes are all the shared head
                    yield cols, lens, head, last_tok
                    continue
                pos = shared + torch.arange(rest_ids.shape[1], device=device)
                out = model(
                    input_ids=rest_ids,
                    position_ids=pos.unsqueeze(0).expand(len(rest), -1),
                    use_cache=True,
                    **{cache_name: head},
                    **kwargs,
                )
            else:
                prefix, _ = pad_right(prefixes, device)
                out = model(input_ids=prefix, use_cache=True, **kwargs)
            base = _checked_cache(out)
            del out
        yield cols, lens, base, last_tok


def context_prefix_cache(model, contexts: Sequence[torch.Tensor], row_context: Sequence[int]):
    """Every distinct context minus its last token encoded once, one cache row per context.

    One :func:`prefix_passes` pass over all of ``contexts`` (their shared head encoded once).
    Returns ``(cache, rows, lens, plen)``: the contexts' cache (``None`` when every context is one
    token long; cache row ``i`` holds the context of length ``lens[i]``, its real slots first, right-padded
    to ``plen``), each row's cache row (row ``r`` reads ``contexts[row_context[r]]``), the contexts'
    lengths in cache-row order and the longest cached prefix ``plen = max(lens) - 1``.

    Example (three rows, two distinct contexts: each context is encoded once):
        >>> from transformers import Qwen2Config, Qwen2ForCausalLM
        >>> model = Qwen2ForCausalLM(Qwen2Config(vocab_size=16, hidden_size=8, intermediate_size=8,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
        >>> contexts = [torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 5])]
        >>> cache, rows, lens, plen = context_prefix_cache(model, contexts, [0, 1, 0])
        >>> cache.layers[0].keys.shape[0], rows.tolist(), lens.tolist(), plen
        (2, [0, 1, 0], [4, 3], 3)
    """
    cache_name, has_logits_to_keep = forward_kwargs(model)
    cols, lens, base, _ = next(iter(prefix_passes(model, contexts, len(contexts), has_logits_to_keep, cache_name)))
    slot = torch.empty(len(contexts), dtype=torch.long)
    slot[cols.cpu()] = torch.arange(cols.numel())
    rows = slot[torch.as_tensor(list(row_context), dtype=torch.long)].to(lens.device)
    return base, rows, lens, int(lens.max()) - 1


def row_prefix_cache(model, contexts: Sequence[torch.Tensor], row_context: Sequence[int]):
    """Each row's context minus its last token in one KV cache, every distinct context encoded once.

    ``contexts`` are distinct; row ``r`` reads ``contexts[row_context[r]]``. One
    :func:`prefix_passes` pass over all of them (their shared head encoded once). Returns
    ``(cache, mask, lens)``: the rows' cache (``None`` when every context is one token long), the
    ``[B, plen]`` mask of its real slots and each row's context length. Gradients flow through the
    cache when grad is enabled (the loss's shared-prefix pass).
    """
    base, rows, lens, plen = context_prefix_cache(model, contexts, row_context)
    row_lens = lens[rows]
    if base is None:
        return None, row_lens.new_zeros((rows.numel(), 0)), row_lens
    return select_cache(base, rows, plen), prefix_mask(row_lens, plen), row_lens


def prefix_mask(lens: torch.Tensor, plen: int) -> torch.Tensor:
    """``[B, plen]`` 0/1 mask of the real (unpadded) cached prefix slots ``x_j[:-1]``."""
    return (torch.arange(plen, device=lens.device).unsqueeze(0) < (lens - 1).unsqueeze(1)).long()


def context_chunks(pcols: torch.Tensor, plens: torch.Tensor, per_pass: int):
    """Split one prefix pass's contexts into scoring passes of ``per_pass`` contexts.

    Yields ``(local, cols, lens, plen)``: row indices into the prefix cache (on the model's
    device), the context indices, their lengths and the longest cached prefix of the chunk
    (the chunk's first, as the pass is sorted by length, descending).
    """
    for c0 in range(0, pcols.numel(), per_pass):
        local = torch.arange(c0, min(c0 + per_pass, pcols.numel()), device=plens.device)
        lens = plens[local]
        yield local, pcols[local.cpu()], lens, int(lens.max()) - 1
