#!/usr/bin/env bash
# `tandem calibrate` speed on large logs: wall time and peak memory (/usr/bin/time -v) of
#   - one table of 20,000 rows: a simulated 2-node all_reduce sweep (1 KiB .. 64 MiB, 17 sizes)
#     whose rows repeat, as a log of a sweep run over and over under one header does;
#   - a log near the reader's 16 MiB limit: the same table repeated as many runs as fit (each with
#     its own header, as concatenated nccl-tests outputs are);
#   - one table of 2,000 distinct sizes (all_reduce, 32 KiB apart): every row its own simulation.
# Usage: bench/calibrate_speed.sh [path/to/tandem]   (default build/release/app/tandem)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=${1:-build/release/app/tandem}
[[ -x $tandem ]] || { echo "calibrate_speed: $tandem not built (cmake --build build/release --target tandem)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cluster=(--cluster dgx-h100 --nodes 2 -g 4)

measure() {
  local label=$1
  shift
  if ! /usr/bin/time -v "$@" >"$tmp/out" 2>"$tmp/time"; then
    tail -3 "$tmp/time" >&2
    echo "calibrate_speed: $label failed" >&2
    exit 1
  fi
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tmp/time")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f MiB", $2 / 1024}' "$tmp/time")
  printf '%-62s wall %-9s peak RSS %s\n' "$label" "$wall" "$rss"
}

# The sweep, simulated with tandem's defaults and the ring: header lines and 17 rows.
"$tandem" bench all_reduce --backend sim "${cluster[@]}" --algo ring -b 1K -e 64M -f 2 >"$tmp/sweep.log"
grep '^#' "$tmp/sweep.log" | sed '/^# Out of bounds/,$d' >"$tmp/header"
grep -v '^#' "$tmp/sweep.log" | grep -v '^$' >"$tmp/rows"

# One table of 20,000 rows.
{
  cat "$tmp/header"
  for _ in $(seq 1 $((20000 / $(wc -l <"$tmp/rows") + 1))); do cat "$tmp/rows"; done | head -n 20000
} >"$tmp/rows20k_all_reduce_perf.log"
echo "table: $(grep -cv '^#' "$tmp/rows20k_all_reduce_perf.log") rows, $(wc -c <"$tmp/rows20k_all_reduce_perf.log") bytes"
measure "calibrate, one table of 20,000 rows (17 sizes repeated)" \
  "$tandem" calibrate "$tmp/rows20k_all_reduce_perf.log" "${cluster[@]}" -q
grep '^# merged' "$tmp/out" || true

# As many whole runs (header and table) as fit in 16 MiB.
run_bytes=$(cat "$tmp/sweep.log" | wc -c)
runs=$(((16 * 1024 * 1024 - 1) / run_bytes))
for _ in $(seq 1 "$runs"); do cat "$tmp/sweep.log"; done >"$tmp/big_all_reduce_perf.log"
echo "log: $runs runs, $(wc -c <"$tmp/big_all_reduce_perf.log") bytes"
measure "calibrate, a 16 MiB log of $runs runs" "$tandem" calibrate "$tmp/big_all_reduce_perf.log" "${cluster[@]}" -q

# 2,000 distinct sizes: no repeats to merge.
"$tandem" bench all_reduce --backend sim "${cluster[@]}" --algo ring -b 32K -e 64000K -i 32K \
  >"$tmp/distinct_all_reduce_perf.log"
echo "distinct: $(grep -cv '^#' "$tmp/distinct_all_reduce_perf.log") rows"
measure "calibrate, one table of 2,000 distinct sizes" \
  "$tandem" calibrate "$tmp/distinct_all_reduce_perf.log" "${cluster[@]}" -q
