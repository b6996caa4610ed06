"""Supervised warm start on oracle demonstrations (assistant tokens only).

The tiny policy starts from random weights; a short supervised fine-tune on
demonstrations from the environment's oracle (with deliberate noise) gives RL a policy
that follows the reply format but still makes mistakes. The result is cached under a
hash of everything that determines it, so the second run starts instantly.

Example:
    >>> from ragen_torchrl.trainer.sft import sft_fingerprint
    >>> len(sft_fingerprint({"steps": 10}, "/tmp/base"))
    16
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import time
from pathlib import Path

import torch

from ..models.build_cache import build_once, has_config
from ..models.chat_template import assistant_token_masks
from ..models.loading import (
    checkpointed_layers,
    copy_tokenizer_files,
    dtype_name,
    enable_gradient_checkpointing,
    resolve_precision,
)
from ..models.priming import unmask_primed
from ..objectives.token_distribution import logits_at

log = logging.getLogger(__name__)


def sft_fingerprint(sft_cfg: dict, base_path: str, env_desc: str = "") -> str:
    """Hash of the SFT settings, the base model directory and the env description."""
    payload = json.dumps({"sft": sft_cfg, "base": os.path.basename(str(base_path)), "env": env_desc}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def tokenize_conversations(
    tokenizer, conversations: list[list[dict]], *, reply_prime: str = ""
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Token ids and assistant masks of each conversation, rendered by the tokenizer's own chat template
    (any template: the assistant tokens are found by construction, :mod:`~ragen_torchrl.models.chat_template`).

    ``reply_prime`` (``"<think>"`` under ``rollout.prime_think``): the rollouts put it in the prompt,
    so the targets leave it out, as the RL update does
    (:func:`~ragen_torchrl.models.priming.unmask_primed`).
    """
    pairs = []
    for ids, mask in assistant_token_masks(tokenizer, conversations):
        if reply_prime:
            mask = unmask_primed(ids, mask, tokenizer, reply_prime)
        pairs.append((ids, mask))
    return pairs


