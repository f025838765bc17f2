#!/usr/bin/env bash
# The same sweep twice: in one process, and split over `mpirun -np 2` (each rank a shard of the
# cluster jobs, gathered on rank 0). plan.csv and plan.json must be identical, byte for byte.
# usage: plan_mpi_check.sh MPIEXEC TANDEM SWEEP.yaml
set -euo pipefail
mpiexec=$1 tandem=$2 sweep=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tandem" plan "$sweep" --out "$tmp/single" --quiet
"$mpiexec" -np 2 "$tandem" plan "$sweep" --out "$tmp/mpi" --jobs 1 > "$tmp/mpi.out"
grep -q "x 2 MPI ranks" "$tmp/mpi.out" || { echo "rank 0 did not report 2 MPI ranks:"; cat "$tmp/mpi.out"; exit 1; }
cmp "$tmp/single/plan.csv" "$tmp/mpi/plan.csv"
cmp "$tmp/single/plan.json" "$tmp/mpi/plan.json"
echo "mpirun -np 2: plan.csv ($(($(wc -l < "$tmp/mpi/plan.csv") - 1)) points) and plan.json identical to one process"
