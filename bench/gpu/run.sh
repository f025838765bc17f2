#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU (made for one H200 / H100), one command builds tandem
# with the cuda and nccl backends, runs the `gpu` tests, measures, and prints a short table last.
# See docs/real-hardware.md for what each row means and how the copy-bound estimate is derived.
#
# What it runs, in order (each step under `timeout`, its output in $OUT/logs/NN-step.log):
#   configure + build   cmake (Ninja, Release, -DTANDEM_CUDA=ON) into $BUILD; builds `tandem`,
#                       `tandem_kernel_bench` and the executables of the tests labelled `gpu`
#   probe               tandem_kernel_bench --probe: is a GPU usable? (no: the table says why, exit 77)
#   schedules           `tandem schedule` of 8-rank ring and tree all_reduce (the estimate's traffic)
#   kernel_bench        D2D copy bandwidth and launch_reduce bandwidth per dtype, 256 MiB and 1 GiB
#   gemm_sweep          bf16 GEMM TFLOP/s by token count (cuBLAS): the step model's GEMM occupancy rule
#   ctest_gpu           ctest -L gpu
#   nccl_*              NCCL init + a world-size-1 native all_reduce, a self send/recv, and tandem's
#                       schedule on NCCL (-g 1)
#   fault_*             scenarios/faults/host/{link-flap,rank-hang}-host.yaml with --backend cuda
#   cuda_busbw_all_reduce_{ring,tree}  8 ranks on the one GPU, 1 MiB .. 256 MiB, busbw and #wrong
#   cuda_graph_busbw_all_reduce_ring   the same ring sweep with TANDEM_CUDA_GRAPH=1 (optional)
#   cuda_<coll>_<algo>  every collective x algorithm cell (docs/algorithms.md), 8 ranks, #wrong
#   cuda_all_reduce_*_<dtype|op>  other data types and reduction operators, #wrong
#   host_<coll>_<algo>  the same cells on the host backend at the small sizes (side by side; optional)
# then bench/gpu/summarize.py prints the table (also $OUT/summary.txt) and decides the exit status.
#
# Usage: bench/gpu/run.sh
# Environment:
#   OUT=dir       where logs and results go (default: a new folder under ${TMPDIR:-/tmp}, printed first)
#   BUILD=dir     the CMake build folder (default build/gpu in the repository); configured if it has no
#                 CMakeCache.txt (OUT and BUILD given relative are relative to the current folder)
#   SKIP_BUILD=1  use BUILD as it is: no configure, no build (the binaries must be there)
#   JOBS=n        build parallelism (default: nproc)
#   CUDA_ARCHITECTURES=list  CMAKE_CUDA_ARCHITECTURES of the build (default 90: H100, H200)
#   BUDGET_S=s    wall-clock budget of the whole run, build included (default 470, under 8 minutes);
#                 a step gets at most what is left, and steps that no longer fit are skipped
# Exit status: 0 every check passed; 1 a check failed (or did not fit the budget); 2 a usage or setup
# error (a missing tool); 77 no usable GPU: the build and the CPU-side steps ran, nothing was measured.
# It never changes GPU clocks, power limits or modes, and never resets a GPU.
set -uo pipefail
caller=$PWD  # OUT and BUILD given relative are relative to where the script was started
cd "$(dirname "$0")/../.." || exit 2
root=$PWD

build=${BUILD:-$root/build/gpu}
jobs=${JOBS:-$(nproc)}
budget=${BUDGET_S:-470}
skip_build=${SKIP_BUILD:-0}
readonly min_step_s=5  # a step is skipped rather than started with less time than this left

