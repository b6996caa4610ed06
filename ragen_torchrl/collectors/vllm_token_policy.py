"""vLLM's token-prompt rollout policy (``rollout.backend=vllm``, ``rollout.trajectory=tokens``).

:class:`VLLMTokenPolicy` is a :class:`~ragen_torchrl.collectors.policy_protocol.TokenPromptPolicy` and a
:class:`~ragen_torchrl.collectors.policy_protocol.TrajectoryOwner`: the collector keeps each row's
trajectory as ids and passes it as ``("tokens", "prompt")``; the policy sends it to the engine as a
token prompt and writes back the sampled ids (``("tokens", "response")``, cut after the first
end-of-turn id: :func:`reply_from_output`) and the engine's log-probs of those ids
(``("log_probs", "response")``), which it also keeps per row for the record
(``("log_probs", "trajectory")``). :func:`~ragen_torchrl.collectors.vllm_backend.make_vllm_generation_policy`
builds it.

Why it calls ``LLM.generate`` with vLLM's ``TokensPrompt`` rather than torchrl 0.14's
``vLLMWrapper(input_mode="tokens")``: that wrapper asks for ``prompt_logprobs`` whenever it returns
log-probs (a scoring pass over the whole trajectory at every turn, which vLLM V1 may also leave
out), writes the full token, mask and text views the collector rebuilds itself, and leaves every id
after an end-of-turn token in the reply; the collector's token contract needs only the reply ids.
Its own generate call turns ``prompt_token_ids`` into the same ``TokensPrompt`` objects.

Example:
    >>> from ragen_torchrl.collectors.policy_protocol import TokenPromptPolicy, TrajectoryOwner
    >>> policy = VLLMTokenPolicy(None, None, sampling_params=None, stop_ids={2})  # no engine needed to check
    >>> isinstance(policy, TokenPromptPolicy), isinstance(policy, TrajectoryOwner)
    (True, True)
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from ..keys import ENV_INDEX, HISTORY_PROMPT, LOG_PROBS_TRAJECTORY, TOKENS_PROMPT, TOKENS_RESPONSE
from .policy_protocol import TokenPromptPolicy, TrajectoryOwner

__all__ = ["LOG_PROBS_RESPONSE", "VLLMTokenPolicy", "reply_from_output", "token_sampling_kwargs"]

#: float ``[L]`` per row of a token policy's output: the engine's log-probs of the sampled ids (torchrl's name)
LOG_PROBS_RESPONSE = ("log_probs", "response")


def token_sampling_kwargs(sampling: dict, stop_ids) -> dict:
    """``SamplingParams`` keywords of :class:`VLLMTokenPolicy`: ``sampling``
    (:func:`~ragen_torchrl.collectors.vllm_backend.vllm_sampling_kwargs`)
    plus what the token contract needs.

    * ``logprobs=0``: the log-prob of each sampled id and of no other;
    * ``stop_token_ids``: the hf path's end ids, and ``ignore_eos=True`` so that vLLM does not also
      stop at a tokenizer eos outside them (``generate`` stops at exactly these ids);
    * ``detokenize=False``: the collector decodes the ids itself; no text is built per token.

    Example:
        >>> from ragen_torchrl.collectors.vllm_backend import vllm_sampling_kwargs
        >>> kw = token_sampling_kwargs(vllm_sampling_kwargs(8, 1.0), {7, 3})
        >>> kw["max_tokens"], kw["logprobs"], kw["stop_token_ids"], kw["ignore_eos"], kw["detokenize"]
        (8, 0, [3, 7], True, False)
        >>> token_sampling_kwargs(vllm_sampling_kwargs(8, 1.0), set())
        Traceback (most recent call last):
        ...
        ValueError: a token-mode vLLM policy needs at least one end-of-turn id to stop at
    """
    stop = sorted(int(i) for i in stop_ids)
    if not stop:
        raise ValueError("a token-mode vLLM policy needs at least one end-of-turn id to stop at")
    return {**sampling, "logprobs": 0, "stop_token_ids": stop, "ignore_eos": True, "detokenize": False}


def _sampled_log_prob(entry, token: int) -> float:
    """The log-prob of ``token`` in one position of vLLM's ``CompletionOutput.logprobs``
    (``{token_id: Logprob}``; a bare float is taken as it is)."""
    if entry is None:
        return float("nan")
    value = entry.get(token) if hasattr(entry, "get") else entry  # a dict, or a mapping view per position
    if value is None:
        return float("nan")
    return float(getattr(value, "logprob", value))


def reply_from_output(completion, stop_ids) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, log_probs)`` of one vLLM ``CompletionOutput``: the sampled ids up to and including the
    first id of ``stop_ids`` (the hf token path's cut), and each one's log-prob (NaN where the engine
    gave none).

    vLLM includes the stop id in ``token_ids``; should a version report it only as ``stop_reason``
    (an int), it is appended, so a reply that stopped always ends with its end-of-turn id.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> out = NS(token_ids=[5, 9, 2, 4], logprobs=[{5: NS(logprob=-0.5)}, {9: NS(logprob=-1.0)},
        ...          {2: NS(logprob=-0.25)}, {4: NS(logprob=-3.0)}], stop_reason=None)
        >>> ids, lps = reply_from_output(out, {2})
        >>> ids.tolist(), lps.tolist()
        ([5, 9, 2], [-0.5, -1.0, -0.25])
    """
    ids = [int(t) for t in completion.token_ids]
    entries = list(completion.logprobs) if getattr(completion, "logprobs", None) is not None else [None] * len(ids)
    lps = [_sampled_log_prob(e, t) for e, t in zip(entries, ids)] + [float("nan")] * (len(ids) - len(entries))
    stop = {int(i) for i in stop_ids}
    cut = next((k + 1 for k, t in enumerate(ids) if t in stop), None)
    if cut is not None:
        ids, lps = ids[:cut], lps[:cut]
    else:
        reason = getattr(completion, "stop_reason", None)
        if isinstance(reason, int) and not isinstance(reason, bool) and reason in stop:
            ids, lps = [*ids, reason], [*lps, float("nan")]
    return torch.tensor(ids, dtype=torch.long), torch.tensor(lps, dtype=torch.float32)


