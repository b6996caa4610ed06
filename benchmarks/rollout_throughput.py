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

**KV cache across turns** (``--part turn-cache``): on Sokoban at the default shape (``env=sokoban``,
``trainer.prompts_per_iter`` x ``trainer.group_size`` rows, ``rollout.max_new_tokens``, the tiny model
built from ``model=tiny`` as the trainer builds it; untrained unless ``--turn-cache-sft-steps``), OUR
side is the trainer's rollout: :func:`~ragen_torchrl.collectors.collect_rollouts` with the policy
:func:`~ragen_torchrl.collectors.make_generation_policy` builds from the composed config (token
trajectories, ``rollout.kv_cache`` / ``rollout.kv_cache_max_tokens``, the ``<think>`` prime, entropy
recording). The reference is a token-level episode loop (each prompt grows by the reply as sampled
plus the next observation, tokenised once with the chat template's delimiters) around a bare
``model.generate`` that re-prefills the whole left-padded prompts every turn, with the same sampling
keywords. For the 5-turn and the single-turn game it prints the sampled tokens per second of both
(their ratio: the targets are >= 1.5x multi-turn, >= 0.95x single-turn) and the tokens the model
processed (every position of every forward pass, padding included) per token that had to be
processed (each prompt token of a trajectory once, each sampled token once; 1.0 is the limit).

**Preallocated KV buffer** (``--part kv-buffer``): one :class:`~ragen_torchrl.models.turn_cache.TurnCachePolicy`
call (the single-turn shape of ``benchmarks/vs_trl.py``: ``--groups`` x ``--group-size`` rows, the rows of a
group sharing their prompt, the groups a 120-token head, ``--kv-buffer-new-tokens`` sampled tokens, temperature 1),
decoding into the policy's preallocated buffer (written in place) vs into transformers' ``DynamicCache`` of the
same slots (``torch.cat`` at every step and layer), on the tiny model or ``--model DIR``. Same seed on both
sides: the replies must be identical (checked); prints seconds per call and the buffer / DynamicCache ratio per
repeat (alternating which goes first).

Usage::

    python benchmarks/rollout_throughput.py            # both parts: P=8 groups x G=8 FrozenLake, 4 repeats; Sokoban
    python benchmarks/rollout_throughput.py --part kv-buffer --threads 1 --model /tmp/small-chatml
    python benchmarks/rollout_throughput.py --part turn-cache --repeats 2
    python benchmarks/rollout_throughput.py --quick
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import tensordict
import torch

from ragen_torchrl.collectors.grouped import (
    NEUTRAL_GENERATE_KWARGS,
    NEUTRAL_SAMPLING_KWARGS,
    collect_rollouts,
    make_generation_policy,
    turn_cache_metrics,
)
from ragen_torchrl.envs import make_env
from ragen_torchrl.envs.parsing import parse_response
from ragen_torchrl.envs.splits import train_level_seeds
from ragen_torchrl.envs.text_env import sample_seed
from ragen_torchrl.models.loading import load_pretrained
from ragen_torchrl.models.tiny import TinyModelConfig, build_tiny_model
from ragen_torchrl.trainer.demonstrations import make_demonstrations, tokenizer_corpus
from ragen_torchrl.trainer.sft import supervised_finetune


def play_reply(game, reply: str, max_actions: int) -> bool:
    """Run the reply's parsed actions on ``game`` in order (as the env does); whether the game ended."""
    for action in parse_response(reply, game.action_names, max_actions).actions:
        if game.step(action)[1]:
            return True
    return False


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
            done = play_reply(games[i], reply, env.max_actions_per_turn)
            turns[i] += 1
            if not done and turns[i] < env.max_turn:
                chats[i].append({"role": "user", "content": env.observation_text(games[i])})
                still.append(i)
        running = still
    return total


#: the policy's generate keywords that set what is sampled and for how long
SAMPLING_KEYS = ("max_new_tokens", "do_sample", "temperature", "top_p", "top_k")
#: the keywords that switch transformers' other generation settings off (hf_generate_kwargs sets them)
NEUTRAL_KEYS = (*NEUTRAL_GENERATE_KWARGS, *NEUTRAL_SAMPLING_KWARGS, "min_p")


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


def _chat_delimiters(tokenizer) -> tuple[str, str]:
    """The text between a reply and the next observation, and after it up to the next reply (ChatML:
    ``"<|im_end|>\\n<|im_start|>user\\n"``, ``"<|im_end|>\\n<|im_start|>assistant\\n"``), read off the template."""
    reply, obs = "\x00REPLY\x00", "\x00OBS\x00"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": reply}, {"role": "user", "content": obs}],
        tokenize=False,
        add_generation_prompt=True,
    )
    after = text[text.index(reply) + len(reply) :]
    head, _, tail = after.partition(obs)
    return head, tail


