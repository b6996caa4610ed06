"""Log-prob plumbing: score conversations with the policy and attach behaviour data for the losses.

Every loss in :mod:`ragen_torchrl.objectives` reads per-token log-probs of the trained
conversations. Its actor is a ``TransformersWrapper`` in log-prob mode (``generate=False``)
over the same model that generates (:func:`make_logprob_policy`).

Behaviour log-probs are recomputed with that same wrapper on exactly the token sequences
that are trained (:func:`compute_behaviour_log_probs`): torchrl's generate path sets the first
response token's log-prob to 0 and decoding/re-tokenising a history is not token-exact,
so log-probs from generation would not line up with the trained tokens.

Per-row results are stored unpadded (:func:`attach_training_data`); ``GRPOLoss`` re-pads
them on the left for each mini-batch, which matches the wrapper's left padding, so
mini-batches can be reshuffled freely between PPO epochs.

Example:
    >>> from ragen_torchrl.objectives.logprobs import masked_mean
    >>> import torch
    >>> masked_mean(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([True, True, False])).item()
    2.0
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase, lazy_stack
from torchrl.modules.llm import TransformersWrapper

from ..keys import HISTORY_FULL, HISTORY_PROMPT, LOG_PROBS_FULL, MASKS_ASSISTANT, MASKS_ATTENTION, TOKENS_FULL
from ..models.loading import wrapper_chat_template

__all__ = [
    "attach_training_data",
    "compute_behaviour_log_probs",
    "make_logprob_policy",
    "masked_mean",
    "tokenize_conversations",
    "training_view",
]


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over ``mask`` (0 when the mask is empty)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp_min(1)


def make_logprob_policy(model, tokenizer) -> TransformersWrapper:
    """History-mode ``TransformersWrapper`` that scores (does not generate) conversations."""
    return TransformersWrapper(
        model,
        tokenizer=tokenizer,
        chat_template=wrapper_chat_template(tokenizer),
        input_mode="history",
        generate=False,
        return_log_probs=True,
        pad_output=True,
    )


def training_view(records: TensorDictBase) -> TensorDictBase:
    """The input layout the log-prob wrapper expects: the conversation at ``("history", "prompt")``."""
    td = records.copy()
    td.set(HISTORY_PROMPT, records.get(HISTORY_FULL))
    return td


_BEHAVIOUR_KEYS = (
    TOKENS_FULL,
    LOG_PROBS_FULL,
    MASKS_ASSISTANT,
    MASKS_ATTENTION,
)


def _per_row(out: TensorDictBase, key) -> list[torch.Tensor]:
    """``key`` of the wrapper output as one tensor per row, padded (``pad_output=True``) or not."""
    try:
        return list(out.get(key, as_list=True))
    except KeyError:
        raise KeyError(
            f"the log-prob wrapper returned no {key!r}; build it with generate=False, return_log_probs=True "
            "and input_mode='history' (make_logprob_policy does)"
        ) from None


def tokenize_conversations(actor: TransformersWrapper, records: TensorDictBase) -> TensorDictBase:
    """The rows :func:`compute_behaviour_log_probs` returns, without the forward pass.

    Tokens and masks come from the same chat-template call the log-prob wrapper makes, so they
    equal the wrapper's; ``("log_probs", "full")`` is NaN (not computed: a loss run inside
    :meth:`~ragen_torchrl.objectives.metrics.TokenStatsMixin.current_as_behaviour` does not
    read it, and any other use drops those tokens from the loss rather than trusting a
    made-up value).
    """
    history = records.get(HISTORY_FULL)
    kwargs = {"add_generation_prompt": False, "return_assistant_tokens_mask": True, "tokenize": True}
    if getattr(actor, "chat_template_name", None) is not None:
        kwargs["chat_template_name"] = actor.chat_template_name
    if getattr(actor, "chat_template", None) is not None:
        kwargs["chat_template"] = actor.chat_template
    enc = history.apply_chat_template(tokenizer=actor.tokenizer, padding=False, return_dict=True, **kwargs)
    rows = []
    for ids, attn, amask in zip(
        enc.get("input_ids", as_list=True),
        enc.get("attention_mask", as_list=True),
        enc.get("assistant_masks", as_list=True),
    ):
        keep = attn.bool()
        ids = ids[keep]
        rows.append(
            TensorDict(
                {
                    TOKENS_FULL: ids,
                    LOG_PROBS_FULL: torch.full(ids.shape, float("nan")),
                    MASKS_ASSISTANT: amask.bool()[keep],
                    MASKS_ATTENTION: keep[keep],
                },
                batch_size=[],
            )
        )
    return lazy_stack(rows)


@torch.no_grad()
def compute_behaviour_log_probs(
    actor: TransformersWrapper, records: TensorDictBase, chunk_size: int = 32, *, skip=None
) -> TensorDictBase:
    """Score every conversation with the current policy; return per-row unpadded tensors.

    The result (lazy stack, one row per trajectory) holds ``("tokens", "full")``,
    ``("log_probs", "full")``, ``("masks", "all_assistant_mask")`` and
    ``("masks", "all_attention_mask")``, each cut to the row's real tokens.

    ``actor`` is a history-mode log-prob ``TransformersWrapper`` (:func:`make_logprob_policy`);
    it may pad its outputs (``pad_output=True``, as ``make_logprob_policy`` builds it) or not
    (torchrl's default ``pad_output=False``, ragged per-row outputs): both give the same rows.
    ``records`` hold the conversations at ``("history", "full")``.

    ``skip``: row indices (or a boolean row mask) that are only tokenised
    (:func:`tokenize_conversations`; their log-probs are NaN), e.g. the rows of the first,
    exactly on-policy mini-batch, whose behaviour log-probs the loss takes from its own forward.
    """
    n = records.batch_size[0]
    scored = torch.ones(n, dtype=torch.bool)
    if skip is not None:
        scored[torch.as_tensor(skip).reshape(-1)] = False
    if not scored.all():
        rows: list = [None] * n
        unscored = torch.nonzero(~scored).reshape(-1)
        for i, row in zip(unscored.tolist(), tokenize_conversations(actor, records[unscored]).unbind(0)):
            rows[i] = row
        if scored.any():
            idx = torch.nonzero(scored).reshape(-1)
            for i, row in zip(idx.tolist(), compute_behaviour_log_probs(actor, records[idx], chunk_size).unbind(0)):
                rows[i] = row
        return lazy_stack(rows)
    rows = []
    for start in range(0, n, chunk_size):
        chunk = training_view(records[start : start + chunk_size])
        out = actor(chunk)
        tokens, lps, amask, attn = (_per_row(out, k) for k in _BEHAVIOUR_KEYS)
        for tok_i, lp_i, am_i, at_i in zip(tokens, lps, amask, attn):
            keep = at_i.bool()
            rows.append(
                TensorDict(
                    {
                        TOKENS_FULL: tok_i[keep],
                        LOG_PROBS_FULL: lp_i[keep].float(),
                        MASKS_ASSISTANT: am_i.bool()[keep],
                        MASKS_ATTENTION: keep[keep],
                    },
                    batch_size=[],
                )
            )
    return lazy_stack(rows)


def attach_training_data(records: TensorDictBase, behaviour: TensorDictBase) -> TensorDictBase:
    """Records + behaviour tensors in the layout ``GRPOLoss`` reads."""
    # row by row: the tensors are ragged, so they cannot be set as one stacked entry
    view = training_view(records)
    return lazy_stack([row.update(beh) for row, beh in zip(view.unbind(0), behaviour.unbind(0))])
