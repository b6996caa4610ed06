"""Rollout tokens with and without T3 truncation: the same policy on the same levels.

**Policy: scripted and stochastic, not a model.** A warm-started tiny model would need an SFT run
per task and minutes of CPU generation per mode, more than these shared machines allow, so the
policy here is each game's *oracle that falls into belief traps*: every turn an agent that is not
trapped yet becomes trapped with probability ``--p-trap`` (the paper's belief-trap region, which
it does not leave); until then it plays the oracle. Trapped, its queries are uninformative: an
earlier query repeated (GuessNumbers, CircuitDecoding), an off-topic question (SituationPuzzles,
``env.random_query``), or an earlier comparison/rating with a reported estimate that drifts away
from the truth by Gaussian noise (PreferenceEstimation, MovieRecommendation: belief deviation).
It answers with the oracle's best guess when the oracle would answer (its last turn, or solved)
or at once when the last user message asks it to present its answer (T3 fired). Its reasoning
text is the demonstrator's (``game.explain``), so replies have realistic lengths.

Each row's random stream is seeded by (task, level, sample), so both modes make the same
decisions until T3 cuts an episode. Tokens are the policy's generated tokens (what
``collect_rollouts`` counts as ``num_tokens``), counted with the tiny model's byte-level BPE
tokenizer trained on the task's text (+1 end-of-turn token per reply). Rows are stepped in
sub-batches of running rows, as the trainer does, through ``RowTransformedEnv``.

Columns: success rate, mean episode return, total generated tokens, tokens per success, mean
turns, T3 truncation rate, mean turns saved per truncated episode (``max_turn - turns``) and the
change in tokens relative to no truncation.

Usage::

    python benchmarks/t3_tokens.py                       # all five tasks, 16 levels x 4 samples
    python benchmarks/t3_tokens.py --quick               # 4 levels x 2 samples
    python benchmarks/t3_tokens.py --tasks guess_numbers --levels 64 --p-trap 0.3

Example (programmatic):
    >>> from benchmarks.t3_tokens import run_mode   # doctest: +SKIP
    >>> stats = run_mode("guess_numbers", levels=[0, 1], samples=2, p_trap=0.15, t3=True, tokenizer=tok)  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import random
import time

import tensordict
import torch
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.active_reasoning import ActiveReasoningEnv
from ragen_torchrl.envs.games.guess_numbers import InteractiveGame
from ragen_torchrl.envs.games.movie_recommendation import MovieRecommendationGame
from ragen_torchrl.envs.games.preference_estimation import PreferenceEstimationGame, format_vector, split_estimate
from ragen_torchrl.envs.games.situation_puzzles import SituationPuzzlesGame
from ragen_torchrl.models.tiny import train_tokenizer
from ragen_torchrl.trainer.demonstrations import tokenizer_corpus
from ragen_torchrl.transforms.t3 import DEFAULT_PROMPT, ENV_TASKS, T3Truncation, t3_token_stats

TASKS = tuple(ENV_TASKS)


def best_answer(game: InteractiveGame) -> str:
    """The oracle's answer now (its best guess), whatever the turns left."""
    saved = game.max_turns
    game.max_turns = game.turn + 1  # every oracle answers when one turn is left
    try:
        return game.oracle_action()
    finally:
        game.max_turns = saved


def useless_query(env: ActiveReasoningEnv, game: InteractiveGame, rng: random.Random, drift: float) -> str:
    """A trapped agent's query (see the module docstring)."""
    if isinstance(game, SituationPuzzlesGame):
        return env.random_query(game, rng)
    earlier = [q for q, fb in game.transcript if not fb.startswith("Invalid")]
    query = rng.choice(earlier) if earlier else env.random_query(game, rng)
    if isinstance(game, (PreferenceEstimationGame, MovieRecommendationGame)):
        body, _ = split_estimate(query)
        est = game.estimate or [rng.gauss(0.0, 1.0) for _ in range(game.dim)]
        query = body + "; estimate: " + format_vector([x + rng.gauss(0.0, drift) for x in est])
    return query


def policy_reply(env: ActiveReasoningEnv, game: InteractiveGame, rng: random.Random, state: dict,
                 p_trap: float, forced: bool, drift: float = 0.3) -> str:
    """One reply of the trap-prone oracle; ``state["trapped"]`` persists over the episode."""
    state["trapped"] = state.get("trapped", False) or rng.random() < p_trap
    action = best_answer(game) if forced else game.oracle_action()
    kind, _ = game.split_action(action)
    if kind == "interact" and state["trapped"]:
        action = game.INTERACT_PREFIX + useless_query(env, game, rng, drift)
    return env.format_reply(game.explain(action), [action])


