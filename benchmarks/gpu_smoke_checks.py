"""The numeric checks of ``benchmarks/gpu_smoke.sh``, each writing one JSON file, and its table.

    python benchmarks/gpu_smoke_checks.py loss MODEL_DIR OUT.json        # bf16 vs fp32 loss on one batch
    python benchmarks/gpu_smoke_checks.py attention OUT.json             # cascade vs SDPA in bf16
    python benchmarks/gpu_smoke_checks.py table OUT_DIR                  # every result under OUT_DIR

``loss``: one batch of 8 rows x 256 random token ids through the model in float32 and under bfloat16
autocast (the compute of ``model.precision=mixed``): the mean token negative log-likelihood of each,
their difference and the relative difference of the gradient norms. ``attention``: GRPO-shaped
first-turn decoding (8 prompts x 16 rows, prompt 512 tokens, 16 own tokens, 14 query / 2 key-value
heads of 64) in bfloat16: :func:`~ragen_torchrl.models.cascade_attention.cascade_attention` and SDPA
on the rows' own copies, both against float32 SDPA, and the milliseconds of each (CUDA events).
``table``: the runs' ``summary.json`` (tokens/s, seconds per iteration, peak memory) and these files
as one short table. Any device works (``cuda`` when present, else ``cpu``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def loss_agreement(model_dir: str, rows: int = 8, tokens: int = 256, seed: int = 0) -> dict:
    """Mean token NLL of one random batch in float32 and under bfloat16 autocast, and their gradient norms.

    Example (on a saved model dir):

        loss_agreement("outputs/gpu_smoke/model")["loss_abs_diff"]
    """
    import torch
    from transformers import AutoModelForCausalLM

    device = _device()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (rows, tokens), generator=g).to(device)

    def run(autocast: bool):
        model.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(ids).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        norm = torch.sqrt(sum((p.grad.float() ** 2).sum() for p in model.parameters() if p.grad is not None))
        return float(loss.detach()), float(norm)

    fp32_loss, fp32_norm = run(False)
    bf16_loss, bf16_norm = run(True)
    return {
        "device": device.type,
        "rows": rows,
        "tokens": tokens,
        "loss_fp32": fp32_loss,
        "loss_bf16_autocast": bf16_loss,
        "loss_abs_diff": abs(bf16_loss - fp32_loss),
        "grad_norm_rel_diff": abs(bf16_norm - fp32_norm) / max(fp32_norm, 1e-12),
    }


def attention_agreement(
    prompts: int = 8,
    group: int = 16,
    prefix: int = 512,
    own: int = 16,
    heads: int = 14,
    kv_heads: int = 2,
    dim: int = 64,
) -> dict:
    """Cascade attention and SDPA, both in bfloat16, against float32 SDPA; milliseconds of each.

    Example:
        >>> out = attention_agreement(prompts=2, group=2, prefix=8, own=3, heads=4, kv_heads=2, dim=8)
        >>> out["cascade_max_abs_err"] < 0.05, out["rows"]
        (True, 4)
    """
    import torch
    import torch.nn.functional as F

    from ragen_torchrl.models.cascade_attention import cascade_attention, prefix_bias

    device = _device()
    g = torch.Generator().manual_seed(0)
    rows = prompts * group

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(device, torch.bfloat16)

    pk, pv = randn(prompts, kv_heads, prefix, dim), randn(prompts, kv_heads, prefix, dim)
    q, k, v = randn(rows, heads, 1, dim), randn(rows, kv_heads, own, dim), randn(rows, kv_heads, own, dim)
    slot = torch.arange(prompts, device=device).repeat_interleave(group)
    group_rows = torch.arange(rows, device=device).view(prompts, group)
    row_place = torch.arange(rows, device=device)
    valid = torch.ones(prompts, prefix, dtype=torch.bool, device=device)
    bias = prefix_bias(valid)
    rep = heads // kv_heads
    keys = torch.cat([pk[slot], k], 2).repeat_interleave(rep, 1)
    values = torch.cat([pv[slot], v], 2).repeat_interleave(rep, 1)
    scale = dim**-0.5

    def cascade():
        return cascade_attention(q, k, v, None, pk, pv, bias, group_rows, row_place, scale)

    def sdpa():
        return F.scaled_dot_product_attention(q, keys, values, scale=scale).transpose(1, 2)

    ref = F.scaled_dot_product_attention(q.float(), keys.float(), values.float(), scale=scale).transpose(1, 2)

    def timed(fn, reps: int = 20) -> float:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / reps
        import time

        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t0) * 1000 / reps

    out_c, out_s = cascade().float(), sdpa().float()
    return {
        "device": device.type,
        "rows": rows,
        "prefix": prefix,
        "cascade_max_abs_err": float((out_c - ref).abs().max()),
        "sdpa_bf16_max_abs_err": float((out_s - ref).abs().max()),
        "bf16_rounding_of_ref": float((ref.bfloat16().float() - ref).abs().max()),
        "cascade_ms": timed(cascade),
        "sdpa_ms": timed(sdpa),
    }


def table(out_dir: str) -> str:
    """The short table of everything ``gpu_smoke.sh`` wrote under ``out_dir``.

    Example:
        >>> import tempfile
        >>> print(table(tempfile.mkdtemp()))
        check                  result
    """
    root = Path(out_dir)
    lines = [f"{'check':<22} result"]
    for summary in sorted(root.glob("*/summary.json")):
        s = json.loads(summary.read_text())
        hist = [h for h in s.get("history", []) if h.get("timing/rollout") is not None]
        timed = hist[1:] if len(hist) > 1 else hist  # the first iteration warms up
        t = s.get("config", {}).get("trainer", {})
        rows = int(t.get("prompts_per_iter", 0)) * int(t.get("group_size", 0))
        tokens = sum((h.get("rollout/tokens") or 0.0) * rows for h in timed)
        rollout_s = sum(h["timing/rollout"] for h in timed)
        per_iter = sum(h.get("timing/total") or 0.0 for h in timed) / max(len(timed), 1)
        peak = max((h.get("memory/max_allocated_gb") or 0.0 for h in timed), default=0.0)
        mem = summary.parent.with_suffix(".mem")
        smi = max((int(x) for x in mem.read_text().split() if x.isdigit()), default=0) if mem.exists() else 0
        lines.append(
            f"{'run ' + summary.parent.name:<22} {tokens / max(rollout_s, 1e-9):8.0f} tok/s | {per_iter:6.2f} s/iter | "
            f"peak {peak:.1f} GiB torch, {smi / 1024:.1f} GiB nvidia-smi | {len(timed)} timed iters x {rows} rows"
        )
    loss = root / "loss_agreement.json"
    if loss.exists():
        r = json.loads(loss.read_text())
        lines.append(
            f"{'bf16 vs fp32 loss':<22} fp32 {r['loss_fp32']:.5f}, bf16 autocast {r['loss_bf16_autocast']:.5f} "
            f"(|diff| {r['loss_abs_diff']:.2e}), grad norm rel diff {r['grad_norm_rel_diff']:.2e}"
        )
    att = root / "attention_agreement.json"
    if att.exists():
        r = json.loads(att.read_text())
        lines.append(
            f"{'cascade vs sdpa bf16':<22} max |err| vs fp32 SDPA: cascade {r['cascade_max_abs_err']:.2e}, sdpa "
            f"{r['sdpa_bf16_max_abs_err']:.2e} (bf16 rounding {r['bf16_rounding_of_ref']:.2e}); "
            f"{r['cascade_ms']:.3f} ms vs {r['sdpa_ms']:.3f} ms, {r['rows']} rows x prefix {r['prefix']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="check", required=True)
    p = sub.add_parser("loss")
    p.add_argument("model_dir")
    p.add_argument("out")
    p = sub.add_parser("attention")
    p.add_argument("out")
    p = sub.add_parser("table")
    p.add_argument("out_dir")
    a = parser.parse_args(argv)
    if a.check == "table":
        print(table(a.out_dir))
        return
    result = loss_agreement(a.model_dir) if a.check == "loss" else attention_agreement()
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
