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


@torch.no_grad()
def compute_behaviour_log_probs(
    actor: TransformersWrapper, records: TensorDictBase, chunk_size: int = 32
) -> TensorDictBase:
    """Score every conversation with the current policy; return per-row unpadded tensors.

    The result (lazy stack, one row per trajectory) holds ``("tokens", "full")``,
    ``("log_probs", "full")``, ``("masks", "all_assistant_mask")`` and
    ``("masks", "all_attention_mask")``, each cut to the row's real tokens.

    ``actor`` is a history-mode log-prob ``TransformersWrapper`` (:func:`make_logprob_policy`);
    it may pad its outputs (``pad_output=True``, as ``make_logprob_policy`` builds it) or not
    (torchrl's default ``pad_output=False``, ragged per-row outputs): both give the same rows.
    ``records`` hold the conversations at ``("history", "full")``.
    """
    n = records.batch_size[0]
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
