"""Token-level multi-turn trajectories: each row is one token sequence, built turn by turn.

A multi-turn rollout alternates replies the policy samples and environment turns (the env's new
user message). Re-rendering the whole conversation each turn and tokenising it again trains
earlier replies on ids that were never sampled: a reply's text does not always re-tokenise to the
ids that produced it (``'ĠRight'`` can come back as ``'Ri'``, ``'ght'``), and a reply the token
budget cut gets an end-of-turn token it never sampled. Here each row's trajectory is kept as ids:

* the first prompt: the conversation rendered by the chat template (with the generation prompt
  and the reply prime, e.g. ``"<think>"`` under ``rollout.prime_think``) and tokenised once;
* each reply: the ids exactly as sampled, all trained (its end-of-turn token only if sampled);
* each environment turn: the template's text after the reply (the rest of its end-of-turn
  delimiter: ``"<|im_end|>\\n"`` when the budget cut the reply, ``"\\n"`` after a sampled
  ``<|im_end|>``) and the env's new message(s) with the next generation prompt (and prime),
  tokenised once and appended, never trained.

The environment turn's text comes from the template itself: the conversation up to the reply is
rendered without a generation prompt (``A``) and with the env's messages and a generation prompt
(``B``); the turn is ``B[len(A):]`` when ``A`` is a prefix of ``B`` (any chat template that renders
a conversation message by message), plus the text ``A`` writes after the reply's content. A row
whose rendering breaks that (a template that rewrites earlier messages) is tokenised again from
the whole rendered conversation for that turn, its assistant tokens found by construction
(:mod:`~ragen_torchrl.models.chat_template`); it is counted
(``("tokens", "trajectory_refits")``).

Where the reply texts round-trip (decode, parse, render, tokenise back to the same ids), the
sequence and mask are exactly those of the re-rendered conversation; where they do not, every
trained token was sampled. The text and ``History`` views stay: the collector writes each row's
reply into ``("history", "full")`` for the env, the MI diagnostics and the logs.

Example:
    >>> env_turn_text("<s>u</s><a>", "<s>u</s><a>hi</a>", "<s>u</s><a>hi</a><s>v</s><a>", "hi")
    ('</a>', '<s>v</s><a>')
    >>> env_turn_text("<a>", "<a>hi</a>", "<a>HI</a><s>v</s>", "hi") is None   # the template rewrote the reply
    True
"""

from __future__ import annotations

import os

import torch
from torchrl.data.llm import History

from ..models.chat_template import assistant_token_masks, special_token_texts
from ..models.history_wrapper import parse_replies, reply_parser_name
from ..models.priming import unmask_primed

__all__ = ["TokenTrajectories", "encode", "env_turn_text", "render", "reply_histories", "reply_message"]


def render(tokenizer, conversations: list[list[dict]], template: str | None, generation_prompt: bool) -> list[str]:
    """Each conversation rendered as text by ``template`` (the tokenizer's own when ``None``), in one call."""
    if not conversations:
        return []
    return tokenizer.apply_chat_template(
        conversations, tokenize=False, add_generation_prompt=generation_prompt, chat_template=template
    )


def encode(tokenizer, texts: list[str]) -> list[torch.Tensor]:
    """Each text's ids, as ``apply_chat_template(tokenize=True)`` tokenises rendered text (no special tokens added)."""
    if not texts:
        return []
    ids = tokenizer(list(texts), add_special_tokens=False, padding=False)["input_ids"]
    return [torch.tensor(t, dtype=torch.long) for t in ids]


def env_turn_text(prompt: str, before: str, after: str, content: str, prime: str = "") -> tuple[str, str] | None:
    """``(closing, turn)``: the text the template writes after the reply, and the environment turn's text.

    ``prompt`` is the text the reply was generated after (ending with the generation prompt and
    ``prime``), ``before`` the conversation rendered up to and including the reply (no generation
    prompt), ``after`` the same with the env's new messages and the generation prompt, ``content``
    the reply's message content (the prime included). The reply's content is looked up in
    ``before`` from where it leaves ``prompt`` (an empty reply renders there too). ``None`` when
    ``before`` is not a prefix of ``after`` or does not hold ``content`` there (the template rewrites
    messages: the caller tokenises the whole conversation).

    Example:
        >>> env_turn_text("U<a>", "U<a>go<e>\\n", "U<a>go<e>\\nV<a>", "go")
        ('<e>\\n', 'V<a>')
        >>> env_turn_text("U<a>", "U<a><e>\\n", "U<a><e>\\nV<a>", "")   # an empty reply
        ('<e>\\n', 'V<a>')
    """
    if not after.startswith(before):
        return None
    head = prompt[: len(prompt) - len(prime)] if prime and prompt.endswith(prime) else prompt
    if not before.startswith(head):  # the generation prompt is not the reply's header: the longest common prefix
        head = os.path.commonprefix([prompt, before])[: max(0, len(prompt) - len(prime))]
    start = before.find(content, len(head))
    if start < 0:
        return None
    return before[start + len(content) :], after[len(before) :]


