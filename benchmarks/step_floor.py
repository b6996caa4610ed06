"""The arithmetic floor of one GRPO step on a model: its matrix products alone, for the step's token counts.

A GRPO step on a small dense model is matrix products over the model's weights: one per decoding step
for the sampled rows (each reads every weight), one over the prompt tokens (prefill), then the loss
forward and backward over the prompt and reply tokens, then AdamW over the parameters. This script
times exactly those products, with nothing else (no attention, norms, sampling, cache or Python around
them), as ``torch.nn.functional.linear`` over the model's own ``nn.Linear`` weights in float32, and the
model's own decoding step beside them; what is left of a measured step above this floor is what an
implementation can still remove. ``benchmarks/vs_trl.py`` measures the steps themselves.

Usage (the vs_trl SmolLM2 shape: 4 prompts x 4 samples, 32 new tokens, 2 threads)::

    python benchmarks/step_floor.py --model $RAGEN_CACHE/smollm2-135m-instruct-v1 \\
        --rows 16 --prompts 4 --prompt-tokens 150 --new-tokens 32 --reply-tokens 21 --threads 2

``--reply-tokens`` is the mean reply length the loss trains (vs_trl prints it: generated tokens / rows);
``--step-seconds NAME=S`` (repeatable) prints the floor as a share of a step measured elsewhere, e.g.
``--step-seconds trl_default=27.19``. Each part is timed ``--repeats`` times alternating with the model's
own decoding step, and the median is printed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def linear_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    """The weight of every ``nn.Linear`` in ``model`` (the LM head included; a tied head is its embedding).

    Example:
        >>> m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
        >>> [tuple(w.shape) for w in linear_weights(m)]
        [(3, 4), (2, 3)]
    """
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]


def products_seconds(weights: list[torch.Tensor], tokens: int, backward: bool = False) -> float:
    """Seconds for ``x @ W.T`` over every weight at ``tokens`` rows (and, with ``backward``, the two
    products of its gradient: with respect to the input and to the weight)."""
    xs = [torch.randn(tokens, w.shape[1]) for w in weights]
    gs = [torch.randn(tokens, w.shape[0]) for w in weights] if backward else None
    with torch.no_grad():
        t = time.perf_counter()
        for i, w in enumerate(weights):
            torch.nn.functional.linear(xs[i], w)
            if backward:
                gs[i] @ w  # dL/dx
                gs[i].T @ xs[i]  # dL/dW
        return time.perf_counter() - t


def model_decode_seconds(model, rows: int, cache_tokens: int, steps: int = 4) -> float:
    """Seconds per decoding step of ``model`` itself (transformers' forward with its cache) at ``rows``."""
    vocab = model.get_input_embeddings().num_embeddings
    ids = torch.randint(0, vocab, (rows, cache_tokens))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        cache, nxt = out.past_key_values, torch.randint(0, vocab, (rows, 1))
        t = time.perf_counter()
        for _ in range(steps):
            cache = model(input_ids=nxt, past_key_values=cache, use_cache=True).past_key_values
        return (time.perf_counter() - t) / steps


def adamw_seconds(model) -> float:
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
    opt = torch.optim.AdamW(params, lr=1e-6)
    opt.step()  # allocates the state
    t = time.perf_counter()
    opt.step()
    seconds = time.perf_counter() - t
    for p in params:
        p.grad = None
    return seconds


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a local Hugging Face causal LM dir")
    ap.add_argument("--rows", type=int, default=16, help="sampled rows (prompts x samples)")
    ap.add_argument("--prompts", type=int, default=4, help="distinct prompts (each prefilled and trained once)")
    ap.add_argument("--prompt-tokens", type=int, default=150)
    ap.add_argument("--new-tokens", type=int, default=32, help="decoding steps")
    ap.add_argument("--reply-tokens", type=float, default=21.0, help="mean trained reply length")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--step-seconds", action="append", default=[], metavar="NAME=S")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, trust_remote_code=False).eval()
    weights = linear_weights(model)
    prefill = args.prompts * args.prompt_tokens
    loss_tokens = prefill + round(args.rows * args.reply_tokens)
    parts: dict[str, list[float]] = {k: [] for k in ("decode step", "model decode step", "prefill", "loss fwd+bwd")}
    for _ in range(args.repeats):
        parts["decode step"].append(products_seconds(weights, args.rows))
        parts["model decode step"].append(model_decode_seconds(model, args.rows, args.prompt_tokens))
        parts["prefill"].append(products_seconds(weights, prefill))
        parts["loss fwd+bwd"].append(products_seconds(weights, loss_tokens, backward=True))
    med = {k: statistics.median(v) for k, v in parts.items()}
    opt = adamw_seconds(model)
    floor = args.new_tokens * med["decode step"] + med["prefill"] + med["loss fwd+bwd"] + opt
    n = sum(w.numel() for w in weights)
    print(f"{args.model}: {n / 1e6:.1f}M linear weights, {args.threads} threads, medians of {args.repeats}")
    print(
        f"  decode step, products only ({args.rows} rows): {med['decode step'] * 1e3:.1f} ms "
        f"({4 * n / med['decode step'] / 1e9:.1f} GB/s of weights read)"
    )
    print(
        f"  the model's own decode step (cache {args.prompt_tokens}): {med['model decode step'] * 1e3:.1f} ms "
        f"({med['model decode step'] / med['decode step']:.2f}x the products)"
    )
    print(f"  prefill, {prefill} tokens: {med['prefill']:.2f} s ({2 * n * prefill / med['prefill'] / 1e9:.0f} GFLOP/s)")
    print(
        f"  loss forward + backward, {loss_tokens} tokens: {med['loss fwd+bwd']:.2f} s "
        f"({6 * n * loss_tokens / med['loss fwd+bwd'] / 1e9:.0f} GFLOP/s)"
    )
    print(f"  AdamW step: {opt:.2f} s")
    print(
        f"floor of one step: {floor:.2f} s = {args.new_tokens} x decode {args.new_tokens * med['decode step']:.2f} "
        f"+ prefill {med['prefill']:.2f} + loss {med['loss fwd+bwd']:.2f} + AdamW {opt:.2f}"
    )
    for item in args.step_seconds:
        name, _, s = item.partition("=")
        print(f"  floor / {name} ({float(s):.2f} s): {floor / float(s):.2f}")


if __name__ == "__main__":
    main()
