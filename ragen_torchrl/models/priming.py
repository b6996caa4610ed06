"""Priming generation with ``<think>``: the prompt ends with the opening reasoning tag.

RAGEN's reference appends ``<think>`` to every prompt after the assistant-turn header, so the model's
reply starts inside the reasoning block (``rollout.prime_think``, on by default). The primed tag is
part of the prompt: the policy never samples it, so it is never trained.

* generation: the policy's chat template appends the tag after the generation prompt
  (:func:`primed_chat_template`), so both backends render and tokenise it with the prompt: the
  tag's ids are prompt ids (``("tokens", "prompt")``), the generated ids start after it;
* the conversation: the decoded text holds the tag at the start of the assistant message, so the
  env parses (and the next prompt shows) a complete ``<think>…</think><answer>…</answer>`` reply;
* training rows and the warm-start targets: the assistant mask that the chat template gives covers
  the whole message, tag included; :func:`unmask_primed` takes the tag's tokens out of it.

Example:
    >>> reply_prime(object()), THINK_PRIME
    ('', '<think>')
"""

from __future__ import annotations

import torch

__all__ = ["THINK_PRIME", "prime_text", "primed_chat_template", "reply_prime", "unmask_primed"]

#: what ``rollout.prime_think`` appends to every prompt
THINK_PRIME = "<think>"


def prime_text(prime_think: bool) -> str:
    """The text appended to every prompt: ``"<think>"`` when ``prime_think``, else ``""``.

    Example:
        >>> prime_text(True), prime_text(False)
        ('<think>', '')
    """
    return THINK_PRIME if prime_think else ""


def primed_chat_template(template: str | None, prime: str) -> str | None:
    """``template`` that also writes ``prime`` after the generation prompt (``add_generation_prompt``).

    Only prompts rendered for generation change; a conversation rendered for training (no generation
    prompt) is the same. ``prime=""`` returns ``template`` unchanged.

    Raises:
        ValueError: a prime without a template (the tokenizer has no chat template, so the policy
            would leave the choice to torchrl's model-family detection).

    Example:
        >>> from jinja2 import Template
        >>> t = "{% for m in messages %}{{ m }};{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
        >>> primed = primed_chat_template(t, "<think>")
        >>> Template(primed).render(messages=["hi"], add_generation_prompt=True)
        'hi;A:<think>'
        >>> Template(primed).render(messages=["hi"], add_generation_prompt=False)
        'hi;'
    """
    if not prime:
        return template
    if template is None:
        raise ValueError(
            f"priming generation with {prime!r} (rollout.prime_think) needs the tokenizer's chat template; "
            "the tokenizer has none: save one with the checkpoint or set rollout.prime_think=false"
        )
    return template + "{% if add_generation_prompt %}{{ " + repr(prime) + " }}{% endif %}"


def reply_prime(obj) -> str:
    """The prime a policy or log-prob wrapper was built with (its ``reply_prime`` attribute; ``""``: none).

    Example:
        >>> class Policy:
        ...     reply_prime = "<think>"
        >>> reply_prime(Policy())
        '<think>'
    """
    return getattr(obj, "reply_prime", "") or ""


def unmask_primed(ids: torch.Tensor, mask: torch.Tensor, tokenizer, prime: str) -> torch.Tensor:
    """``mask`` without the tokens of ``prime`` at the start of each assistant span.

    A span is a run of set positions (one assistant message). Its leading tokens are taken out when
    they decode to exactly ``prime``; a span that does not start with it (or whose first token
    runs past it, as when a tokenizer merges the tag with the reply's first characters) is left as
    it is. Returns a new mask.

    Example:
        >>> class Tok:
        ...     def decode(self, ids):
        ...         return "".join({1: "<think>", 2: "go", 3: "<|im_end|>", 4: "user"}[int(i)] for i in ids)
        >>> ids = torch.tensor([4, 1, 2, 3, 4, 2, 3])
        >>> mask = torch.tensor([0, 1, 1, 1, 0, 1, 1], dtype=torch.bool)
        >>> unmask_primed(ids, mask, Tok(), "<think>").int().tolist()
        [0, 0, 1, 1, 0, 1, 1]
    """
    out = mask.clone().bool()
    if not prime:
        return out
    flat = out.tolist()
    n = len(flat)
    for start in range(n):
        if not flat[start] or (start > 0 and flat[start - 1]):
            continue
        end = start
        while end < n and flat[end]:
            end += 1
        for stop in range(start + 1, min(end, start + len(prime)) + 1):
            text = tokenizer.decode(ids[start:stop].tolist())
            if text == prime:
                out[start:stop] = False
                break
            if not prime.startswith(text):
                break
    return out
