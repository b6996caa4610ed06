"""Multi-turn rollouts through torchrl's ``TransformersWrapper`` in history mode.

P prompt groups x G samples run together: every row of a group gets the same level
(``level_seed``) and its ``group_id``. At each turn only the rows still running are
generated and stepped; since every turn adds exactly one assistant and one user message,
those rows all hold the same number of messages, which avoids the wrapper's crash on
ragged history batches. Large batches are generated in chunks.

The result has one row per trajectory (see :func:`collect_rollouts`).

Example:
    >>> import tensordict
    >>> tensordict.set_list_to_stack(True).set()
    >>> from ragen_torchrl.trainer.rollout import train_level_seeds, VAL_SEED_OFFSET
    >>> seeds = train_level_seeds(seed=0, iteration=3, num_groups=4)
    >>> len(seeds), all(s < VAL_SEED_OFFSET for s in seeds)
    (4, True)
"""

from __future__ import annotations

import random

import torch
from tensordict import TensorDict, TensorDictBase, lazy_stack
from torchrl.modules.llm import TransformersWrapper

from ..envs.text_env import TextGameEnv, sample_seed
from ..models.entropy_recorder import EntropyRecorder, attach_entropy_recorder
from ..models.loading import wrapper_chat_template

#: training levels use seeds in [0, 2**30); validation levels [2**30, 2**30 + n);
#: demonstrations [2**31, 2**31 + 2**30): the three sets never overlap
VAL_SEED_OFFSET = 1 << 30


def train_level_seeds(seed: int, iteration: int, num_groups: int) -> list[int]:
    """Level seeds of one training iteration (a pure function of seed and iteration, so resuming reproduces them)."""
    rng = random.Random(seed * 1_000_003 + iteration)
    return [rng.randrange(VAL_SEED_OFFSET) for _ in range(num_groups)]


def val_level_seeds(num_levels: int) -> list[int]:
    """The fixed validation levels (disjoint from training seeds)."""
    return [VAL_SEED_OFFSET + i for i in range(num_levels)]


