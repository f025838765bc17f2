#!/usr/bin/env python3
"""Hostile and unusual inputs, each with the outcome tandem must give (issue "Hardening, round 3").

Every case runs the built binary once and checks its exit code (docs/cli.md, "Exit status": 0 ok,
1 findings, 2 bad input, 3 internal) and a piece of what it printed. The exit-code scheme is checked
for every subcommand: a flag typo (with its "did you mean"), a bad input file, a success and, where
the command has them, findings.

    python3 tests/probe/hardening_probe.py REPO TANDEM [--table] [--timeout S]

--table prints every case as a Markdown row (case, command, exit, verdict); --timeout S bounds each
case (default 120 s). Exit 0 when every case holds, 1 otherwise (each failure printed with what the
command said).
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile

# One row of a nccl-tests table: size count type redop root, then time algbw busbw #wrong twice.
ROW = "     {size:>7}  {count:>12}     float     sum      -1    10.00    0.10    0.19      0    10.00    0.10    0.19      0\n"
HEADER = "# Collective test starting: all_reduce_perf\n# nThread 1 nGpus {gpus} minBytes 8 maxBytes 8 step: 2(factor)\n"


def nccl_log(gpus=2, rows=((1048576, 262144),), bom=False):
    text = HEADER.format(gpus=gpus) + "".join(ROW.format(size=s, count=c) for s, c in rows)
    return ("\ufeff" if bom else "") + text


STARTUP_TP3 = """tandem_scenario: 1
name: startup-tp3
cluster: {preset: dgx-h100, nodes: 8}
workload:
  type: startup
  layout: {tp: 3}
"""

LOOP_1024 = """tandem_scenario: 1
name: loop-1024-ranks
cluster: {preset: dgx-h100, nodes: 128}
workload: {type: collective-loop, collective: all_reduce, size: 64M, algorithm: ring, iterations: 2}
"""

UNRUNNABLE = """tandem_scenario: 1
name: unrunnable
cluster: {preset: dgx-h100, nodes: 1}
workload:
  type: training
  model: llama3-70b
  seq_len: 8192
  global_batch: 8
  layouts:
    - {name: ddp, sharding: none}
    - {name: tp3, tp: 3}
