"""``benchmarks/gpu_smoke.sh``: it parses, ``--dry-run`` lists its checks without a GPU, and its table
reads what the runs and checks wrote (hand-made files, numbers computed by hand)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_smoke.sh"


def _checks():
    spec = importlib.util.spec_from_file_location("gpu_smoke_checks", ROOT / "benchmarks" / "gpu_smoke_checks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_parses_and_its_dry_run_lists_every_measurement(tmp_path):
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    out = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", str(tmp_path / "smoke")], check=True, capture_output=True, text=True
    ).stdout
    for item in (
        "tokens/s",
        "seconds per iteration",
        "peak memory",
        "float32 vs bfloat16",
        "cascade attention vs SDPA",
    ):
        assert item in out, item
    assert f"{tmp_path / 'smoke'}/model" in out and "rollout.backend=vllm" in out and "table.txt" in out
    assert not (tmp_path / "smoke").exists()  # a dry run writes nothing


def test_the_table_reads_the_runs_and_the_checks(tmp_path):
    run = tmp_path / "hf"
    run.mkdir()
    history = [  # the first iteration is warm-up and left out
        {"timing/rollout": 9.0, "timing/total": 12.0, "rollout/tokens": 1.0, "memory/max_allocated_gb": 1.0},
        {"timing/rollout": 2.0, "timing/total": 3.0, "rollout/tokens": 40.0, "memory/max_allocated_gb": 5.5},
        {"timing/rollout": 2.0, "timing/total": 5.0, "rollout/tokens": 60.0, "memory/max_allocated_gb": 5.0},
    ]
    config = {"trainer": {"prompts_per_iter": 4, "group_size": 2}}
    (run / "summary.json").write_text(json.dumps({"history": history, "config": config}))
    (tmp_path / "hf.mem").write_text("1000\n8192\n4000\n")
    (tmp_path / "loss_agreement.json").write_text(
        json.dumps({"loss_fp32": 5.0, "loss_bf16_autocast": 5.001, "loss_abs_diff": 0.001, "grad_norm_rel_diff": 0.002})
    )
    (tmp_path / "attention_agreement.json").write_text(
        json.dumps(
            {
                "cascade_max_abs_err": 0.0075,
                "sdpa_bf16_max_abs_err": 0.0078,
                "bf16_rounding_of_ref": 0.0075,
                "cascade_ms": 0.5,
                "sdpa_ms": 0.25,
                "rows": 128,
                "prefix": 512,
            }
        )
    )
    lines = _checks().table(str(tmp_path)).splitlines()
    # (40 + 60) tokens x 8 rows over 4 s of rollout = 200 tok/s; (3 + 5) / 2 = 4 s per iteration
    assert lines[1].split()[:7] == ["run", "hf", "200", "tok/s", "|", "4.00", "s/iter"]
    assert "peak 5.5 GiB torch, 8.0 GiB nvidia-smi" in lines[1] and "2 timed iters x 8 rows" in lines[1]
    assert "(|diff| 1.00e-03)" in lines[2] and "grad norm rel diff 2.00e-03" in lines[2]
    assert "cascade 7.50e-03, sdpa 7.80e-03" in lines[3] and "0.500 ms vs 0.250 ms" in lines[3]


def test_the_attention_check_runs_on_the_cpu_within_bfloat16_rounding():
    r = _checks().attention_agreement(prompts=2, group=4, prefix=32, own=4, heads=4, kv_heads=2, dim=16)
    assert r["device"] in ("cpu", "cuda") and r["rows"] == 8
    assert r["cascade_max_abs_err"] <= r["bf16_rounding_of_ref"] + 1e-5
