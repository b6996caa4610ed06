"""Sokoban level-generation throughput (cold: the level pool is bypassed).

Usage:
    python benchmarks/sokoban_generation.py [--seconds 2.0] [--solve]

Prints levels generated per second for 6x6 / 1 box and 8x8 / 2 boxes, and (with
``--solve``) the mean BFS plan length and solver time per level.
"""

from __future__ import annotations

import argparse
import time

from ragen_torchrl.envs.games.sokoban import SokobanGame

CONFIGS = [((6, 6), 1), ((8, 8), 2)]


def bench(dim: tuple[int, int], num_boxes: int, seconds: float, solve: bool) -> dict:
    n, seed = 0, 0
    t0 = time.perf_counter()
    gen_time = 0.0
    solve_time = 0.0
    plan_total = 0
    while time.perf_counter() - t0 < seconds:
        t1 = time.perf_counter()
        game = SokobanGame.generate(seed, dim=dim, num_boxes=num_boxes, use_cache=False)
        gen_time += time.perf_counter() - t1
        if solve:
            t2 = time.perf_counter()
            plan = game.solve()
            solve_time += time.perf_counter() - t2
            assert plan, f"unsolvable level for seed {seed}"
            plan_total += len(plan)
        n += 1
        seed += 1
    return {
        "levels": n,
        "levels_per_s": n / gen_time,
        "ms_per_level": 1000 * gen_time / n,
        "mean_plan": plan_total / n if solve else float("nan"),
        "solve_ms": 1000 * solve_time / n if solve else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time budget per configuration")
    parser.add_argument("--solve", action="store_true", help="also BFS-solve every level")
    args = parser.parse_args()
    print(f"{'dim':>6} {'boxes':>5} {'levels':>7} {'levels/s':>10} {'ms/level':>9} {'mean plan':>10} {'solve ms':>9}")
    for dim, boxes in CONFIGS:
        r = bench(dim, boxes, args.seconds, args.solve)
        print(
            f"{dim[0]}x{dim[1]:<4} {boxes:>5} {r['levels']:>7} {r['levels_per_s']:>10.1f} "
            f"{r['ms_per_level']:>9.3f} {r['mean_plan']:>10.2f} {r['solve_ms']:>9.3f}"
        )


if __name__ == "__main__":
    main()
