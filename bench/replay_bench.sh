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
  python3 - "$dumps" "$ranks" "$entries" >/dev/null <<'EOF'
import multiprocessing
import os
import pickle
import sys

outdir, world, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
START_NS = 1_700_000_000_000_000_000
OPS = [("nccl:all_reduce", 1, 1), ("nccl:all_gather", 1, world), ("nccl:reduce_scatter", world, 1),
       ("nccl:broadcast", 1, 1)]
ranks_text = "[" + ", ".join(map(str, range(world))) + "]"


def entry(rank, seq, state, group="0", desc="default_pg"):
    name, in_factor, out_factor = OPS[seq % len(OPS)]
    elements = 1024 << (seq % 7)
    created = START_NS + seq * 1_000_000 + rank * 1_000
    started = created + 10_000 if state != "scheduled" else None
    completed = created + 500_000 if state == "completed" else None
    e = {
        "record_id": seq,
        "pg_id": 0,
        "process_group": (group, desc),  # a new tuple each time, as PyTorch's and the fixtures' are
        "collective_seq_id": seq + 1,
        "p2p_seq_id": 0,
        "op_id": seq + 1,
        "profiling_name": name,
        "time_created_ns": created,
        "input_sizes": [[elements * in_factor]],
        "input_dtypes": ["Float"],
        "output_sizes": [[elements * out_factor]],
        "output_dtypes": ["Float"],
        "state": state,
        "time_discovered_started_ns": started,
        "time_discovered_completed_ns": completed,
        "retired": state == "completed",
        "timeout_ms": 600_000,
        "is_p2p": False,
        "frames": [{"name": "train_step", "filename": "train.py", "line": 42}],
        "thread_id": "140245417121344",
        "thread_name": "pt_main_thread",
    }
    if completed is not None:
        e["duration_ms"] = (completed - started) / 1e6
    return e


def write_rank(rank):
    # The last collective hangs: started everywhere but on the last rank, which never issued it.
    recorded = count - 1 if rank == world - 1 and world > 1 else count
    items = [entry(rank, seq, "completed" if seq < count - 1 else "started") for seq in range(recorded)]
    dump = {
        "version": "2.10",
        "comm_lib_version": "2.21.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks_text}},
        "pg_status": {"0": {"last_enqueued_collective": recorded, "last_started_collective": recorded,
                            "last_completed_collective": min(recorded, count - 1)}},
        "entries": items,
    }
    data = pickle.dumps(dump, protocol=2)
    with open(os.path.join(outdir, f"nccl_trace_rank_{rank}"), "wb") as f:
        f.write(data)
    return len(data)


if __name__ == "__main__":
    # fork: the workers need this script's functions, and it came on stdin.
    with multiprocessing.get_context("fork").Pool() as pool:
        print(sum(pool.imap_unordered(write_rank, range(world), chunksize=16)))
EOF
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