def reply_histories(
    tokenizer, prompt_texts: list[str], replies: list[torch.Tensor], prompt: History, prime: str = ""
) -> History:
    """``("history", "full")``: ``prompt`` plus each row's reply parsed as torchrl's history mode parses it.

    The reply is decoded as the wrapper decodes its output (special tokens kept). For chat-ML templates it
    is parsed from the rendered prompt text plus that reply
    (:func:`~ragen_torchrl.models.history_wrapper.parse_replies`), so the env sees the message torchrl's
    history mode would give it. Any other template's reply is read off its ids directly
    (:func:`reply_message`, ``prime`` opening its content): no model-family parser is guessed from the
    checkpoint's name.
    """
    decoded = tokenizer.batch_decode(replies, skip_special_tokens=False)
    parser = reply_parser_name(None, tokenizer)
    if parser is None:
        specials = special_token_texts(tokenizer)
        responses = torch.stack([reply_message(r, specials, prime) for r in decoded])
    else:
        responses = parse_replies([p + r for p, r in zip(prompt_texts, decoded)], prompt, parser)
    return prompt.extend(responses, inplace=False, dim=-1)


def reply_message(reply_text: str, specials: list[str], prime: str = "") -> History:
    """The assistant message of one decoded reply: ``prime`` (the text the prompt ended with, ``"<think>"``
    under ``rollout.prime_think``: it opens the message) and the reply's text up to its first special token
    (the end of turn it stopped at); complete when the reply reached such a token.

    Example:
        >>> m = reply_message("go</think><answer>Up</answer><|eot_id|>", ["<|eot_id|>"], "<think>")
        >>> m[0].content, m[0].is_complete
        ('<think>go</think><answer>Up</answer>', True)
    """
    cut = min((at for at in (reply_text.find(s) for s in specials) if at >= 0), default=-1)
    text = reply_text if cut < 0 else reply_text[:cut]
    return History(role="assistant", content=prime + text, is_complete=cut >= 0, batch_size=(1,))


