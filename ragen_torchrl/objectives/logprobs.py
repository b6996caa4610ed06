"""Log-prob plumbing: score conversations with the policy and attach behaviour data for the losses.

Every loss in :mod:`ragen_torchrl.objectives` reads per-token log-probs of the trained
conversations. Its actor is a ``TransformersWrapper`` in log-prob mode (``generate=False``)
over the same model that generates (:func:`make_logprob_policy`).

Behaviour log-probs are recomputed with that same wrapper on exactly the token sequences
that are trained (:func:`compute_behaviour_log_probs`): torchrl's generate path sets the first
response token's log-prob to 0 and decoding/re-tokenising a history is not token-exact,
so log-probs from generation would not line up with the trained tokens.

Each conversation is tokenised once, with the wrapper's own chat-template call
(:func:`tokenize_conversations`); the behaviour pass and every loss forward then score those
stored token ids (:func:`token_dist`: the wrapper's left padding and model call) instead of
applying the chat template again. The first mini-batch of a one-epoch update needs no behaviour
pass at all (its rows are only tokenised; the loss runs inside ``current_as_behaviour``).

The training batch is built once, dense and padded on the left as the wrapper pads
(:func:`behaviour_batch`, :func:`attach_training_data`, :mod:`ragen_torchrl.data.dense`);
mini-batches index it and each loss forward drops the columns that are padding in all of its
rows, so mini-batches can be reshuffled freely between PPO epochs. The losses also accept ragged
per-row tensors (a lazy stack, :func:`compute_behaviour_log_probs`'s rows), which they pad on the left.

Example:
    >>> from ragen_torchrl.objectives.logprobs import masked_mean
    >>> import torch
    >>> masked_mean(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([True, True, False])).item()
    2.0
"""

from __future__ import annotations

import math

import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase, lazy_stack
from torchrl.modules.distributions import LLMMaskedCategorical
from torchrl.modules.llm import TransformersWrapper

from ..checks import check_choice
from ..data.dense import dense_rows, per_row_columns, trim_padding, unpad_rows
from ..envs.messages import chat_dicts
from ..keys import (
    HISTORY_FULL,
    HISTORY_PROMPT,
    IMAGES_COUNT,
    IMAGES_TRAJECTORY,
    LOG_PROBS_FULL,
    MASKS_ASSISTANT,
    MASKS_ATTENTION,
    MASKS_TRAJECTORY,
    NUM_TURNS,
    TOKENS_FULL,
    TOKENS_LAST_PROMPT,
    TOKENS_LAST_RESPONSE,
    TOKENS_TRAJECTORY,
)
from ..models.chat_template import assistant_token_masks
from ..models.kv_cache import shared_prefix_supported
from ..models.loading import resolved_chat_template, wrapper_chat_template
from ..models.priming import reply_prime, unmask_primed
from ..models.vision import suppress_vision_tokens
from .shared_prefix import shared_prefix_logits
from .token_distribution import CompactMaskedCategorical, in_parameter_dtype, masked_position_logits

__all__ = [
    "TRAIN_ON",
    "attach_training_data",
    "behaviour_batch",
    "check_temperature",
    "compute_behaviour_log_probs",
    "make_logprob_policy",
    "masked_mean",
    "scoring_temperature",
    "token_dist",
    "tokenize_conversations",
    "training_view",
]


def _is_lazy(td: TensorDictBase) -> bool:
    return isinstance(td, LazyStackedTensorDict)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over ``mask`` (0 when the mask is empty)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp_min(1)


def make_logprob_policy(
    model, tokenizer, *, reply_prime: str = "", processor=None, temperature: float = 1.0
) -> TransformersWrapper:
    """History-mode ``TransformersWrapper`` that scores (does not generate) conversations.

    ``reply_prime``: the text the rollout policy appended to every prompt (``"<think>"`` under
    ``rollout.prime_think``); the training rows leave it out of the assistant mask.
    ``processor``: a vision-language model's :class:`~ragen_torchrl.models.vision.VLProcessor`
    (``actor.vl_processor``): :func:`token_dist` passes a batch's images to the model with it.
    ``temperature``: the rollout's sampling temperature (``actor.temperature``): :func:`token_dist`
    scores ``log_softmax(logits / temperature)``, the distribution the tokens were drawn from, in
    the behaviour, reference and loss passes alike (0, greedy rollouts, scores at 1).
    """
    temperature = check_temperature(temperature)
    actor = TransformersWrapper(
        model,
        tokenizer=tokenizer,
        chat_template=wrapper_chat_template(tokenizer),
        input_mode="history",
        generate=False,
        return_log_probs=True,
        pad_output=True,
    )
    actor.reply_prime = reply_prime
    actor.vl_processor = processor
    actor.temperature = temperature
    return actor


