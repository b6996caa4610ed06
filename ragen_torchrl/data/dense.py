"""The dense training batch: one left-padded ``[N, T]`` TensorDict, built once per update.

Rows are padded on the left, as the log-prob wrapper pads a batch for the model (and as the losses
pad ragged rows), so the last position of every row is aligned. The batch holds the token ids
(padded with the tokenizer's pad id), the attention and assistant masks (``False`` on the
padding), the behaviour and reference log-probs (``0`` on the padding, the value the losses pad
with) and one value per row from the records (advantage, group id, return, ...). Mini-batches and
micro-batches index it; :func:`trim_padding` then drops the columns that are padding in every row
of the selection, so each forward sees exactly the padded tensors a ragged batch of those rows
would give.

Example:
    >>> import torch
    >>> from tensordict import TensorDict, lazy_stack
    >>> rows = lazy_stack([TensorDict({("tokens", "full"): torch.tensor([5, 6, 7])}),
    ...                    TensorDict({("tokens", "full"): torch.tensor([8])})])
    >>> batch = dense_rows(rows, pad_token_id=0)
    >>> batch["tokens", "full"].tolist(), batch["masks", "all_attention_mask"].tolist()
    ([[5, 6, 7], [0, 0, 8]], [[True, True, True], [False, False, True]])
    >>> trim_padding(batch[torch.tensor([1])])["tokens", "full"].tolist()
    [[8]]
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase, lazy_stack

from ..keys import (
    IMAGES_COUNT,
    IMAGES_TRAJECTORY,
    LOG_PROBS_FULL,
    MASKS_ASSISTANT,
    MASKS_ATTENTION,
    REF_LOG_PROBS_FULL,
    TOKENS_FULL,
)

__all__ = ["dense_images", "dense_rows", "pad_left", "per_row_columns", "trim_padding", "unpad_rows"]

#: per-token columns and the value their padding holds (None: the tokenizer's pad id)
_TOKEN_COLUMNS = {
    TOKENS_FULL: None,
    MASKS_ASSISTANT: False,
    MASKS_ATTENTION: False,
    LOG_PROBS_FULL: 0.0,
    REF_LOG_PROBS_FULL: 0.0,
}


#: top-level record keys that hold per-token or text data, never one number per row
_PER_TOKEN_GROUPS = ("tokens", "log_probs", "masks", "ref_log_probs", "history", "text", "images")
#: top-level keys of the conversation views a history-mode wrapper reads
_TEXT_GROUPS = ("history", "text")
#: top-level keys carried over untouched when padding columns are dropped (not per-token: a row's images)
_UNTRIMMED_GROUPS = (*_TEXT_GROUPS, "images")


def pad_left(rows: list[torch.Tensor], value, length: int | None = None) -> torch.Tensor:
    """Stack 1-D (or ``[L, ...]``) tensors into ``[N, T, ...]``, each row's values at the end.

    Example:
        >>> pad_left([torch.tensor([1, 2]), torch.tensor([3])], 0).tolist()
        [[1, 2], [0, 3]]
    """
    if not rows:
        return torch.empty(0, 0)
    length = max(int(r.shape[0]) for r in rows) if length is None else int(length)
    first = rows[0]
    out = torch.full((len(rows), length, *first.shape[1:]), value, dtype=first.dtype, device=first.device)
    for i, r in enumerate(rows):
        if r.shape[0]:
            out[i, length - r.shape[0] :] = r
    return out


def dense_rows(rows: TensorDictBase, pad_token_id: int) -> TensorDict:
    """The per-token columns of ragged rows (a lazy stack, one row per trajectory) as one dense batch.

    Reads ``("tokens", "full")`` (required), the assistant mask and the behaviour and reference
    log-probs when present; the
    attention mask is the row's real tokens (a row's own attention mask, when it has one, marks
    which of its positions are real).
    """
    keys = set(rows.keys(True))
    if TOKENS_FULL not in keys:
        raise KeyError(f"dense_rows needs {TOKENS_FULL!r} in every row (keys: {sorted(map(str, keys))})")
    tokens = list(rows.get(TOKENS_FULL, as_list=True))
    if MASKS_ATTENTION in keys:
        real = [m.bool() for m in rows.get(MASKS_ATTENTION, as_list=True)]
    else:
        real = [torch.ones(t.shape, dtype=torch.bool) for t in tokens]
    n = len(tokens)
    out = TensorDict({TOKENS_FULL: pad_left(tokens, int(pad_token_id))}, batch_size=[n])
    out.set(MASKS_ATTENTION, pad_left(real, False))
    for key, value in _TOKEN_COLUMNS.items():
        if key in (TOKENS_FULL, MASKS_ATTENTION) or key not in keys:
            continue
        col = list(rows.get(key, as_list=True))
        out.set(key, pad_left([c.bool() if value is False else c for c in col], value))
    if IMAGES_TRAJECTORY in keys:
        out.update(dense_images(list(rows.get(IMAGES_TRAJECTORY, as_list=True))))
    return out


def dense_images(rows: list[torch.Tensor]) -> TensorDict:
    """Each row's ``[K_i, 3, H, W]`` images as ``("images", "trajectory")`` ``[N, K, 3, H, W]`` (zeros after a
    row's own) and ``("images", "count")`` ``[N]`` (its ``K_i``).

    Example:
        >>> out = dense_images([torch.ones(2, 3, 4, 4, dtype=torch.uint8), torch.ones(1, 3, 4, 4, dtype=torch.uint8)])
        >>> out["images", "trajectory"].shape, out["images", "count"].tolist(), int(out["images", "trajectory"][1, 1].sum())
        (torch.Size([2, 2, 3, 4, 4]), [2, 1], 0)
    """
    shapes = {tuple(r.shape[1:]) for r in rows if r.shape[0]}
    if len(shapes) > 1:
        raise ValueError(f"the images of one training batch must share one size, got {sorted(shapes)}")
    shape = shapes.pop() if shapes else (3, 1, 1)
    k = max((int(r.shape[0]) for r in rows), default=0)
    out = torch.zeros((len(rows), k, *shape), dtype=torch.uint8)
    for i, r in enumerate(rows):
        if r.shape[0]:
            out[i, : r.shape[0]] = r
    counts = torch.tensor([int(r.shape[0]) for r in rows], dtype=torch.long)
    return TensorDict({IMAGES_TRAJECTORY: out, IMAGES_COUNT: counts}, batch_size=[len(rows)])


def unpad_rows(batch: TensorDictBase, keys=tuple(_TOKEN_COLUMNS)) -> TensorDictBase:
    """The per-token ``keys`` of a dense batch as ragged rows (a lazy stack), each cut to its real tokens.

    Example:
        >>> rows = lazy_stack([TensorDict({("tokens", "full"): torch.tensor([5, 6])}),
        ...                    TensorDict({("tokens", "full"): torch.tensor([8])})])
        >>> [r.tolist() for r in unpad_rows(dense_rows(rows, 0)).get(("tokens", "full"), as_list=True)]
        [[5, 6], [8]]
    """
    attention = batch.get(MASKS_ATTENTION).bool()
    present = [k for k in keys if k in batch.keys(True)]
    columns = {k: batch.get(k) for k in present}
    rows = []
    for i in range(batch.batch_size[0]):
        start = attention.shape[1] - int(attention[i].sum())
        rows.append(TensorDict({k: v[i, start:] for k, v in columns.items()}, batch_size=[]))
    return lazy_stack(rows)


def per_row_columns(records: TensorDictBase) -> TensorDict:
    """Every column of ``records`` that holds one number per row (advantage, group id, return, ...).

    Per-token, per-turn and text columns are left out: the training batch holds its own per-token
    columns, padded.

    Example:
        >>> td = lazy_stack([TensorDict(group_id=torch.tensor(3), turns=torch.ones(2)),
        ...                  TensorDict(group_id=torch.tensor(4), turns=torch.ones(5))])
        >>> per_row_columns(td)["group_id"].tolist(), "turns" in per_row_columns(td).keys()
        ([3, 4], False)
    """
    n = records.batch_size[0]
    out = TensorDict(batch_size=[n])
    first = records[0] if n else None
    for key in records.keys(True, True):
        if first is None:
            break
        if (key[0] if isinstance(key, tuple) else key) in _PER_TOKEN_GROUPS:
            continue
        leaf = first.get(key)
        if not isinstance(leaf, torch.Tensor) or leaf.numel() != 1:
            continue
        values = records.get(key, as_list=True) if _is_lazy(records) else list(records.get(key).unbind(0))
        if all(isinstance(v, torch.Tensor) and v.numel() == 1 for v in values):
            out.set(key, torch.stack([v.reshape(leaf.shape) for v in values]))
    return out


def trim_padding(batch: TensorDictBase) -> TensorDictBase:
    """Drop the leading columns that are padding in every row (no-op on a ragged batch).

    The per-token columns are the entries whose second dimension is the attention mask's ``T``;
    one value per row (``(N,)``, ``(N, 1, 1)``) is left as it is.
    """
    if _is_lazy(batch) or MASKS_ATTENTION not in batch.keys(True):
        return batch
    attention = batch.get(MASKS_ATTENTION)
    if attention.ndim != 2 or attention.shape[1] <= 1:
        return batch
    used = attention.bool().any(0)
    if not bool(used.any()) or bool(used[0]):
        return batch
    first = int(used.long().argmax())
    length = attention.shape[1]
    # the conversations (History, text) are not per-token columns: carried over untouched
    kept = [k for k in _UNTRIMMED_GROUPS if k in batch.keys()]
    out = batch.exclude(*kept).apply(lambda x: x[:, first:] if x.ndim >= 2 and x.shape[1] == length else x)
    for key in kept:
        out.set(key, batch.get(key))
    return out


def _is_lazy(td: TensorDictBase) -> bool:
    from tensordict import LazyStackedTensorDict

    return isinstance(td, LazyStackedTensorDict)
