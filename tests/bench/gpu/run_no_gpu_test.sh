#!/usr/bin/env bash
# bench/gpu/run.sh where no GPU is visible (CUDA_VISIBLE_DEVICES= hides any there is), on an existing
# build (SKIP_BUILD=1): exit 77 with a "no GPU" line and the table, the CPU-side steps run, logs in
# $OUT. Also: a build folder without the binaries fails (exit 1), a bad BUDGET_S is a usage error (2).
# Usage: tests/bench/gpu/run_no_gpu_test.sh BUILD_DIR   (BUILD_DIR holds app/tandem and the kernel bench)
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 2
build=${1:?usage: run_no_gpu_test.sh BUILD_DIR}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/run_no_gpu_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
expect() {  # expect DESCRIPTION COMMAND...: counts a failure when COMMAND fails
  local what=$1
  shift
  if ! "$@"; then
    echo "FAIL: $what" >&2
    failures=$((failures + 1))
  fi
}

CUDA_VISIBLE_DEVICES='' SKIP_BUILD=1 BUILD=$build OUT=$tmp/out bench/gpu/run.sh >"$tmp/stdout" 2>"$tmp/stderr"
status=$?
expect "exit status 77 without a GPU (got $status)" test "$status" -eq 77
expect "a 'no GPU:' line in the table" grep -q '^GPU  *no GPU: cudaGetDeviceCount failed' "$tmp/stdout"
expect "the verdict printed last" \
  bash -c "tail -n 1 '$tmp/stdout' | grep -q '^verdict: NO GPU: built, nothing measured (exit 77'"
expect "the output folder printed first" bash -c "head -n 1 '$tmp/stdout' | grep -qF 'logs and results in $tmp/out'"
expect "the schedules' estimate, computed without a GPU" \
  grep -q 'copy-bound estimate (8 ranks) *ring: T = 35.0 S, busbw <= 0.0500 x copy; tree: T = 35.0 S' "$tmp/stdout"
expect "summary.txt is the table, printed last" \
  bash -c "tail -n \$(wc -l <'$tmp/out/summary.txt') '$tmp/stdout' | cmp -s - '$tmp/out/summary.txt'"
expect "the probe's exit status in steps.tsv" grep -qP '^probe\t77\t' "$tmp/out/steps.tsv"
expect "gpu_state says absent" grep -qx absent "$tmp/out/gpu_state"
expect "the environment recorded" grep -q '^CUDA_VISIBLE_DEVICES: $' "$tmp/out/env.txt"
expect "nothing measured" bash -c "! grep -q '^kernel_bench' '$tmp/out/steps.tsv'"
expect "no stderr" test ! -s "$tmp/stderr"

SKIP_BUILD=1 BUILD=$tmp/no-such-build OUT=$tmp/out2 bench/gpu/run.sh >"$tmp/stdout2" 2>&1
status=$?
expect "exit 1 when the binaries are missing (got $status)" test "$status" -eq 1
expect "says the binaries are missing" \
  grep -q '^binaries  *tandem or tandem_kernel_bench missing after the build *FAIL' "$tmp/stdout2"

BUDGET_S=soon bench/gpu/run.sh >"$tmp/stdout3" 2>&1
status=$?
expect "exit 2 for a bad BUDGET_S (got $status)" test "$status" -eq 2

if ((failures)); then
  echo "--- run.sh stdout (no GPU) ---" >&2
  cat "$tmp/stdout" "$tmp/stderr" >&2
  exit 1
fi
echo "ok: run.sh without a GPU exits 77 with the table; missing binaries exit 1; bad BUDGET_S exits 2"
