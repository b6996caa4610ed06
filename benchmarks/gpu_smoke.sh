#!/usr/bin/env bash
# GPU smoke + throughput check of the rollout backends on one CUDA machine (not run by the tests,
# which only check that this parses).
#
#   bash benchmarks/gpu_smoke.sh [OUT_DIR]        # env: ITERS (3), P (16), G (4), MAX_NEW (48)
#
# 1. builds a Qwen2.5-0.5B-shaped model with random weights (benchmarks/gpu_smoke_model.py, no
#    download) unless OUT_DIR/model exists;
# 2. GRPO on FrozenLake for ITERS iterations with rollout.backend=hf, then rollout.backend=vllm when
#    vLLM imports, then (more than one GPU) under torchrun, one rank per GPU: data parallel, FSDP2, and vLLM when installed;
# 3. prints per run: generated tokens/s in the rollouts, seconds per iteration (rollout / update /
#    total, the first iteration left out as warm-up when there are more) and peak GPU memory
#    (nvidia-smi samples every 0.5 s, and the trainer's memory/max_allocated_gb: rank 0's torch peak).
# Logs and run dirs: OUT_DIR/<run>/ (summary.json), OUT_DIR/<run>.log, OUT_DIR/<run>.mem.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-outputs/gpu_smoke}
ITERS=${ITERS:-3}
P=${P:-16}
G=${G:-4}
MAX_NEW=${MAX_NEW:-48}
PY=${PYTHON:-python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_smoke: needs an NVIDIA GPU (nvidia-smi)" >&2
  exit 1
fi
if ! command -v ragen-train >/dev/null; then
  echo "gpu_smoke: ragen-train is not on PATH (pip install -e '.[vllm]')" >&2
  exit 1
fi
NGPU=$(nvidia-smi -L | wc -l)
mkdir -p "$OUT"
MODEL="$OUT/model"
if [ ! -f "$MODEL/config.json" ]; then
  "$PY" benchmarks/gpu_smoke_model.py "$MODEL" || exit 1
fi

COMMON=(
  model=hf "model.name_or_path=$MODEL" model.device=cuda sft.enabled=false
  "trainer.total_iterations=$ITERS" "trainer.prompts_per_iter=$P" "trainer.group_size=$G"
  "rollout.max_new_tokens=$MAX_NEW" trainer.val_levels=8 trainer.save_every=0 trainer.log_text_samples=0
  diagnostics.mi.enabled=false
)

report() {  # report NAME RUN_DIR MEM_FILE
  "$PY" - "$1" "$2" "$3" <<'PYEOF'
import json, sys
from pathlib import Path

name, run_dir, mem = sys.argv[1:]
summary = Path(run_dir) / "summary.json"
if not summary.exists():
    print(f"{name:>12}: no summary.json (failed; see {run_dir}.log)")
    sys.exit(0)
s = json.loads(summary.read_text())
hist = [h for h in s["history"] if h.get("timing/rollout") is not None]
timed = hist[1:] if len(hist) > 1 else hist  # the first iteration compiles / warms up
t = s["config"]["trainer"]
rows = int(t["prompts_per_iter"]) * int(t["group_size"])
mean = lambda key: sum(h.get(key) or 0.0 for h in timed) / max(len(timed), 1)  # noqa: E731
tokens = sum((h.get("rollout/tokens") or 0.0) * rows for h in timed)  # rollout/tokens: mean per trajectory
rollout_s = sum(h["timing/rollout"] for h in timed)
peak = 0
if Path(mem).exists():
    values = [int(v) for v in Path(mem).read_text().split() if v.strip().isdigit()]
    peak = max(values, default=0)
extra = {k: v for k, v in (timed[-1] if timed else {}).items() if k.startswith("memory/")}
print(
    f"{name:>12}: {tokens / max(rollout_s, 1e-9):9.0f} tok/s | iter {mean('timing/total'):6.2f}s "
    f"(rollout {mean('timing/rollout'):.2f}s, update {mean('timing/update'):.2f}s) | "
    f"peak GPU mem {peak / 1024:.1f} GiB (nvidia-smi, per GPU) {extra or ''} | "
    f"{len(timed)} timed iterations, {rows} trajectories each"
)
PYEOF
}

run() {  # run NAME CMD... (the trainer's overrides are appended)
  local name=$1
  shift
  local dir="$OUT/$name"
  rm -rf "$dir"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$dir.mem" 2>/dev/null &
  local smi=$!
  local t0=$SECONDS
  "$@" "${COMMON[@]}" "hydra.run.dir=$dir" >"$dir.log" 2>&1
  local rc=$?
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  echo "# $name: exit $rc after $((SECONDS - t0)) s (log: $dir.log)"
  [ "$rc" -eq 0 ] || tail -n 20 "$dir.log"
  RESULTS+=("$name $dir $dir.mem")
}

RESULTS=()
run hf ragen-train rollout.backend=hf
if "$PY" -c "import vllm" >/dev/null 2>&1; then
  run vllm ragen-train rollout.backend=vllm
  VLLM_BACKEND=vllm
else
  echo "# vllm: not installed (pip install 'ragen_torchrl[vllm]'), skipped"
  VLLM_BACKEND=hf
fi
if [ "$NGPU" -gt 1 ]; then
  # one rank per GPU (nccl): data parallel, then FSDP2 (parameters, gradients, optimizer state sharded)
  run "ddp_${NGPU}gpu" torchrun --standalone "--nproc_per_node=$NGPU" -m ragen_torchrl.train rollout.backend=hf
  run "fsdp_${NGPU}gpu" torchrun --standalone "--nproc_per_node=$NGPU" -m ragen_torchrl.train rollout.backend=hf \
    trainer.fsdp=true
  if [ "$VLLM_BACKEND" = vllm ]; then
    run "ddp_${NGPU}gpu_vllm" torchrun --standalone "--nproc_per_node=$NGPU" -m ragen_torchrl.train rollout.backend=vllm
  fi
else
  echo "# torchrun: one GPU, skipped (NCCL needs one GPU per rank)"
fi

echo "== gpu_smoke: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1) x $NGPU, P=$P G=$G, max_new_tokens=$MAX_NEW"
for r in "${RESULTS[@]}"; do
  # shellcheck disable=SC2086
  report $r
done
