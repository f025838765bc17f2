#!/usr/bin/env bash
# Fuzzes tandem's input readers with libFuzzer (ASan + UBSan): the schedule JSON reader (and the
# validate / symbolic_check that `tandem schedule --check` runs after it), the scenario YAML loader,
# the pickle / flight-recorder dump reader (pickle and JSON dumps), the results.json reader of
# `tandem report` (down to the page it writes), the capacity-plan YAML loader, the memory-snapshot
# reader and replay of `tandem memory`, and the nccl-tests log and reference-CSV readers of
# `tandem calibrate`. (A normal test build replays each target's seed corpus as a test:
# tandem_fuzz_corpus_<target>.)
#
# Usage: bench/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
#   Configures build-fuzz with clang (TANDEM_FUZZ=ON, no tests, no benchmarks), builds only the fuzz
#   targets, and runs each for SECONDS on a fresh copy of its seed corpus (fuzz/corpus/<target>/,
#   with the tokens in fuzz/dict/<target>.dict), in libFuzzer's fork mode so that one run collects
#   every crash rather than stopping at the first. Logs, corpora and artifacts (crash-*, leak-*,
#   timeout-*, oom-*) go to ${OUT:-build-fuzz/out}/<target>/.
#   Environment: TARGETS="fuzz_pickle ..." runs a subset; JOBS (default 2) sets build parallelism.
#   A crash found by hand: build-fuzz/fuzz/<target> ARTIFACT replays it with the stack.
# Exit status: 0 when nothing was found, 1 when any target found a crash, leak, timeout or OOM,
# 2 when a target did not build.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || { echo "fuzz.sh: SECONDS must be a positive integer" >&2; exit 2; }
out=${OUT:-build-fuzz/out}
jobs=${JOBS:-2}
targets=${TARGETS:-fuzz_schedule_json fuzz_scenario_yaml fuzz_pickle fuzz_results_json fuzz_plan_yaml fuzz_memory_snapshot fuzz_nccl_tests_log}
build="build-fuzz"

mkdir -p "$out"
generator=()
command -v ninja >/dev/null && [[ ! -f $build/CMakeCache.txt ]] && generator=(-G Ninja)
CC=clang CXX=clang++ cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_FUZZ=ON \
  -DTANDEM_BUILD_TESTS=OFF -DTANDEM_BUILD_BENCH=OFF >"$out/configure.log" 2>&1 ||
  { cat "$out/configure.log" >&2; echo "fuzz.sh: configure failed" >&2; exit 2; }

count_artifacts() { find "$1" -maxdepth 1 -name "$2-*" | wc -l; }

status=0
summary=()
for target in $targets; do
  dir=$out/$target
  rm -rf "$dir"
  mkdir -p "$dir/artifacts"
  if ! cmake --build "$build" -j "$jobs" --target "$target" >"$dir/build.log" 2>&1; then
    summary+=("$(printf '%-20s BUILD FAILED (see %s)' "$target" "$dir/build.log")")
    status=2
    continue
  fi
  cp -r "fuzz/corpus/$target" "$dir/corpus"
  dict=()
  [[ -f fuzz/dict/$target.dict ]] && dict=(-dict="fuzz/dict/$target.dict")
  # -fork=1: one child at a time, restarted after a crash, so the run keeps going and every
  # distinct crash is kept under artifacts/. -timeout / -rss_limit_mb apply to each input.
  "$build/fuzz/$target" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "${dict[@]}" -artifact_prefix="$dir/artifacts/" "$dir/corpus" >"$dir/fuzz.log" 2>&1
  rc=$?
  executions=$(grep -oE '^#[0-9]+:' "$dir/fuzz.log" | tail -1 | tr -d '#:')
  crashes=$(count_artifacts "$dir/artifacts" crash) leaks=$(count_artifacts "$dir/artifacts" leak)
  timeouts=$(count_artifacts "$dir/artifacts" timeout) ooms=$(count_artifacts "$dir/artifacts" oom)
  found=$((crashes + leaks + timeouts + ooms))
  corpus=$(find "$dir/corpus" -type f | wc -l)
  line=$(printf '%-20s %10s executions  %d found (crash %d, leak %d, timeout %d, oom %d)  corpus %d' "$target" \
    "${executions:-?}" "$found" "$crashes" "$leaks" "$timeouts" "$ooms" "$corpus")
  if ((found > 0)); then
    status=1
  elif ((rc != 0)); then
    line+="  (libFuzzer exited $rc: see $dir/fuzz.log)"
    status=1
  fi
  summary+=("$line")
done

echo "fuzz.sh: ${seconds}s per target; logs and artifacts in $out/"
printf '%s\n' "${summary[@]}"
if ((status == 1)); then
  echo "artifacts (replay one with: $build/fuzz/<target> FILE):"
  find "$out" -path '*/artifacts/*' -type f | sort | sed 's/^/  /'
fi
exit "$status"
