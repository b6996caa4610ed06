"""Vision-language rollout speed: batched rows (``VLBatchRollout``) vs one row at a time (``VLConversation``).

Both play the same visual FrozenLake boards for ``--turns`` turns with the same tiny Qwen2-VL
(``model=tiny_vl`` sizes unless overridden, random weights: replies run to ``--max-new-tokens``),
each image through the vision tower once. The per-row side keeps each row's KV cache across turns
and decodes one row per forward; the batched side re-encodes the rows' sequences each turn in one
left-padded forward (cached image features) and decodes all rows per forward. Prints sampled tokens
per second of both and their ratio per repeat (alternating which goes first; the machine may be
shared, so compare the ratio, not the absolute numbers).

Usage::

    PYTHONPATH=$PWD python benchmarks/vl_rollout.py --rows 16 --turns 3 --max-new-tokens 32 --repeats 2
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.visual import IMAGE_TEXT
from ragen_torchrl.models.tiny_vl import TinyVLConfig, build_tiny_vl_model, load_tiny_vl
from ragen_torchrl.models.vision import VLBatchRollout, VLConversation


def boards(rows: int, turns: int) -> list[list[torch.Tensor]]:
    """Each row's board image at each turn (a fixed random walk, the same for both sides)."""
    env = make_env("frozenlake_visual", num_envs=1)
    gen = torch.Generator().manual_seed(0)
    out = []
    for r in range(rows):
        game = env.game_factory(r, 0)
        shown = [env.render(game)]
        for _ in range(turns - 1):
            game.step(["Left", "Down", "Right", "Up"][int(torch.randint(4, (1,), generator=gen))])
            shown.append(env.render(game))
        out.append(shown)
    return out


def first_messages(env) -> list[tuple[str, str]]:
    return [("system", env.system_prompt), ("user", IMAGE_TEXT)]


def per_row(model, processor, images, max_new_tokens: int, system) -> int:
    tokens = 0
    for r, shown in enumerate(images):
        conv = VLConversation(model, processor, generator=torch.Generator().manual_seed(r), prime="<think>")
        for t, image in enumerate(shown):
            conv.play(system if t == 0 else [("user", IMAGE_TEXT)], [image], max_new_tokens)
        tokens += int(conv.sampled_mask().sum())
    return tokens


def batched(model, processor, images, max_new_tokens: int, system) -> int:
    batch = VLBatchRollout(model, processor, generator=torch.Generator().manual_seed(0), prime="<think>")
    for t in range(len(images[0])):
        messages = {r: system if t == 0 else [("user", IMAGE_TEXT)] for r in range(len(images))}
        batch.play(messages, {r: shown[t] for r, shown in enumerate(images)}, max_new_tokens)
    return sum(int(batch.trajectory(r)[1].sum()) for r in range(len(images)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    env = make_env("frozenlake_visual", num_envs=1)
    corpus = [IMAGE_TEXT, env.system_prompt, "<think>Goal is down right.</think><answer>Right || Down</answer>"] * 20
    model, processor = load_tiny_vl(build_tiny_vl_model(corpus, TinyVLConfig(), tempfile.mkdtemp()))
    images = boards(args.rows, args.turns)
    system = first_messages(env)
    sides = {"per_row": per_row, "batched": batched}
    for f in sides.values():  # warm-up
        f(model, processor, images[:2], 4, system)
    for rep in range(args.repeats):
        rates = {}
        for name in sorted(sides, reverse=bool(rep % 2)):
            t0 = time.perf_counter()
            n = sides[name](model, processor, images, args.max_new_tokens, system)
            rates[name] = n / (time.perf_counter() - t0)
            print(f"repeat {rep}: {name:8s} {n} tokens, {rates[name]:.1f} tokens/s")
        print(f"repeat {rep}: batched / per_row = {rates['batched'] / rates['per_row']:.2f}x")


if __name__ == "__main__":
    main()