class TokenTrajectories:
    """Per-row token trajectories (ids and assistant mask) of a batch of multi-turn rollouts.

    ``template`` is the chat template the prompts are rendered with (with the reply prime already
    in it: :func:`~ragen_torchrl.models.priming.primed_chat_template`), ``prime`` that prime's text
    (only for the rows tokenised again, whose template mask covers it).

    Example:
        >>> class Tok:  # one id per character
        ...     def apply_chat_template(self, convs, tokenize, add_generation_prompt, chat_template):
        ...         return ["".join(f"[{m['content']}]" for m in c) + (">" if add_generation_prompt else "")
        ...                 for c in convs]
        ...     def __call__(self, texts, add_special_tokens, padding):
        ...         return {"input_ids": [[ord(c) for c in t] for t in texts]}
        >>> traj = TokenTrajectories(Tok(), None, num_rows=1)
        >>> traj.start([0], [[{"role": "user", "content": "u"}]])
        >>> traj.add_replies([0], [torch.tensor([ord("h"), ord("i")])])
        >>> traj.add_env_turns([0], [[{"role": "user", "content": "u"}, {"role": "assistant", "content": "hi"}]],
        ...     [[{"role": "user", "content": "u"}, {"role": "assistant", "content": "hi"},
        ...       {"role": "user", "content": "v"}]])
        >>> ids, mask = traj.trajectory(0)
        >>> "".join(map(chr, ids.tolist())), "".join("x" if m else "." for m in mask.tolist())
        ('[u]>hi][v]>', '....xx.....')
    """

    def __init__(self, tokenizer, template: str | None, num_rows: int, prime: str = "") -> None:
        self.tokenizer = tokenizer
        self.template = template
        self.prime = prime
        self.ids: list[list[torch.Tensor]] = [[] for _ in range(num_rows)]
        self.masks: list[list[torch.Tensor]] = [[] for _ in range(num_rows)]
        #: the rendered text of each row's current prompt (what its reply is parsed after)
        self.prompt_texts: list[str] = [""] * num_rows
        #: per row: environment turns tokenised again from the whole conversation
        self.refits = torch.zeros(num_rows, dtype=torch.long)

    def _set(self, row: int, ids: torch.Tensor, mask: torch.Tensor) -> None:
        self.ids[row] = [ids]
        self.masks[row] = [mask]

    def _append(self, row: int, ids: torch.Tensor, trained: bool) -> None:
        self.ids[row].append(ids)
        self.masks[row].append(torch.full(ids.shape, trained, dtype=torch.bool))

    def start(self, rows: list[int], conversations: list[list[dict]]) -> None:
        """Each row's first prompt: its conversation rendered with the generation prompt, tokenised once."""
        texts = render(self.tokenizer, conversations, self.template, True)
        for row, text, ids in zip(rows, texts, encode(self.tokenizer, texts)):
            self.prompt_texts[row] = text
            self._set(row, ids, torch.zeros(ids.shape, dtype=torch.bool))

    def prompts(self, rows: list[int]) -> list[torch.Tensor]:
        """The ids each row's policy call reads: its whole trajectory so far."""
        out = []
        for row in rows:
            if len(self.ids[row]) > 1:  # one tensor per row from here on: the next turn appends to it
                self._set(row, torch.cat(self.ids[row]), torch.cat(self.masks[row]))
            out.append(self.ids[row][0])
        return out

    def add_replies(self, rows: list[int], replies: list[torch.Tensor]) -> None:
        """Append each row's sampled ids, all trained."""
        for row, reply in zip(rows, replies):
            self._append(row, reply.reshape(-1).to("cpu", torch.long), True)

    def add_env_turns(self, rows: list[int], before: list[list[dict]], after: list[list[dict]]) -> None:
        """Append each row's environment turn (untrained): ``before`` is its conversation up to its last
        reply, ``after`` that plus the env's new messages; the next prompt ends with the generation prompt."""
        texts_before = render(self.tokenizer, before, self.template, False)
        texts_after = render(self.tokenizer, after, self.template, True)
        parts = [
            env_turn_text(self.prompt_texts[row], b, a, conv[-1]["content"], self.prime)
            for row, b, a, conv in zip(rows, texts_before, texts_after, before)
        ]
        ok = [k for k, p in enumerate(parts) if p is not None]
        # closing and turn texts of all rows in one tokenizer call
        enc = encode(self.tokenizer, [t for k in ok for t in parts[k]])
        for j, k in enumerate(ok):
            row = rows[k]
            closing, turn = enc[2 * j], enc[2 * j + 1]
            reply = self.ids[row][-1]
            if closing.numel() and reply.numel() and int(closing[0]) == int(reply[-1]):
                closing = closing[1:]  # the reply sampled the template's end-of-turn token itself
            self._append(row, torch.cat([closing, turn]), False)
            self.prompt_texts[row] = texts_after[k]
        bad = [k for k, p in enumerate(parts) if p is None]
        if bad:
            self._refit([rows[k] for k in bad], [after[k] for k in bad], [texts_after[k] for k in bad])

    def _refit(self, rows: list[int], conversations: list[list[dict]], texts: list[str]) -> None:
        """The rows whose template does not render the env turn as a suffix: the whole conversation
        tokenised again, its replies trained where their text is found (the prime left out)."""
        # a reply the template rewrote (its content is not in the text) was never sampled as rendered: not trained
        enc = assistant_token_masks(
            self.tokenizer, conversations, self.template, add_generation_prompt=True, strict=False
        )
        for row, text, (ids, mask) in zip(rows, texts, enc):
            if self.prime:
                mask = unmask_primed(ids, mask, self.tokenizer, self.prime)
            self._set(row, ids, mask)
            self.prompt_texts[row] = text
            self.refits[row] += 1

    def trajectory(self, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, assistant mask)`` of the row so far."""
        return torch.cat(self.ids[row]), torch.cat(self.masks[row])