def check_temperature(temperature) -> float:
    """``temperature`` as a float, or a ``ValueError`` naming it (a finite number >= 0).

    Example:
        >>> check_temperature(1), check_temperature(0.5)
        (1.0, 0.5)
    """
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    return float(temperature)


def scoring_temperature(actor) -> float:
    """The temperature ``actor``'s scores divide the logits by: its ``temperature``, 1 when it has none or 0.

    Greedy rollouts (temperature 0) have no softmax to match; they are scored at 1.

    Example:
        >>> class Actor:
        ...     temperature = 0.5
        >>> scoring_temperature(Actor()), scoring_temperature(object())
        (0.5, 1.0)
    """
    return float(getattr(actor, "temperature", 1.0) or 1.0)


def _tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    # the rollout drew from softmax(logits / T): score that distribution (verl divides in both passes)
    return logits if temperature == 1.0 else logits / temperature


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


#: what the update trains: the ids the policy generated, or the decoded conversation re-tokenised
TRAIN_ON = ("generated", "retokenized")


def tokenize_conversations(
    actor: TransformersWrapper, records: TensorDictBase, *, train_on: str = "generated"
) -> TensorDictBase:
    """The rows :func:`compute_behaviour_log_probs` returns, without the forward pass.

    ``train_on="generated"`` (default): where the records hold each row's token trajectory
    (``("tokens", "trajectory")`` and ``("masks", "trajectory_assistant")``, which
    :func:`~ragen_torchrl.collectors.grouped.collect_rollouts` stores under
    ``rollout.trajectory=tokens``), a row is that sequence and mask as they are: every reply of
    every turn exactly as sampled, nothing rendered or tokenised again.
    Else, where the records hold the ids of each row's last turn
    (``("tokens", "last_prompt")`` and ``("tokens", "last_response")``, which
    :func:`~ragen_torchrl.collectors.grouped.collect_rollouts` stores when the policy reports its
    prompt ids, as torchrl's wrappers do), a row is those ids: the prompt exactly as the policy read
    it at its last turn, then the reply exactly as it sampled it (its end-of-turn token when it
    stopped, none when the token budget cut it). The reply is trained; so are the earlier replies
    inside that prompt, at the assistant positions of the same chat-template call (a row whose
    template call does not reproduce the prompt ids falls back to re-tokenising). Nothing is
    decoded and tokenised again, so a reply whose text does not round-trip (random or byte-level
    tokens) is still trained as sampled.

    ``train_on="retokenized"`` (and records without those ids): the whole conversation is
    rendered by the wrapper's chat template and tokenised (RAGEN's reference trains the decoded
    text this way); tokens and masks equal the log-prob wrapper's.

    With an ``actor.reply_prime`` (``"<think>"`` under ``rollout.prime_think``) the tag that opens
    each reply was part of the prompt the policy read: it is left out of the assistant mask in
    both modes (:func:`~ragen_torchrl.models.priming.unmask_primed`).

    ``("log_probs", "full")`` is NaN (not computed: a loss run inside
    :meth:`~ragen_torchrl.objectives.base.TokenStatsMixin.current_as_behaviour` does not
    read it, and any other use drops those tokens from the loss rather than trusting a
    made-up value).
    """
    check_choice("train_on", train_on, TRAIN_ON)
    keys = records.keys(True)
    if IMAGES_TRAJECTORY in keys and (train_on != "generated" or TOKENS_TRAJECTORY not in keys):
        raise ValueError(
            f"records with images are scored on their token trajectories: algo.train_on=generated, got {train_on!r}"
        )
    if train_on == "generated" and TOKENS_TRAJECTORY in keys and MASKS_TRAJECTORY in keys:
        ids, masks = records.get(TOKENS_TRAJECTORY, as_list=True), records.get(MASKS_TRAJECTORY, as_list=True)
        images = records.get(IMAGES_TRAJECTORY, as_list=True) if IMAGES_TRAJECTORY in keys else [None] * len(ids)
        return lazy_stack([_row(t.to(torch.long), m.to(torch.bool), i) for t, m, i in zip(ids, masks, images)])
    if train_on == "retokenized" or TOKENS_LAST_PROMPT not in keys or TOKENS_LAST_RESPONSE not in keys:
        return _retokenized(actor, records)
    prompts = [t.to(torch.long) for t in records.get(TOKENS_LAST_PROMPT, as_list=True)]
    replies = [t.to(torch.long) for t in records.get(TOKENS_LAST_RESPONSE, as_list=True)]
    n = len(prompts)
    prompt_masks: list[torch.Tensor | None] = [torch.zeros(p.shape, dtype=torch.bool) for p in prompts]
    # rows past their first turn carry earlier replies inside the prompt: mark them as the template does
    turns = records.get(NUM_TURNS) if NUM_TURNS in keys else None
    later = list(range(n)) if turns is None else torch.nonzero(turns.reshape(-1) > 1).reshape(-1).tolist()
    if later:
        for i, mask in zip(later, _prompt_assistant_masks(actor, records, later, prompts)):
            prompt_masks[i] = mask
    rows = [
        None if m is None else _row(torch.cat([p, r]), torch.cat([m, torch.ones(r.shape, dtype=torch.bool)]))
        for p, r, m in zip(prompts, replies, prompt_masks)
    ]
    missing = [i for i, row in enumerate(rows) if row is None]
    if missing:
        for i, row in zip(missing, _retokenized(actor, records[torch.tensor(missing)]).unbind(0)):
            rows[i] = row
    return lazy_stack(rows)


