#!/usr/bin/env bash
# Capacity-planning speed: wall time and peak memory (/usr/bin/time -v, whole processes) of
#   - the training scenario of the main job (Llama-3 70B, 64 GPUs, 2 layouts x 3 clusters);
#   - the 384-point Llama-3 70B sweep (8 to 16,384 GPUs, 24 simulated clusters) on local cores;
#   - the same sweep under `mpirun -np 2` (one local process per rank), whose plan.csv must be
#     byte-identical to the single-process run's.
# Usage: bench/plan_speed.sh [path/to/tandem]   (default build/release/app/tandem)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=${1:-build/release/app/tandem}
[[ -x $tandem ]] || { echo "plan_speed: $tandem not built (run scripts/main.sh or cmake --build --preset release)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

measure() {
  local label=$1
  shift
  /usr/bin/time -v "$@" >"$tmp/out" 2>"$tmp/time"
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tmp/time")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f MiB", $2 / 1024}' "$tmp/time")
  printf '%-58s wall %-9s peak RSS %s (largest process)\n' "$label" "$wall" "$rss"
}

measure "run scenarios/llama3-70b-64xh100.yaml" "$tandem" run scenarios/llama3-70b-64xh100.yaml
measure "plan llama3-70b-capacity (576 points), $(nproc) processes" \
  "$tandem" plan scenarios/plans/llama3-70b-capacity.yaml --out "$tmp/single" --quiet
if command -v mpirun >/dev/null 2>&1; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_btl_vader_single_copy_mechanism=none \
    OMPI_MCA_btl_base_warn_component_unused=0
  measure "mpirun -np 2 plan llama3-70b-capacity, 1 process per rank" \
    mpirun -np 2 "$tandem" plan scenarios/plans/llama3-70b-capacity.yaml --out "$tmp/mpi" --jobs 1 --quiet
  if cmp -s "$tmp/single/plan.csv" "$tmp/mpi/plan.csv"; then
    echo "plan.csv under mpirun -np 2: identical ($(($(wc -l <"$tmp/mpi/plan.csv") - 1)) points)"
  else
    echo "plan.csv under mpirun -np 2: DIFFERS" >&2
    exit 1
  fi
fi
