#!/usr/bin/env bash
# The test suite under the sanitizers, from a clean clone:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (preset debug-asan: -fsanitize=address,undefined,
#         -fno-sanitize-recover=all), every CTest suite;
#   tsan  ThreadSanitizer (preset debug-tsan), the suites that run ranks as threads: the host backend,
#         the executor and the flight recorder (CTest -R 'host|flight|recorder|executor').
#
# Usage: bench/sanitize.sh [asan|tsan|all]   (default all; asan first, then tsan: one build at a time)
# Environment:
#   ASAN_BUILD, TSAN_BUILD  build folders (default build-asan2, build-tsan2)
#   ASAN_TESTS, TSAN_TESTS  CTest -R regexes (default: every test; 'host|flight|recorder|executor')
#   JOBS                    build and test parallelism (default 2)
#   TANDEM_FULL_SWEEP=1     the host sweep in full (sanitizer builds otherwise run a reduced sweep)
# Suppressions for code that is not ours live in tests/sanitizers/<sanitizer>.supp.
# Prints one summary line per sanitizer; exits non-zero when a build or a test failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

modes=${1:-all}
case $modes in
  asan | tsan) ;;
  all) modes="asan tsan" ;;
  *) echo "usage: bench/sanitize.sh [asan|tsan|all]" >&2; exit 2 ;;
esac
jobs=${JOBS:-2}
supp=$PWD/tests/sanitizers

# Runtime options: stop at the first report, with a full stack, so that CTest sees a failure.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
[[ -f $supp/lsan.supp ]] && export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
[[ -f $supp/ubsan.supp ]] && UBSAN_OPTIONS+=":suppressions=$supp/ubsan.supp"
[[ -f $supp/asan.supp ]] && ASAN_OPTIONS+=":suppressions=$supp/asan.supp"
[[ -f $supp/tsan.supp ]] && TSAN_OPTIONS+=":suppressions=$supp/tsan.supp"

status=0
summary=()

# run_mode NAME PRESET BUILD_DIR TEST_REGEX
run_mode() {
  local name=$1 preset=$2 build=$3 regex=$4
  local log=$build/sanitize
  mkdir -p "$log"
  echo "== $name: configure ($preset) into $build"
  if ! cmake --preset "$preset" -B "$build" >"$log/configure.log" 2>&1; then
    summary+=("$name: configure failed (see $log/configure.log)")
    status=1
    return
  fi
  # Build only what the selected tests need: each CTest test is the GoogleTest binary of the same
  # name (tests/CMakeLists.txt), and the CLI tests depend on the `tandem` binary themselves.
  local targets=()
  if [[ -z $regex ]]; then
    targets=(all)
  else
    mapfile -t targets < <(ctest --test-dir "$build" -N -R "$regex" | awk '/Test +#[0-9]+:/ {print $3}')
    if ((${#targets[@]} == 0)); then
      summary+=("$name: no test matches '$regex'")
      status=1
      return
    fi
  fi
  echo "== $name: build ${targets[*]}"
  if ! cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$log/build.log" 2>&1; then
    tail -30 "$log/build.log" >&2
    summary+=("$name: build failed (see $log/build.log)")
    status=1
    return
  fi
  echo "== $name: test"
  local filter=()
  [[ -n $regex ]] && filter=(-R "$regex")
  ctest --test-dir "$build" "${filter[@]}" --output-on-failure --timeout 3600 -j "$jobs" >"$log/test.log" 2>&1
  local rc=$?
  local result failed
  result=$(grep -E '^[0-9]+% tests passed' "$log/test.log" | tail -1)
  failed=$(awk '/The following tests FAILED:/ {f = 1; next} f && NF {print "    " $0}' "$log/test.log")
  summary+=("$name: ${result:-ctest did not finish (see $log/test.log)}; log: $log/test.log")
  [[ -n $failed ]] && summary+=("$failed")
  ((rc != 0)) && status=1
}

for mode in $modes; do
  case $mode in
    asan) run_mode asan debug-asan "${ASAN_BUILD:-build-asan2}" "${ASAN_TESTS:-}" ;;
    tsan) run_mode tsan debug-tsan "${TSAN_BUILD:-build-tsan2}" "${TSAN_TESTS:-host|flight|recorder|executor}" ;;
  esac
done

echo "sanitize.sh summary:"
printf '  %s\n' "${summary[@]}"
exit "$status"