def _tokens_prompt(ids: torch.Tensor) -> dict:
    """vLLM's ``TokensPrompt`` for ``ids``: a ``TypedDict``, so at run time this dict is one."""
    return {"prompt_token_ids": [int(t) for t in ids.tolist()]}


class VLLMTokenPolicy(TensorDictModuleBase, TokenPromptPolicy, TrajectoryOwner):
    """A token-prompt rollout policy (``input_mode="tokens"``) that samples from a vLLM engine.

    :func:`~ragen_torchrl.collectors.collect_rollouts` calls it with each running row's token
    trajectory at ``("tokens", "prompt")`` (one 1-D long tensor per row) and its ``env_index``. Each
    row goes to ``engine.generate`` as one token prompt (``TokensPrompt``) with ``sampling_params``
    (:func:`token_sampling_kwargs`); the policy writes ``("tokens", "response")`` (the ids as sampled,
    up to and including the first end-of-turn id: :func:`reply_from_output`) and
    ``("log_probs", "response")`` (the engine's log-prob of each). It keeps, per ``env_index``, the
    engine's log-probs over the row's whole trajectory; the collector reads them when the episode
    ends (``owns_trajectories``: :meth:`trajectory`, the record's ``("log_probs", "trajectory")``,
    0 on the tokens that were not sampled, NaN on earlier replies when the collector tokenised the
    row again).

    Args:
        engine: a ``vllm.LLM`` (or anything with its ``generate(prompts, sampling_params, use_tqdm=...)``
            and its output objects: ``outputs[0].token_ids`` / ``.logprobs``); ``policy.model``.
        tokenizer: the training model's tokenizer (the collector renders and decodes with it).
        sampling_params: what ``engine.generate`` is given (a ``vllm.SamplingParams``).
        stop_ids: the end-of-turn ids a reply is cut after.
        chat_template: the (primed) template the collector renders the trajectories with.
        reply_prime: the text every prompt ends with (``"<think>"`` under ``rollout.prime_think``).

    Example (an engine that always samples ids 5 and 2, the end id):
        >>> from types import SimpleNamespace as NS
        >>> from tensordict import TensorDict, lazy_stack
        >>> class Engine:
        ...     def generate(self, prompts, sampling_params, use_tqdm=False):
        ...         done = NS(token_ids=[5, 2], logprobs=[{5: NS(logprob=-0.5)}, {2: NS(logprob=-0.1)}])
        ...         return [NS(outputs=[done]) for _ in prompts]
        >>> policy = VLLMTokenPolicy(Engine(), None, sampling_params=None, stop_ids={2})
        >>> rows = [TensorDict({"tokens": {"prompt": torch.tensor([1, 3, 4])}, "env_index": torch.tensor(0)}, [])]
        >>> out = policy(lazy_stack(rows))
        >>> out.get(("tokens", "response"), as_list=True)[0].tolist(), policy.trajectory(0)["log_probs", "trajectory"].tolist()
        ([5, 2], [0.0, 0.0, 0.0, -0.5, -0.10000000149011612])
    """

    input_mode = "tokens"
    #: the collector asks :meth:`trajectory` for each finished row's entries (its log-probs)
    owns_trajectories = True

    def __init__(
        self,
        engine,
        tokenizer,
        *,
        sampling_params,
        stop_ids,
        chat_template: str | None = None,
        reply_prime: str = "",
    ) -> None:
        super().__init__()
        self.model = engine
        self.tokenizer = tokenizer
        self.sampling_params = sampling_params
        self.stop_ids = frozenset(int(i) for i in stop_ids)
        self.chat_template = chat_template
        self.reply_prime = reply_prime
        # collect_rollouts reads it: no per-token entropy from vLLM (the records' entropy stays 0)
        self.entropy_recorder = None
        self.in_keys = [TOKENS_PROMPT, ENV_INDEX]
        self.out_keys = [TOKENS_RESPONSE, LOG_PROBS_RESPONSE]
        #: env_index -> (the row's ids so far, the engine's log-probs of them: 0 where not sampled)
        self._rows: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def clear(self) -> None:
        """Forget every row (a collection starts)."""
        self._rows.clear()

    def release(self, env_indices) -> None:
        """Forget these ``env_index`` rows (their episodes ended and were read)."""
        for e in env_indices:
            self._rows.pop(int(e), None)

    def trajectory(self, env_index: int) -> dict:
        """The record entries of the row's episode: ``{("log_probs", "trajectory"): [T] float}``."""
        ids, log_probs = self._rows[int(env_index)]
        return {LOG_PROBS_TRAJECTORY: log_probs.clone()}

    def _remember(self, env_index: int, prompt: torch.Tensor, reply: torch.Tensor, reply_lps: torch.Tensor) -> None:
        stored = self._rows.get(env_index)
        head = torch.zeros(prompt.shape, dtype=torch.float32)
        if stored is not None:
            ids, lps = stored
            if ids.numel() <= prompt.numel() and torch.equal(prompt[: ids.numel()], ids):
                head[: ids.numel()] = lps  # the trajectory grew by an env turn: keep the earlier replies' values
            else:  # tokenised again by the collector: the earlier replies' positions are unknown
                head.fill_(float("nan"))
        self._rows[env_index] = (torch.cat([prompt, reply]), torch.cat([head, reply_lps]))

    @torch.no_grad()
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        keys = tensordict.keys(include_nested=True)
        if TOKENS_PROMPT not in keys:
            hint = (
                " (it holds a conversation: build the policy with trajectory='history')"
                if HISTORY_PROMPT in keys
                else ""
            )
            raise ValueError(f"VLLMTokenPolicy reads each row's token trajectory at {TOKENS_PROMPT}{hint}")
        prompts = [
            torch.as_tensor(p).reshape(-1).to("cpu", torch.long) for p in tensordict.get(TOKENS_PROMPT, as_list=True)
        ]
        if not prompts or min(int(p.numel()) for p in prompts) == 0:
            raise ValueError("every row needs a non-empty token prompt")
        env_index = (
            [int(e) for e in torch.as_tensor(tensordict.get(ENV_INDEX)).reshape(-1).tolist()]
            if ENV_INDEX in keys
            else list(range(len(prompts)))
        )
        outputs = self.model.generate([_tokens_prompt(p) for p in prompts], self.sampling_params, use_tqdm=False)
        if len(outputs) != len(prompts):
            raise RuntimeError(f"the vLLM engine returned {len(outputs)} outputs for {len(prompts)} prompts")
        replies, log_probs = [], []
        for e, prompt, request in zip(env_index, prompts, outputs, strict=True):
            ids, lps = reply_from_output(request.outputs[0], self.stop_ids)
            replies.append(ids)
            log_probs.append(lps)
            self._remember(e, prompt, ids, lps)
        tensordict.set(TOKENS_RESPONSE, torch.nested.as_nested_tensor(replies, layout=torch.jagged))
        tensordict.set(LOG_PROBS_RESPONSE, torch.nested.as_nested_tensor(log_probs, layout=torch.jagged))
        return tensordict