"""


SWEEP_AG = """tandem_scenario: 1
name: other-sweep
cluster: {preset: dgx-h100, nodes: 1}
workload: {type: collective-sweep, collectives: [all_gather], sizes: [64M], algorithms: [ring]}
outputs: {json: true, csv: false}
"""


def scenario_edit(repo, name, old, new):
    with open(os.path.join(repo, "scenarios", name)) as f:
        text = f.read()
    assert old in text, f"{name} no longer holds {old!r}: update the probe"
    return text.replace(old, new, 1)


def cases(repo, work):
    """(id, group, command, files {name: text}, exit code, regex on stdout+stderr). In a command,
    {W} is the case's own folder (where `files` are written) and {T} the binary."""
    fr_fixture = os.path.join(repo, "tests", "fixtures", "fr", "make_fr_fixtures.py")
    snapshot = os.path.join(repo, "tests", "fixtures", "memory", "sixteens_then_thirty_twos.pickle")
    smoke = os.path.join(repo, "scenarios", "smoke-8xh100.yaml")
    small_plan = os.path.join(repo, "scenarios", "plans", "llama3-8b-small.yaml")
    claims_oom = scenario_edit(repo, "release-claims-64xh100.yaml", "{name: fsdp, sharding: fsdp, recompute: full}",
                               "{name: ddp, sharding: none}")
    claims_tp3 = scenario_edit(repo, "release-claims-64xh100.yaml", "{name: fsdp, sharding: fsdp, recompute: full}",
                               "{name: t3, tp: 3}")
    nvls = scenario_edit(repo, "llama3-8b-8xh100.yaml", "  micro_batch: 1\n", "  micro_batch: 1\n  algorithm: nvls\n")
    typo_key = scenario_edit(repo, "llama3-8b-8xh100.yaml", "  micro_batch: 1\n", "  micro_batch: 1\n  algorithms: ring\n")
    failing = scenario_edit(repo, "smoke-8xh100.yaml", "busbw_GBps: {min: 300, max: 450}", "busbw_GBps: {min: 100000}")
    link_in_step = scenario_edit(repo, "faults/llama3-70b-hang-64xh100.yaml", "kind: rank_hang", "kind: transient")
    esc_key = scenario_edit(repo, "llama3-8b-8xh100.yaml", "  micro_batch: 1\n", "  micro_batch: 1\n  \"x\x1b[2J\": 1\n")
    return [
        # ---- the exit-code scheme, per subcommand -------------------------------------------------
        ("schedule-ok", "exit codes", "schedule --collective all_reduce --nranks 4", {}, 0, r"all_reduce"),
        ("schedule-typo", "exit codes", "schedule --nranks 4 --colective all_reduce", {}, 2,
         r"did you mean '--collective'\?"),
        ("schedule-check-missing", "exit codes", "schedule --check {W}/none.json", {}, 2, r"cannot read schedule"),
        ("schedule-stdout-full", "exit codes", "schedule --collective all_reduce --nranks 4 > /dev/full", {}, 3,
         r"could not write the standard output"),
        ("bench-ok", "exit codes", "bench all_reduce --backend sim -g 8 -b 1K -e 1K", {}, 0, r"Avg bus bandwidth"),
        ("bench-typo", "exit codes", "bench all_reduce --backnd sim", {}, 2, r"did you mean '--backend'\?"),
        ("topo-bad-preset", "exit codes", "topo --cluster dgx-h1000", {}, 2, r"preset"),
        ("bound-ok", "exit codes", "bound all_reduce 1G", {}, 0, r"."),
        ("bound-bad-size", "exit codes", "bound all_reduce 1Q", {}, 2, r"1Q"),
        ("reliability-ok", "exit codes", "reliability --gpus 1024", {}, 0, r"ETTR"),
        ("reliability-bad", "exit codes", "reliability --gpus 0", {}, 2, r"--gpus"),
        ("run-ok", "exit codes", f"run {smoke} --quiet", {}, 0, r"verdict: PASS"),
        ("run-expectation-fails", "exit codes", "run {W}/failing.yaml --out {W}/failing", {"failing.yaml": failing}, 1,
         r"verdict: FAIL"),
        ("run-missing-file", "exit codes", "run {W}/none.yaml", {}, 2, r"cannot read scenario"),
        ("run-device-file", "exit codes", "run /dev/zero", {}, 2, r"is a character device"),
        ("fr-findings", "exit codes", f"sh -c 'python3 {fr_fixture} {{W}}/fx missing_rank >/dev/null && {{T}} fr analyze {{W}}/fx/missing_rank'",
         {}, 1, r"rank 2 never joined"),
        ("fr-not-a-folder", "exit codes", f"fr analyze {smoke}", {}, 2, r"is a file, not a folder"),
        ("replay-findings", "exit codes", f"sh -c 'python3 {fr_fixture} {{W}}/fx2 missing_rank >/dev/null && {{T}} replay {{W}}/fx2/missing_rank'",
         {}, 1, r"."),
        ("replay-missing", "exit codes", "replay {W}/no-such-folder", {}, 2, r"no-such-folder"),
        ("report-ok", "exit codes", f"sh -c '{{T}} run {smoke} --quiet --out {{W}}/smoke >/dev/null && {{T}} report {{W}}/smoke'", {}, 0,
         r"wrote"),
        ("report-no-results", "exit codes", "report {W}", {}, 2, r"has no results.json"),
        ("plan-ok", "exit codes", f"plan {small_plan} --quiet", {}, 0, r""),
        ("plan-missing", "exit codes", "plan {W}/none.yaml", {}, 2, r"cannot read plan"),
        ("memory-ok", "exit codes", f"memory {snapshot}", {}, 0, r"consistency: OK"),
        ("memory-not-a-pickle", "exit codes", f"memory {smoke}", {}, 2, r"not a memory snapshot pickle"),
        ("calibrate-ok", "exit codes", "calibrate {W}/ar.log --cluster dgx-h100 --nodes 1 --gpus-per-node 2 --out {W}/cal",
         {"ar.log": nccl_log()}, 0, r"."),
        ("calibrate-jobs", "exit codes", "calibrate {W}/ar.log -j -3", {"ar.log": nccl_log()}, 2, r"-j"),
        ("command-typo", "exit codes", "rnu x.yaml", {}, 2, r"did you mean 'run'\?"),
        # ---- 1. silently wrong results ---------------------------------------------------------------
        ("claims-memory-oom", "wrong results", "run {W}/claims.yaml", {"claims.yaml": claims_oom}, 2,
         r"claim 'fragmentation': the ddp step on 64 GPUs .* runs out of memory"),
        ("training-nvls", "wrong results", "run {W}/nvls.yaml", {"nvls.yaml": nvls}, 2,
         r"nvls.yaml:\d+:\d+: workload.algorithm: 'nvls': a training step's collectives run with auto"),
        ("device-memory-1", "wrong results", f"memory {snapshot} --device-memory 1", {}, 2,
         r"--device-memory 1 is less than its largest segment"),
        ("unrunnable-training", "wrong results", "run {W}/unrunnable.yaml", {"unrunnable.yaml": UNRUNNABLE}, 1,
         r"no layout ran on any cluster"),
        ("log-gpus-wrap", "wrong results", "calibrate {W}/big.log", {"big.log": nccl_log(gpus=4294967297)}, 2,
         r"big.log:2: .*nGpus 4294967297 is more than"),
        ("log-size-count", "wrong results", "calibrate {W}/sc.log", {"sc.log": nccl_log(rows=((1048576, 1000),))}, 2,
         r"sc.log:3: "),
        # ---- 2. bounded memory ------------------------------------------------------------------------
        ("loop-1024-ranks-64MiB", "memory", "run {W}/loop.yaml --quiet", {"loop.yaml": LOOP_1024}, 0, r"Verdict: PASS"),
        ("symbolic-check-budget", "memory",
         "env TANDEM_MEMORY_LIMIT=2G {T} bench all_reduce --backend sim --nodes 4096 -g 8 -b 1G -e 1G --algo ring", {},
         2, r"the symbolic check of the 32768-rank ring all_reduce schedule needs 4.0 GiB"),
        # ---- 4. exit codes and located errors -------------------------------------------------------
        ("startup-tp3", "located errors", "run {W}/st.yaml", {"st.yaml": STARTUP_TP3}, 2,
         r"st.yaml:6:\d+: workload.layout: start-up: a tp group of 3 ranks"),
        ("claims-split", "located errors", "run {W}/claims3.yaml", {"claims3.yaml": claims_tp3}, 2,
         r"claims3.yaml:\d+:\d+: workload.claims\[1\].training: layout 't3' on 64 GPUs"),
        ("device-memory-empty", "located errors", f"memory {snapshot} --device-memory ''", {}, 2,
         r"invalid size '' for --device-memory"),
        ("log-bom", "located errors", "calibrate {W}/bom.log --cluster dgx-h100 --nodes 1 --gpus-per-node 2",
         {"bom.log": nccl_log(bom=True)}, 0, r"."),
        ("escape-bytes", "located errors", "run {W}/esc.yaml", {"esc.yaml": esc_key}, 2, r"\\x1b\[2J"),
        ("results-version", "located errors",
         f"sh -c '{{T}} run {smoke} --quiet --out {{W}}/v >/dev/null && sed -i \"s/\\\"tandem_results\\\": 1/\\\"tandem_results\\\": 99/\" {{W}}/v/results.json && {{T}} report {{W}}/v'",
         {}, 2, r"results layout version 99"),
        ("compare-mismatch", "located errors",
         f"sh -c '{{T}} run {smoke} --quiet --out {{W}}/c1 >/dev/null; {{T}} run {{W}}/ag.yaml --quiet --out {{W}}/c2 >/dev/null; {{T}} report {{W}}/c1 --compare {{W}}/c2'",
         {"ag.yaml": SWEEP_AG}, 2, r"--compare: the sweeps have no \(collective, size\) point in common"),
        ("compare-training", "located errors",
         f"sh -c '{{T}} run {repo}/scenarios/llama3-8b-8xh100.yaml --quiet --out {{W}}/t >/dev/null; {{T}} report {{W}}/t --compare {{W}}/t'",
         {}, 2, r"--compare is for collective loops and sweeps, not a training run"),
        ("mfu-tiny", "located errors", "reliability --gpus 1024 --mfu 1e-30", {}, 0, r"MFU 1e-30"),
        ("training-transient", "located errors", "run {W}/t.yaml", {"t.yaml": link_in_step}, 2,
         r"t.yaml:\d+:\d+: faults\[0\].kind: a transient fault is not rehearsed in a training step \(rank_hang, "
         r"rank_crash, desync and straggler are\)"),
        ("key-typo", "located errors", "run {W}/typo.yaml", {"typo.yaml": typo_key}, 2,
         r"unknown key 'algorithms' in workload \(did you mean 'algorithm'\?\)"),
    ]


