"""Any checkpoint's own chat template, with the assistant tokens found by construction.

Training needs to know which tokens of a rendered conversation are the assistant's. transformers
answers that only for templates that wrap assistant messages in a ``{% generation %}`` block, which
almost no published template has (not ChatML, not Llama-3, not Qwen2.5, not Gemma). Here the mask
comes from rendering the conversation message by message with the checkpoint's own template:

* the text before assistant message ``i`` is the conversation up to it rendered with the generation
  prompt (``P``); the message is the same conversation rendered with it, without a generation prompt
  (``F``); its content is found in ``F`` where ``P`` ends (after the longest prefix both share, for a
  template whose generation prompt differs from its assistant header);
* the trained span is the content plus the template's closing up to and including its first special
  token (the end-of-turn delimiter: ``<|im_end|>`` for ChatML and Qwen2.5, ``<|eot_id|>`` for
  Llama-3, ``<end_of_turn>`` for Gemma); what the template writes after it (a newline) is not trained,
  as the rollouts never sample it;
* the whole conversation is rendered and tokenised once, and every token overlapping a trained span
  is marked, as transformers marks a ``{% generation %}`` block's tokens: for a template that has
  one around ``content + end-of-turn``, the masks are the same.

A template that drops or rewrites a reply's text (one that strips past reasoning, say) cannot be
masked this way: :func:`trainable_chat_template` says so before a run starts, as it says when a reply
prime such as ``<think>`` does not survive the template.

Example:
    >>> from ragen_torchrl.models.tiny import train_tokenizer
    >>> tok = train_tokenizer(["go left", "go right"] * 5, vocab_size=280)
    >>> conv = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "left"}]
    >>> (ids, mask), = assistant_token_masks(tok, [conv])
    >>> tok.decode([i for i, m in zip(ids.tolist(), mask.tolist()) if m])
    'left<|im_end|>'
"""

from __future__ import annotations

import os

import torch

from .template_guard import ChatTemplateError

__all__ = [
    "ChatTemplateError",
    "assistant_spans",
    "assistant_token_masks",
    "closing_delimiter",
    "special_token_texts",
    "trainable_chat_template",
]


