"""SearchQA retrieval speed: BM25 index build time, cache load time and queries per second.

Usage:
    python benchmarks/searchqa_retrieval.py [--passages 1000000] [--seconds 5] [--seed 0]

Two corpora, each through :class:`~ragen_torchrl.envs.games.retrieval.BM25Retriever` (what the
env uses) with a fresh temporary cache dir:

* the shipped generated world (300 passages), queried with its oracle's hop queries;
* a synthetic corpus of ``--passages`` short random passages (8-20 words drawn from a Zipf-like
  vocabulary of 50,000 made-up words, plus a title of two words), queried with 2-5 vocabulary words
  drawn uniformly (mostly rare words: short postings) and, separately, drawn with the corpus's Zipf
  weights (frequent words: long postings, the expensive case). ``--passages 0`` skips it.

For each: "build" is a cold build (fingerprint + tokenising + ``bm25s`` indexing + writing the cache),
"load" a new process's load of the cached index (the in-process memo is cleared), "q/s" single
queries (top 5) per second over ``--seconds``; peak RSS of the process is printed at the end.

Example:
    $ python benchmarks/searchqa_retrieval.py --passages 100000 --seconds 2
"""

from __future__ import annotations

import argparse
import itertools
import random
import resource
import string
import tempfile
import time

from ragen_torchrl.envs.games import retrieval
from ragen_torchrl.envs.games.retrieval import BM25Retriever, Passage
from ragen_torchrl.envs.games.searchqa_world import generate_world

VOCAB = 50_000


def synthetic_corpus(n: int, seed: int) -> tuple[list[Passage], list[str], list[float]]:
    """``n`` random passages, the vocabulary they are drawn from and its cumulative weights."""
    rng = random.Random(seed)
    letters = string.ascii_lowercase
    vocab = sorted({"".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(VOCAB + VOCAB // 10)})[:VOCAB]
    rng.shuffle(vocab)
    weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))  # Zipf-like
    passages = []
    for i in range(n):
        words = rng.choices(vocab, cum_weights=weights, k=rng.randint(10, 22))
        passages.append(Passage(str(i), f"{words[0]} {words[1]}".title(), " ".join(words[2:]) + "."))
    return passages, vocab, weights


def bench(passages: list[Passage], query_sets: dict[str, list[str]], seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        retrieval._MEMO.clear()
        t0 = time.perf_counter()
        built = BM25Retriever(passages, cache_dir=cache)
        build = time.perf_counter() - t0
        assert built.source == "built"
        retrieval._MEMO.clear()  # as a new process would
        t0 = time.perf_counter()
        loaded = BM25Retriever(passages, cache_dir=cache)
        load = time.perf_counter() - t0
        assert loaded.source == "disk"
        qps = {}
        for name, queries in query_sets.items():
            n, hits, t0 = 0, 0, time.perf_counter()
            for query in itertools.cycle(queries):
                hits += len(loaded.search(query, k=5))
                n += 1
                if n % 20 == 0 and time.perf_counter() - t0 >= seconds:
                    break
            qps[name] = (n / (time.perf_counter() - t0), hits / n)
    retrieval._MEMO.clear()
    return {"passages": len(passages), "build_s": build, "load_s": load, "qps": qps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=1_000_000, help="synthetic corpus size (0 = skip)")
    parser.add_argument("--seconds", type=float, default=5.0, help="time spent querying each corpus")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    retrieval.require_bm25s()  # the first import of bm25s (~0.5 s) is not index time
    rows = []
    world = generate_world(0)
    queries = [hop.query for q in world.questions for hop in q.hops]
    rows.append(("shipped generated world", bench(list(world.passages), {"oracle hop queries": queries}, args.seconds)))
    if args.passages > 0:
        t0 = time.perf_counter()
        passages, vocab, weights = synthetic_corpus(args.passages, args.seed)
        gen = time.perf_counter() - t0
        rng = random.Random(args.seed + 1)
        query_sets = {
            "uniform words": [" ".join(rng.choices(vocab, k=rng.randint(2, 5))) for _ in range(2_000)],
            "Zipf words": [
                " ".join(rng.choices(vocab, cum_weights=weights, k=rng.randint(2, 5))) for _ in range(2_000)
            ],
        }
        rows.append((f"synthetic (generated in {gen:.0f} s)", bench(passages, query_sets, args.seconds)))

    print(f"{'corpus':<30} {'passages':>10} {'build s':>8} {'load s':>7}  {'queries':<19} {'q/s':>8} {'hits':>5}")
    for name, r in rows:
        for i, (qname, (qps, hits)) in enumerate(r["qps"].items()):
            head = f"{name:<30} {r['passages']:>10,} {r['build_s']:>8.2f} {r['load_s']:>7.2f}" if i == 0 else " " * 58
            print(f"{head}  {qname:<19} {qps:>8.1f} {hits:>5.1f}")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