def run_mode(task: str, levels: list[int], samples: int, p_trap: float, t3: bool, tokenizer) -> dict[str, float]:
    """Play every (level, sample) episode to the end; return summary statistics."""
    n = len(levels) * samples
    base = make_env(task, num_envs=n)
    env = base.append_transform(T3Truncation(task)) if t3 else base
    level_t = torch.tensor([lv for lv in levels for _ in range(samples)])
    td = env.reset(TensorDict(level_seed=level_t, group_id=torch.arange(n) // samples, batch_size=[n]))
    rngs = [random.Random(f"{task}/{lv}/{s}") for lv in levels for s in range(samples)]
    states: list[dict] = [{} for _ in range(n)]
    tokens = torch.zeros(n, dtype=torch.long)
    returns = torch.zeros(n)
    turns = torch.zeros(n, dtype=torch.long)
    success = torch.zeros(n, dtype=torch.bool)
    cut = torch.zeros(n, dtype=torch.bool)
    while td is not None:
        idx = td["env_index"].tolist()
        replies = []
        for row, i in enumerate(idx):
            forced = DEFAULT_PROMPT in td["history", "prompt"][row].content[-1]
            replies.append(policy_reply(base, base.games[i], rngs[i], states[i], p_trap, forced))
        m = len(replies)
        msg = History(role=["assistant"] * m, content=replies, batch_size=(m,))
        td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(-1), inplace=False, dim=-1))
        nxt = env.step(td)["next"]
        ids = torch.tensor(idx)
        tokens[ids] += torch.tensor([len(tokenizer(r)["input_ids"]) + 1 for r in replies])
        returns[ids] += nxt["reward"].reshape(-1)
        turns[ids] = nxt["turn"]
        if t3:
            cut[ids] |= nxt["truncated_by_t3"]
        done = nxt["done"].reshape(-1)
        success[ids[done]] = nxt["success"][done]
        running = (~done).nonzero().reshape(-1)
        td = nxt[running] if running.numel() else None
    stats = t3_token_stats(
        {"num_tokens": tokens, "success": success, "num_turns": turns, "truncated_by_t3": cut}, base.max_turn
    )
    stats.update(success=success.float().mean().item(), reward=returns.mean().item(),
                 turns=turns.float().mean().item(), episodes=float(n))
    return stats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--levels", type=int, default=16, help="levels per task")
    parser.add_argument("--samples", type=int, default=4, help="episodes per level (group size)")
    parser.add_argument("--p-trap", type=float, default=0.15, help="per-turn probability of entering the belief trap")
    parser.add_argument("--quick", action="store_true", help="4 levels x 2 samples")
    args = parser.parse_args(argv)
    if args.quick:
        args.levels, args.samples = 4, 2
    tensordict.set_list_to_stack(True).set()
    print(f"policy: scripted trap-prone oracle (p_trap={args.p_trap}), NOT a model; "
          f"{args.levels} levels x {args.samples} samples per task; tokens = generated tokens (tiny BPE)")
    header = (f"{'task':<22} {'T3':<4} {'success':>7} {'return':>7} {'tokens':>8} {'tok/succ':>9} "
              f"{'turns':>6} {'trunc%':>7} {'saved':>6} {'Δtokens':>8} {'secs':>6}")
    print(header)
    print("-" * len(header))
    for task in args.tasks:
        corpus_env = make_env(task, num_envs=1)
        tokenizer = train_tokenizer(tokenizer_corpus(corpus_env, num_episodes=40) + [DEFAULT_PROMPT], vocab_size=512)
        levels = list(range(args.levels))
        rows = {}
        for t3 in (False, True):
            t0 = time.time()
            rows[t3] = run_mode(task, levels, args.samples, args.p_trap, t3, tokenizer)
            rows[t3]["secs"] = time.time() - t0
        base_tokens = rows[False]["t3/rollout_tokens"]
        for t3, s in rows.items():
            delta = (s["t3/rollout_tokens"] - base_tokens) / base_tokens * 100 if base_tokens else 0.0
            print(f"{task:<22} {'on' if t3 else 'off':<4} {s['success']:>7.3f} {s['reward']:>7.3f} "
                  f"{s['t3/rollout_tokens']:>8.0f} {s['t3/tokens_per_success']:>9.1f} {s['turns']:>6.2f} "
                  f"{100 * s['t3/truncation_rate']:>6.1f}% {s['t3/mean_turns_saved']:>6.2f} {delta:>+7.1f}% "
                  f"{s['secs']:>6.1f}")


if __name__ == "__main__":
    main()
