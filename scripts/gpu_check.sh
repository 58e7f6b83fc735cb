#!/usr/bin/env bash
# The GPU checks in one call, for a lent GPU machine (or any CUDA runner).
#
# Usage:
#   OUT=/tmp/gpu bash scripts/gpu_check.sh            # all steps
#   OUT=/tmp/gpu STEPS="tests forest summary" bash scripts/gpu_check.sh
#
# Steps, in this order (each bounded by its own timeout, each writing under $OUT, so a step
# that hangs still leaves the others' results): env (the card and packages), tests
# (`pytest -m cuda` on the modules that hold cuda tests: CUDA_TESTS, TESTS_MARK, TESTS_S),
# forest (`parabench run` of the forest's GPU kernels), dl (the deep-learning methods on
# cuda, one worker each), bench (`pytest -m cuda --benchmark-only` on BENCH_WORKLOADS x
# BENCH_METHODS, BENCH_S), mainjob (the README's main job on MAINJOB_DEVICES x
# MAINJOB_WORKERS, MAINJOB_S), summary (a short table last). Results: env.txt, cuda-tests.{log,xml}, run.{log,jsonl}, bench.{log,json},
# report.tgz: at most 8 files, what a lent machine sends back.
# Needs only the packages parabench and its tests import; the source is used from src/.
set -u
OUT=${OUT:-/tmp/parabench-gpu}
PY=${PY:-python3}
STEPS=${STEPS:-env tests forest dl bench mainjob summary}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
has() { [[ " $STEPS " == *" $1 "* ]]; }
stamp() { echo "== $1 $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"; }

if has env; then
  { stamp env; nvidia-smi; "$PY" -c 'import torch; print("torch", torch.__version__,
torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")'
    "$PY" -m pip list 2>/dev/null | grep -iE '^(torch|numba|mpi4py|pytest|scikit-learn|numpy|dask|xgboost|tensorflow|rich|matplotlib|psutil)\b'
    nproc; } > "$OUT/env.txt" 2>&1
fi

CUDA_TESTS=${CUDA_TESTS:-"tests/test_ddp_fsdp.py tests/test_dl_workloads.py tests/test_fedavg.py
  tests/test_forest_peers.py tests/test_markers.py tests/test_pipeline_mp.py
  tests/test_workload_gpt.py tests/test_workloads.py tests/test_schedule_step.py"}
if has tests; then
  stamp tests
  # shellcheck disable=SC2086
  timeout "${TESTS_S:-240}" "$PY" -m pytest -m "${TESTS_MARK:-(cuda or multigpu) and not long}" $CUDA_TESTS -p no:cacheprovider \
    -q -rsfE --timeout 120 --benchmark-disable --junitxml="$OUT/cuda-tests.xml" \
    > "$OUT/cuda-tests.log" 2>&1
  echo "tests rc=$?" >> "$OUT/cuda-tests.log"
fi

R="$PY -m parabench run --profile tiny --out $OUT/run.jsonl"
if has forest; then
  stamp forest
  timeout 60 $R --workload random_forest --method numba,torch,threads+torch --device cuda \
    --workers 1 >> "$OUT/run.log" 2>&1
  echo "forest rc=$?" >> "$OUT/run.log"
fi

if has dl; then
  stamp dl
  timeout 200 $R --workload cnn,mlp --method serial,ddp,fsdp,model_parallel,fedavg,pipeline \
    --device cuda --workers 1 >> "$OUT/run.log" 2>&1
  echo "dl rc=$?" >> "$OUT/run.log"
fi

if has bench; then
  stamp bench
  # every cuda benchmark is ~90 one-GPU cases of ~10 s each: a lease holds a chosen few
  PARABENCH_WORKLOADS=${BENCH_WORKLOADS:-cnn,mlp} \
  PARABENCH_METHODS=${BENCH_METHODS:-serial,ddp,fsdp,fedavg,pipeline} \
  timeout "${BENCH_S:-150}" "$PY" -m pytest -m cuda tests/benchmarks -p no:cacheprovider -v -rs \
    --timeout 120 --benchmark-only --benchmark-json="$OUT/bench.json" > "$OUT/bench.log" 2>&1
  echo "bench rc=$?" >> "$OUT/bench.log"
fi

if has mainjob; then
  stamp mainjob
  timeout "${MAINJOB_S:-200}" $R --workload cnn --method serial,ddp,pipeline,fsdp,fedavg \
    --workers "${MAINJOB_WORKERS:-1,2}" --device "${MAINJOB_DEVICES:-cpu,cuda}" \
    --target-quality --report "$OUT/report" >> "$OUT/run.log" 2>&1
  echo "main job rc=$?" >> "$OUT/run.log"
  (cd "$OUT" && tar czf report.tgz report 2>/dev/null && rm -rf report)
fi

if has summary; then
  stamp summary
  head -3 "$OUT/env.txt" 2>/dev/null | cut -c1-120
  grep -E "passed|failed|error|rc=" "$OUT/cuda-tests.log" 2>/dev/null | tail -3
  grep -E "^(FAILED|ERROR)" "$OUT/cuda-tests.log" 2>/dev/null | cut -c1-200 | head -20
  grep -E "(PASSED|FAILED|ERROR) " "$OUT/bench.log" 2>/dev/null | cut -c1-160 | head -30
  grep -E "passed|failed|rc=" "$OUT/bench.log" 2>/dev/null | tail -2
  grep -E "rc=|failed:" "$OUT/run.log" 2>/dev/null | cut -c1-200 | head -30
  tail -25 "$OUT/run.log" 2>/dev/null | cut -c1-200
fi
