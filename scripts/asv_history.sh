#!/usr/bin/env bash
# asv history of main in *this* Python environment: benchmark the last N commits, then publish.
#
# Usage:   bash scripts/asv_history.sh [N] [extra `asv run` arguments...]      (N default 2)
#   PARABENCH_ASV_PROFILE=tiny|quick|full   benchmark size (default tiny)
#   ASV_BENCH=<regex>                       which cases (asv -b); default: a representative
#                                           subset (below); ASV_BENCH=all runs every case
#   ASV_ARGS="--quick"                      extra `asv run` arguments (word-split), like the tail
#   ASV_BRANCH=main                         the branch whose history is benchmarked
#   ASV_RERUN=1                             benchmark commits that already have results here
# Site: .asv/html (`asv preview` serves it). Needs git, asv and pip in the active environment.
#
# The default selection: serial (1 worker) and ddp (2 workers) on mlp, serial and the threads
# forest (2 workers) on random_forest, every benchmark of each (time_window and every track;
# the tracks also measure the serial runs their ratios need: serial at 1 thread per workload).
# Measured on a quiet 2-core machine at tiny (load 0.00 before, 2026-11-23, commits 58c5fd6 and
# c860083): 266 s and 260 s a commit (install, benchmarks), 9 min 9 s for `asv_history.sh 2`
# with every benchmark present for all 4 cases (the target is <= 20 min).
set -euo pipefail

count=${1:-2}
shift || true
if ! [[ $count =~ ^[1-9][0-9]*$ ]]; then
  echo "asv_history: N must be a positive number of commits, got '$count'" >&2
  exit 2
fi
read -r -a asv_args <<< "${ASV_ARGS:-}"
asv_args+=("$@")
branch=${ASV_BRANCH:-main}
export PARABENCH_ASV_PROFILE=${PARABENCH_ASV_PROFILE:-tiny}
# asv -b matches "bench_methods.<Class>.<benchmark>('<workload>', '<method>', '<device>', <workers>)"
default_bench="\\('mlp', '(serial', 'cpu', 1|ddp', 'cpu', 2)\\)"
default_bench+="|\\('random_forest', '(serial', 'cpu', 1|rf_threads', 'cpu', 2)\\)"
bench=${ASV_BENCH:-$default_bench}
if [ "$bench" != all ]; then asv_args+=(--bench "$bench"); fi

root=$(git rev-parse --show-toplevel)
cd "$root"
python=$(command -v python)
# Build without an isolated env when setuptools is already here: no download per commit.
pip_build=()
if "$python" -c "import setuptools, wheel" 2>/dev/null; then pip_build=(--no-build-isolation); fi

restored=""
restore() {
  [ -z "$restored" ] || return 0
  restored=1
  echo "asv_history: reinstalling $root editable (--no-deps)"
  "$python" -m pip install --quiet --no-deps "${pip_build[@]}" -e "$root"
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/asv-history.XXXXXX")
cleanup() {
  local status=$?
  if [ -d "$tmp/worktree" ]; then git worktree remove --force "$tmp/worktree" || true; fi
  rm -rf "$tmp"
  git worktree prune || true
  restore || status=1
  exit "$status"
}
trap cleanup EXIT

mapfile -t commits < <(git rev-list --first-parent --reverse --max-count="$count" "$branch" --)
[ "${#commits[@]}" -gt 0 ] || { echo "asv_history: no commits on '$branch'" >&2; exit 2; }
echo "asv_history: ${#commits[@]} commit(s) of $branch, profile $PARABENCH_ASV_PROFILE," \
  "python $python, asv args: ${asv_args[*]}"

asv machine --yes > /dev/null
machine=$(uname -n)                 # the name `asv machine --yes` stores results under
env_name="existing-py${python//\//_}"  # asv's name for `-E existing:$python`
failed=()
i=0
for sha in "${commits[@]}"; do
  i=$((i + 1))
  label="[$i/${#commits[@]}] $(git log -1 --format='%h %s' "$sha")"
  if [ -z "${ASV_RERUN:-}" ] &&
     [ -f ".asv/results/$machine/${sha:0:8}-$env_name.json" ]; then
    echo "asv_history: $label: results exist, skipped (ASV_RERUN=1 re-runs it)"
    continue
  fi
  echo "asv_history: $label: installing"
  git worktree add --quiet --detach "$tmp/worktree" "$sha"
  if ! "$python" -m pip install --quiet --no-deps "${pip_build[@]}" "$tmp/worktree"; then
    echo "asv_history: $label: pip could not install it; not benchmarked" >&2
    failed+=("${sha:0:8} (install)")
  else
    echo "asv_history: $label: benchmarking"
    started=$SECONDS
    # --record-samples keeps the raw samples: `asv compare` needs them for Mann-Whitney
    if ! asv run -E "existing:$python" --set-commit-hash "$sha" --record-samples \
        "${asv_args[@]}"; then
      failed+=("${sha:0:8} (benchmarks)")
    fi
    echo "asv_history: $label: done in $((SECONDS - started)) s"
  fi
  git worktree remove --force "$tmp/worktree"
done

restore
# publish draws the parameter axes from the last discovery (benchmarks.json): redo it with this
# checkout installed, so the site shows today's cases whichever commit ran last, or none did.
asv run -E "existing:$python" --bench just-discover
asv publish
echo "asv_history: site in $root/.asv/html (asv preview serves it)"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "asv_history: failures at: ${failed[*]}" >&2
  exit 1
fi
