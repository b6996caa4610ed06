"""Cost of MI cross-scoring with image contexts: ``cross_score_vl`` vs one teacher-forced pass per pair.

Builds the ``model=tiny_vl`` preset's tiny Qwen2-VL (hidden 128, 4 layers, vision depth 2) offline
in a temporary directory and scores ``M`` reasonings against ``N`` visual-FrozenLake contexts
(each the conversation up to a turn: one board image per user message, 1 to 3 turns, 16 image
tokens per 4 x 4 board) two ways:

* ``naive``: :func:`~ragen_torchrl.models.vision.score_conversation` of every concatenation
  ``[x_j | z_i]`` (``M * N`` passes, each through the vision tower and the whole context);
* ``cross_score_vl``: each context's images through the vision tower once, its prefix encoded
  once, the reasonings scored against its KV cache in batches.

It prints both wall times, the ratio and the largest disagreement between the two matrices. Both
run in the same process, one after the other, so a busy machine slows both.

Usage::

    python benchmarks/vl_cross_scoring.py                  # N = 8 contexts, M = 16 reasonings
    python benchmarks/vl_cross_scoring.py --contexts 16 --reasonings 32
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from ragen_torchrl.diagnostics.vl_scoring import cross_score_vl, vl_context
from ragen_torchrl.envs.visual import IMAGE_TEXT, VisualFrozenLakeEnv
from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model, load_tiny_vl
from ragen_torchrl.models.vision import score_conversation

MOVES = ["Right", "Down", "Left", "Up"]
REASONING = "Goal is down right. The hole is below. {} is ice, so I go {}."


def contexts_and_reasonings(processor, num_contexts: int, num_reasonings: int):
    env = VisualFrozenLakeEnv()
    contexts = []
    for j in range(num_contexts):
        game = env.game_factory(j, 0)
        messages, images = [("system", "You play FrozenLake.")], []
        for turn in range(1 + j % 3):
            images.append(env.render(game))
            messages.append(("user", IMAGE_TEXT))
            if turn < j % 3:
                move = MOVES[(j + turn) % 4]
                messages.append(("assistant", f"<think>go</think><answer>{move}</answer>"))
                game.step(move)
        contexts.append(vl_context(processor, messages, images))
    tok = processor.tokenizer
    reasonings = [
        torch.tensor(tok(REASONING.format(MOVES[i % 4], MOVES[(i // 4) % 4]), add_special_tokens=False)["input_ids"])
        for i in range(num_reasonings)
    ]
    return contexts, reasonings


def naive(model, contexts, reasonings) -> torch.Tensor:
    out = torch.zeros(len(reasonings), len(contexts))
    with torch.no_grad():
        for j, c in enumerate(contexts):
            for i, z in enumerate(reasonings):
                lp = score_conversation(model, torch.cat([c.input_ids, z]), c.pixel_values, c.image_grid_thw)
                out[i, j] = lp[-z.numel() :].sum()
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--contexts", type=int, default=8)
    p.add_argument("--reasonings", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    corpus = [IMAGE_TEXT, "You play FrozenLake.", REASONING, "<think>go</think><answer>Right || Down</answer>"] * 20
    path = build_tiny_vl_model(corpus, TinyVLConfig(), tempfile.mkdtemp())
    model, processor = load_tiny_vl(path)
    contexts, reasonings = contexts_and_reasonings(processor, args.contexts, args.reasonings)
    t0 = time.perf_counter()
    ref = naive(model, contexts, reasonings)
    t_naive = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, fast = cross_score_vl(model, contexts, reasonings)
    t_fast = time.perf_counter() - t0
    ctx_len = sum(c.input_ids.numel() for c in contexts) / len(contexts)
    z_len = sum(z.numel() for z in reasonings) / len(reasonings)
    row = {
        "contexts": float(len(contexts)),
        "reasonings": float(len(reasonings)),
        "context_tokens": ctx_len,
        "reasoning_tokens": z_len,
        "naive_s": t_naive,
        "cross_score_vl_s": t_fast,
        "speedup": t_naive / t_fast,
        "max_abs_diff": float((ref - fast).abs().max()),
    }
    print(
        f"N={len(contexts)} contexts (mean {ctx_len:.0f} tokens), M={len(reasonings)} reasonings ({z_len:.0f} tokens)"
    )
    print(f"{'path':<16}{'seconds':>10}")
    print(f"{'naive':<16}{t_naive:>10.2f}")
    print(f"{'cross_score_vl':<16}{t_fast:>10.2f}")
    print(f"speed-up {row['speedup']:.1f}x, max |difference| {row['max_abs_diff']:.2e} nats (sums)")
    return row


if __name__ == "__main__":
    main()
