#!/usr/bin/env bash
# Replay speed: wall time and peak memory of one `tandem replay DIR` over RANKS PyTorch-style pickle
# dumps of ENTRIES entries each, laid out as bench/fr_bench.sh lays them out (its generator, copied):
# one default group over all ranks, collectives cycling through all_reduce / all_gather /
# reduce_scatter / broadcast at 7 sizes, all completed except the last, which the last rank never
# joined (a hang, so the replay has a divergence to report and exits 1). Issue 16's target: 16,384
# ranks x 100 entries in under 60 s and 4 GiB.
#
# Usage: bench/replay_bench.sh [RANKS] [ENTRIES] [-- REPLAY ARGS...]   (default 1024 100)
#   BUILD=dir   the CMake build folder to use (default build); configured (Release) if it has no
#               CMakeCache.txt yet, then `tandem` is built in it.
#   JOBS=n      build parallelism (default 2)
#   DUMPS=dir   keep the dumps in dir/RANKSxENTRIES and reuse them on later runs (generating 16,384
#               ranks takes minutes); without it they go to a temporary folder removed on exit.
# Arguments after -- go to `tandem replay` (e.g. --algorithm ring).
# Prints one line: ranks, entries, wall seconds, peak RSS.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-1024}
entries=${2:-100}
shift $(( $# < 2 ? $# : 2 ))
[[ ${1:-} == -- ]] && shift
build=${BUILD:-build}
jobs=${JOBS:-2}
[[ $ranks =~ ^[1-9][0-9]*$ && $entries =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [RANKS] [ENTRIES] [-- REPLAY ARGS...]" >&2; exit 2; }
command -v python3 >/dev/null || { echo "replay_bench: python3 not found" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "replay_bench: /usr/bin/time not found" >&2; exit 2; }

if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --target tandem -j "$jobs" >/dev/null
tandem=$build/app/tandem

work=$(mktemp -d "${TMPDIR:-/tmp}/replay_bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [[ -n ${DUMPS:-} ]]; then
  dumps=$DUMPS/${ranks}x${entries}
else
  dumps=$work/dumps
fi

# A kept folder is complete once its marker (DIR.complete) is written (an interrupted generation starts over).
if [[ ! -f $dumps.complete ]]; then
  rm -rf "$dumps"
  mkdir -p "$dumps"
  python3 bench/make_fr_dumps.py "$dumps" "$ranks" "$entries" >/dev/null
  touch "$dumps.complete"
fi

# Exit status 1 is the expected finding (the hang); anything else is a failure.
status=0
/usr/bin/time -f '%e s %M KB' -o "$work/time" "$tandem" replay "$dumps" --json "$@" >/dev/null || status=$?
if [[ $status -gt 1 ]]; then
  echo "replay_bench: tandem replay exited $status" >&2
  exit 1
fi
read -r wall_s _ rss_kb _ < <(tail -n 1 "$work/time")
printf 'replay: %d ranks x %d entries: %s s wall, %d MiB peak RSS (%s)\n' "$ranks" "$entries" "$wall_s" \
  $((rss_kb >> 10)) "$tandem"
