"""Rollout tokens with and without T3 truncation: the same policy on the same levels.

**Default policy: the trainer's warm-started model.** For each task the config is composed
exactly as ``ragen-train env=<task>`` composes it (plus any ``--override``), and the starting
policy is the one :class:`~ragen_torchrl.trainer.loop.Trainer` would train: the tiny model
warm-started on the task's oracle demonstrations (cached by config hash, so a second run skips
the SFT). Both modes then sample training rollouts (``rollout.temperature``) through
``collect_rollouts`` on the same levels with the same group size and the same torch seed; the
only difference is the :class:`~ragen_torchrl.transforms.t3.T3Truncation` transform on the env.
Tokens are generated tokens (``num_tokens``).

``--policy scripted`` instead plays a *scripted, stochastic* policy that isolates the mechanism:
each game's oracle that falls into a belief trap with probability ``--p-trap`` per turn (and
never leaves it); trapped, its queries are uninformative (an earlier query repeated for
GuessNumbers/CircuitDecoding, an off-topic question for SituationPuzzles, an earlier comparison
with a drifting estimate for PreferenceEstimation/MovieRecommendation). It answers with the
oracle's best guess when the oracle would, or at once when T3 asks it to present its answer.
Each row's random stream is seeded by (task, level, sample), so both modes make the same
decisions until T3 cuts an episode; tokens are counted with a tiny BPE tokenizer trained on the
task's text (+1 end-of-turn token per reply).

Columns: success rate, mean episode return, total generated tokens, tokens per success, mean
turns, share of episodes whose T3 rule fired, T3 truncation rate (episodes that *ended*
truncated: a correct answer on the forced-answer turn is a success, not a truncation), mean turns
saved per truncated episode (``max_turn - turns``) and the change in tokens relative to no
truncation. (``fired%`` needs the rollout records' ``t3_rule_fired`` column in model mode; ``-``
without it.)

Usage::

    python benchmarks/t3_tokens.py                        # the two small presets and all five tasks
    python benchmarks/t3_tokens.py --tasks guess_numbers_small circuit_decoding_small
    python benchmarks/t3_tokens.py --quick                # 4 levels x 2 samples, 20 SFT steps
    python benchmarks/t3_tokens.py --tasks guess_numbers --levels 64 -o sft.steps=300
    python benchmarks/t3_tokens.py --policy scripted --p-trap 0.3

Example (programmatic):
    >>> from benchmarks.t3_tokens import run_mode   # doctest: +SKIP
    >>> stats = run_mode("guess_numbers", levels=[0, 1], samples=2, p_trap=0.15, t3=True, tokenizer=tok)  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import math
import random
import time

import tensordict
import torch
from tensordict import TensorDict
from torchrl.data.llm import History

from ragen_torchrl.collectors.grouped import collect_rollouts, make_generation_policy
from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.active.env import ActiveReasoningEnv
from ragen_torchrl.envs.games.interactive import InteractiveGame
from ragen_torchrl.envs.games.movie_recommendation import MovieRecommendationGame
from ragen_torchrl.envs.games.preference_estimation import PreferenceEstimationGame
from ragen_torchrl.envs.games.preference_questions import format_vector, split_estimate
from ragen_torchrl.envs.games.situation_puzzles import SituationPuzzlesGame
from ragen_torchrl.models.loading import load_pretrained
from ragen_torchrl.models.tiny import train_tokenizer
from ragen_torchrl.trainer.demonstrations import tokenizer_corpus
from ragen_torchrl.trainer.model_setup import env_kwargs, prepare_model
from ragen_torchrl.transforms.t3 import DEFAULT_PROMPT, ENV_TASKS, T3Truncation, t3_token_stats

#: the CPU-scale presets first (a tiny model learns them in minutes), then the paper-size envs
SMALL_TASKS = ("guess_numbers_small", "circuit_decoding_small")
TASKS = SMALL_TASKS + tuple(ENV_TASKS)


def task_env(task: str) -> tuple[str, dict]:
    """Env registry name and constructor arguments of a task (an ``env=`` preset name)."""
    cfg = compose_task_config(task, [])
    return str(cfg.env.name), env_kwargs(cfg.env)


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
        query = body + " estimate: " + format_vector([x + rng.gauss(0.0, drift) for x in est])
    return query


def policy_reply(
    env: ActiveReasoningEnv,
    game: InteractiveGame,
    rng: random.Random,
    state: dict,
    p_trap: float,
    forced: bool,
    drift: float = 0.3,
) -> str:
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
    name, kwargs = task_env(task)
    base = make_env(name, num_envs=n, **kwargs)
    env = base.append_transform(T3Truncation(name)) if t3 else base
    level_t = torch.tensor([lv for lv in levels for _ in range(samples)])
    td = env.reset(TensorDict(level_seed=level_t, group_id=torch.arange(n) // samples, batch_size=[n]))
    rngs = [random.Random(f"{task}/{lv}/{s}") for lv in levels for s in range(samples)]
    states: list[dict] = [{} for _ in range(n)]
    tokens = torch.zeros(n, dtype=torch.long)
    returns = torch.zeros(n)
    turns = torch.zeros(n, dtype=torch.long)
    success = torch.zeros(n, dtype=torch.bool)
    cut = torch.zeros(n, dtype=torch.bool)
    fired = torch.zeros(n, dtype=torch.bool)
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
            fired[ids] |= nxt["t3_rule_fired"]
        done = nxt["done"].reshape(-1)
        success[ids[done]] = nxt["success"][done]
        running = (~done).nonzero().reshape(-1)
        td = nxt[running] if running.numel() else None
    stats = t3_token_stats(
        {"num_tokens": tokens, "success": success, "num_turns": turns, "truncated_by_t3": cut, "t3_rule_fired": fired},
        base.max_turn,
    )
    stats.update(
        success=success.float().mean().item(),
        reward=returns.mean().item(),
        turns=turns.float().mean().item(),
        episodes=float(n),
    )
    return stats


def compose_task_config(task: str, overrides: list[str]):
    """The config ``ragen-train env=<task> <overrides>`` would run with."""
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.trainer.config import validate_config
    from ragen_torchrl.trainer.config_paths import CONFIG_DIR

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"env={task}", *overrides])
    return validate_config(cfg)


def load_policy(cfg):
    """The trainer's starting policy for ``cfg`` (warm-started and cached) as a sampling wrapper."""
    env = make_env(cfg.env.name, num_envs=1, **env_kwargs(cfg.env))
    model, tokenizer = load_pretrained(prepare_model(cfg, env), cfg.model.device, cfg.model.dtype)
    model.eval()
    return make_generation_policy(
        model, tokenizer, max_new_tokens=int(cfg.rollout.max_new_tokens), temperature=float(cfg.rollout.temperature)
    )


