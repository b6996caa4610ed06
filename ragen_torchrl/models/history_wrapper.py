"""torchrl's ``TransformersWrapper`` in history mode, with less Python work per generate call.

:class:`HistoryTransformersWrapper` returns exactly what torchrl's
:class:`~torchrl.modules.llm.TransformersWrapper` returns for ``input_mode="history"``,
``generate=True`` (same prompt tokens, same generated tokens for the same RNG state with
``sampler="multinomial"``, the class default, same ``History`` objects) and does the same generate call, but spends less time around it. On
a small model, that bookkeeping costs as much as a good part of the generation itself
(``benchmarks/rollout_throughput.py``). Two places change:

* the chat template: the parent renders every row's conversation twice (once as text,
  once to tokenise it) and converts each row's ``History`` to dicts twice; here the
  conversations are converted once, rendered in one batched ``apply_chat_template`` call
  and the rendered text is tokenised in one batched tokenizer call (what
  ``apply_chat_template(tokenize=True)`` does: ``add_special_tokens=False``);
* the reply: the parent parses the *whole* decoded conversation back into ``History``
  messages (``History.from_text``) and keeps the messages after the prompt's; here only the
  text after the prompt's last parsed message is parsed. For the two torchrl parsers used
  by chat-ML templates (``"qwen"`` and ``"chatml_format"``, picked the way
  ``History.from_text`` picks them) a message's boundaries do not depend on the text before
  it, so the tail parses to the same messages; any other parser (custom templates,
  Llama, ...) goes through torchrl's own code.

* the prefill: a prompt group's rows share their whole prompt in their first turn, and every
  prompt starts with the same head (the system prompt). Each distinct prompt is encoded once, on
  top of the head encoded once (the MI diagnostics' prefix encoder,
  :func:`~ragen_torchrl.models.kv_cache.prefix_passes`), and ``generate`` starts from that
  KV cache with each row's last prompt token; positions come from the attention mask, so every
  real token has the position it has in the left-padded batch. Same logits up to float
  round-off; ``share_prompt_head=False`` (or a model whose attention takes no padding mask with
  holes, see :func:`~ragen_torchrl.models.kv_cache.shared_prefix_supported`) keeps the
  parent's single left-padded prefill.

Everything else (several samples per prompt, padded outputs, token inputs, log-probs) is
the parent's code path.

Example:
    >>> import tempfile, tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import TensorDict
    >>> from torchrl.data.llm import History
    >>> from ragen_torchrl.models.loading import load_pretrained, wrapper_chat_template
    >>> from ragen_torchrl.models.tiny import TinyModelConfig, build_tiny_model
    >>> path = build_tiny_model(["go left or right"] * 20, TinyModelConfig(vocab_size=300, hidden_size=32,
    ...     num_layers=1, num_heads=2, num_kv_heads=1), tempfile.mkdtemp())
    >>> model, tok = load_pretrained(path)
    >>> policy = HistoryTransformersWrapper(model, tokenizer=tok, chat_template=wrapper_chat_template(tok),
    ...     input_mode="history", generate=True, pad_output=False, generate_kwargs={"max_new_tokens": 4})
    >>> chats = [[{"role": "user", "content": "go"}]] * 2
    >>> td = TensorDict({"history": {"prompt": History.from_chats(chats)}}, batch_size=[2])
    >>> out = policy(td)
    >>> out["history", "full"].shape, out["history", "full"][0, -1].role
    (torch.Size([2, 2]), 'assistant')
"""

from __future__ import annotations

import re

import torch
from tensordict import TensorDictBase
from torch.nn.utils.rnn import pad_sequence
from torchrl.data.llm import History
from torchrl.modules.llm import ChatHistory, Text, TransformersWrapper

from ..envs.messages import chat_dicts
from ..torchrl_compat import CUSTOM_MODEL_FAMILY_KEYWORDS, extract_responses_from_full_histories
from .inverse_cdf import inverse_cdf_generate_kwargs
from .kv_cache import common_prefix_len, forward_kwargs, row_prefix_cache, shared_prefix_supported
from .loading import resolved_chat_template

__all__ = ["HistoryTransformersWrapper", "parse_replies", "reply_parser_name"]

# the message patterns of torchrl's History._inv_qwen and History._inv_chatml (torchrl 0.14):
# used only to find where the prompt's last message ends; the tail is parsed by torchrl itself
_QWEN_MESSAGE = re.compile(r"<\|im_start\|>(.*?)(?:<\|(im_end|endoftext)\|>|$)", re.DOTALL)
_CHATML_COMPLETE = re.compile(r"<\|im_start\|>(.*?)\n(.*?)<\|(im_end|endoftext)\|>", re.DOTALL)


