"""Grouped multi-turn collection: G samples of each level, played to the end.

GRPO-style objectives compare the G trajectories of one prompt (RAGEN-2, arXiv 2604.06268:
"P prompt groups x G samples"), so the core data path plays ``P`` levels ``G`` times each
in one batched env and returns one record per trajectory. :func:`collect_rollouts` does
that with any torchrl LLM policy that honours the contract below, in the text envs of
:mod:`ragen_torchrl.envs` (plain or wrapped in a ``TransformedEnv``, e.g. with
:class:`~ragen_torchrl.transforms.t3.T3Truncation`).

Row layout: row ``i`` plays level ``level_seeds[i // G]`` as sample ``i % G`` of group
``i // G + group_offset``. At each turn only the rows still running are generated and
stepped; every turn adds one assistant and one user message, so those rows all hold the
same number of messages (``TransformersWrapper`` in history mode cannot batch ragged
histories). Large batches are generated in chunks of ``chunk_size`` rows.

**Policy contract.** ``policy(td)`` is called on a TensorDict of ``n`` running rows that
holds ``("history", "prompt")`` (a :class:`~torchrl.data.llm.History` per row: the
conversation so far) and the env's per-row keys (``env_index``, ``group_id``, ...). It
must return a TensorDict with the same ``n`` rows that keeps those per-row keys and adds

* ``("history", "full")``: the prompt plus one assistant message (the reply the env parses);
* ``("tokens", "response")``: the reply's generated token ids, one 1-D tensor per row
  (ragged; counted into ``num_tokens``).

torchrl's :class:`~torchrl.modules.llm.TransformersWrapper` (and ``vLLMWrapper``) with
``input_mode="history"`` and ``generate=True`` write both; :func:`make_generation_policy`
builds one. A scripted policy must write both too (e.g. ``tokenizer(reply).input_ids``);
a policy output without them raises :class:`PolicyContractError` naming the missing key.
What the collector calls and reads on the policy itself is the protocol
:class:`~ragen_torchrl.collectors.policy_protocol.RolloutPolicy` (a callable that does not declare it
is read with the defaults of :func:`~ragen_torchrl.collectors.policy_protocol.as_rollout_policy`).

**Token-prompt policies** (``policy.input_mode == "tokens"``, the default of
:func:`make_generation_policy`, ``rollout.trajectory=tokens``): the collector keeps each row's
trajectory as one token sequence (:mod:`~ragen_torchrl.collectors.token_trajectory`) and calls the
policy with the per-row keys plus ``("tokens", "prompt")`` (that sequence so far, one 1-D long
tensor per row) and no conversation; the policy writes only ``("tokens", "response")`` (the ids
exactly as sampled, end-of-turn included if sampled, no padding) and the collector writes
``("history", "full")`` from them. Such a policy carries ``tokenizer``, ``reply_prime`` and
optionally its (primed) ``chat_template``
(:class:`~ragen_torchrl.collectors.policy_protocol.TokenPromptPolicy`).
Optionally, a ``policy.entropy_recorder``
(:class:`~ragen_torchrl.models.entropy_recorder.EntropyRecorder`) fills the ``entropy`` column.

**Trajectory modes.** Each turn is played by :func:`_history_turn` (the policy reads and extends the
conversation) or :func:`_token_turn` (the collector keeps each row's token trajectory); a
:class:`~ragen_torchrl.collectors.policy_protocol.TrajectoryOwner` in either hands over each finished
row's entries itself. What the collection sums per row is a :class:`RowAccumulators`.

Example (a scripted policy that always answers "Right"):
    >>> import tensordict, torch
    >>> tensordict.set_list_to_stack(True).set()
    >>> from tensordict import lazy_stack
    >>> from torchrl.data.llm import History
    >>> from ragen_torchrl.envs import make_env
    >>> from ragen_torchrl.collectors import collect_rollouts
    >>> def scripted(td):
    ...     reply = History(role="assistant", content="<answer>Right</answer>")
    ...     full = td["history", "prompt"].extend(lazy_stack([reply.unsqueeze(0)] * td.shape[0]), inplace=False, dim=-1)
    ...     td.set(("history", "full"), full)
    ...     td.set(("tokens", "response"), [torch.tensor([1, 2, 3])] * td.shape[0])
    ...     return td
    >>> env = make_env("frozenlake", num_envs=2 * 3)          # P=2 levels x G=3 samples
    >>> records = collect_rollouts(env, scripted, level_seeds=[11, 12], group_size=3)
    >>> records.batch_size, records["group_id"].tolist(), records["level_seed"].tolist()
    (torch.Size([6]), [0, 0, 0, 1, 1, 1], [11, 11, 11, 12, 12, 12])
    >>> bool((records["num_tokens"] == 3 * records["num_turns"]).all())
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tensordict import TensorDict, TensorDictBase, lazy_stack
from torchrl.envs import EnvBase

from ..envs.messages import chat_dicts
from ..envs.text_env import sample_seed
from ..keys import (
    ACTION_IS_VALID,
    DONE,
    ENTROPY,
    ENV_INDEX,
    EPISODE_RETURN,
    FORMAT_VALID,
    GROUP_ID,
    HISTORY_FULL,
    HISTORY_PROMPT,
    KV_COUNT_KEYS,
    LEVEL_SEED,
    MASKS_TRAJECTORY,
    NUM_TOKENS,
    NUM_TURNS,
    REWARD,
    SAMPLE_SEED,
    SUCCESS,
    T3_RULE_FIRED,
    TOKENS_LAST_PROMPT,
    TOKENS_LAST_RESPONSE,
    TOKENS_PROMPT,
    TOKENS_RESPONSE,
    TOKENS_TRAJECTORY,
    TRAJECTORY_REFITS,
    TRUNCATED_BY_T3,
    TURN,
)
from ..models.loading import wrapper_chat_template
from ..models.priming import primed_chat_template
from ..models.priming import reply_prime as policy_reply_prime
from ..rollout_options import check_sampling, sampling_truncation

# the policy builders and the contract live in their own modules; importable from here as well
from .generation import (
    NEUTRAL_GENERATE_KWARGS,
    NEUTRAL_SAMPLING_KWARGS,
    TRAJECTORY_MODES,
    hf_generate_kwargs,
    wrapper_generate_kwargs,
)
from .hf_policy import TokenPromptWrapper, make_generation_policy
from .policy_protocol import (
    POLICY_OUTPUT_KEYS,
    TOKEN_POLICY_OUTPUT_KEYS,
    PolicyContractError,
    RolloutPolicy,
    as_rollout_policy,
    check_policy_output,
)
from .token_trajectory import TokenTrajectories, reply_histories

__all__ = [
    "NEUTRAL_GENERATE_KWARGS",
    "NEUTRAL_SAMPLING_KWARGS",
    "POLICY_OUTPUT_KEYS",
    "PolicyContractError",
    "RowAccumulators",
    "TokenPromptWrapper",
    "TRAJECTORY_MODES",
    "TOKEN_POLICY_OUTPUT_KEYS",
    "check_policy_output",
    "check_sampling",
    "collect_rollouts",
    "hf_generate_kwargs",
    "make_generation_policy",
    "turn_cache_metrics",
    "sampling_truncation",
    "wrapper_generate_kwargs",
]

#: the per-trajectory turn-cache counts of a record (:data:`~ragen_torchrl.keys.KV_COUNT_KEYS`), logged per
#: iteration summed over the records, as ``rollout/<name>``
TURN_CACHE_METRICS = dict(
    zip(("kv_rows_reused", "kv_rows_prefilled", "kv_rows_over_cap", "kv_prefill_tokens"), KV_COUNT_KEYS)
)


def turn_cache_metrics(records: TensorDictBase) -> dict[str, float]:
    """The turn-cache counts of one iteration's records summed over them, named ``rollout/kv_...``
    (``{}`` when the policy had no turn cache: the records hold no counts).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> counts = {("turn_cache", "reused"): torch.tensor([3, 4]), ("turn_cache", "prefilled"): torch.tensor([1, 1]),
        ...           ("turn_cache", "over_cap"): torch.tensor([0, 1]), ("turn_cache", "prefill_tokens"): torch.tensor([50, 60])}
        >>> turn_cache_metrics(TensorDict(counts, batch_size=[2]))
        {'rollout/kv_rows_reused': 7.0, 'rollout/kv_rows_prefilled': 2.0, 'rollout/kv_rows_over_cap': 1.0, \
'rollout/kv_prefill_tokens': 110.0}
        >>> turn_cache_metrics(TensorDict(batch_size=[2]))
        {}
    """
    if KV_COUNT_KEYS[0] not in records.keys(include_nested=True):
        return {}
    return {f"rollout/{tag}": float(records.get(key).sum()) for tag, key in TURN_CACHE_METRICS.items()}


def token_prompt_template(policy) -> str | None:
    """The chat template (prime included) a token-prompt policy's trajectories are rendered with.

    A policy is a token-prompt policy when its ``input_mode`` is ``"tokens"``; it carries the
    ``tokenizer`` to render with, optionally its ``chat_template`` (with the prime, as
    :func:`make_generation_policy` builds it; else the tokenizer's own, see
    :func:`~ragen_torchrl.models.loading.wrapper_chat_template`) and its ``reply_prime``.

    Example:
        >>> class Policy:
        ...     input_mode, tokenizer, chat_template, reply_prime = "tokens", None, "T", "<think>"
        >>> token_prompt_template(Policy())[:1]
        'T'
    """
    template = getattr(policy, "chat_template", None)
    if template is None:
        template = primed_chat_template(wrapper_chat_template(policy.tokenizer), policy_reply_prime(policy))
    return template


@dataclass
class RowAccumulators:
    """What one collection sums and keeps per row (index ``i``: the env row ``env_index == i``) until
    its records are built.

    Example:
        >>> acc = RowAccumulators.zeros(2)
        >>> acc.returns.tolist(), acc.final, acc.owned is None
        ([0.0, 0.0], [None, None], True)
    """

    #: rewards plus format penalties, summed over the turns
    returns: torch.Tensor
    success: torch.Tensor
    turns: torch.Tensor
    #: generated tokens, summed over the turns
    tokens: torch.Tensor
    #: turns whose action was valid
    valid_turns: torch.Tensor
    #: a T3 truncation cut the episode / its stall rule fired at some turn
    t3_cut: torch.Tensor
    t3_fired: torch.Tensor
    #: the recorded next-token entropy and how many tokens it covers
    ent_sum: torch.Tensor
    ent_count: torch.Tensor
    #: ``("history", "full")`` at the row's last turn
    final: list
    #: the ids the policy read and wrote at the row's last turn (when it reports its prompt ids)
    last_prompt: list
    last_response: list
    #: a :class:`~ragen_torchrl.collectors.policy_protocol.TrajectoryOwner`'s entries of each row (else ``None``)
    owned: list | None = None
    #: the turn-cache counts of each row (:data:`~ragen_torchrl.keys.KV_COUNT_KEYS`), summed over its turns
    kv_counts: dict = field(default_factory=dict)

    @classmethod
    def zeros(cls, n: int, owned: bool = False) -> RowAccumulators:
        """Nothing played yet, for ``n`` rows (``owned``: keep a trajectory owner's entries)."""
        return cls(
            returns=torch.zeros(n),
            success=torch.zeros(n, dtype=torch.bool),
            turns=torch.zeros(n, dtype=torch.long),
            tokens=torch.zeros(n, dtype=torch.long),
            valid_turns=torch.zeros(n),
            t3_cut=torch.zeros(n, dtype=torch.bool),
            t3_fired=torch.zeros(n, dtype=torch.bool),
            ent_sum=torch.zeros(n, dtype=torch.float64),
            ent_count=torch.zeros(n, dtype=torch.long),
            final=[None] * n,
            last_prompt=[None] * n,
            last_response=[None] * n,
            owned=[None] * n if owned else None,
        )

    def add_turn(self, idx: torch.Tensor, nxt: TensorDictBase, out: TensorDictBase, h_sum, h_count, response_ids):
        """Add one turn of the rows ``idx``: the env's step ``nxt``, the policy's output ``out``, the
        recorded entropy sums and counts (``None``: not recorded) and the sampled ids."""
        n = self.returns.shape[0]
        if h_sum is not None:
            self.ent_sum.index_add_(0, idx, h_sum)
            self.ent_count.index_add_(0, idx, h_count)
        self.returns[idx] += nxt[REWARD].reshape(-1)
        self.turns[idx] = nxt[TURN]
        self.valid_turns[idx] += nxt[ACTION_IS_VALID].float()
        if TRUNCATED_BY_T3 in nxt.keys():
            self.t3_cut[idx] |= nxt[TRUNCATED_BY_T3].reshape(-1)
        if T3_RULE_FIRED in nxt.keys():
            self.t3_fired[idx] |= nxt[T3_RULE_FIRED].reshape(-1)
        if KV_COUNT_KEYS[0] in out.keys(include_nested=True):
            for key in KV_COUNT_KEYS:
                counts = self.kv_counts.setdefault(key, torch.zeros(n, dtype=torch.long))
                counts.index_add_(0, idx, out.get(key).reshape(-1))
        self.tokens[idx] += torch.tensor([len(t) for t in response_ids], dtype=torch.long)

    def finish(self, finished: list[int], idx, nxt, out, full, response_ids, policy: RolloutPolicy) -> list[int]:
        """Keep the last turn of the rows at positions ``finished`` of this turn's batch (``full``: the
        batch's ``("history", "full")``); returns their env indices."""
        prompt_ids = out.get(TOKENS_PROMPT, as_list=True) if TOKENS_PROMPT in out.keys(include_nested=True) else None
        ended = []
        for row in finished:
            i = int(idx[row])
            self.final[i] = full[row]
            self.success[i] = bool(nxt[SUCCESS][row])
            if prompt_ids is not None:
                self.last_prompt[i] = prompt_ids[row].reshape(-1).to("cpu", torch.long)
                self.last_response[i] = response_ids[row].reshape(-1).to("cpu", torch.long)
            if self.owned is not None:
                self.owned[i] = policy.trajectory(i)
            ended.append(i)
        return ended

    def records(self, groups: torch.Tensor, levels: torch.Tensor) -> TensorDictBase:
        """One lazily stacked record per row (see :func:`collect_rollouts`)."""
        records = TensorDict(
            {
                GROUP_ID: groups,
                LEVEL_SEED: levels,
                EPISODE_RETURN: self.returns,
                SUCCESS: self.success,
                NUM_TURNS: self.turns,
                NUM_TOKENS: self.tokens,
                FORMAT_VALID: self.valid_turns / self.turns.clamp_min(1),
                TRUNCATED_BY_T3: self.t3_cut,
                T3_RULE_FIRED: self.t3_fired,
                ENTROPY: (self.ent_sum / self.ent_count.clamp_min(1)).float(),
            },
            batch_size=[self.returns.shape[0]],
        ).to_lazystack(0)
        records.set(HISTORY_FULL, lazy_stack(self.final))
        for key, counts in self.kv_counts.items():
            records.set(key, counts)
        if all(p is not None for p in self.last_prompt):
            for row, p, r in zip(records.tensordicts, self.last_prompt, self.last_response):
                row.set(TOKENS_LAST_PROMPT, p)
                row.set(TOKENS_LAST_RESPONSE, r)
        return records


def _token_prompts(td: TensorDictBase, prompts: list[torch.Tensor]) -> TensorDictBase:
    """``td``'s per-row keys as a lazy stack whose rows hold their token prompts (ragged: set row by row).

    The conversation is left out: a token-prompt policy reads the ids (and
    :class:`~ragen_torchrl.collectors.hf_policy.TokenPromptWrapper` renders a ``("history", "prompt")`` it
    is given, as torchrl's own loops give it)."""
    td = lazy_stack(list(td.exclude(HISTORY_PROMPT[0]).unbind(0)))
    for row, ids in zip(td.tensordicts, prompts):
        row.set(TOKENS_PROMPT, ids)
    return td


def _response_lengths(out: TensorDictBase) -> list[int]:
    return [len(t) for t in out.get(TOKENS_RESPONSE, as_list=True)]


def _generate_part(
    policy: RolloutPolicy, td: TensorDictBase, keys: tuple = POLICY_OUTPUT_KEYS
) -> tuple[TensorDictBase, torch.Tensor | None, torch.Tensor | None]:
    rec = policy.entropy_recorder
    if rec is not None:
        rec.clear()
    out = policy(td)
    check_policy_output(out, int(td.batch_size[0]), keys)
    if rec is None or rec.num_steps == 0:
        return out, None, None
    sums, counts = rec.row_sums(_response_lengths(out))
    return out, sums, counts


def _generate(
    policy: RolloutPolicy, td: TensorDictBase, chunk_size: int, keys: tuple = POLICY_OUTPUT_KEYS
) -> tuple[TensorDictBase, torch.Tensor | None, torch.Tensor | None]:
    """Generate replies in chunks; also the per-row entropy sums and counts when recorded."""
    n = td.batch_size[0]
    if n <= chunk_size:
        return _generate_part(policy, td, keys)
    parts = [_generate_part(policy, td[i : i + chunk_size], keys) for i in range(0, n, chunk_size)]
    out = lazy_stack([row for part in parts for row in part[0].unbind(0)])
    if any(p[1] is None for p in parts):
        return out, None, None
    return out, torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])