def _row(ids: torch.Tensor, assistant: torch.Tensor, images: torch.Tensor | None = None) -> TensorDictBase:
    row = TensorDict(
        {
            TOKENS_FULL: ids,
            LOG_PROBS_FULL: torch.full(ids.shape, float("nan")),
            MASKS_ASSISTANT: assistant,
            MASKS_ATTENTION: torch.ones(ids.shape, dtype=torch.bool),
        },
        batch_size=[],
    )
    if images is not None:  # the sequence's images, in the order of its placeholders
        row.set(IMAGES_TRAJECTORY, images)
    return row


def _prompt_assistant_masks(
    actor, records: TensorDictBase, rows: list[int], prompts: list[torch.Tensor]
) -> list[torch.Tensor | None]:
    """The assistant mask of each row's last prompt (``None`` where the template does not give its ids)."""
    history = records.get(HISTORY_FULL)[torch.tensor(rows)]
    conversations = chat_dicts(history)
    out: list[torch.Tensor | None] = [None] * len(rows)
    usable = [k for k, c in enumerate(conversations) if c and c[-1]["role"] == "assistant"]
    if not usable:
        return out
    enc = assistant_token_masks(
        actor.tokenizer,
        [conversations[k][:-1] for k in usable],
        resolved_chat_template(actor),
        add_generation_prompt=True,
    )
    prime = reply_prime(actor)
    for k, (ids, amask) in zip(usable, enc):
        prompt, n = prompts[rows[k]], len(ids)
        if torch.equal(ids, prompt):
            out[k] = amask
        elif (  # a primed prompt: the template's prompt, then the prime's ids (prompt tokens, not trained)
            prime
            and n < len(prompt)
            and torch.equal(prompt[:n], ids)
            and actor.tokenizer.decode(prompt[n:].tolist()) == prime
        ):
            out[k] = torch.cat([amask, torch.zeros(len(prompt) - n, dtype=torch.bool)])
        if out[k] is not None and prime:  # earlier replies start with the prime too: never sampled
            out[k] = unmask_primed(prompt, out[k], actor.tokenizer, prime)
    return out


def _retokenized(actor: TransformersWrapper, records: TensorDictBase) -> TensorDictBase:
    """Rows of the conversations rendered by the wrapper's chat template and tokenised (the wrapper's tokens)."""
    # the assistant tokens by construction (models.chat_template): any template, with or without a generation block
    enc = assistant_token_masks(actor.tokenizer, chat_dicts(records.get(HISTORY_FULL)), resolved_chat_template(actor))
    prime = reply_prime(actor)
    rows = []
    for ids, amask in enc:
        if prime:  # the primed tag opening each reply was a prompt token: not trained
            amask = unmask_primed(ids, amask, actor.tokenizer, prime)
        rows.append(_row(ids, amask))
    return lazy_stack(rows)