[[ $budget =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: BUDGET_S must be a number of seconds" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: JOBS must be a positive number" >&2; exit 2; }
for tool in python3 timeout; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool not found" >&2; exit 2; }
done
if [[ $skip_build != 1 ]]; then
  for tool in cmake ctest ninja; do
    command -v "$tool" >/dev/null || {
      echo "run.sh: $tool not found (needed to build; or set SKIP_BUILD=1)" >&2
      exit 2
    }
  done
fi
[[ $build = /* ]] || build=$caller/$build

out=${OUT:-}
if [[ -z $out ]]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/tandem-gpu-check.XXXXXX") || exit 2
fi
[[ $out = /* ]] || out=$caller/$out
mkdir -p "$out/logs" || exit 2
out=$(cd "$out" && pwd)
echo "tandem GPU check: logs and results in $out (build: $build, budget ${budget} s)"

steps=$out/steps.tsv
printf 'step\tstatus\tseconds\trequired\tlog\n' >"$steps"
step_index=0

# run_step NAME CAP_S REQUIRED CMD...: runs CMD under `timeout` with at most CAP_S seconds (less when
# the budget has less left), output to logs/NN-NAME.log, one line in steps.tsv: the exit status
# (124 / 137: timed out), or `skip` when the budget is spent. REQUIRED 1: its failure fails the check.
run_step() {
  local name=$1 cap=$2 required=$3
  shift 3
  step_index=$((step_index + 1))
  local log
  log=logs/$(printf '%02d' "$step_index")-$name.log
  local left=$((budget - SECONDS))
  local limit=$((cap < left ? cap : left))
  local status seconds
  if ((limit < min_step_s)); then
    echo "skipped: the time budget (BUDGET_S=$budget) is spent" >"$out/$log"
    status=skip
    seconds=0.0
  else
    {
      printf '$'
      printf ' %q' "$@"
      printf '\n# timeout %s s\n' "$limit"
    } >"$out/$log"
    local start_us=${EPOCHREALTIME/./}
    timeout -k 10 "$limit" "$@" </dev/null >>"$out/$log" 2>&1
    status=$?
    local elapsed_us=$((${EPOCHREALTIME/./} - start_us))
    seconds=$(printf '%d.%01d' $((elapsed_us / 1000000)) $((elapsed_us % 1000000 / 100000)))
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$seconds" "$required" "$log" >>"$steps"
  local shown=$status
  [[ $status = 0 ]] && shown=ok
  [[ $status = 124 || $status = 137 ]] && shown="timed out after ${limit} s"
  [[ $name = probe && $status = 77 ]] && shown="exit 77: no GPU"
  printf '[%4d s] %-36s %s (%s s)\n' "$SECONDS" "$name" "$shown" "$seconds"
  [[ $status = 0 ]]
}

summarize() {
  exec python3 "$root/bench/gpu/summarize.py" "$out" --elapsed "$SECONDS" --budget "$budget"
}

# --- environment (for the record) ---------------------------------------------------------------------
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "git: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  git -C "$root" status --porcelain 2>/dev/null | grep -q . && echo "git: with local changes"
  echo "cpus: $(nproc)"
  echo "CUDA_VISIBLE_DEVICES: ${CUDA_VISIBLE_DEVICES-(unset)}"
  command -v nvcc >/dev/null && nvcc --version | tail -n 2
  [[ -x /usr/local/cuda/bin/nvcc ]] && /usr/local/cuda/bin/nvcc --version | tail -n 1
  if command -v nvidia-smi >/dev/null; then
    timeout 20 nvidia-smi 2>&1
  else
    echo "nvidia-smi: not found"
  fi
} >"$out/env.txt" 2>&1

# --- build --------------------------------------------------------------------------------------------
tandem=$build/app/tandem
kernel_bench=$build/bench/gpu/tandem_kernel_bench
if [[ $skip_build = 1 ]]; then
  printf 'build\treused\t0.0\t1\t-\n' >>"$steps"
  echo "[   0 s] build                                reused $build (SKIP_BUILD=1)"
else
  # sm_90 unless CUDA_ARCHITECTURES says otherwise (nvcc's own default would be an older PTX, JIT-compiled).
  # CMake 3.25 knows no C++20 flag for nvcc: CMAKE_CUDA20_STANDARD_COMPILE_OPTION supplies it (newer
  # CMake sets its own).
  configure=(cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON
    "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES:-90}"
    -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20)
  [[ -f $build/CMakeCache.txt ]] || configure+=(-G Ninja)
  if run_step configure 150 1 "${configure[@]}"; then
    # The build targets of the `gpu` tests: a test's name where it is a target (tandem_add_test), else
    # its executable's path in the build folder (Ninja takes outputs as targets too).
    mapfile -t gpu_test_targets < <(python3 -c '
import json, os, subprocess, sys
build = os.path.realpath(sys.argv[1])
listed = subprocess.run(["ctest", "--test-dir", build, "-L", "gpu", "--show-only=json-v1"],
                        capture_output=True, text=True).stdout
ninja = subprocess.run(["ninja", "-C", build, "-t", "targets", "all"], capture_output=True, text=True).stdout
targets = {line.split(":")[0] for line in ninja.splitlines()}
for test in json.loads(listed or "{}").get("tests", []):
    name, command = test["name"], test.get("command") or []
    path = os.path.relpath(os.path.realpath(command[0]), build) if command else None
    if name in targets:
        print(name)
    elif path in targets:
        print(path)
    else:
        print("no build target found for the gpu test " + name, file=sys.stderr)
' "$build" 2>"$out/logs/gpu-test-targets.txt" | sort -u)
    echo "gpu test targets: ${gpu_test_targets[*]:-(none found)}" >>"$out/logs/gpu-test-targets.txt"
    run_step build 360 1 cmake --build "$build" -j "$jobs" --target tandem tandem_kernel_bench "${gpu_test_targets[@]}"
  fi
fi
# A failed configure or build ends the run (stale binaries would measure old code).
if awk -F '\t' '($1 == "configure" || $1 == "build") && $2 != "0" && $2 != "reused" { bad = 1 }
                END { exit !bad }' "$steps"; then
  summarize
fi
if [[ ! -x $tandem || ! -x $kernel_bench ]]; then
  echo "run.sh: the build did not produce $tandem and $kernel_bench" | tee -a "$out/env.txt"
  printf 'binaries\tmissing\t0.0\t1\t-\n' >>"$steps"
  summarize
fi

# --- is there a GPU? ----------------------------------------------------------------------------------
# The schedules' traffic needs no GPU: it is the CPU-side half of the copy-bound estimate.
run_step schedule_all_reduce_ring 20 1 "$tandem" schedule --collective all_reduce --algo ring --nranks 8
run_step schedule_all_reduce_tree 20 1 "$tandem" schedule --collective all_reduce --algo tree --nranks 8
run_step probe 60 1 "$kernel_bench" --probe
probe_status=$(tail -n 1 "$steps" | cut -f 2)
if [[ $probe_status = 77 ]]; then
  # No GPU for CUDA. If the driver still lists one (and none is hidden on purpose), it is unusable: a failure.
  listed=0
  if [[ -z ${CUDA_VISIBLE_DEVICES+set} ]] && command -v nvidia-smi >/dev/null; then
    listed=$(timeout 20 nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  fi
  if ((listed > 0)); then
    echo "unusable: nvidia-smi lists $listed GPU(s) but CUDA cannot use them" >"$out/gpu_state"
  else
    echo "absent" >"$out/gpu_state"
  fi
  summarize
fi
[[ $probe_status = 0 ]] || summarize
echo "present" >"$out/gpu_state"

# --- measurements -------------------------------------------------------------------------------------
run_step kernel_bench 90 1 "$kernel_bench" --sizes 256M,1G --iters 30
run_step gemm_sweep 60 1 "$kernel_bench" --gemm --iters 10
run_step ctest_gpu 150 1 ctest --test-dir "$build" -L gpu --output-on-failure --no-tests=error --timeout 120

run_step nccl_native_all_reduce 60 1 "$tandem" bench all_reduce --backend nccl-native -g 1 -b 8 -e 128M -f 8 -c 1
run_step nccl_native_send_recv 60 1 "$tandem" bench send_recv --backend nccl-native -g 1 -b 8 -e 128M -f 8 -c 1
run_step nccl_all_reduce 60 1 "$tandem" bench all_reduce --backend nccl -g 1 -b 8 -e 128M -f 8 -c 1

for scenario in link-flap-host rank-hang-host; do
  run_step "fault_$scenario" 60 1 "$tandem" run "scenarios/faults/host/$scenario.yaml" --backend cuda \
    --out "$out/fault/$scenario"
done

# busbw against the copy-bound estimate (and #wrong at every size).
for algo in ring tree; do
  run_step "cuda_busbw_all_reduce_$algo" 120 1 "$tandem" bench all_reduce --backend cuda -g 8 --algo "$algo" \
    -b 1M -e 256M -f 4 -n 20 -w 2 -c 1
done
# The same ring sweep with each run launched as one CUDA graph (optional): is the default path's
# per-call floor below 64 MiB the host issuing the schedule's commands one call at a time?
run_step cuda_graph_busbw_all_reduce_ring 120 0 env TANDEM_CUDA_GRAPH=1 "$tandem" bench all_reduce --backend cuda \
  -g 8 --algo ring -b 1M -e 256M -f 4 -n 20 -w 2 -c 1

# Every collective x algorithm cell at 1000, 64000 and 4096000 B (1000 B is 250 floats: counts that
# do not divide by 8 ranks). Kept small: the check's reference runs on one CPU core.
cells=(
  all_reduce:ring all_reduce:tree all_reduce:recursive_doubling all_reduce:halving_doubling
  all_reduce:direct all_reduce:hierarchical
  reduce_scatter:ring reduce_scatter:halving_doubling reduce_scatter:direct
  all_gather:ring all_gather:recursive_doubling all_gather:direct all_gather:hierarchical
  broadcast:ring broadcast:recursive_doubling broadcast:direct
  reduce:ring reduce:recursive_doubling reduce:direct
  all_to_all:direct send_recv:direct
)
cell_flags() {  # collective algo -> the flags of its bench run beyond sizes
  local flags=(-g 8 --algo "$2")
  [[ $2 = hierarchical ]] && flags+=(--ranks-per-node 4)
  [[ $1 = broadcast || $1 = reduce ]] && flags+=(-r 3)
  printf '%s\n' "${flags[@]}"
}
for cell in "${cells[@]}"; do
  collective=${cell%%:*}
  algo=${cell##*:}
  mapfile -t flags < <(cell_flags "$collective" "$algo")
  run_step "cuda_${collective}_$algo" 40 1 "$tandem" bench "$collective" --backend cuda "${flags[@]}" \
    -b 1000 -e 4096000 -f 64 -n 5 -w 1 -c 1
done
for variant in ring:half ring:bfloat16 ring:double ring:int32 ring:int64 tree:bfloat16 tree:int32; do
  run_step "cuda_all_reduce_${variant%%:*}_${variant##*:}" 40 1 "$tandem" bench all_reduce --backend cuda -g 8 \
    --algo "${variant%%:*}" -d "${variant##*:}" -b 1000 -e 4096000 -f 64 -n 5 -w 1 -c 1
done
for op in prod min max avg; do
  run_step "cuda_all_reduce_ring_$op" 40 1 "$tandem" bench all_reduce --backend cuda -g 8 --algo ring -o "$op" \
    -b 1000 -e 4096000 -f 64 -n 5 -w 1 -c 1
done

# The host backend on the same cells at the two small sizes: the side by side (optional).
for cell in "${cells[@]}"; do
  collective=${cell%%:*}
  algo=${cell##*:}
  mapfile -t flags < <(cell_flags "$collective" "$algo")
  run_step "host_${collective}_$algo" 30 0 "$tandem" bench "$collective" --backend host "${flags[@]}" \
    -b 1000 -e 64000 -f 64 -n 2 -w 0 -c 1
done

summarize