def _history_turn(policy: RolloutPolicy, td: TensorDictBase, chunk_size: int, traj: None = None):
    """One turn of a policy that reads the conversation: it writes ``("history", "full")`` itself."""
    return _generate(policy, td, chunk_size)


def _token_turn(policy: RolloutPolicy, td: TensorDictBase, chunk_size: int, traj: TokenTrajectories):
    """One turn of a token-prompt policy: it reads each row's trajectory at ``("tokens", "prompt")``, its
    replies are appended to the trajectories and the collector writes ``("history", "full")`` from them."""
    rows = td[ENV_INDEX].tolist()
    out, h_sum, h_count = _generate(
        policy, _token_prompts(td, traj.prompts(rows)), chunk_size, TOKEN_POLICY_OUTPUT_KEYS
    )
    replies = out.get(TOKENS_RESPONSE, as_list=True)
    traj.add_replies(rows, replies)
    prompt_texts = [traj.prompt_texts[r] for r in rows]
    out.set(HISTORY_FULL, reply_histories(policy.tokenizer, prompt_texts, replies, td.get(HISTORY_PROMPT), traj.prime))
    return out, h_sum, h_count


def _set_token_trajectories(records: TensorDictBase, traj: TokenTrajectories) -> None:
    """Each record's whole token sequence and its sampled positions (rows are not extended once finished)."""
    records.set(TRAJECTORY_REFITS, traj.refits)
    for i, row in enumerate(records.tensordicts):
        ids, mask = traj.trajectory(i)
        row.set(TOKENS_TRAJECTORY, ids)
        row.set(MASKS_TRAJECTORY, mask)


