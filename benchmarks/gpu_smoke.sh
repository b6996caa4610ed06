#!/usr/bin/env bash
# The device check of the GPU path, on one CUDA GPU, in under 8 minutes on one H100 (each step has a
# time limit; a step past it is reported as such and the rest still run).
#
#   bash benchmarks/gpu_smoke.sh [OUT_DIR]             # env: ITERS (3), P (16), G (4), MAX_NEW (48), STEP_LIMIT (150 s)
#   bash benchmarks/gpu_smoke.sh --dry-run [OUT_DIR]   # list what it would measure; needs no GPU
#
# Everything goes under OUT_DIR (default outputs/gpu_smoke):
#   model/                    a Qwen2.5-0.5B-shaped model with random weights (benchmarks/gpu_smoke_model.py, no download)
#   hf/, vllm/                GRPO on FrozenLake, ITERS iterations, rollout.backend=hf / vllm (vllm when it imports):
#                             summary.json, the logs <run>.log and nvidia-smi samples <run>.mem (every 0.5 s)
#   loss_agreement.json       one batch of 8 x 256 tokens: the loss in float32 vs under bfloat16 autocast, grad norms
#   attention_agreement.json  cascade attention vs SDPA in bfloat16, both against float32 SDPA, and their times
#   table.txt                 the short table printed at the end (benchmarks/gpu_smoke_checks.py table):
#                             tokens/s hf vs vllm, seconds per iteration, peak memory, the two agreements
# MULTI_GPU=1 on a machine with several GPUs adds torchrun runs (data parallel, FSDP2), not bounded by the 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY_RUN=0
if [ "${1:-}" = "--dry-run" ]; then
  DRY_RUN=1
  shift
fi
OUT=${1:-outputs/gpu_smoke}
ITERS=${ITERS:-3}
P=${P:-16}
G=${G:-4}
MAX_NEW=${MAX_NEW:-48}
STEP_LIMIT=${STEP_LIMIT:-150}
PY=${PYTHON:-python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
MODEL="$OUT/model"

COMMON=(
  model=hf "model.name_or_path=$MODEL" model.device=cuda sft.enabled=false
  "trainer.total_iterations=$ITERS" "trainer.prompts_per_iter=$P" "trainer.group_size=$G"
  "rollout.max_new_tokens=$MAX_NEW" trainer.val_levels=8 trainer.save_every=0 trainer.log_text_samples=0
  diagnostics.mi.enabled=false
)

if [ "$DRY_RUN" -eq 1 ]; then
  cat <<PLAN
gpu_smoke --dry-run: what a run on one CUDA GPU measures, under $OUT/ (each step at most ${STEP_LIMIT}s)
  1. model/: $PY benchmarks/gpu_smoke_model.py $MODEL  (Qwen2.5-0.5B shape, random weights)
  2. hf/: ragen-train rollout.backend=hf ${COMMON[*]}
       -> tokens/s of the rollouts, seconds per iteration (rollout / update), peak memory (torch, nvidia-smi)
  3. vllm/: the same with rollout.backend=vllm (when vllm imports) -> tokens/s hf vs vllm
  4. loss_agreement.json: $PY benchmarks/gpu_smoke_checks.py loss $MODEL ...
       -> the loss of one batch in float32 vs bfloat16 autocast, gradient-norm difference
  5. attention_agreement.json: $PY benchmarks/gpu_smoke_checks.py attention ...
       -> cascade attention vs SDPA in bfloat16, max error against float32 SDPA, milliseconds each
  6. table.txt: $PY benchmarks/gpu_smoke_checks.py table $OUT
PLAN
  exit 0
fi

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_smoke: needs an NVIDIA GPU (nvidia-smi); --dry-run lists the checks without one" >&2
  exit 1
fi
if ! command -v ragen-train >/dev/null; then
  echo "gpu_smoke: ragen-train is not on PATH (pip install -e '.[vllm]')" >&2
  exit 1
fi
NGPU=$(nvidia-smi -L | wc -l)
mkdir -p "$OUT"
T_START=$SECONDS

step() {  # step NAME CMD...: run with the time limit, log to OUT/NAME.log
  local name=$1
  shift
  local t0=$SECONDS
  timeout "$STEP_LIMIT" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -eq 124 ]; then
    echo "# $name: past ${STEP_LIMIT}s, stopped (log: $OUT/$name.log)"
  else
    echo "# $name: exit $rc after $((SECONDS - t0)) s (log: $OUT/$name.log)"
    [ "$rc" -eq 0 ] || tail -n 20 "$OUT/$name.log"
  fi
}

run() {  # run NAME CMD...: a training run (the common overrides appended), nvidia-smi sampled beside it
  local name=$1
  shift
  local dir="$OUT/$name"
  rm -rf "$dir"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 >"$dir.mem" 2>/dev/null &
  local smi=$!
  step "$name" "$@" "${COMMON[@]}" "hydra.run.dir=$dir"
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
}

if [ ! -f "$MODEL/config.json" ]; then
  step model "$PY" benchmarks/gpu_smoke_model.py "$MODEL"
fi
run hf ragen-train rollout.backend=hf
if "$PY" -c "import vllm" >/dev/null 2>&1; then
  run vllm ragen-train rollout.backend=vllm
  VLLM_BACKEND=vllm
else
  echo "# vllm: not installed (pip install 'ragen_torchrl[vllm]'), skipped"
  VLLM_BACKEND=hf
fi
step loss_agreement "$PY" benchmarks/gpu_smoke_checks.py loss "$MODEL" "$OUT/loss_agreement.json"
step attention_agreement "$PY" benchmarks/gpu_smoke_checks.py attention "$OUT/attention_agreement.json"
if [ "${MULTI_GPU:-0}" = 1 ] && [ "$NGPU" -gt 1 ]; then
  # one rank per GPU (nccl): data parallel, then FSDP2 (parameters, gradients, optimizer state sharded)
  run "ddp_${NGPU}gpu" torchrun --standalone "--nproc_per_node=$NGPU" -m ragen_torchrl.train rollout.backend=hf
  run "fsdp_${NGPU}gpu" torchrun --standalone "--nproc_per_node=$NGPU" -m ragen_torchrl.train rollout.backend=hf \
    trainer.fsdp=true
  if [ "$VLLM_BACKEND" = vllm ]; then
    run "ddp_${NGPU}gpu_vllm" torchrun --standalone "--nproc_per_node=$NGPU" -m ragen_torchrl.train rollout.backend=vllm
  fi
fi

{
  echo "== gpu_smoke: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1) x $NGPU, P=$P G=$G," \
    "max_new_tokens=$MAX_NEW, $ITERS iterations, $((SECONDS - T_START)) s in all"
  "$PY" benchmarks/gpu_smoke_checks.py table "$OUT"
} | tee "$OUT/table.txt"
