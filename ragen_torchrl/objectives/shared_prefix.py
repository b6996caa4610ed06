"""Score a batch whose rows share prompts: each shared prompt runs through the model once.

GRPO samples G replies per prompt, so a mini-batch of whole groups holds every prompt G times;
the padded forward of :func:`~ragen_torchrl.objectives.logprobs.token_dist` runs each prompt G
times, forward and backward. :func:`shared_prefix_logits` returns the same logits (those of the
trained positions, as :func:`~ragen_torchrl.objectives.token_distribution.masked_position_logits`
does) from three smaller passes, all with gradients:

1. rows whose tokens before their first trained token are identical form one *prefix group*
   (:func:`prefix_groups`: a prompt group of GRPO, or several groups that share a level);
2. the prefix groups' prompts (minus their last token) are encoded once each, and the head they all
   share (the system prompt) once for the whole batch, into a KV cache
   (:func:`~ragen_torchrl.models.kv_cache.prefix_passes`, also the MI diagnostics' prefix
   encoder);
3. every row's rest (the prompt's last token, then everything from its first trained token on)
   runs on top of its group's cache rows.

Each token attends to exactly the tokens before it, at the same relative positions, so the logits
and gradients are those of the padded pass up to float round-off (tested within 1e-5); the prompt's
activations receive the summed gradient of all rows that read them, which is what the separate
passes add up to. On the single-turn Countdown batch of ``benchmarks/vs_trl.py`` (8 prompts x 8
samples, a ~180-token prompt, 64-token replies) the model reads about a third of the tokens.
The same idea for GRPO training is Prefix Grouper (arXiv 2506.05433).

Activation checkpointing (``model.gradient_checkpointing``) is off inside it: its passes write and read a
KV cache, which transformers drops in a checkpointed layer (the rows would attend to no prompt) and a
recompute would append to a second time (:func:`~ragen_torchrl.models.loading.without_checkpointing`).
The trainer therefore scores with the padded, checkpointed pass when checkpointing is on.

It needs a model whose attention takes an arbitrary padding mask next to a KV cache (``sdpa`` or
``eager`` attention, no sliding window:
:func:`~ragen_torchrl.models.kv_cache.shared_prefix_supported`); the callers fall back to the padded
pass otherwise.

Example:
    >>> import torch
    >>> rows = [torch.tensor([1, 2, 3, 7, 8]), torch.tensor([1, 2, 3, 9]), torch.tensor([1, 5, 6, 7])]
    >>> masks = [torch.tensor([0, 0, 0, 1, 1]), torch.tensor([0, 0, 0, 1]), torch.tensor([0, 0, 0, 1])]
    >>> prefix_groups(rows, [m.bool() for m in masks])
    ([0, 0, 1], [3, 3, 3])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

from ..models.kv_cache import forward_kwargs, row_prefix_cache
from ..models.loading import without_checkpointing
from .token_distribution import logits_at

__all__ = ["prefix_groups", "shared_prefix_logits"]


def prefix_groups(tokens: Sequence[torch.Tensor], masks: Sequence[torch.Tensor]) -> tuple[list[int], list[int]]:
    """Each row's prefix group and its first trained position ``f`` (>= 1).

    Rows whose tokens before ``f`` are identical share a group (numbered in order of first
    appearance). ``f`` is the first masked position after position 0 (position 0 has nothing
    before it to score it); a row without one gets ``f = 0`` and group ``-1`` (nothing to score).
    """
    groups: list[int] = []
    firsts: list[int] = []
    seen: dict[bytes, int] = {}
    for ids, mask in zip(tokens, masks, strict=True):
        pos = torch.nonzero(mask.bool()[1:]).reshape(-1)
        if pos.numel() == 0:
            groups.append(-1)
            firsts.append(0)
            continue
        f = int(pos[0]) + 1
        key = ids[:f].to(torch.long).numpy().tobytes()
        groups.append(seen.setdefault(key, len(seen)))
        firsts.append(f)
    return groups, firsts


def shared_prefix_logits(
    model: torch.nn.Module, tokens: Sequence[torch.Tensor], masks: Sequence[torch.Tensor], **model_kwargs
) -> torch.Tensor:
    """``[N, V]`` logits scoring the ``N`` masked tokens of the rows, in row-major order.

    The values of
    :func:`~ragen_torchrl.objectives.token_distribution.masked_position_logits` on the
    left-padded batch (position ``t`` scored by the output at ``t - 1``; a masked position 0 by
    zero logits), computed with each shared prompt encoded once (see the module docstring).
    Differentiable: the gradient reaches the model's parameters through every pass.

    Args:
        model: a causal LM with a KV cache (:func:`~ragen_torchrl.models.kv_cache.shared_prefix_supported`).
        tokens: one 1-D token tensor per row (unpadded).
        masks: the rows' trained positions (1-D bool, same lengths).
        model_kwargs: extra keyword arguments of the scoring pass.

    Example (two samples of one prompt: the prompt is encoded once):
        >>> import torch
        >>> from transformers import Qwen2Config, Qwen2ForCausalLM
        >>> model = Qwen2ForCausalLM(Qwen2Config(vocab_size=16, hidden_size=8, intermediate_size=8,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
        >>> rows = [torch.tensor([1, 2, 3, 4, 5]), torch.tensor([1, 2, 3, 6])]
        >>> masks = [torch.tensor([0, 0, 0, 1, 1]).bool(), torch.tensor([0, 0, 0, 1]).bool()]
        >>> shared_prefix_logits(model, rows, masks).shape   # 3 trained tokens x vocabulary
        torch.Size([3, 16])
    """
    if len(tokens) != len(masks):
        raise ValueError(f"{len(tokens)} token rows but {len(masks)} masks")
    with without_checkpointing(model):  # the cache passes: see the module docstring
        return _shared_prefix_logits(model, tokens, masks, **model_kwargs)


def _shared_prefix_logits(
    model: torch.nn.Module, tokens: Sequence[torch.Tensor], masks: Sequence[torch.Tensor], **model_kwargs
) -> torch.Tensor:
    for r, (ids, mask) in enumerate(zip(tokens, masks)):
        if ids.shape != mask.shape or ids.ndim != 1:
            raise ValueError(
                f"row {r}: tokens {tuple(ids.shape)} and mask {tuple(mask.shape)} must be equal 1-D shapes"
            )
    device = next(model.parameters()).device
    masks = [m.bool().cpu() for m in masks]
    tokens = [t.to(torch.long).cpu() for t in tokens]
    groups, firsts = prefix_groups(tokens, masks)
    rows = [r for r, g in enumerate(groups) if g >= 0]
    by_row: dict[int, torch.Tensor] = {}
    vocab, dtype = int(model.config.vocab_size), next(model.parameters()).dtype
    if rows:
        contexts: list[torch.Tensor | None] = [None] * (max(groups) + 1)
        for r in rows:
            contexts[groups[r]] = tokens[r][: firsts[r]]
        cache, prefix_mask, row_lens = row_prefix_cache(model, contexts, [groups[r] for r in rows])
        # each row's rest: its prompt's last token, then everything from its first trained token on
        # (rest column j scores token firsts[r] + j)
        rest = [tokens[r][firsts[r] - 1 :] for r in rows]
        trained = [torch.nonzero(masks[r][firsts[r] :]).reshape(-1) for r in rows]
        ids = pad_sequence(rest, batch_first=True).to(device)
        width = ids.shape[1]
        valid = (torch.arange(width).unsqueeze(0) < torch.tensor([t.numel() for t in rest]).unsqueeze(1)).long()
        pos = (row_lens - 1).unsqueeze(1) + torch.arange(width, device=device).unsqueeze(0)
        kwargs = dict(model_kwargs)
        if cache is not None:
            kwargs[forward_kwargs(model)[0]] = cache
        attention = torch.cat([prefix_mask, valid.to(device)], dim=1)
        # the LM head only at the positions some row needs; one gather for every row: indexing row by row
        # would make the backward pass zero-fill and add a whole [rows, columns, V] gradient once per row
        keep = torch.unique(torch.cat(trained))
        counts = [int(t.numel()) for t in trained]
        at_row = torch.repeat_interleave(torch.arange(len(rows)), torch.tensor(counts))
        picked = logits_at(
            model,
            at_row.to(device),
            torch.cat(trained).to(device),
            keep if keep.numel() < width else None,
            input_ids=ids,
            attention_mask=attention,
            position_ids=pos,
            use_cache=True,
            **kwargs,
        )
        vocab, dtype = picked.shape[-1], picked.dtype
        if len(rows) == len(masks) and not any(bool(m[0]) for m in masks if m.numel()):
            return picked  # every row scored, none at position 0: already in row-major order
        by_row = dict(zip(rows, picked.split(counts), strict=True))
    pieces: list[torch.Tensor] = []
    for r, mask in enumerate(masks):
        if mask.numel() and bool(mask[0]):  # position 0: nothing before it scores it
            pieces.append(torch.zeros(1, vocab, dtype=dtype, device=device))
        if r in by_row:
            pieces.append(by_row[r])
    return torch.cat(pieces, 0) if pieces else torch.zeros(0, vocab, dtype=dtype, device=device)