@torch.no_grad()
def compute_behaviour_log_probs(
    actor: TransformersWrapper, records: TensorDictBase, chunk_size: int = 32, **options
) -> TensorDictBase:
    """Score every conversation with the current policy; return per-row unpadded tensors.

    The rows of :func:`behaviour_batch` (which the trainer uses: one dense batch) cut to their
    real tokens.

    The result (lazy stack, one row per trajectory) holds ``("tokens", "full")``,
    ``("log_probs", "full")``, ``("masks", "all_assistant_mask")`` and
    ``("masks", "all_attention_mask")``, each cut to the row's real tokens.

    ``actor`` is a history-mode log-prob ``TransformersWrapper`` (:func:`make_logprob_policy`;
    ``pad_output`` either way). The conversations are tokenised once
    (:func:`tokenize_conversations`: the wrapper's own chat-template call) and scored from those
    tokens (:func:`token_dist`: the wrapper's left padding and model call), ``chunk_size`` rows
    per forward; the values equal the wrapper's own log-prob output (first token 0, as torchrl's).
    Another actor (not a ``TransformersWrapper``) is called on the conversations instead.
    ``records`` hold the conversations at ``("history", "full")``; records that already hold the
    tokens and masks (a training batch, for the reference pass) are scored as they are.

    ``options`` are :func:`behaviour_batch`'s keywords. ``skip``: row indices (or a boolean row
    mask) that are only tokenised (their log-probs are NaN), e.g. the rows of the first, exactly on-policy mini-batch, whose behaviour log-probs the
    loss takes from its own forward.

    ``train_on``: which token ids the rows hold (:func:`tokenize_conversations`): ``"generated"``
    (the ids the policy read and sampled, where the records carry them) or ``"retokenized"``.

    ``shared_prefix``: score only the assistant tokens (the ones a loss reads; every other
    position is NaN), with each prompt shared by several rows of a chunk run through the model
    once (:func:`~ragen_torchrl.objectives.shared_prefix.shared_prefix_logits`); the assistant
    log-probs equal the full pass's up to float round-off.
    """
    return unpad_rows(behaviour_batch(actor, records, chunk_size, **options))


@torch.no_grad()
def behaviour_batch(
    actor: TransformersWrapper,
    records: TensorDictBase,
    chunk_size: int = 32,
    *,
    skip=None,
    shared_prefix: bool = False,
    train_on: str = "generated",
) -> TensorDict:
    """:func:`compute_behaviour_log_probs` as one dense, left-padded ``[N, T]`` batch.

    Token ids, attention and assistant masks and behaviour log-probs
    (:func:`~ragen_torchrl.data.dense.dense_rows`: pad id, ``False`` and ``0`` on the padding).
    Records that already hold the tokens and masks (a training batch, dense or ragged) are scored
    as they are.
    """
    n = records.batch_size[0]
    scored = torch.ones(n, dtype=torch.bool)
    if skip is not None:
        scored[torch.as_tensor(skip).reshape(-1)] = False
    pad = getattr(getattr(actor, "tokenizer", None), "pad_token_id", None)
    pad = 0 if pad is None else int(pad)
    if not isinstance(actor, TransformersWrapper):
        batch = dense_rows(_wrapper_log_probs(actor, records, chunk_size), pad)
        lp = batch.get(LOG_PROBS_FULL)
        lp[~scored] = torch.where(batch.get(MASKS_ATTENTION)[~scored], float("nan"), 0.0)
        return batch
    stored = (TOKENS_FULL, MASKS_ASSISTANT, MASKS_ATTENTION)
    if all(key in records.keys(True) for key in stored):
        # already tokenised (e.g. the reference pass over a training batch): score those tokens
        images = [k for k in (IMAGES_TRAJECTORY, IMAGES_COUNT) if k in records.keys(True)]
        batch = records.select(*stored, *images)
        batch = dense_rows(batch, pad) if _is_lazy(batch) else batch.clone(recurse=False)
    else:
        batch = dense_rows(tokenize_conversations(actor, records, train_on=train_on), pad)
    batch.set(LOG_PROBS_FULL, score_tokens(actor, batch, chunk_size, rows=scored, shared_prefix=shared_prefix))
    return batch


