#!/usr/bin/env bash
# Simulator speed: wall time and peak memory of the simulations the capacity-planning questions
# need, each a whole `tandem bench --backend sim` process (/usr/bin/time -v), so the figures include
# topology building, routing and SimGrid start-up:
#   - a 64-GPU all_reduce sweep, 8 B to 16 GiB in x2 steps (32 sizes), ring and auto;
#   - one 1 GiB all_reduce with ring, tree and auto on 1,024, 4,096 and 16,384 GPUs (8 per node,
#     rail-optimized 400G); the last column is the pick ("# Simulated with").
# Usage: bench/sim_speed.sh [path/to/tandem]   (default build/release/app/tandem)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=${1:-build/release/app/tandem}
[[ -x $tandem ]] || { echo "sim_speed: $tandem not built (run scripts/main.sh or cmake --build --preset release)" >&2; exit 2; }

measure() {
  local label=$1
  shift
  local log
  log=$(mktemp)
  /usr/bin/time -v "$tandem" "$@" >"$log.out" 2>"$log"
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$log")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f MiB", $2 / 1024}' "$log")
  printf '%-44s %12s %12s   %s\n' "$label" "$wall" "$rss" "$(grep '^# Simulated with' "$log.out" | cut -c19-)"
  rm -f "$log" "$log.out"
}

printf '%-44s %12s %12s   %s\n' "simulation" "wall (m:s)" "peak RSS" "what ran"
measure "64 GPUs, all_reduce 8 B..16 GiB x2, ring" bench all_reduce --backend sim --nodes 8 -b 8 -e 16G -f 2 --algo ring
measure "64 GPUs, all_reduce 8 B..16 GiB x2, auto" bench all_reduce --backend sim --nodes 8 -b 8 -e 16G -f 2
for nodes in 128 512 2048; do
  for algo in ring tree auto; do
    measure "$((nodes * 8)) GPUs, all_reduce 1 GiB, $algo" bench all_reduce --backend sim --nodes "$nodes" -b 1G -e 1G --algo "$algo"
  done
done
