"""Rollout throughput: env + torchrl ``TransformersWrapper`` (history mode) vs a bare
``model.generate`` loop, on the same multi-turn FrozenLake batch.

Both paths use the same tiny model, the same levels, the same number of turns and the
same sampling settings (``max_new_tokens``, ``do_sample``, ``temperature``, ``top_p`` are read
off the policy's ``generate_kwargs``; ``top_k`` and the stopping tokens are the model's
``generation_config`` in both); the bare loop renders the prompts with the tokenizer's chat
template, generates with ``model.generate`` and steps the pure-Python game cores itself
(no TensorDicts, no History objects, no entropy recording). Generated tokens per second are
printed for both, with the number of tokens each path generated (sampling makes episode
lengths differ a little, so speed is compared per generated token).

The machine may be shared: each repeat runs both paths back to back, alternating which
goes first, after one untimed warm-up of each; the summary gives the median of the
per-repeat ratios (robust to a burst of load during one repeat) and the ratio of the
totals.

Usage::

    python benchmarks/rollout_throughput.py            # P=8 groups x G=8, 4 repeats
    python benchmarks/rollout_throughput.py --quick
"""

from __future__ import annotations

import argparse
import statistics
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


def bare_generate_rollout(env, model, tokenizer, level_seeds, group_size, sampling: dict) -> int:
    """The same episodes with a plain ``model.generate`` loop; returns generated tokens.

    ``sampling``: ``model.generate`` keywords (``max_new_tokens``, ``do_sample``, ...), the
    same as the policy's (see :func:`sampling_kwargs`).
    """
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
                **enc, **sampling, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id
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


#: the policy's generate keywords that set what is sampled and for how long
SAMPLING_KEYS = ("max_new_tokens", "do_sample", "temperature", "top_p", "top_k")


def sampling_kwargs(policy, model, tokenizer) -> dict:
    """The policy's sampling settings, for the bare loop; checks the stopping tokens agree."""
    gen = policy.generate_kwargs
    cfg = model.generation_config
    # the policy does not pass eos/pad: generate falls back to the model's generation_config,
    # which must be the tokenizer's ids the bare loop passes
    assert cfg.eos_token_id == tokenizer.eos_token_id, (cfg.eos_token_id, tokenizer.eos_token_id)
    assert cfg.pad_token_id == tokenizer.pad_token_id, (cfg.pad_token_id, tokenizer.pad_token_id)
    return {k: gen[k] for k in SAMPLING_KEYS if k in gen}


def timed(fn):
    """``(tokens, wall seconds, CPU seconds of this process)``: on a shared machine the CPU time
    is the steadier of the two (other jobs stretch the wall time, not this process's work)."""
    t0, c0 = time.perf_counter(), time.process_time()
    n = fn()
    return n, time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--sft-steps", type=int, default=60, help="brief warm start so replies are well-formed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.groups, args.group_size, args.repeats, args.sft_steps = 4, 4, 2, 20
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
    sampling = sampling_kwargs(policy, model, tok)
    top_k = model.generation_config.top_k
    print(
        f"sampling (both paths): {sampling}; top_k and eos/pad: the model generation_config (top_k={top_k}: transformers default), eos={tok.eos_token_id}"
    )

    def ours(seeds):
        return int(collect_rollouts(env, policy, seeds, args.group_size)["num_tokens"].sum())

    def bare(seeds):
        return bare_generate_rollout(env, model, tok, seeds, args.group_size, sampling)

    # untimed warm-up of both (template compilation, allocator, lazy imports)
    warm = train_level_seeds(1, 0, args.groups)
    ours(warm), bare(warm)
    rows = []
    for r in range(args.repeats):
        seeds = train_level_seeds(0, r, args.groups)
        res = {}
        order = [("torchrl", ours), ("bare", bare)]
        for name, fn in order if r % 2 == 0 else order[::-1]:
            torch.manual_seed(r)
            res[name] = timed(lambda fn=fn: fn(seeds))
        (n_wrap, t_wrap, c_wrap), (n_bare, t_bare, c_bare) = res["torchrl"], res["bare"]
        rows.append((n_wrap, t_wrap, n_bare, t_bare, c_wrap, c_bare))
        print(
            f"repeat {r} ({'torchrl' if r % 2 == 0 else 'bare'} first): torchrl {n_wrap} tok in {t_wrap:.2f}s "
            f"({n_wrap / t_wrap:.0f} tok/s) | bare generate {n_bare} tok in {t_bare:.2f}s ({n_bare / t_bare:.0f} tok/s) "
            f"| ratio {(n_wrap / t_wrap) / (n_bare / t_bare):.2f} (CPU time {(n_wrap / c_wrap) / (n_bare / c_bare):.2f})",
            flush=True,
        )
    n_w, t_w = sum(r[0] for r in rows), sum(r[1] for r in rows)
    n_b, t_b = sum(r[2] for r in rows), sum(r[3] for r in rows)
    ratios = [(r[0] / r[1]) / (r[2] / r[3]) for r in rows]
    cpu_ratios = [(r[0] / r[4]) / (r[2] / r[5]) for r in rows]
    print()
    print(f"{'path':<34}{'tokens':>8}{'seconds':>9}{'tokens/s':>10}")
    print(f"{'env + TransformersWrapper':<34}{n_w:>8}{t_w:>9.2f}{n_w / t_w:>10.0f}")
    print(f"{'bare model.generate loop':<34}{n_b:>8}{t_b:>9.2f}{n_b / t_b:>10.0f}")
    print(
        f"ratio (torchrl / bare): median of repeats {statistics.median(ratios):.2f}, "
        f"of totals {(n_w / t_w) / (n_b / t_b):.2f}; per CPU second: median {statistics.median(cpu_ratios):.2f}"
    )


if __name__ == "__main__":
    main()