@torch.no_grad()
def score_tokens(
    actor: TransformersWrapper,
    batch: TensorDictBase,
    chunk_size: int = 32,
    *,
    rows=None,
    shared_prefix: bool = False,
) -> torch.Tensor:
    """Log-probs ``[N, T]`` of a dense batch's tokens under ``actor``'s model, ``chunk_size`` rows per forward.

    Each chunk is cut to its own longest row (:func:`~ragen_torchrl.data.dense.trim_padding`), so
    the model sees the padded tensors a ragged batch of those rows would give. The first real token
    of a row gets 0 (nothing scores it, as torchrl and vLLM write), the padding 0, rows outside
    ``rows`` (indices or a boolean mask) NaN; with ``shared_prefix`` only assistant tokens are
    scored (every other real position is NaN).
    """
    attention = batch.get(MASKS_ATTENTION).bool()
    n, length = attention.shape
    out = torch.where(attention, float("nan"), 0.0)
    chosen = torch.ones(n, dtype=torch.bool)
    if rows is not None:
        rows = torch.as_tensor(rows)
        chosen = rows.reshape(-1).clone() if rows.dtype == torch.bool else torch.zeros(n, dtype=torch.bool)
        if rows.dtype != torch.bool:
            chosen[rows.reshape(-1)] = True
    idx = torch.nonzero(chosen).reshape(-1)
    for start in range(0, idx.numel(), chunk_size):
        part = idx[start : start + chunk_size]
        chunk = trim_padding(batch[part])
        if shared_prefix:
            dist = token_dist(actor, chunk, mask_key=MASKS_ASSISTANT, compact=True, shared_prefix=True)
        else:
            dist = token_dist(actor, chunk, mask_key=MASKS_ATTENTION)
        real = chunk.get(MASKS_ATTENTION).bool()
        tokens = chunk.get(TOKENS_FULL).masked_fill(~real, -100)
        log_probs = dist.log_prob(tokens.to(dist.logits.device)).float().cpu()
        if shared_prefix:
            log_probs = torch.where(dist.mask.cpu(), log_probs, float("nan"))
        width = log_probs.shape[1]
        first = width - real.sum(1)
        log_probs[torch.arange(part.numel()), first.clamp_max(width - 1)] = 0.0
        out[part, length - width :] = torch.where(real, log_probs, 0.0)
    return out


@torch.no_grad()
def _wrapper_log_probs(actor, records: TensorDictBase, chunk_size: int) -> TensorDictBase:
    """The behaviour rows from the wrapper's own history path (chat template and forward inside)."""
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


def attach_training_data(records: TensorDictBase, behaviour: TensorDictBase) -> TensorDict:
    """The training batch the losses read: behaviour tensors (dense, or ragged rows padded here) + the records' per-row values.

    One dense, left-padded TensorDict (:mod:`ragen_torchrl.data.dense`): the behaviour's token ids,
    masks and log-probs, every column of ``records`` that holds one number per row (advantage,
    group id, return, ...), and the conversations at ``("history", "full")`` and
    ``("history", "prompt")`` (the layout a history-mode wrapper reads).
    """
    if _is_lazy(behaviour):
        batch = dense_rows(behaviour, 0)  # any pad id: the attention mask hides the padding
    else:
        batch = behaviour.clone(recurse=False)
    if records.batch_size[0] != batch.batch_size[0]:
        raise ValueError(f"records hold {records.batch_size[0]} rows, the behaviour data {batch.batch_size[0]}")
    batch.update(per_row_columns(records))
    if HISTORY_FULL in records.keys(True):
        # the conversations, for a loss or wrapper that scores them through the chat template
        history = records.get(HISTORY_FULL)
        batch.set(HISTORY_FULL, history)
        batch.set(HISTORY_PROMPT, history)
    return batch


