#!/usr/bin/env bash
# Every shipped scenario, plan and README example command, run by two tandem binaries, outputs
# diffed: what a refactor that must not change outputs is checked with.
#
#   bench/outputs_diff.sh BEFORE_TANDEM AFTER_TANDEM OUT_DIR
#
# OUT_DIR/{before,after}/NAME.txt hold each command's stdout, stderr and exit code; OUT_DIR/diff.txt
# the differences. Commands on the host backend time real threads on the wall clock (and print
# their pid): their numbers are masked before the diff, so their structure, outcomes and exit codes
# are compared, not their times. Exits 1 when any output differs. Takes ~10 minutes per binary on two cores (the 16,384-GPU scenario and
# the 576-point plan are most of it).
set -uo pipefail
cd "$(dirname "$0")/.."

if (($# != 3)); then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
before=$(realpath "$1")
after=$(realpath "$2")
out=$3
mkdir -p "$out"
out=$(realpath "$out")

# NAME|COMMAND (TANDEM stands for the binary, WORK for a scratch folder of that binary's own).
commands=()
for scenario in scenarios/*.yaml scenarios/faults/*.yaml scenarios/faults/host/*.yaml; do
  commands+=("run-$(basename "$scenario" .yaml)|TANDEM run $scenario --out WORK/$(basename "$scenario" .yaml)")
done
for plan in scenarios/plans/*.yaml; do
  commands+=("plan-$(basename "$plan" .yaml)|TANDEM plan $plan --out WORK/plan-$(basename "$plan" .yaml)")
done
commands+=(
  "reliability|TANDEM reliability --cluster dgx-h100 --gpus 16384"
  "bench-sim|TANDEM bench all_reduce --backend sim --cluster dgx-h100 --nodes 8 -b 8 -e 16G -f 2"
  "bench-host|TANDEM bench all_reduce --backend host -b 8 -e 64M -f 4 -g 8 --algo ring"
  "bound|TANDEM bound all_reduce 1G --cluster dgx-h100 --nodes 8"
  "topo|TANDEM topo --cluster dgx-h100 --nodes 2 --format dot"
  "schedule|TANDEM schedule --collective all_reduce --algo tree --nranks 8"
  "fr-analyze|TANDEM fr analyze WORK/rank-hang-64xh100/fr"
  "replay|TANDEM replay WORK/rank-hang-64xh100/fr --algorithm ring --watchdog 100ms"
  "replay-70b|TANDEM replay WORK/llama3-70b-hang-64xh100/fr --recovery shrink --out WORK/hang70b-replay"
  "memory|TANDEM memory tests/fixtures/memory/sixteens_then_thirty_twos.pickle --alloc-conf expandable_segments:True"
  "calibrate|TANDEM calibrate ../shared/reference/h100_calibration.csv --cluster dgx-h100 -o WORK/h100.yaml"
  "trace|TANDEM run scenarios/faults/rank-hang-64xh100.yaml --trace WORK/hang.json"
)

run_all() {
  local tandem=$1 side=$2
  local work="$out/$side/work"
  rm -rf "${out:?}/$side"
  mkdir -p "$work"
  for entry in "${commands[@]}"; do
    local name=${entry%%|*} command=${entry#*|}
    command=${command//TANDEM/$tandem}
    command=${command//WORK/$work}
    echo "outputs_diff: $side $name" >&2
    {
      # shellcheck disable=SC2086
      eval "$command" 2>&1
      echo "exit: $?"
    } | sed -E -e "s|$work|WORK|g" -e "s|$tandem|TANDEM|g" \
        -e 's/(in|took|elapsed|wall) [0-9.]+ ?(s|ms|min)\b/\1 <wall>/g' >"$out/$side/$name.txt"
  done
  (cd "$work" && find . -name trace.json -o -name hang.json | sort | while read -r f; do
     python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1], len(d["traceEvents"]))' "$f"
   done) >"$out/$side/traces.txt"
}

# Wall-clock outputs: every number masked.
mask_wall_clock() {
  local side=$1
  for f in "$out/$side"/bench-host.txt "$out/$side"/run-*-host.txt; do
    [[ -f $f ]] && sed -i -E 's/-?[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?( ?(ns|us|ms|s)\b)?/N/g; s/ +/ /g' "$f"
  done
}

run_all "$before" before
run_all "$after" after
mask_wall_clock before
mask_wall_clock after
diff -r -x work "$out/before" "$out/after" >"$out/diff.txt"
status=$?
if ((status == 0)); then
  echo "outputs_diff: ${#commands[@]} commands, no output differs"
else
  echo "outputs_diff: outputs differ: $out/diff.txt ($(grep -c '^diff ' "$out/diff.txt") files)"
fi
exit $status
