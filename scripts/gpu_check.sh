#!/usr/bin/env bash
# The GPU checks in one call, for a lent GPU machine (or any CUDA runner).
#
# Usage:
#   OUT=/tmp/gpu bash scripts/gpu_check.sh                       # the default steps, <= 9 min
#   OUT=/tmp/gpu STEPS="select summary" bash scripts/gpu_check.sh   # the cuda selection alone
#   OUT=/tmp/gpu STEPS="tests dl summary" bash scripts/gpu_check.sh # the older regression steps
#   OUT=/tmp/cpu DEVICE=cpu PROFILE=tiny bash scripts/gpu_check.sh    # the flow, on a CPU
#
# Default steps (GPU runs a GPU user trusts), each bounded by its own timeout so one that
# hangs leaves the others' results, in this order:
#   env      the card, torch and packages
#   peaks    the matmul peaks MFU is against (fp32, tf32, bf16), recorded in the shared folder
#   vgg      parabench: vgg11 full bf16 serial, channels_last on/off x batch 256/64 (MFU, the
#            training's GPU memory apart from evaluation and data, start-up with the data cache)
#   peer     the hand-written loop against parabench's serial case, alternating rounds:
#            vgg11 full bf16 (batch 256 channels_last on, batch 64 off); parabench's ratio
#   gpt2     parabench: gpt2 full (GPT-2 small's shape) bf16 serial, ddp, fsdp on one GPU
#   compile  parabench: vgg11 full bf16 batch 256 channels_last on with --compile on
#   summary  a short table last
# Other steps: select (`pytest -m cuda --benchmark-only`: the cuda selection, <= 10 min on
# its own), tests (`pytest -m cuda` on the modules with cuda tests), dl (the deep-learning
# methods on cuda at tiny), forest (the forest's GPU kernels).
# Every step shares one sweep folder (PARABENCH_SWEEP_DIR), so vgg11's 224 px data is built
# once and the peaks are measured once. Results under $OUT (at most 8 files come back from a
# lent machine): env.txt, runs.jsonl, runs.log, peer.jsonl, select.json, tests.log, summary.txt.
set -u
OUT=${OUT:-/tmp/parabench-gpu}
PY=${PY:-python3}
STEPS=${STEPS:-env peaks vgg peer gpt2 compile summary}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
MADE_SWEEP=""
if [ -z "${PARABENCH_SWEEP_DIR:-}" ]; then
  PARABENCH_SWEEP_DIR=$(mktemp -d -t parabench-gpu-sweep-XXXX) && MADE_SWEEP=1
fi
export PARABENCH_SWEEP_DIR
has() { [[ " $STEPS " == *" $1 "* ]]; }
stamp() { echo "== $1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$OUT/runs.log"; }
DEVICE=${DEVICE:-cuda}
PROFILE=${PROFILE:-full}
R="$PY -m parabench run --device $DEVICE --out $OUT/runs.jsonl"
LOG="$OUT/runs.log"

if has env; then
  { stamp env; date -u; nvidia-smi; "$PY" -c 'import torch; print("torch", torch.__version__,
torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")'
    "$PY" -m pip list 2>/dev/null | grep -iE '^(torch|numba|mpi4py|pytest|scikit-learn|numpy|dask|xgboost|tensorflow|rich|matplotlib|psutil)\b'
    nproc; } > "$OUT/env.txt" 2>&1
fi

if has peaks; then
  stamp peaks
  DEVICE=$DEVICE timeout 60 "$PY" - >> "$LOG" 2>&1 <<'PY'
import os

from parabench.case.peak import sweep_peak

device = os.environ.get("DEVICE", "cuda")
for arith in ("bf16", "tf32", "fp32") if device == "cuda" else ("bf16", "fp32"):
    p = sweep_peak(device, arith, threads=None if device == "cuda" else os.cpu_count())
    print(f"peak {arith}: {p.flops / 1e12:.1f} TFLOP/s ({p.device}, {p.n}^3, {p.source})")
PY
  echo "peaks rc=$?" >> "$LOG"
fi

VGG="--workload vgg11 --method serial --profile $PROFILE --precision bf16 --epochs 1 --windows 8"
if has vgg; then
  stamp vgg
  timeout "${VGG_S:-150}" $R $VGG --channels-last on,off --batch-size 256,64 --wide >> "$LOG" 2>&1
  echo "vgg rc=$?" >> "$LOG"