def run_case(tandem, work, case, timeout_s):
    cid, group, command, files, want_code, pattern = case
    folder = os.path.join(work, cid)
    os.makedirs(folder, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(text)
    # {W}: the case's folder; {T}: the binary. A command that does not start with sh or env is
    # tandem's arguments.
    line = command.replace("{W}", folder).replace("{T}", shlex.quote(tandem))
    if not command.startswith(("sh ", "env ")):
        line = shlex.quote(tandem) + " " + line
    # A session of its own, so that a case past its time is killed with every process it started
    # (the shell's tandem and tandem's simulation workers), not only the shell.
    process = subprocess.Popen(line, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               errors="replace", start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return False, "timeout", f"(still running after {timeout_s} s)", command
    said = out + err
    ok = process.returncode == want_code and re.search(pattern, said, re.S) is not None
    return ok, process.returncode, said, command


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    repo, tandem = sys.argv[1], os.path.abspath(sys.argv[2])
    table = "--table" in sys.argv[3:]
    timeout_s = int(sys.argv[sys.argv.index("--timeout") + 1]) if "--timeout" in sys.argv else 120
    failed = 0
    with tempfile.TemporaryDirectory(prefix="tandem_probe_") as work:
        all_cases = cases(repo, work)
        if table:
            print("| case | group | command | exit (expected) | verdict |\n|---|---|---|---|---|")
        for case in all_cases:
            ok, code, said, command = run_case(tandem, work, case, timeout_s)
            if table:
                print(f"| {case[0]} | {case[1]} | `{command}` | {code} ({case[4]}) | {'ok' if ok else 'FAIL'} |")
            if not ok:
                failed += 1
                last = said.strip().splitlines()[-3:] if said.strip() else ["(nothing)"]
                print(f"FAIL {case[0]}: exit {code} (expected {case[4]}), wanted /{case[5]}/; it said:\n  " +
                      "\n  ".join(last), file=sys.stderr)
        print(f"{len(all_cases) - failed} of {len(all_cases)} cases hold", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