def reply_lengths(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> list[int]:
    """Token count of every reply in ``pairs`` (from :func:`tokenize_conversations`): each run of trained
    tokens, end-of-turn token included, which is what a rollout must generate for that reply.

    Example:
        >>> ids = torch.arange(8)
        >>> reply_lengths([(ids, torch.tensor([0, 1, 1, 0, 0, 1, 1, 1], dtype=torch.bool))])
        [2, 3]
    """
    out = []
    for _, mask in pairs:
        run = 0
        for trained in mask.tolist() + [False]:
            if trained:
                run += 1
            elif run:
                out.append(run)
                run = 0
    return out


def check_replies_fit(lengths: list[int], max_new_tokens: int | None, strict: bool = True) -> str | None:
    """Refuse a warm start whose demonstrated replies mostly do not fit the rollouts' token budget.

    A reply longer than ``rollout.max_new_tokens`` is cut before its end token in every rollout and
    fails the reply format, so a warm start that teaches such replies starts RL at zero valid replies (a
    tokenizer other than the tiny model's can need twice the tokens for the same text). Raises
    :class:`~ragen_torchrl.trainer.config_checks.ConfigError` when more than half of ``lengths`` exceed
    ``max_new_tokens`` (unless not ``strict``: ``sft.reply_budget=warn``); returns a warning when some do,
    ``None`` when all fit (or no budget is given).

    Example:
        >>> check_replies_fit([20, 30, 40], 48) is None
        True
        >>> check_replies_fit([20, 30, 56], 48)[:40]
        '1 of 3 demonstrated replies (33%) are lo'
        >>> check_replies_fit([50, 56, 60], 48)
        Traceback (most recent call last):
        ...
        ragen_torchrl.trainer.config_checks.ConfigError: 3 of 3 demonstrated replies (100%) are longer than rollout.max_new_tokens=48 with this model's tokenizer (median 56, longest 60 tokens, end of turn included): each of those rollout replies would be cut before its end and fail the reply format; set rollout.max_new_tokens=60 or more
    """
    if not lengths or not max_new_tokens:
        return None
    over = sum(n > max_new_tokens for n in lengths)
    if not over:
        return None
    ranked = sorted(lengths)
    msg = (
        f"{over} of {len(lengths)} demonstrated replies ({over / len(lengths):.0%}) are longer than "
        f"rollout.max_new_tokens={max_new_tokens} with this model's tokenizer (median {ranked[len(ranked) // 2]}, "
        f"longest {ranked[-1]} tokens, end of turn included): each of those rollout replies would be cut before "
        f"its end and fail the reply format; set rollout.max_new_tokens={ranked[-1]} or more"
    )
    if strict and 2 * over > len(lengths):
        from .config_checks import ConfigError

        raise ConfigError(msg)
    return msg


def assistant_token_loss(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, target_mask: torch.Tensor, **model_kwargs
):
    """Mean next-token cross-entropy over positions whose *target* is an assistant token.

    ``model_kwargs``: a vision-language batch's image inputs
    (:meth:`~ragen_torchrl.models.vision.VLProcessor.batch_inputs`).
    """
    mask = target_mask[:, 1:].bool()
    rows, cols = torch.nonzero(mask, as_tuple=True)  # output position j scores token j + 1
    keep = torch.nonzero(mask.any(0)).reshape(-1)
    # the LM head only where a target is (a 49k vocabulary makes the full [B, T, V] logits most of a step)
    logits = logits_at(
        model, rows, cols, keep, input_ids=input_ids, attention_mask=attention_mask, **model_kwargs
    ).float()
    nll = torch.nn.functional.cross_entropy(logits, input_ids[:, 1:][rows, cols], reduction="sum")
    return nll / mask.sum().clamp_min(1)


def pad_batch(pairs, pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad (ids, assistant-mask) pairs into tensors."""
    length = max(len(ids) for ids, _ in pairs)
    ids = torch.full((len(pairs), length), pad_id, dtype=torch.long)
    attn = torch.zeros((len(pairs), length), dtype=torch.long)
    tgt = torch.zeros((len(pairs), length), dtype=torch.bool)
    for i, (row, mask) in enumerate(pairs):
        ids[i, : len(row)] = row
        attn[i, : len(row)] = 1
        tgt[i, : len(row)] = mask
    return ids.to(device), attn.to(device), tgt.to(device)


def supervised_finetune(
    model,
    tokenizer,
    conversations: list[list[dict]],
    *,
    steps: int = 500,
    batch_size: int = 32,
    lr: float = 1e-3,
    seed: int = 0,
    log_every: int = 50,
    progress: bool = True,
    reply_prime: str = "",
    processor=None,
    images: list | None = None,
    compute_dtype: torch.dtype | None = None,
    gradient_checkpointing: bool = False,
) -> list[float]:
    """Fine-tune ``model`` in place on the assistant tokens of ``conversations``.

    Returns the loss history. Observation and system tokens are never trained. ``progress``
    shows a progress bar (steps/s, ETA, current loss) on stderr. ``reply_prime``: the text the
    rollouts prime every reply with; it is not a target (:func:`tokenize_conversations`).
    ``processor`` + ``images`` (a vision-language model: its
    :class:`~ragen_torchrl.models.vision.VLProcessor`, and one uint8 image per user message of each
    conversation): each conversation is laid out as the rollouts lay it out
    (:func:`~ragen_torchrl.models.vision.vl_sequence`) and trained with its images.
    ``compute_dtype`` (mixed precision, ``model.precision=mixed``): the forwards run under
    :func:`torch.autocast` in it while the parameters and AdamW state keep their own dtype (float32);
    ``None`` or the parameters' dtype: no autocast. ``gradient_checkpointing``: arm the model's activation
    checkpointing (:func:`~ragen_torchrl.models.loading.enable_gradient_checkpointing`) and checkpoint the
    decoder layers of every training forward.

    Example (float32 parameters, bfloat16 compute):
        >>> from transformers import Qwen2Config, Qwen2ForCausalLM
        >>> from ragen_torchrl.models.tiny import train_tokenizer
        >>> tok = train_tokenizer(["a b c"] * 5, vocab_size=270)
        >>> tok.pad_token = tok.eos_token
        >>> model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)).eval()
        >>> chats = [[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b c"}]] * 4
        >>> losses = supervised_finetune(model, tok, chats, steps=2, batch_size=2, lr=1e-3, progress=False,
        ...     compute_dtype=torch.bfloat16, gradient_checkpointing=True)
        >>> len(losses), next(model.parameters()).dtype
        (2, torch.float32)
    """
    from tqdm.auto import tqdm

    if steps < 0 or batch_size < 1 or lr <= 0:
        raise ValueError(f"invalid SFT settings: steps={steps}, batch_size={batch_size}, lr={lr}")
    device = next(model.parameters()).device
    param_dtype = next(model.parameters()).dtype
    autocast = compute_dtype is not None and compute_dtype != param_dtype
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    if processor is not None:
        from ..models.vision import vl_sequence

        if images is None or len(images) != len(conversations):
            raise ValueError("a vision-language warm start needs one image list per conversation")
        data = [vl_sequence(processor, c, i, prime=reply_prime) for c, i in zip(conversations, images)]
    else:
        data = [
            (ids, mask, None) for ids, mask in tokenize_conversations(tokenizer, conversations, reply_prime=reply_prime)
        ]
    # length-sorted buckets: a batch of similar lengths wastes little compute on padding
    data.sort(key=lambda row: len(row[0]))
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.1, 1 - s / max(steps, 1)))
    losses = []
    t0 = time.time()
    bar = tqdm(range(steps), desc="warm start (SFT)", unit="step", disable=not progress, mininterval=1.0)
    for step in bar:
        start = rng.randrange(max(len(data) - batch_size, 0) + 1)
        batch = data[start : start + batch_size]
        ids, attn, tgt = pad_batch([(i, m) for i, m, _ in batch], tokenizer.pad_token_id, device)
        vision = {}
        if processor is not None:
            vision = processor.batch_inputs(ids, [shown for _, _, shown in batch])
            model.model.rope_deltas = None  # positions from this batch alone
        with (
            torch.autocast(device.type, dtype=compute_dtype, enabled=autocast),
            checkpointed_layers(model, enabled=gradient_checkpointing),
        ):
            loss = assistant_token_loss(model, ids, attn, tgt, **vision)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
        if log_every and (step + 1) % log_every == 0:
            log.info("sft step %d/%d loss %.4f (%.0fs)", step + 1, steps, loss.item(), time.time() - t0)
    bar.close()
    model.eval()
    return losses


def warm_start(
    base_path: str,
    env,
    sft_cfg: dict,
    cache_dir: str,
    device: str = "auto",
    dtype: str = "auto",
    env_config: dict | None = None,
    reply_prime: str = "",
    precision: str = "mixed",
    gradient_checkpointing: bool = False,
    max_new_tokens: int | None = None,
    reply_budget: str = "warn",
) -> str:
    """Return the directory of the warm-started model, training it if not cached.

    ``sft_cfg``: the typed ``sft`` node's keys but ``enabled`` (:class:`~ragen_torchrl.trainer.config_schema.SFTConfig`):
    ``episodes``, ``noise``, ``noise_kind``, ``steps``, ``batch_size``, ``lr``, ``seed``, ``reasoning``
    (``grounded`` or ``shuffled``; see :mod:`.demonstrations`).
    ``env_config`` (the env's constructor arguments) is part of the cache key: two sizes of one
    game must not share a warm start. ``reply_prime`` (``rollout.prime_think``) is left out of the
    targets, and is part of the cache key. ``precision`` (``model.precision``) with ``dtype`` (the compute
    dtype, :func:`~ragen_torchrl.models.loading.resolve_precision`): ``mixed`` trains float32 parameters
    under autocast and saves them in float32, ``pure`` trains and saves the parameters in ``dtype``; with a
    float32 compute dtype both are the same run, and the cache key leaves the precision out (it is part of
    the key otherwise). ``gradient_checkpointing`` (``model.gradient_checkpointing``) changes memory, not the result.
    ``max_new_tokens`` (``rollout.max_new_tokens``): before training, the demonstrated replies are measured in
    the model's own tokens (:func:`check_replies_fit`): those that do not fit are logged (``reply_budget="warn"``,
    ``sft.reply_budget``), and with ``"error"`` a warm start most of whose replies do not fit is refused.
    """
    from ..models.vision import load_policy
    from .demonstrations import make_demonstrations

    env_desc = f"{type(env).__name__}:{env.system_prompt}:{env.max_turn}:{env.max_actions_per_turn}"
    if env_config:
        env_desc += ":" + json.dumps(env_config, sort_keys=True, default=str)
    # the version of the env's demonstrations, when it has one (0 or absent: no version in the key)
    if getattr(env, "demo_revision", 0):
        env_desc += f":demos-r{int(env.demo_revision)}"
    key_cfg = dict(sft_cfg)
    reasoning = str(key_cfg["reasoning"])
    if reasoning == "grounded":
        # the default leaves the key as it was before the switch existed: cached warm starts stay valid
        key_cfg.pop("reasoning", None)
    if reply_prime:
        key_cfg["reply_prime"] = reply_prime
    prec = resolve_precision(device, dtype, precision)
    if prec.compute_dtype != torch.float32:
        key_cfg["precision"] = f"{precision}:{dtype_name(prec.compute_dtype)}"
    target = Path(cache_dir).expanduser() / f"sft-{sft_fingerprint(key_cfg, base_path, env_desc)}"
    if has_config(target):
        log.info("warm start: using cached model %s", target)
        return str(target)

    def build():
        model, tokenizer, processor = load_policy(base_path, device=device, dtype=dtype_name(prec.param_dtype))
        images: list | None = [] if processor is not None else None  # a vision-language policy reads the boards
        demos = make_demonstrations(
            env,
            int(sft_cfg["episodes"]),
            noise=float(sft_cfg["noise"]),
            noise_kind=str(sft_cfg["noise_kind"]),
            seed=int(sft_cfg["seed"]),
            progress=True,
            reasoning=reasoning,
            images=images,
        )
        if processor is None:  # a vision-language conversation is laid out around its images: not measured here
            fit = check_replies_fit(
                reply_lengths(tokenize_conversations(tokenizer, demos, reply_prime=reply_prime)),
                max_new_tokens,
                strict=reply_budget == "error",
            )
            if fit:
                log.warning("warm start: %s", fit)
        log.info("warm start: %d demonstrations, %d steps", len(demos), sft_cfg["steps"])
        with torch.random.fork_rng():
            torch.manual_seed(int(sft_cfg["seed"]))
            supervised_finetune(
                model,
                tokenizer,
                demos,
                steps=int(sft_cfg["steps"]),
                batch_size=int(sft_cfg["batch_size"]),
                lr=float(sft_cfg["lr"]),
                seed=int(sft_cfg["seed"]),
                reply_prime=reply_prime,
                processor=processor,
                images=images,
                compute_dtype=prec.compute_dtype,
                gradient_checkpointing=gradient_checkpointing,
            )
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(tmp)
        copy_tokenizer_files(tokenizer, tmp)  # the checkpoint's own tokenizer files, unchanged
        if processor is not None:
            processor.image_processor.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)

    return build_once(target, build)