fi

if has peer; then
  for cfg in "256 on" "64 off"; do
    set -- $cfg
    stamp "peer b$1 channels_last=$2"
    timeout "${PEER_S:-60}" "$PY" scripts/hand_loop.py --workload vgg11 --profile "$PROFILE" \
      --device "$DEVICE" --precision bf16 --batch-size "$1" --channels-last "$2" --compare 5 \
      >> "$OUT/peer.jsonl" 2>> "$LOG"
    echo "peer rc=$?" >> "$LOG"
  done
  stamp "hand loop alone b256 channels_last=on (its CUDA peak)"
  timeout 40 "$PY" scripts/hand_loop.py --workload vgg11 --profile "$PROFILE" --device "$DEVICE" \
    --precision bf16 --batch-size 256 --channels-last on --steps 20 --warmup 10 --repeats 5 \
    >> "$OUT/peer.jsonl" 2>> "$LOG"
  echo "hand rc=$?" >> "$LOG"
fi

if has gpt2; then
  stamp gpt2
  timeout "${GPT2_S:-130}" $R --workload gpt2 --method serial,ddp,fsdp --workers 1 \
    --profile "$PROFILE" --precision bf16 --epochs 1 --windows 8 --wide >> "$LOG" 2>&1
  echo "gpt2 rc=$?" >> "$LOG"
fi

if has compile; then
  stamp compile
  timeout "${COMPILE_S:-80}" $R $VGG --channels-last on --batch-size 256 --compile on \
    --wide >> "$LOG" 2>&1
  echo "compile rc=$?" >> "$LOG"
fi

if has select; then
  stamp select
  set -o pipefail
  timeout "${SELECT_S:-560}" "$PY" -m pytest -m cuda --benchmark-only tests/benchmarks/test_methods.py \
    -p no:cacheprovider -v -rsfE --timeout 300 --durations=0 \
    --benchmark-json="$OUT/select.json" >> "$OUT/tests.log" 2>&1
  echo "select rc=$?" >> "$OUT/tests.log"
  set +o pipefail
fi

CUDA_TESTS=${CUDA_TESTS:-"tests/methods/test_ddp_fsdp.py tests/workloads/test_dl_workloads.py
  tests/methods/test_fedavg.py tests/forest/test_forest_peers.py tests/bottom/test_markers.py
  tests/methods/test_pipeline_mp.py tests/torch_engine/test_autobatch.py
  tests/workloads/test_workload_gpt.py tests/workloads/test_workload_gpt2.py
  tests/workloads/test_workloads.py tests/torch_engine/test_schedule_step.py"}
if has tests; then
  stamp tests
  # shellcheck disable=SC2086
  timeout "${TESTS_S:-240}" "$PY" -m pytest -m "${TESTS_MARK:-(cuda or multigpu) and not long}" $CUDA_TESTS -p no:cacheprovider \
    -q -rsfE --timeout 120 --benchmark-disable >> "$OUT/tests.log" 2>&1
  echo "tests rc=$?" >> "$OUT/tests.log"
fi

if has forest; then
  stamp forest
  timeout 60 $R --profile tiny --workload random_forest --method rf_numba,rf_torch,rf_threads+torch \
    --workers 1 >> "$LOG" 2>&1
  echo "forest rc=$?" >> "$LOG"
fi

if has dl; then
  stamp dl
  timeout 200 $R --profile tiny --workload cnn,mlp --method serial,ddp,fsdp,model_parallel,fedavg,pipeline \
    --workers 1 >> "$LOG" 2>&1
  echo "dl rc=$?" >> "$LOG"
fi

if has summary; then
  stamp summary
  { head -3 "$OUT/env.txt" 2>/dev/null | cut -c1-120
    grep -E "^peak |rc=" "$LOG" 2>/dev/null
    "$PY" scripts/gpu_summary.py "$OUT/runs.jsonl" "$OUT/peer.jsonl" 2>&1
    grep -E "passed|failed|rc=" "$OUT/tests.log" 2>/dev/null | tail -4
  } | tee "$OUT/summary.txt"
fi
[ -n "$MADE_SWEEP" ] && rm -rf "$PARABENCH_SWEEP_DIR"  # a folder the caller named stays