def run_model_mode(cfg, policy, levels: list[int], samples: int, t3: bool, seed: int = 0) -> dict[str, float]:
    """Rollouts of ``policy`` (see :func:`load_policy`) with or without T3 truncation."""
    task = cfg.env.name
    n = len(levels) * samples
    base = make_env(task, num_envs=n, **env_kwargs(cfg.env))
    t3_cfg = cfg.get("t3") or {}
    transform = T3Truncation(
        task,
        k=t3_cfg.get("k"),
        cumulative=t3_cfg.get("cumulative"),
        outside_trigger=bool(t3_cfg.get("outside_trigger", False)),
    )
    env = base.append_transform(transform) if t3 else base
    torch.manual_seed(seed)  # same sampling stream in both modes until T3 cuts an episode
    records = collect_rollouts(env, policy, levels, samples, chunk_size=int(cfg.rollout.chunk_size))
    stats = t3_token_stats(records, base.max_turn)
    stats.update(
        success=records["success"].float().mean().item(),
        reward=records["episode_return"].float().mean().item(),
        turns=records["num_turns"].float().mean().item(),
        episodes=float(n),
    )
    return stats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument(
        "--policy",
        choices=("model", "scripted"),
        default="model",
        help="model: the trainer's warm-started policy (default); scripted: trap-prone oracle",
    )
    parser.add_argument("--levels", type=int, default=16, help="levels per task")
    parser.add_argument("--samples", type=int, default=4, help="episodes per level (group size)")
    parser.add_argument("--p-trap", type=float, default=0.15, help="scripted policy: per-turn trap probability")
    parser.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        help="Hydra override for the model policy's config, e.g. -o sft.steps=300 (repeatable)",
    )
    parser.add_argument("--quick", action="store_true", help="4 levels x 2 samples (model: 20 SFT steps)")
    args = parser.parse_args(argv)
    if args.quick:
        args.levels, args.samples = 4, 2
        if args.policy == "model":
            args.override = ["sft.steps=20", "sft.episodes=50", *args.override]
    tensordict.set_list_to_stack(True).set()
    if args.policy == "model":
        print(
            f"policy: the trainer's warm-started model (overrides: {args.override or 'none'}); "
            f"{args.levels} levels x {args.samples} samples per task; tokens = generated tokens"
        )
    else:
        print(
            f"policy: scripted trap-prone oracle (p_trap={args.p_trap}), NOT a model; "
            f"{args.levels} levels x {args.samples} samples per task; tokens = generated tokens (tiny BPE)"
        )
    header = (
        f"{'task':<22} {'T3':<4} {'success':>7} {'return':>7} {'tokens':>8} {'tok/succ':>9} "
        f"{'turns':>6} {'fired%':>7} {'trunc%':>7} {'saved':>6} {'Δtokens':>8} {'secs':>6}"
    )
    print(header, flush=True)
    print("-" * len(header))
    for task in args.tasks:
        levels = list(range(args.levels))
        if args.policy == "model":
            cfg = compose_task_config(task, args.override)
            if cfg.model.get("threads"):
                torch.set_num_threads(int(cfg.model.threads))
            policy = load_policy(cfg)  # warm start outside the timed modes
            run = lambda t3: run_model_mode(cfg, policy, levels, args.samples, t3, seed=int(cfg.seed))  # noqa: E731
        else:
            name, kwargs = task_env(task)
            corpus_env = make_env(name, num_envs=1, **kwargs)
            tokenizer = train_tokenizer(
                tokenizer_corpus(corpus_env, num_episodes=40) + [DEFAULT_PROMPT], vocab_size=512
            )
            run = lambda t3: run_mode(task, levels, args.samples, args.p_trap, t3, tokenizer)  # noqa: E731
        rows = {}
        for t3 in (False, True):
            t0 = time.time()
            rows[t3] = run(t3)
            rows[t3]["secs"] = time.time() - t0
        base_tokens = rows[False]["t3/rollout_tokens"]
        for t3, s in rows.items():
            delta = (s["t3/rollout_tokens"] - base_tokens) / base_tokens * 100 if base_tokens else 0.0
            tps = s["t3/tokens_per_success"]
            tps_text = "no succ" if math.isnan(tps) else f"{tps:.1f}"  # undefined without a success
            fire = s.get("t3/rule_fire_rate")
            fire_text = "-" if fire is None else f"{100 * fire:.1f}%"
            print(
                f"{task:<22} {'on' if t3 else 'off':<4} {s['success']:>7.3f} {s['reward']:>7.3f} "
                f"{s['t3/rollout_tokens']:>8.0f} {tps_text:>9} {s['turns']:>6.2f} {fire_text:>7} "
                f"{100 * s['t3/truncation_rate']:>6.1f}% {s['t3/mean_turns_saved']:>6.2f} {delta:>+7.1f}% "
                f"{s['secs']:>6.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
