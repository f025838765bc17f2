#!/usr/bin/env python3
"""Writes RANKS PyTorch-style flight-recorder pickle dumps (protocol 2, as Python's pickle writes
them, memoizing every string and container) of ENTRIES entries each into DIR, laid out as
tests/fixtures/fr/make_fr_fixtures.py lays them out: one default group over all ranks, collectives
cycling through all_reduce / all_gather / reduce_scatter / broadcast, all completed except the
last, which the last rank never joined (a hang). Prints the dumps' total bytes.

Usage: bench/make_fr_dumps.py DIR RANKS ENTRIES   (bench/fr_bench.sh, bench/replay_bench.sh)
"""
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