def token_episodes(env, tokenizer, level_seeds, group_size, generate_fn, *, max_turn: int, release=None):
    """Plays the episodes at the token level; returns ``(sampled tokens, tokens that had to be processed)``.

    ``generate_fn(prompts, env_indices)`` returns each row's reply ids as sampled. A row's next prompt is
    its prompt, its reply, the end-of-turn token if the reply did not sample it, and the next observation
    with the template's delimiters (tokenised once). ``release(env_indices)`` is told which rows finished.
    """
    head, tail = _chat_delimiters(tokenizer)
    eos = tokenizer.eos_token_id
    eot_text = tokenizer.eos_token if head.startswith(tokenizer.eos_token) else ""
    eot_ids = torch.tensor(tokenizer(eot_text, add_special_tokens=False)["input_ids"], dtype=torch.long)
    games = [env.game_factory(s, sample_seed(s, g)) for s in level_seeds for g in range(group_size)]
    prompts = []
    for g in games:
        chat = [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": env.observation_text(g)}]
        text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        prompts.append(torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long))
    turns = [0] * len(games)
    running = list(range(len(games)))
    sampled = needed = 0
    while running:
        replies = generate_fn([prompts[i] for i in running], running)
        still, done_rows = [], []
        for i, ids in zip(running, replies, strict=True):
            sampled += len(ids)
            reply = tokenizer.decode(ids, skip_special_tokens=True)
            done = play_reply(games[i], reply, env.max_actions_per_turn)
            turns[i] += 1
            if not done and turns[i] < max_turn:
                obs = head[len(eot_text) :] + env.observation_text(games[i]) + tail
                obs_ids = torch.tensor(tokenizer(obs, add_special_tokens=False)["input_ids"], dtype=torch.long)
                ended = len(ids) > 0 and int(ids[-1]) == eos
                prompts[i] = torch.cat([prompts[i], ids.to(torch.long), *([] if ended else [eot_ids]), obs_ids])
                still.append(i)
            else:
                needed += len(prompts[i]) + len(ids)  # every prompt token once, every sampled token once
                done_rows.append(i)
        if release is not None:
            release(done_rows)
        running = still
    return sampled, needed


def bare_token_generate(model, sampling: dict, pad: int, eos: int):
    """``generate_fn`` of :func:`token_episodes`: a bare ``model.generate`` on the whole left-padded prompts."""

    def generate(prompts, env_indices):
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, p in enumerate(prompts):
            ids[r, width - len(p) :] = p
            mask[r, width - len(p) :] = 1
        with torch.no_grad():
            new = model.generate(input_ids=ids, attention_mask=mask, **sampling)[:, width:]
        out = []
        for row in new:
            hits = (row == eos).nonzero().reshape(-1)
            out.append(row[: int(hits[0]) + 1] if hits.numel() else row)
        return out

    return generate