def reply_parser_name(chat_template_name: str | None, tokenizer) -> str | None:
    """The ``History.from_text`` parser torchrl would use, when it is one :func:`parse_replies` knows.

    Returns ``"qwen"``, ``"chatml_format"`` or ``None`` (another parser: use torchrl's code).
    The selection is ``History.from_text``'s: an explicit name, else custom families
    registered with ``add_chat_template``, else the model family in ``tokenizer.name_or_path``.

    Example:
        >>> class Tok:
        ...     name_or_path = "/models/tiny-qwen2-abc"
        >>> reply_parser_name(None, Tok()), reply_parser_name("llama", Tok())
        ('qwen', None)
    """
    if chat_template_name is not None:
        return chat_template_name if chat_template_name in ("qwen", "chatml_format") else None
    name = getattr(tokenizer, "name_or_path", "").lower()
    for keywords in CUSTOM_MODEL_FAMILY_KEYWORDS.values():
        if any(k.lower() in name for k in keywords):
            return None
    if "qwen" in name:
        return "qwen"
    if any(k in name for k in ("dialogpt", "microsoft/dialo", "falcon", "deepseek", "llama")):
        return None
    return "chatml_format"


def _prompt_end(text: str, num_prompt: int, parser: str) -> int | None:
    """Offset where the ``num_prompt``-th parsed message of ``text`` ends; ``None`` if fewer."""
    if num_prompt == 0:
        return 0
    count = 0
    if parser == "qwen":
        for m in _QWEN_MESSAGE.finditer(text):
            if "\n" in m.group(1):  # _inv_qwen drops a block without a role line
                count += 1
                if count == num_prompt:
                    return m.end()
        return None
    # chatml: every complete block is one message, an incomplete one can only come last
    for m in _CHATML_COMPLETE.finditer(text):
        count += 1
        if count == num_prompt:
            return m.end()
    return None


def _empty_reply() -> History:
    # what torchrl writes when the full text holds no message after the prompt's
    return History(role="assistant", content="", batch_size=(1,))


def parse_replies(text_full: list[str], prompt_histories: History, parser: str) -> History:
    """torchrl's ``_extract_responses_from_full_histories`` for the ``"qwen"``/``"chatml_format"`` parsers.

    Same result (the messages ``History.from_text`` finds in each full text after the
    prompt's, padded with ``"<none>"`` messages to a common count), parsing only the text
    after the prompt's last message.

    Example:
        >>> prompt = History.from_chats([[{"role": "user", "content": "hi"}]])
        >>> full = ["<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\nhello<|im_end|>"]
        >>> reply = parse_replies(full, prompt, "qwen")
        >>> reply.shape, reply[0, 0].role, reply[0, 0].content
        (torch.Size([1, 1]), 'assistant', 'hello')
    """
    func = History._inv_qwen if parser == "qwen" else History._inv_chatml
    num_prompt = int(prompt_histories.shape[-1])
    replies = []
    for text in text_full:
        end = _prompt_end(text, num_prompt, parser)
        if end is None:  # not even the prompt's messages: the full parse has none after them
            replies.append(_empty_reply())
            continue
        try:
            replies.append(func(text[end:]))
        except RuntimeError:  # no message in the tail (the parsers raise on an empty parse)
            replies.append(_empty_reply())
    if len({r.shape for r in replies}) > 1:  # ragged: pad as torchrl does
        longest = max(r.shape[0] for r in replies)
        replies = [
            r.extend(History(role="<none>", content="", batch_size=(longest - r.shape[0],)), inplace=False)
            if r.shape[0] < longest
            else r
            for r in replies
        ]
    return torch.stack(replies)