def _vision_kwargs(actor, tensordict: TensorDictBase, tokens: torch.Tensor) -> dict | None:
    """The image keywords of a batch with images (``None`` without): pixel values, grids, token types."""
    if IMAGES_TRAJECTORY not in tensordict.keys(True):
        return None
    processor = getattr(actor, "vl_processor", None)
    if processor is None:
        raise ValueError(
            "the batch holds images but the log-prob actor has no vision-language processor "
            "(make_logprob_policy(..., processor=...))"
        )
    if _is_lazy(tensordict):
        images = list(tensordict.get(IMAGES_TRAJECTORY, as_list=True))
        kwargs = processor.batch_inputs(tokens, images)
    else:
        counts = tensordict.get(IMAGES_COUNT) if IMAGES_COUNT in tensordict.keys(True) else None
        kwargs = processor.batch_inputs(tokens, tensordict.get(IMAGES_TRAJECTORY), counts)
    # no rope offsets left over from a cached rollout: positions come from this batch alone
    actor.model.model.rope_deltas = None
    return kwargs or None


def token_dist(
    actor: TransformersWrapper,
    tensordict: TensorDictBase,
    tokens_key=TOKENS_FULL,
    mask_key=MASKS_ASSISTANT,
    *,
    compact: bool = False,
    shared_prefix: bool = False,
) -> LLMMaskedCategorical:
    """The loss's per-token distribution, computed from the batch's token ids.

    What the wrapper's ``_get_rlhf_dist`` returns for a history batch (the same left padding, the
    same model call, logits shifted so that position ``t`` scores token ``t``, masked to the
    assistant tokens), without applying the chat template and tokenising each conversation again:
    the tokens are the ones :func:`compute_behaviour_log_probs` / :func:`tokenize_conversations`
    stored. The losses use it whenever the batch holds ``tokens_key`` and ``mask_key``.

    ``compact``: logits only where the mask is set (a
    :class:`~ragen_torchrl.objectives.token_distribution.CompactMaskedCategorical`; the LM head runs
    only at the positions some row needs), same values there.

    ``shared_prefix`` (with ``compact``): rows whose prompts are identical run that prompt through
    the model once (:func:`~ragen_torchrl.objectives.shared_prefix.shared_prefix_logits`), same
    values up to float round-off; ignored for a model it does not support.

    The logits are divided by the actor's rollout temperature (:func:`scoring_temperature`), so
    log-probs and entropies are those of the distribution the rollout sampled from.
    """
    temperature = scoring_temperature(actor)
    pad = actor.tokenizer.pad_token_id
    device = next(actor.model.parameters()).device
    tokens = tensordict.get(tokens_key, as_padded_tensor=True, padding_side="left", padding_value=pad)
    attention = tensordict.get(MASKS_ATTENTION, as_padded_tensor=True, padding_side="left", padding_value=False)
    tokens = tokens.masked_fill(~attention.bool(), pad)  # a dense batch may hold another pad id
    mask = tensordict.get(mask_key, as_padded_tensor=True, padding_side="left", padding_value=False)
    vision = _vision_kwargs(actor, tensordict, tokens)
    if vision is None and compact and shared_prefix and shared_prefix_supported(actor.model):
        keep = attention.bool()
        logits = shared_prefix_logits(
            actor.model,
            [row[k] for row, k in zip(tokens, keep)],
            [row[k] for row, k in zip(mask.bool(), keep)],
            **actor.generate_kwargs,
        )
        return CompactMaskedCategorical(_tempered(logits, temperature), mask.bool().to(device))
    kwargs = dict(actor.generate_kwargs)
    if vision is not None:  # the images go with the whole sequence: one padded pass (no shared-prefix split)
        kwargs.update({k: v.to(device) for k, v in vision.items()})
    if compact:
        logits = masked_position_logits(actor.model, tokens.to(device), attention.long().to(device), mask, **kwargs)
    else:
        logits = actor.model(tokens.to(device), attention.long().to(device), **kwargs)["logits"]
        logits = in_parameter_dtype(logits, actor.model)  # mixed precision: the log-softmax in float32
    logits = _tempered(logits, temperature)  # before the placeholders' floor, which a division would overflow
    if vision is not None:
        logits = suppress_vision_tokens(logits, actor.model)  # the policy never samples a placeholder
    if compact:
        return CompactMaskedCategorical(logits, mask.bool().to(device))
    # position t scores token t (the first position has nothing before it), as torchrl's wrapper does
    shifted = torch.cat([torch.zeros_like(logits[:, :1]), logits[:, :-1]], 1)
    return LLMMaskedCategorical(logits=shifted, mask=mask.bool().to(device))