def make_generation_policy(model, tokenizer, *, max_new_tokens: int = 64, temperature: float = 1.0) -> TransformersWrapper:
    """A history-mode ``TransformersWrapper`` that samples replies (``temperature`` 0 = greedy)."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    kwargs = {"max_new_tokens": int(max_new_tokens)}
    if temperature > 0:
        kwargs.update(do_sample=True, temperature=float(temperature), top_p=1.0)
    else:
        kwargs.update(do_sample=False)
    policy = TransformersWrapper(
        model,
        tokenizer=tokenizer,
        chat_template=wrapper_chat_template(tokenizer),
        input_mode="history",
        generate=True,
        return_log_probs=False,
        pad_output=False,
        generate_kwargs=kwargs,
    )
    # per-trajectory token entropy for the SNR filter's entropy ablations, read off the
    # logits generate computes anyway (no extra forward pass)
    policy.entropy_recorder = attach_entropy_recorder(policy)
    return policy


def _response_lengths(out: TensorDictBase) -> list[int]:
    return [len(t) for t in out.get(("tokens", "response"), as_list=True)]


def _generate_part(policy, td: TensorDictBase) -> tuple[TensorDictBase, torch.Tensor | None, torch.Tensor | None]:
    rec: EntropyRecorder | None = getattr(policy, "entropy_recorder", None)
    if rec is not None:
        rec.clear()
    out = policy(td)
    if rec is None or rec.num_steps == 0:
        return out, None, None
    sums, counts = rec.row_sums(_response_lengths(out))
    return out, sums, counts


def _generate(policy, td: TensorDictBase, chunk_size: int) -> tuple[TensorDictBase, torch.Tensor | None, torch.Tensor | None]:
    """Generate replies in chunks; also the per-row entropy sums and counts when recorded."""
    n = td.batch_size[0]
    if n <= chunk_size:
        return _generate_part(policy, td)
    parts = [_generate_part(policy, td[i : i + chunk_size]) for i in range(0, n, chunk_size)]
    out = lazy_stack([row for part in parts for row in part[0].unbind(0)])
    if any(p[1] is None for p in parts):
        return out, None, None
    return out, torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts])


@torch.no_grad()
def collect_rollouts(
    env: TextGameEnv,
    policy,
    level_seeds: list[int],
    group_size: int,
    *,
    chunk_size: int = 128,
    group_offset: int = 0,
) -> TensorDictBase:
    """Play ``len(level_seeds) * group_size`` episodes to the end.

    Returns a lazily stacked TensorDict with one row per trajectory:
    ``("history", "full")`` (the whole conversation), ``group_id``, ``level_seed``,
    ``episode_return`` (rewards plus format penalties), ``success``, ``num_turns``,
    ``num_tokens`` (generated tokens), ``format_valid`` (fraction of valid turns) and
    ``truncated_by_t3`` (set when a :class:`~ragen_torchrl.transforms.t3.T3Truncation`
    on the env cut the episode: the stall rule fired and the forced answer was not a success),
    ``t3_rule_fired`` (the stall rule fired at some turn, whatever the forced answer) and ``entropy`` (mean next-token entropy of the policy over the
    trajectory's generated tokens, recorded during generation when the policy comes from
    :func:`make_generation_policy`; 0 for a policy that does not record it).

    ``env`` must have exactly ``len(level_seeds) * group_size`` rows.
    """
    if group_size < 1 or not level_seeds:
        raise ValueError(f"need at least one level and group_size >= 1, got {len(level_seeds)} levels, G={group_size}")
    n = len(level_seeds) * group_size
    env_rows = int(env.batch_size[0]) if len(env.batch_size) else 1
    if env_rows != n:
        raise ValueError(
            f"collect_rollouts: {len(level_seeds)} levels x G={group_size} = {n} rows, but the env has {env_rows} "
            f"rows (num_envs); build the env with num_envs={n}"
        )
    levels = torch.tensor([s for s in level_seeds for _ in range(group_size)], dtype=torch.long)
    groups = torch.arange(len(level_seeds)).repeat_interleave(group_size) + group_offset
    samples = torch.tensor(
        [sample_seed(s, g) for s in level_seeds for g in range(group_size)], dtype=torch.long
    )
    td = env.reset(TensorDict(level_seed=levels, group_id=groups, sample_seed=samples, batch_size=[n]))
    returns = torch.zeros(n)
    success = torch.zeros(n, dtype=torch.bool)
    turns = torch.zeros(n, dtype=torch.long)
    tokens = torch.zeros(n, dtype=torch.long)
    valid_turns = torch.zeros(n)
    t3_cut = torch.zeros(n, dtype=torch.bool)
    t3_fired = torch.zeros(n, dtype=torch.bool)
    ent_sum = torch.zeros(n, dtype=torch.float64)
    ent_count = torch.zeros(n, dtype=torch.long)
    final: list = [None] * n
    while td is not None and td.batch_size[0] > 0:
        out, h_sum, h_count = _generate(policy, td, chunk_size)
        nxt = env.step(out)["next"]
        idx = nxt["env_index"]
        if h_sum is not None:
            ent_sum.index_add_(0, idx, h_sum)
            ent_count.index_add_(0, idx, h_count)
        returns[idx] += nxt["reward"].reshape(-1)
        turns[idx] = nxt["turn"]
        valid_turns[idx] += nxt["action_is_valid"].float()
        if "truncated_by_t3" in nxt.keys():
            t3_cut[idx] |= nxt["truncated_by_t3"].reshape(-1)
        if "t3_rule_fired" in nxt.keys():
            t3_fired[idx] |= nxt["t3_rule_fired"].reshape(-1)
        response_tokens = out.get(("tokens", "response"), as_list=True)
        tokens[idx] += torch.tensor([len(t) for t in response_tokens], dtype=torch.long)
        done = nxt["done"].reshape(-1)
        full = out.get(("history", "full"))
        for row in done.nonzero().reshape(-1).tolist():
            i = int(idx[row])
            final[i] = full[row]
            success[i] = bool(nxt["success"][row])
        running = (~done).nonzero().reshape(-1)
        td = nxt[running] if running.numel() else None
    records = TensorDict(
        {
            "group_id": groups,
            "level_seed": levels,
            "episode_return": returns,
            "success": success,
            "num_turns": turns,
            "num_tokens": tokens,
            "format_valid": valid_turns / turns.clamp_min(1),
            "truncated_by_t3": t3_cut,
            "t3_rule_fired": t3_fired,
            "entropy": (ent_sum / ent_count.clamp_min(1)).float(),
        },
        batch_size=[n],
    ).to_lazystack(0)
    records.set(("history", "full"), lazy_stack(final))
    return records
