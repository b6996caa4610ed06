"""The loss's token distribution: logits at every position vs at the assistant positions only.

Before: the model projects every position to the vocabulary and torchrl's ``LLMMaskedCategorical``
evaluates ``log_prob`` and ``entropy`` over the whole ``[B, T, V]`` tensor. After: the LM head runs
only at positions where some row has an assistant token (transformers' ``logits_to_keep``) and
:class:`~ragen_torchrl.objectives.token_distribution.CompactMaskedCategorical` keeps those ``[N, V]``
logits alone. Both compute a GRPO-like masked loss (mean log-prob + 0.001 x mean entropy) and its
backward on the same random batch, alternately; the script prints seconds for each, their ratio and
the largest difference between the two losses' gradients, for several vocabulary sizes (768 is the
tiny model's; 151,936 is Qwen2.5's).

Usage::

    python benchmarks/compact_logits.py                 # vocab 768, 32000, 151936; 3 repeats
    python benchmarks/compact_logits.py --vocab 151936 --repeats 5
"""

from __future__ import annotations

import argparse
import time

import torch
from torchrl.modules.distributions import LLMMaskedCategorical
from transformers import Qwen2Config, Qwen2ForCausalLM

from ragen_torchrl.objectives.token_distribution import CompactMaskedCategorical, masked_position_logits


def batch(rows: int, length: int, vocab: int, assistant: float, seed: int = 0):
    """Random tokens; each row's assistant tokens are two replies at row-dependent offsets (multi-turn)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (rows, length), generator=g)
    mask = torch.zeros(rows, length, dtype=torch.bool)
    reply = max(1, int(length * assistant / 2))
    for r in range(rows):
        first = length // 3 + int(torch.randint(0, length // 8, (1,), generator=g))
        mask[r, first : first + reply] = True
        mask[r, length - reply :] = True
    return tokens, torch.ones_like(tokens), mask


def loss_full(model, tokens, attn, mask):
    logits = model(tokens, attn).logits
    shifted = torch.cat([torch.zeros_like(logits[:, :1]), logits[:, :-1]], 1)
    dist = LLMMaskedCategorical(logits=shifted, mask=mask)
    m = mask.float()
    return ((dist.log_prob(tokens) * m).sum() + 0.001 * (dist.entropy() * m).sum()) / m.sum()


def loss_compact(model, tokens, attn, mask):
    dist = CompactMaskedCategorical(masked_position_logits(model, tokens, attn, mask), mask)
    m = mask.float()
    return ((dist.log_prob(tokens) * m).sum() + 0.001 * (dist.entropy() * m).sum()) / m.sum()


def timed(fn, model, *args) -> tuple[float, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    fn(model, *args).backward()
    seconds = time.perf_counter() - t0
    return seconds, [p.grad.clone() for p in model.parameters() if p.grad is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, nargs="+", default=[768, 32000, 151936])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--assistant", type=float, default=0.3, help="fraction of tokens that are assistant tokens")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"B={args.rows} x T={args.length}, {args.assistant:.0%} assistant tokens in two replies per row, "
        f"Qwen2 {args.layers} layers hidden {args.hidden}, float32 CPU, {args.threads} threads, {args.repeats} repeats"
    )
    print(f"{'vocab':>8} {'all positions s':>16} {'assistant only s':>17} {'ratio':>6} {'max grad diff':>14}")
    for vocab in args.vocab:
        torch.manual_seed(0)
        cfg = Qwen2Config(
            vocab_size=vocab,
            hidden_size=args.hidden,
            intermediate_size=2 * args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=True,
        )
        model = Qwen2ForCausalLM(cfg).eval()
        data = batch(args.rows, args.length, vocab, args.assistant)
        timed(loss_full, model, *data)  # warm-up
        timed(loss_compact, model, *data)
        full_s, compact_s, diff = [], [], 0.0
        for _ in range(args.repeats):  # alternate, so machine noise hits both alike
            s, g_full = timed(loss_full, model, *data)
            full_s.append(s)
            s, g_compact = timed(loss_compact, model, *data)
            compact_s.append(s)
            diff = max(diff, max((a - b).abs().max().item() for a, b in zip(g_full, g_compact)))
        f, c = sum(full_s) / len(full_s), sum(compact_s) / len(compact_s)
        print(f"{vocab:>8} {f:>16.3f} {c:>17.3f} {c / f:>6.2f} {diff:>14.2e}")


if __name__ == "__main__":
    main()
