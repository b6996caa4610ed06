"""Rollout throughput: env + torchrl ``TransformersWrapper`` (history mode) vs a bare
``model.generate`` loop, on the same multi-turn FrozenLake batch.

Both paths use the same tiny model, the same levels, the same number of turns and the
same ``max_new_tokens``; the bare loop renders the prompts with the tokenizer's chat
template, generates with ``model.generate`` and steps the pure-Python game cores itself
(no TensorDicts, no History objects). Generated tokens per second are printed for both,
with their ratio.

Usage::

    python benchmarks/rollout_throughput.py            # P=8 groups x G=8, 3 repeats
    python benchmarks/rollout_throughput.py --quick
"""

from __future__ import annotations

import argparse
import tempfile
import time

import tensordict
import torch

from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.parsing import parse_response
from ragen_torchrl.envs.text_env import sample_seed
from ragen_torchrl.models.loading import load_pretrained
from ragen_torchrl.models.tiny import TinyModelConfig, build_tiny_model
from ragen_torchrl.trainer.demonstrations import make_demonstrations, tokenizer_corpus
from ragen_torchrl.trainer.rollout import collect_rollouts, make_generation_policy, train_level_seeds
from ragen_torchrl.trainer.sft import supervised_finetune


def bare_generate_rollout(env, model, tokenizer, level_seeds, group_size, max_new_tokens, temperature):
    """The same episodes with a plain ``model.generate`` loop; returns generated tokens."""
    games = [env.game_factory(s, sample_seed(s, g)) for s in level_seeds for g in range(group_size)]
    chats = [
        [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": env.observation_text(g)}]
        for g in games
    ]
    turns = [0] * len(games)
    running = list(range(len(games)))
    total = 0
    while running:
        texts = [tokenizer.apply_chat_template(chats[i], tokenize=False, add_generation_prompt=True) for i in running]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=True,
                temperature=temperature,
                top_p=1.0,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        new = out[:, enc["input_ids"].shape[1] :]
        still = []
        for row, i in enumerate(running):
            ids = new[row][new[row] != tokenizer.pad_token_id]
            total += len(ids)
            reply = tokenizer.decode(ids, skip_special_tokens=True)
            chats[i].append({"role": "assistant", "content": reply})
            parsed = parse_response(reply, games[i].action_names, env.max_actions_per_turn)
            done = False
            for a in parsed.actions:
                _, done, _ = games[i].step(a)
                if done:
                    break
            turns[i] += 1
            if not done and turns[i] < env.max_turn:
                chats[i].append({"role": "user", "content": env.observation_text(games[i])})
                still.append(i)
        running = still
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sft-steps", type=int, default=60, help="brief warm start so replies are well-formed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.groups, args.group_size, args.repeats, args.sft_steps = 4, 4, 1, 20
    torch.set_num_threads(args.threads)
    tensordict.set_list_to_stack(True).set()
    env = make_env("frozenlake", num_envs=args.groups * args.group_size)
    cache = tempfile.mkdtemp()
    path = build_tiny_model(tokenizer_corpus(env), TinyModelConfig(), cache)
    model, tok = load_pretrained(path)
    torch.manual_seed(0)
    supervised_finetune(model, tok, make_demonstrations(env, 500, noise=0.3), steps=args.sft_steps, log_every=0)
    model.eval()
    policy = make_generation_policy(model, tok, max_new_tokens=args.max_new_tokens, temperature=1.0)
    rows = []
    for r in range(args.repeats):
        seeds = train_level_seeds(0, r, args.groups)
        torch.manual_seed(r)
        t0 = time.perf_counter()
        rec = collect_rollouts(env, policy, seeds, args.group_size)
        t_wrap = time.perf_counter() - t0
        n_wrap = int(rec["num_tokens"].sum())
        torch.manual_seed(r)
        t0 = time.perf_counter()
        n_bare = bare_generate_rollout(env, model, tok, seeds, args.group_size, args.max_new_tokens, 1.0)
        t_bare = time.perf_counter() - t0
        rows.append((n_wrap / t_wrap, n_bare / t_bare))
        print(
            f"repeat {r}: torchrl {n_wrap} tok in {t_wrap:.2f}s ({n_wrap / t_wrap:.0f} tok/s) | "
            f"bare generate {n_bare} tok in {t_bare:.2f}s ({n_bare / t_bare:.0f} tok/s)",
            flush=True,
        )
    wrap = sum(r[0] for r in rows) / len(rows)
    bare = sum(r[1] for r in rows) / len(rows)
    print()
    print(f"{'path':<34}{'tokens/s':>10}")
    print(f"{'env + TransformersWrapper':<34}{wrap:>10.0f}")
    print(f"{'bare model.generate loop':<34}{bare:>10.0f}")
    print(f"ratio (torchrl / bare): {wrap / bare:.2f}")


if __name__ == "__main__":
    main()