class HistoryTransformersWrapper(TransformersWrapper):
    """A ``TransformersWrapper`` whose history-mode generation does less work around ``generate``.

    Same constructor, same outputs as :class:`torchrl.modules.llm.TransformersWrapper`; see
    the module docstring for what is done differently and when the parent's code runs.
    """

    #: prefill each distinct prompt once, and the head they share once (see the module docstring)
    share_prompt_head: bool = True

    #: how a sampling ``generate`` draws each token: ``"multinomial"`` (``transformers``' own, as the
    #: parent: the same tokens for the same RNG state) or ``"inverse_cdf"``
    #: (:class:`~ragen_torchrl.models.inverse_cdf.InverseCDFSampler`: the same distribution, cheaper);
    #: :func:`ragen_torchrl.collectors.make_generation_policy` sets ``rollout.sampler``
    sampler: str = "multinomial"

    def _generate_from_tokens(self, tokens_prompt_padded, attention_mask_prompt_padded, cfg, out):
        saved = self.generate_kwargs
        kwargs = saved
        if self.sampler == "inverse_cdf" and cfg is None:  # a per-call config (cfg) keeps transformers' sampler
            kwargs = inverse_cdf_generate_kwargs(saved, generation_config=self.model.generation_config)
        plan = self._shared_prefill(tokens_prompt_padded, attention_mask_prompt_padded)
        if plan is not None:
            tokens_prompt_padded, attention_mask_prompt_padded, cache_name, cache = plan
            kwargs = {**kwargs, cache_name: cache}
        self.generate_kwargs = kwargs
        try:
            return super()._generate_from_tokens(tokens_prompt_padded, attention_mask_prompt_padded, cfg, out)
        finally:
            self.generate_kwargs = saved

    def _shared_prefill(self, tokens: torch.Tensor, attention: torch.Tensor):
        """``(ids, attention, cache keyword, cache)`` for ``generate``, or ``None`` (the plain prefill).

        Every prompt but its last token is encoded into a KV cache, each distinct prompt once and
        the head all of them share once (:func:`~ragen_torchrl.models.kv_cache.prefix_passes`);
        row ``r``'s input is then ``[prompt[:-1], right-padded | prompt[-1]]``, so ``generate``
        runs only the last token over the cache. Positions come from the attention mask: every
        real token keeps its position.
        """
        if (
            not self.share_prompt_head
            or tokens.shape[0] < 2
            or self.num_samples is not None
            or any(k in self.generate_kwargs for k in ("past_key_values", "cache", "cache_implementation"))
            or not shared_prefix_supported(self.model)
        ):
            return None
        lengths = attention.sum(-1).tolist()
        if min(lengths) < 2:
            return None
        width = tokens.shape[1]
        prompts = [tokens[r, width - n :] for r, n in enumerate(lengths)]
        slot_of: dict[bytes, int] = {}
        row_context = [slot_of.setdefault(p.cpu().numpy().tobytes(), len(slot_of)) for p in prompts]
        if len(slot_of) == len(prompts) and common_prefix_len(prompts) < 2:
            return None  # nothing shared: the plain prefill is as cheap
        contexts = [None] * len(slot_of)
        for r, c in enumerate(row_context):
            contexts[c] = prompts[r]
        with torch.no_grad():
            cache, prefix_mask, _ = row_prefix_cache(self.model, contexts, row_context)
        plen = prefix_mask.shape[1]
        ids = torch.full((tokens.shape[0], plen + 1), self.padding_value, dtype=tokens.dtype, device=tokens.device)
        for r, p in enumerate(prompts):
            ids[r, : p.numel() - 1] = p[:-1]
            ids[r, plen] = p[-1]
        mask = torch.cat([prefix_mask.to(attention.dtype), torch.ones_like(attention[:, :1])], dim=1)
        return ids, mask, forward_kwargs(self.model)[0], cache

    def _fast_history_generation(self, td: TensorDictBase) -> bool:
        history = td.get(self.input_key, None)
        return (
            self.num_samples is None
            and not self.pad_output
            and self._device is None
            and isinstance(history, History)
            and history.ndim == 2
            and not (self.prefer_tokens and td.get((self.tokens_key, "prompt"), None) is not None)
            and not (self.prefer_tokens and td.get((self.tokens_key, "full"), None) is not None)
        )

    def _from_transformers_generate_history(self, td, cfg, out) -> TensorDictBase:
        if not self._fast_history_generation(td):
            return super()._from_transformers_generate_history(td, cfg, out)
        history: History = td.get(self.input_key)
        template = resolved_chat_template(self)
        if template is None:  # torchrl's model-family detection: leave it to the parent
            return super()._from_transformers_generate_history(td, cfg, out)
        # one dict conversion per row (the parent converts twice), the "<none>" padding
        # messages dropped as History.apply_chat_template drops them
        conversations = chat_dicts(history)
        text_prompt = self.tokenizer.apply_chat_template(
            conversations, tokenize=False, add_generation_prompt=True, chat_template=template
        )
        # apply_chat_template(tokenize=True) tokenises its rendered text this way
        ids = self.tokenizer(text_prompt, add_special_tokens=False, padding=False)["input_ids"]
        prompt_tokens = [torch.tensor(t, dtype=torch.long) for t in ids]
        tokens_prompt_padded = pad_sequence(
            prompt_tokens, batch_first=True, padding_value=self.padding_value, padding_side="left"
        )
        attention_mask_prompt_padded = pad_sequence(
            [torch.ones_like(t) for t in prompt_tokens], batch_first=True, padding_value=0, padding_side="left"
        )
        result = self._generate_from_tokens(tokens_prompt_padded, attention_mask_prompt_padded, cfg, out)
        result[(self.tokens_key, "prompt")] = torch.nested.as_nested_tensor(prompt_tokens, layout=torch.jagged)

        text_result = Text._from_tensordict(result.empty())
        result.set(self.text_key, text_result)
        text_result.prompt = text_prompt
        tokens_full = result.get((self.tokens_key, "full"), as_list=True)
        text_full = self.tokenizer.batch_decode(tokens_full, skip_special_tokens=False)
        text_response = [full[len(prompt) :] for full, prompt in zip(text_full, text_prompt, strict=True)]
        result.set((self.text_key, "full"), text_full)
        result.set((self.text_key, "response"), text_response)

        history_chat = ChatHistory._from_tensordict(result.empty())
        history_chat.prompt = history
        parser = reply_parser_name(self.chat_template_name, self.tokenizer)
        if parser is None:
            responses = extract_responses_from_full_histories(
                text_full, history, self.chat_template_name, self.tokenizer
            )
        else:
            responses = parse_replies(text_full, history, parser)
        history_chat.response = responses
        history_chat.full = history.extend(responses, inplace=False, dim=-1)
        result.set(self.history_key, history_chat)
        return result
