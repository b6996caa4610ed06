"""WebShop speed on the shipped generated catalogue: build, search queries/s and env steps/s.

Usage:
    python benchmarks/webshop_speed.py [--products 3000] [--queries 2000] [--batch 64] [--episodes 3]

Prints:

* catalogue generation and BM25 index build time (``bm25s``);
* search queries per second, uncached (``BM25Index.search`` straight, top 50): the oracle's query of
  each goal (the instruction without its option and price clauses) and the whole instruction text;
* env steps per second (one row stepped once = one step): ``--batch`` rows in prompt groups of 4
  play whole episodes with scripted oracle replies, stepping only the rows still running, as
  ``benchmarks/env_speed.py`` does. Only ``env.reset`` / ``env.step`` are timed (the oracle's replies
  are not). A search inside ``env.step`` goes through the shop's query cache, so the 4 rows of a group
  pay for one search; ``cold`` clears the cache before every step (every search runs BM25).

Example:
    $ python benchmarks/webshop_speed.py --products 3000 --queries 500 --episodes 1
"""

from __future__ import annotations

import argparse
import time

import tensordict

tensordict.set_list_to_stack(True).set()

import torch  # noqa: E402
from env_speed import GROUP  # noqa: E402 (benchmarks/ is on sys.path when a script there runs)
from env_speed import bench_env as env_speed_bench  # noqa: E402

from ragen_torchrl.envs.games.webshop import WebShopGame  # noqa: E402
from ragen_torchrl.envs.games.webshop_catalog import generate_catalog, generate_goals  # noqa: E402
from ragen_torchrl.envs.games.webshop_search import BM25Index  # noqa: E402


def bench_search(products: int, queries: int) -> None:
    t0 = time.perf_counter()
    catalog = generate_catalog.__wrapped__(products, 0)  # uncached
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    index = BM25Index([p.search_text() for p in catalog])
    t_index = time.perf_counter() - t0
    print(
        f"catalogue: {products} products generated in {1000 * t_gen:.0f} ms, BM25 index built in {1000 * t_index:.0f} ms"
    )
    goals = generate_goals(catalog)[:queries]
    oracle = [WebShopGame(g, None).oracle_query() for g in goals]  # type: ignore[arg-type]
    full = [g.instruction for g in goals]
    print(f"{'queries':<28} {'n':>6} {'queries/s':>10} {'ms/query':>9}")
    for label, texts in (("oracle query (top 50)", oracle), ("whole instruction (top 50)", full)):
        t0 = time.perf_counter()
        for q in texts:
            index.search(q, 50)
        dt = time.perf_counter() - t0
        print(f"{label:<28} {len(texts):>6} {len(texts) / dt:>10.0f} {1000 * dt / len(texts):>9.3f}")


def bench_env(products: int, batch: int, episodes: int, cold: bool) -> dict:
    """``env_speed.bench_env`` on WebShop; ``cold`` clears the shop's query cache before every step."""
    return env_speed_bench(
        "webshop",
        {"num_products": products},
        batch,
        episodes,
        setup=lambda env: env.shop.search("warm up the index"),
        before_step=(lambda env: env.shop._cache.clear()) if cold else None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, default=3000, help="generated catalogue size")
    parser.add_argument("--queries", type=int, default=2000, help="search queries timed")
    parser.add_argument("--batch", type=int, default=64, help="env rows stepped together")
    parser.add_argument("--episodes", type=int, default=3, help="batches of whole episodes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    bench_search(args.products, args.queries)
    print(f"\nenv.step throughput (batch {args.batch}, groups of {GROUP}, scripted oracle replies, 9-turn episodes)")
    print(f"{'search cache':<14} {'steps':>6} {'steps/s':>9} {'ms/batch step':>14} {'reset ms':>9} {'success':>8}")
    for cold in (False, True):
        r = bench_env(args.products, args.batch, args.episodes, cold)
        print(
            f"{'cold' if cold else 'shared':<14} {r['steps']:>6} {r['steps_per_s']:>9.0f} "
            f"{r['ms_per_batch_step']:>14.2f} {r['reset_ms']:>9.1f} {r['success']:>8.2f}"
        )


if __name__ == "__main__":
    main()