def _set_owned_entries(records: TensorDictBase, owned: list[dict]) -> None:
    """A trajectory owner's entries of each row, as it handed them over when the row's episode ended."""
    for row, entries in zip(records.tensordicts, owned):
        for key, value in entries.items():
            row.set(key, value)


@torch.no_grad()
def collect_rollouts(
    env: EnvBase,
    policy: RolloutPolicy | Callable[[TensorDictBase], TensorDictBase],
    level_seeds: list[int],
    group_size: int,
    *,
    chunk_size: int = 128,
    group_offset: int = 0,
) -> TensorDictBase:
    """Play ``len(level_seeds) * group_size`` episodes to the end, ``group_size`` per level.

    Args:
        env: a text env of :mod:`ragen_torchrl.envs` (or a ``TransformedEnv`` around one)
            with exactly ``len(level_seeds) * group_size`` rows (``num_envs``).
        policy: a :class:`~ragen_torchrl.collectors.policy_protocol.RolloutPolicy`, or any callable
            honouring the module's policy contract (writes ``("history", "full")`` and
            ``("tokens", "response")``), read with the protocol's defaults
            (:func:`~ragen_torchrl.collectors.policy_protocol.as_rollout_policy`).
        level_seeds: one level per group.
        group_size: G, the samples per level.
        chunk_size: most rows generated in one policy call.
        group_offset: added to the group ids (to keep ids unique across calls).

    Returns a lazily stacked TensorDict with one row per trajectory:
    ``("history", "full")`` (the whole conversation), ``group_id``, ``level_seed``,
    ``episode_return`` (rewards plus format penalties), ``success``, ``num_turns``,
    ``num_tokens`` (generated tokens), ``format_valid`` (fraction of valid turns) and
    ``truncated_by_t3`` (set when a :class:`~ragen_torchrl.transforms.t3.T3Truncation`
    on the env cut the episode: the stall rule fired and the forced answer was not a success),
    ``t3_rule_fired`` (the stall rule fired at some turn, whatever the forced answer) and
    ``entropy`` (mean next-token entropy of the policy over the trajectory's generated
    tokens, recorded during generation when the policy comes from
    :func:`make_generation_policy`; 0 for a policy that does not record it).
    When the policy also reports the prompt ids it generated from (``("tokens", "prompt")``, as
    torchrl's wrappers do), ``("tokens", "last_prompt")`` and ``("tokens", "last_response")``
    hold each row's ids of its last turn. A token-prompt policy's records also hold
    ``("tokens", "trajectory")`` and ``("masks", "trajectory_assistant")`` (each row's whole token
    sequence and its sampled positions: what the update trains with ``algo.train_on=generated``,
    :func:`~ragen_torchrl.objectives.logprobs.tokenize_conversations`) and ``trajectory_refits``.
    A policy that reports per-row turn-cache counts (:data:`~ragen_torchrl.keys.KV_COUNT_KEYS`, a
    :class:`~ragen_torchrl.models.turn_cache.TurnCachePolicy`) has them summed over each trajectory's turns.
    A policy with ``owns_trajectories`` (:class:`~ragen_torchrl.collectors.vl_policy.VLRolloutPolicy`)
    gives each finished row's entries itself (``policy.trajectory(env_index)``, before ``release``).

    Raises:
        ValueError: no level, ``group_size < 1``, or an env of the wrong size.
        PolicyContractError: the policy lacks a member its mode needs, or its output a contract key.

    See the module docstring for an example.
    """
    if group_size < 1 or not level_seeds:
        raise ValueError(f"need at least one level and group_size >= 1, got {len(level_seeds)} levels, G={group_size}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    n = len(level_seeds) * group_size
    env_rows = int(env.batch_size[0]) if len(env.batch_size) else 1
    if env_rows != n:
        raise ValueError(
            f"collect_rollouts: {len(level_seeds)} levels x G={group_size} = {n} rows, but the env has {env_rows} "
            f"rows (num_envs); build the env with num_envs={n}"
        )
    policy = as_rollout_policy(policy)
    levels = torch.tensor([s for s in level_seeds for _ in range(group_size)], dtype=torch.long)
    groups = torch.arange(len(level_seeds)).repeat_interleave(group_size) + group_offset
    samples = torch.tensor([sample_seed(s, g) for s in level_seeds for g in range(group_size)], dtype=torch.long)
    td = env.reset(TensorDict({LEVEL_SEED: levels, GROUP_ID: groups, SAMPLE_SEED: samples}, batch_size=[n]))
    acc = RowAccumulators.zeros(n, owned=policy.owns_trajectories)
    # a policy that keeps per-row state between turns (TurnCachePolicy's KV caches) starts afresh and
    # frees each row when its episode ends
    policy.clear()
    traj = None
    if policy.input_mode == "tokens":
        # one token sequence per row: the policy reads it, the update trains it (module token_trajectory)
        traj = TokenTrajectories(policy.tokenizer, token_prompt_template(policy), n, prime=policy_reply_prime(policy))
        traj.start(td[ENV_INDEX].tolist(), chat_dicts(td.get(HISTORY_PROMPT)))
    play_turn = _history_turn if traj is None else _token_turn
    while td is not None and td.batch_size[0] > 0:
        out, h_sum, h_count = play_turn(policy, td, chunk_size, traj)
        nxt = env.step(out)["next"]
        idx = nxt[ENV_INDEX]
        response_ids = out.get(TOKENS_RESPONSE, as_list=True)
        acc.add_turn(idx, nxt, out, h_sum, h_count, response_ids)
        done = nxt[DONE].reshape(-1)
        finished = done.nonzero().reshape(-1).tolist()
        full = out.get(HISTORY_FULL)
        if finished:
            policy.release(acc.finish(finished, idx, nxt, out, full, response_ids, policy))
        running = (~done).nonzero().reshape(-1)
        td = nxt[running] if running.numel() else None
        if traj is not None and td is not None:
            traj.add_env_turns(idx[running].tolist(), chat_dicts(full[running]), chat_dicts(td.get(HISTORY_PROMPT)))
    records = acc.records(groups, levels)
    if traj is not None:
        _set_token_trajectories(records, traj)
    if acc.owned is not None:
        _set_owned_entries(records, acc.owned)
    return records
