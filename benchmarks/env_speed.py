"""Environment throughput: Sokoban level generation and batched ``env.step`` speed.

Usage:
    python benchmarks/env_speed.py [--seconds 2.0] [--batch 64] [--episodes 3]

Prints two tables:

* Sokoban levels generated per second, cold (the level pool is bypassed:
  ``use_cache=False``), for 6x6 / 1 box and 8x8 / 2 boxes;
* env steps per second for every registered env (one row of the batch stepped once =
  one step): ``--batch`` rows (prompt groups of 4) play whole episodes with scripted
  oracle replies, stepping only the rows still running, as the trainer's rollout does.
  Only ``env.reset`` / ``env.step`` are timed; computing the oracle replies (a BFS for
  Sokoban) and building the assistant messages are not. Reset time (level generation,
  cached after the first episode for Sokoban) is reported separately.

Example:
    $ python benchmarks/env_speed.py --seconds 0.5 --episodes 1
"""

from __future__ import annotations

import argparse
import time

import tensordict

tensordict.set_list_to_stack(True).set()

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.data.llm import History  # noqa: E402

from ragen_torchrl.envs import make_env  # noqa: E402
from ragen_torchrl.envs.games.sokoban import SokobanGame  # noqa: E402
from ragen_torchrl.envs.text_env import TextGameEnv, sample_seed  # noqa: E402

GENERATION = [((6, 6), 1), ((8, 8), 2)]
ENVS = [
    ("frozenlake", {}),
    ("sokoban", {}),
    ("sokoban", {"dim": [8, 8], "num_boxes": 2}),
    ("bandit", {}),
    ("countdown", {}),
    ("metamathqa", {}),
    ("searchqa", {}),
    ("webshop", {}),
    ("deepcoder", {}),
]
GROUP = 4


def bench_generation(dim: tuple[int, int], num_boxes: int, seconds: float) -> tuple[int, float]:
    """``(levels, levels per second)`` of cold Sokoban generation."""
    n, seed, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        SokobanGame.generate(seed, dim=dim, num_boxes=num_boxes, use_cache=False)
        n += 1
        seed += 1
    return n, n / (time.perf_counter() - t0)


def oracle_reply(env: TextGameEnv, idx: int) -> str:
    game = env.games[idx]
    if game.action_names is None:
        return env.format_reply("plan", [game.oracle_action()])
    if hasattr(game, "solve"):  # Sokoban: the next chunk of a shortest plan
        plan = game.solve() or [game.oracle_action()]
        return env.format_reply("plan", plan[: env.max_actions_per_turn])
    return env.format_reply("plan", [game.oracle_action()])


def with_replies(env: TextGameEnv, td: TensorDict) -> TensorDict:
    idx = td["env_index"].tolist()
    msg = History(role=["assistant"] * len(idx), content=[oracle_reply(env, i) for i in idx], batch_size=(len(idx),))
    td.set(("history", "full"), td["history", "prompt"].extend(msg.unsqueeze(-1), inplace=False, dim=-1))
    return td


def bench_env(name: str, cfg: dict, batch: int, episodes: int, *, setup=None, before_step=None) -> dict:
    """Whole episodes of ``batch`` rows with oracle replies; ``setup(env)`` runs once after the env is
    built, ``before_step(env)`` before every timed step (e.g. to clear a cache)."""
    env = make_env(name, num_envs=batch, **cfg)
    if setup is not None:
        setup(env)
    steps, step_time, reset_time, turns, successes = 0, 0.0, 0.0, 0, 0
    for episode in range(episodes):
        levels = [1000 * episode + row // GROUP for row in range(batch)]
        reset_in = TensorDict(
            level_seed=torch.tensor(levels),
            group_id=torch.tensor([row // GROUP for row in range(batch)]),
            sample_seed=torch.tensor([sample_seed(s, row % GROUP) for row, s in enumerate(levels)]),
            batch_size=[batch],
        )
        t0 = time.perf_counter()
        td = env.reset(reset_in)
        reset_time += time.perf_counter() - t0
        while td is not None:
            td = with_replies(env, td)  # not timed: oracle (BFS) and message building
            if before_step is not None:
                before_step(env)
            t0 = time.perf_counter()
            nxt = env.step(td)["next"]
            step_time += time.perf_counter() - t0
            steps += td.batch_size[0]
            turns += 1
            done = nxt["done"].reshape(-1)
            successes += int(nxt["success"][done].sum())
            running = (~done).nonzero().reshape(-1)
            td = nxt[running] if running.numel() else None
    label = name + ("" if not cfg else " " + ",".join(f"{k}={v}" for k, v in cfg.items()))
    return {
        "env": label,
        "steps": steps,
        "steps_per_s": steps / step_time,
        "ms_per_batch_step": 1000 * step_time / turns,
        "reset_ms": 1000 * reset_time / episodes,
        "success": successes / (batch * episodes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time budget per generation setting")
    parser.add_argument("--batch", type=int, default=64, help="rows stepped together")
    parser.add_argument("--episodes", type=int, default=3, help="batches of whole episodes per env")
    args = parser.parse_args()
    torch.set_num_threads(1)

    print("Sokoban level generation (cold, no level pool)")
    print(f"{'dim':>6} {'boxes':>5} {'levels':>7} {'levels/s':>10} {'ms/level':>9}")
    for dim, boxes in GENERATION:
        n, rate = bench_generation(dim, boxes, args.seconds)
        print(f"{dim[0]}x{dim[1]:<4} {boxes:>5} {n:>7} {rate:>10.1f} {1000 / rate:>9.3f}")

    print(f"\nenv.step throughput (batch {args.batch}, groups of {GROUP}, scripted oracle replies)")
    print(f"{'env':<36} {'steps':>6} {'steps/s':>9} {'ms/batch step':>14} {'reset ms':>9} {'success':>8}")
    for name, cfg in ENVS:
        r = bench_env(name, cfg, args.batch, args.episodes)
        print(
            f"{r['env']:<36} {r['steps']:>6} {r['steps_per_s']:>9.0f} {r['ms_per_batch_step']:>14.2f} "
            f"{r['reset_ms']:>9.1f} {r['success']:>8.2f}"
        )


if __name__ == "__main__":
    main()
