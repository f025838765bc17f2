#!/usr/bin/env bash
# Flight-recorder analysis speed: wall time and peak memory of one `tandem fr analyze DIR --json`
# over RANKS PyTorch-style pickle dumps (protocol 2, written by Python's pickle, which memoizes every
# string and container) of ENTRIES entries each, as tests/fixtures/fr/make_fr_fixtures.py lays them
# out: one default group over all ranks, collectives cycling through all_reduce / all_gather /
# reduce_scatter / broadcast, all completed except the last, which the last rank never joined (a
# hang, so the analysis has one finding to report and exits 1).
#
# Usage: bench/fr_bench.sh [RANKS] [ENTRIES]        (default 1024 2000)
#   BUILD=dir   the CMake build folder to use (default build); configured (Release) if it has no
#               CMakeCache.txt yet, then `tandem` is built in it.
#   JOBS=n      build parallelism (default 2)
# Prints one line: ranks, entries, dump bytes, wall seconds, peak RSS. The dumps go to a temporary
# folder that is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-1024}
entries=${2:-2000}
build=${BUILD:-build}
jobs=${JOBS:-2}
[[ $ranks =~ ^[1-9][0-9]*$ && $entries =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [RANKS] [ENTRIES]" >&2; exit 2; }
command -v python3 >/dev/null || { echo "fr_bench: python3 not found" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "fr_bench: /usr/bin/time not found" >&2; exit 2; }

if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --target tandem -j "$jobs" >/dev/null
tandem=$build/app/tandem

dir=$(mktemp -d "${TMPDIR:-/tmp}/fr_bench.XXXXXX")
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/dumps"

python3 bench/make_fr_dumps.py "$dir/dumps" "$ranks" "$entries" >"$dir/bytes"
bytes=$(cat "$dir/bytes")

# Exit status 1 is the expected finding; anything else is a failure.
status=0
/usr/bin/time -f '%e s %M KB' -o "$dir/time" "$tandem" fr analyze "$dir/dumps" --json >/dev/null || status=$?
if [[ $status -gt 1 ]]; then
  echo "fr_bench: tandem fr analyze exited $status" >&2
  exit 1
fi
read -r wall_s _ rss_kb _ < <(tail -n 1 "$dir/time")
printf 'fr analyze: %d ranks x %d entries, %s MiB of pickle: %s s wall, %d MiB peak RSS (%s)\n' "$ranks" "$entries" \
  "$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')" "$wall_s" $((rss_kb >> 10)) "$tandem"