def _render(tokenizer, conversation: list[dict], template: str | None, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(
        conversation, tokenize=False, add_generation_prompt=generation_prompt, chat_template=template
    )


def special_token_texts(tokenizer) -> list[str]:
    """The tokenizer's special tokens' texts, longest first (the end-of-turn delimiters are among them).

    Example:
        >>> from ragen_torchrl.models.tiny import train_tokenizer
        >>> special_token_texts(train_tokenizer(["a b"] * 5, vocab_size=270))
        ['<|im_start|>', '<|im_end|>', '<|pad|>']
    """
    specials = set(getattr(tokenizer, "all_special_tokens", None) or [])
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            specials.add(str(token))
    return sorted((s for s in specials if s), key=len, reverse=True)


def closing_delimiter(closing: str, specials: list[str]) -> int:
    """How many characters of ``closing`` (the template's text after an assistant message's content) are trained:
    up to and including its first special token, or 0 when it has none.

    Example:
        >>> closing_delimiter("<|im_end|>\\n", ["<|im_end|>", "<|im_start|>"]), closing_delimiter("<|eot_id|>", ["<|eot_id|>"])
        (10, 10)
        >>> closing_delimiter("\\n", ["<|im_end|>"])
        0
    """
    best = None
    for s in specials:
        at = closing.find(s)
        if at >= 0 and (best is None or at < best[0] or (at == best[0] and len(s) > best[1])):
            best = (at, len(s))
    return 0 if best is None else best[0] + best[1]


def assistant_spans(
    tokenizer,
    conversation: list[dict],
    template: str | None = None,
    add_generation_prompt: bool = False,
    strict: bool = True,
) -> tuple[str, list[tuple[int, int]]]:
    """``(text, spans)``: the conversation rendered by ``template`` (the tokenizer's own when ``None``) and the
    character spans ``[start, end)`` of each assistant message's trained text (content + end-of-turn delimiter).

    A template that renders earlier messages differently once later ones follow is searched for each
    assistant message's content in order instead; with ``strict=False`` a message whose content is not in
    the text (the template rewrote it) gets no span: text the policy never sampled is never trained.

    Raises:
        ChatTemplateError: (``strict``) an assistant message's content is not in the rendered text.

    Example:
        >>> class Tok:
        ...     all_special_tokens = ["<e>"]
        ...     def apply_chat_template(self, conv, tokenize, add_generation_prompt, chat_template):
        ...         return "".join(f"<{m['role'][0]}>{m['content']}<e>\\n" for m in conv) + ("<a>" if add_generation_prompt else "")
        >>> assistant_spans(Tok(), [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
        ('<u>hi<e>\\n<a>yo<e>\\n', [(12, 17)])
    """
    text = _render(tokenizer, conversation, template, add_generation_prompt)
    specials = special_token_texts(tokenizer)
    spans: list[tuple[int, int]] = []
    for i, message in enumerate(conversation):
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        if not isinstance(content, str):
            raise ChatTemplateError(f"assistant message {i} has no text content: {type(content).__name__}")
        prompt = _render(tokenizer, conversation[:i], template, True) if i else ""
        full = _render(tokenizer, conversation[: i + 1], template, False)
        if text.startswith(full):  # rendered message by message: the content sits where its prompt ends
            head = os.path.commonprefix([prompt, full])
            start = full.find(content, len(head))
            closing = full[start + len(content) :] if start >= 0 else ""
        else:  # a template that rewrites earlier messages: the content's next occurrence in the whole text
            start = text.find(content, spans[-1][1] if spans else 0)
            closing = text[start + len(content) :] if start >= 0 else ""
        if start < 0 and not strict:
            continue
        if start < 0:
            raise ChatTemplateError(
                f"the chat template does not write assistant message {i}'s content verbatim: its assistant "
                "tokens cannot be found"
            )
        end = start + len(content)
        spans.append((start, end + closing_delimiter(closing, specials)))
    return text, spans


def assistant_token_masks(
    tokenizer,
    conversations: list[list[dict]],
    template: str | None = None,
    add_generation_prompt: bool = False,
    strict: bool = True,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each conversation's ids (rendered text tokenised as ``apply_chat_template(tokenize=True)`` does) and its
    assistant mask (every token overlapping an :func:`assistant_spans` span, ``strict`` as there), for any
    chat template.

    Example:
        >>> from ragen_torchrl.models.tiny import train_tokenizer
        >>> tok = train_tokenizer(["a b"] * 5, vocab_size=270)
        >>> (ids, mask), = assistant_token_masks(tok, [[{"role": "user", "content": "a"}]], add_generation_prompt=True)
        >>> bool(mask.any()), tok.decode(ids.tolist()).endswith("assistant\\n")
        (False, True)
    """
    rendered = [assistant_spans(tokenizer, c, template, add_generation_prompt, strict) for c in conversations]
    if not rendered:
        return []
    enc = tokenizer([t for t, _ in rendered], add_special_tokens=False, padding=False, return_offsets_mapping=True)
    out = []
    for (_, spans), ids, offsets in zip(rendered, enc["input_ids"], enc["offset_mapping"]):
        mask = [any(s < e and e_tok > s and s_tok < e for s, e in spans) for s_tok, e_tok in offsets]
        out.append((torch.tensor(ids, dtype=torch.long), torch.tensor(mask, dtype=torch.bool)))
    return out


#: the probe conversation :func:`trainable_chat_template` renders (two turns, a reply in the tags the envs ask for)
_PROBE = [
    {"role": "system", "content": "You play a game."},
    {"role": "user", "content": "Turn 1: where?"},
    {"role": "assistant", "content": "<think>left is open</think><answer>Left</answer>"},
    {"role": "user", "content": "Turn 2: where now?"},
    {"role": "assistant", "content": "<think>up</think><answer>Up</answer>"},
]


def trainable_chat_template(tokenizer, template: str | None = None, prime: str = "") -> str:
    """The template the rollouts render with (``template``, else the tokenizer's own), checked on a probe
    conversation: rendered message by message, each reply's content verbatim and closed by a special token,
    and with ``prime`` (``"<think>"`` under ``rollout.prime_think``) surviving in the replies.

    Raises:
        ChatTemplateError: no template at all, or one of the properties above fails (the message says which
            and what to set instead).

    Example:
        >>> from ragen_torchrl.models.tiny import train_tokenizer
        >>> tok = train_tokenizer(["a b"] * 5, vocab_size=270)
        >>> trainable_chat_template(tok, prime="<think>") == tok.chat_template
        True
        >>> tok.chat_template = None
        >>> trainable_chat_template(tok)
        Traceback (most recent call last):
        ...
        ragen_torchrl.models.template_guard.ChatTemplateError: the tokenizer has no chat template: save one with the checkpoint (tokenizer.chat_template)
    """
    template = template if template is not None else getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or not template:
        raise ChatTemplateError(
            "the tokenizer has no chat template: save one with the checkpoint (tokenizer.chat_template)"
        )
    try:
        text, spans = assistant_spans(tokenizer, _PROBE, template)
    except ChatTemplateError as e:
        raise ChatTemplateError(
            f"{e} (the template rewrites or drops part of a reply, e.g. its <think> block): training needs "
            "replies rendered as they were sampled; give the checkpoint a chat template that writes assistant "
            "messages verbatim"
        ) from None
    except Exception as e:  # a template that raises on the probe (e.g. one that refuses a system message)
        raise ChatTemplateError(f"the chat template fails on a system + two-turn conversation: {e}") from None
    specials = special_token_texts(tokenizer)
    for start, end in spans:
        if not any(text[start:end].endswith(s) for s in specials):
            raise ChatTemplateError(
                "the chat template closes assistant messages with no special token, so a reply has no "
                "end-of-turn token to sample and stop at"
            )
    if prime and any(not text[start:end].startswith(prime) for start, end in spans):
        raise ChatTemplateError(
            f"the chat template does not keep the reply prime {prime!r} in assistant messages: set "
            "rollout.prime_think=false for this checkpoint"
        )
    return template