class ModelTokenCounter:
    """Counts every position the model runs (batch x width of each forward's ``input_ids``)."""

    def __init__(self, model):
        self.count = 0
        self._hook = model.register_forward_pre_hook(self._seen, with_kwargs=True)

    def _seen(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            self.count += ids.numel()

    def close(self):
        self._hook.remove()


def turn_cache_main(args) -> None:
    """The KV-cache part: Sokoban at the default shape, the trainer's rollout vs a bare re-prefill loop."""
    from hydra import compose, initialize_config_dir

    from ragen_torchrl.keys import NUM_TOKENS, TOKENS_TRAJECTORY
    from ragen_torchrl.models.priming import prime_text
    from ragen_torchrl.trainer.config_paths import CONFIG_DIR
    from ragen_torchrl.trainer.model_setup import env_kwargs

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["env=sokoban", *args.turn_cache_override])
    groups, group_size = int(cfg.trainer.prompts_per_iter), int(cfg.trainer.group_size)
    max_new, turns = int(cfg.rollout.max_new_tokens), int(cfg.env.max_turn)
    if args.quick:
        groups = max(2, groups // 4)
    envs = {
        t: make_env(cfg.env.name, num_envs=groups * group_size, **{**env_kwargs(cfg.env), "max_turn": t})
        for t in (turns, 1)
    }
    tiny = TinyModelConfig.from_model_config(cfg.model)
    t0 = time.perf_counter()
    path = build_tiny_model(tokenizer_corpus(envs[turns]), tiny, tempfile.mkdtemp())
    model, tok = load_pretrained(path)
    torch.manual_seed(0)
    if args.turn_cache_sft_steps:
        demos = make_demonstrations(envs[turns], 4 * args.turn_cache_sft_steps, noise=0.3)
        supervised_finetune(model, tok, demos, steps=args.turn_cache_sft_steps, log_every=0)
    model.eval()
    print(f"model built and warm-started in {time.perf_counter() - t0:.0f}s", flush=True)
    r = cfg.rollout
    # the trainer's rollout policy (trainer/loop.py builds it from the same keys)
    policy = make_generation_policy(
        model,
        tok,
        max_new_tokens=max_new,
        temperature=float(r.temperature),
        top_k=r.get("top_k"),
        top_p=float(r.get("top_p", 1.0)),
        min_p=r.get("min_p"),
        reply_prime=prime_text(bool(r.get("prime_think", True))),
        trajectory=str(r.trajectory),
        kv_cache=bool(r.kv_cache),
        max_cached_tokens=int(r.kv_cache_max_tokens),
    )
    # the bare loop samples with the same keywords, minus the wrapper's own and the entropy recorder
    sampling = {k: v for k, v in policy.generate_kwargs.items() if k in NEUTRAL_KEYS or k in SAMPLING_KEYS}
    print(
        f"Sokoban, {groups} x {group_size} rows, max_new_tokens={max_new}, tiny model {tiny.num_layers} layers x "
        f"{tiny.hidden_size}, sampling {{temperature={sampling.get('temperature')}, top_k={sampling.get('top_k')}, "
        f"top_p={sampling.get('top_p')}}}, trajectory={r.trajectory}, kv_cache={r.kv_cache}, "
        f"prime={policy.reply_prime!r}, {args.turn_cache_sft_steps} SFT steps"
    )

    kv_gained: dict[str, float] = {}  # the turn-cache counts of the timed repeats' records

    def collector(seeds, max_turn):
        recs = collect_rollouts(envs[max_turn], policy, seeds, group_size, chunk_size=int(r.chunk_size))
        for k, v in turn_cache_metrics(recs).items():
            kv_gained[k] = kv_gained.get(k, 0.0) + v
        needed = sum(int(t.numel()) for t in recs.get(TOKENS_TRAJECTORY, as_list=True))  # final prompt + reply
        return int(recs.get(NUM_TOKENS).sum()), needed

    bare_gen = bare_token_generate(model, sampling, tok.pad_token_id, tok.eos_token_id)
    counter = ModelTokenCounter(model)

    def run(kind, seeds, max_turn):
        if kind == "ours":
            return collector(seeds, max_turn)
        return token_episodes(envs[max_turn], tok, seeds, group_size, bare_gen, max_turn=max_turn)

    for max_turn in (turns, 1):
        for kind in ("ours", "bare"):  # untimed warm-up
            t0 = time.perf_counter()
            run(kind, train_level_seeds(1, 0, groups), max_turn)
            print(f"  {max_turn}-turn warm-up of {kind}: {time.perf_counter() - t0:.1f}s", flush=True)
        totals = {k: [0, 0.0, 0, 0] for k in ("ours", "bare")}  # sampled, seconds, model tokens, needed
        ratios = []
        kv_gained.clear()
        for rep in range(args.repeats):
            seeds = train_level_seeds(0, rep, groups)
            res = {}
            order = ["ours", "bare"] if rep % 2 == 0 else ["bare", "ours"]
            for kind in order:
                torch.manual_seed(rep)
                counter.count = 0
                t0 = time.perf_counter()
                sampled, needed = run(kind, seeds, max_turn)
                res[kind] = (sampled, time.perf_counter() - t0, counter.count, needed)
                for j, v in enumerate(res[kind]):
                    totals[kind][j] += v
            speed = {k: res[k][0] / res[k][1] for k in res}
            ratios.append(speed["ours"] / speed["bare"])
            print(
                f"  {max_turn}-turn repeat {rep} ({order[0]} first): ours {speed['ours']:.0f} tok/s, "
                f"bare {speed['bare']:.0f} tok/s, ratio {ratios[-1]:.2f}",
                flush=True,
            )
        print(f"\n{max_turn}-turn Sokoban ({args.repeats} repeats)")
        print(f"{'path':<44}{'sampled':>9}{'seconds':>9}{'tokens/s':>10}{'model tok / needed':>20}")
        for kind, label in (("ours", "collect_rollouts (trainer's policy)"), ("bare", "bare generate, re-prefill")):
            n, t, processed, needed = totals[kind]
            print(f"{label:<44}{n:>9}{t:>9.2f}{n / t:>10.0f}{processed / needed:>20.3f}")
        (no, to, _, _), (nb, tb, _, _) = totals["ours"], totals["bare"]
        target = 1.5 if max_turn > 1 else 0.95
        gained = dict(kv_gained)
        print(
            f"ratio (ours / bare tokens/s): median of repeats {statistics.median(ratios):.2f}, of totals "
            f"{(no / to) / (nb / tb):.2f} (target >= {target}); turn cache over the timed repeats {gained}\n",
            flush=True,
        )
    counter.close()


def kv_buffer_main(args) -> None:
    """The preallocated-buffer part: one TurnCachePolicy call, buffer vs transformers' DynamicCache."""
    from tensordict import TensorDict
    from transformers import DynamicCache

    from ragen_torchrl.collectors import hf_generate_kwargs
    from ragen_torchrl.models import turn_cache

    if args.model:
        model, _ = load_pretrained(args.model)
    else:
        env = make_env("countdown", num_envs=1)
        model, _ = load_pretrained(build_tiny_model(tokenizer_corpus(env), TinyModelConfig(), tempfile.mkdtemp()))
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    head = torch.randint(vocab // 2, vocab, (120,), generator=gen)
    prompts = [
        torch.cat([head, torch.randint(vocab // 2, vocab, (30 + 3 * g,), generator=gen)])
        for g in range(args.groups)
        for _ in range(args.group_size)
    ]
    rows = len(prompts)
    td = TensorDict(
        {
            "tokens": {"prompt": torch.nested.as_nested_tensor(prompts, layout=torch.jagged)},
            "env_index": torch.arange(rows),
        },
        batch_size=[rows],
    )
    buffer_cache = turn_cache._buffer_cache

    def dynamic_cache(buffer, filled):
        cache = DynamicCache()
        for layer in range(buffer.shape[0]):
            cache.update(buffer[layer, 0, ..., :filled, :], buffer[layer, 1, ..., :filled, :], layer)
        return cache

    def run(kind, seed):
        turn_cache._buffer_cache = buffer_cache if kind == "buffer" else dynamic_cache
        policy = turn_cache.TurnCachePolicy(model, generate_kwargs=hf_generate_kwargs(args.kv_buffer_new_tokens, 1.0))
        torch.manual_seed(seed)
        t0, c0 = time.perf_counter(), time.process_time()
        replies = policy(td.clone()).get(("tokens", "response"), as_list=True)
        return replies, time.perf_counter() - t0, time.process_time() - c0

    print(
        f"one TurnCachePolicy call: {rows} rows ({args.groups} prompts x {args.group_size}), prompts "
        f"{min(p.numel() for p in prompts)}-{max(p.numel() for p in prompts)} tokens, "
        f"{args.kv_buffer_new_tokens} new tokens, temperature 1, {n_params / 1e6:.2f}M parameters "
        f"({args.model or 'the tiny model'}), {torch.get_num_threads()} threads",
        flush=True,
    )
    run("buffer", 0), run("dynamic", 0)  # untimed warm-up
    ratios, cpu_ratios = [], []
    for rep in range(args.repeats):
        order = ("buffer", "dynamic") if rep % 2 == 0 else ("dynamic", "buffer")
        res = {kind: run(kind, rep) for kind in order}
        same = all(torch.equal(a, b) for a, b in zip(res["buffer"][0], res["dynamic"][0], strict=True))
        if not same:
            raise AssertionError(f"repeat {rep}: the buffer's replies differ from DynamicCache's")
        ratios.append(res["buffer"][1] / res["dynamic"][1])
        cpu_ratios.append(res["buffer"][2] / res["dynamic"][2])
        print(
            f"repeat {rep} ({order[0]} first): buffer {res['buffer'][1]:.2f} s, DynamicCache {res['dynamic'][1]:.2f} s, "
            f"ratio {ratios[-1]:.2f} (CPU time {cpu_ratios[-1]:.2f}); replies identical",
            flush=True,
        )
    turn_cache._buffer_cache = buffer_cache
    print(
        f"buffer / DynamicCache seconds per call: median of repeats {statistics.median(ratios):.2f} "
        f"(CPU time {statistics.median(cpu_ratios):.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--sft-steps", type=int, default=60, help="brief warm start so replies are well-formed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--turn-cache-sft-steps",
        type=int,
        default=0,
        help="warm-start steps of the Sokoban model (0: untrained, every row plays every turn with full replies)",
    )
    parser.add_argument(
        "--turn-cache-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="turn-cache part: a config override (e.g. rollout.kv_cache=false, trainer.prompts_per_iter=4)",
    )
    parser.add_argument(
        "--part",
        choices=("all", "wrapper", "turn-cache", "kv-buffer"),
        default="all",
        help="wrapper: FrozenLake, torchrl wrapper vs bare loop; turn-cache: Sokoban, KV cache across turns; "
        "kv-buffer: one policy call, preallocated KV buffer vs DynamicCache (not part of all)",
    )
    parser.add_argument("--kv-buffer-new-tokens", type=int, default=64, help="kv-buffer part: new tokens per row")
    parser.add_argument("--model", default=None, metavar="DIR", help="kv-buffer part: a local checkpoint")
    args = parser.parse_args()
    if args.quick:
        args.groups, args.group_size, args.repeats, args.sft_steps = 4, 4, 2, 20
    torch.set_num_threads(args.threads)
    tensordict.set_list_to_stack(True).set()
    if args.part == "kv-buffer":
        kv_buffer_main(args)
        return
    if args.part in ("all", "turn-cache"):
        turn_cache_main(args)
    if args.part == "turn-cache":
        return
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
