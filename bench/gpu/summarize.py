#!/usr/bin/env python3
"""The GPU check's table: reads the folder bench/gpu/run.sh wrote and prints one row per check.

Usage: summarize.py OUT [--elapsed S] [--budget S]

OUT holds steps.tsv (one line per step: name, status, seconds, required, log), the logs, and
gpu_state ("present", "absent", or "unusable: why"). The table goes to stdout and OUT/summary.txt;
the per-size busbw comparison to OUT/busbw.txt, the host/cuda side by side to OUT/side_by_side.txt.

Verdicts: PASS / FAIL (counted), info (a measurement with no threshold), WARN (an optional step
failed: not counted), skip. Exit status: 0 when no row FAILs; 1 when one does; 77 when there is no
GPU and nothing else failed (the CPU-side steps ran, nothing was measured).

Thresholds and the model behind the copy-bound estimate (docs/real-hardware.md derives it):
  - the reduce kernels pass at >= REDUCE_FRACTION_MIN of the copy bandwidth for the dtypes in
    REDUCE_GATED_DTYPES (sum) at every measured size >= REDUCE_GATED_MIN_BYTES;
  - every byte a schedule moves costs device-memory traffic: a recv is a device-to-device copy
    (read + write: 2), a recv-reduce a kernel reading two operands and writing one (3), a local copy
    2, a local reduce 3, a send nothing of its own. With T = the traffic of one collective of S bytes
    (T / S from the schedule) and every rank on the one GPU, t >= T / copy_GBps, so
    busbw <= copy_GBps * busbw_factor / (T / S); busbw_factor = 2(n-1)/n for all_reduce.
"""

import argparse
import math
import os
import re
import sys

REDUCE_FRACTION_MIN = 0.85
REDUCE_GATED_DTYPES = ("f32", "bf16")
REDUCE_GATED_MIN_BYTES = 256 << 20
REDUCE_DTYPES = ("f32", "bf16", "f16", "f64", "i32", "i64")
# Device-memory bytes moved per byte of an op's destination chunks (see the module docstring).
TRAFFIC_PER_BYTE = {"recv-reduce": 3, "reduce": 3, "recv": 2, "copy": 2, "send": 0}
BUSBW_ALGORITHMS = ("ring", "tree")
# The step model's GEMM output tile (models/kernels.h kGemmTileM x kGemmTileN).
GEMM_TILE_M, GEMM_TILE_N = 128, 256
EXIT_OK, EXIT_FAIL, EXIT_NO_GPU = 0, 1, 77
LABEL_WIDTH = 36
RESULT_WIDTH = 80
RESULT_MAX_CHARS = 160  # longer results (error lines) are clipped; shorter ones past the column just overflow


class Step:
    """One line of steps.tsv."""

    def __init__(self, out, fields):
        self.name, self.status, seconds, required, log = fields[:5]
        self.seconds = float(seconds)
        self.required = required == "1"
        self.log = None if log == "-" else os.path.join(out, log)

    @property
    def ok(self):
        return self.status == "0"

    def text(self):
        if not self.log:
            return ""
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def failure(self):
        """Why the step failed, in a few words."""
        if self.status == "skip":
            return "skipped: the time budget was spent"
        if self.status in ("124", "137"):
            return f"timed out after {self.seconds:.0f} s"
        lines = [line.strip() for line in self.text().splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line.lower() and not line.startswith("$")]
        detail = errors[-1] if errors else (lines[-1] if lines else "no output")
        return f"exit {self.status}: {detail}"


def read_steps(out):
    steps = {}
    try:
        with open(os.path.join(out, "steps.tsv"), encoding="utf-8") as f:
            for index, line in enumerate(f):
                fields = line.rstrip("\n").split("\t")
                if index == 0 or len(fields) < 5:
                    continue
                steps[fields[0]] = Step(out, fields)
    except OSError:
        pass
    return steps


def parse_bench_table(text):
    """The rows of an nccl-tests table (app/common/nccl_tests_table.h): size, busbw and #wrong per placement.

    A placement is None where it prints N/A (no in-place form); wrong is None where #wrong is N/A.
    """
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if not fields or line.lstrip().startswith("#") or len(fields) != 13 or not fields[0].isdigit():
            continue
        row = {"size": int(fields[0]), "count": int(fields[1]), "type": fields[2], "redop": fields[3]}
        for placement, first in (("out_of_place", 5), ("in_place", 9)):
            time_us, algbw, busbw, wrong = fields[first:first + 4]
            if time_us == "N/A":
                row[placement] = None
                continue
            row[placement] = {
                "time_us": float(time_us),
                "algbw": float(algbw),
                "busbw": float(busbw),
                "wrong": None if wrong == "N/A" else int(wrong),
            }
        rows.append(row)
    return rows


def bench_results(rows):
    return [row[p] for row in rows for p in ("out_of_place", "in_place") if row[p] is not None]


def check_bench(step):
    """(ok, wrong elements, results checked, reason) for a `tandem bench ... -c 1` step."""
    rows = parse_bench_table(step.text())
    results = bench_results(rows)
    wrong = sum(r["wrong"] for r in results if r["wrong"] is not None)
    if not step.ok:
        return False, wrong, len(results), step.failure()
    if not rows:
        return False, 0, 0, "no table rows in the output"
    unchecked = sum(1 for r in results if r["wrong"] is None)
    if unchecked:
        return False, wrong, len(results), f"{unchecked} results not checked (#wrong N/A)"
    if wrong:
        bad = [f"{row['size']} B" for row in rows
               if any(row[p] and row[p]["wrong"] for p in ("out_of_place", "in_place"))]
        return False, wrong, len(results), f"{wrong} wrong elements at {', '.join(bad)}"
    return True, 0, len(results), ""


def parse_key_values(line):
    return {k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}


def parse_kernel_bench(text):
    """(device, {bytes: copy GBps}, [reduce records]) from tandem_kernel_bench's output."""
    device, copies, reduces = {}, {}, []
    for line in text.splitlines():
        word = line.split(" ", 1)[0]
        if word == "device":
            device = parse_key_values(line)
        elif word == "copy":
            record = parse_key_values(line)
            copies[int(record["bytes"])] = float(record["GBps"])
        elif word == "reduce":
            record = parse_key_values(line)
            reduces.append({
                "dtype": record["dtype"],
                "op": record["op"],
                "bytes": int(record["bytes"]),
                "GBps": float(record["GBps"]),
                "fraction": float(record["fraction_of_copy"]),
                "check": record["check"],
            })
    return device, copies, reduces


def parse_gemm_sweep(text):
    """[gemm records] from tandem_kernel_bench --gemm's output."""
    records = []
    for line in text.splitlines():
        if line.startswith("gemm "):
            r = parse_key_values(line)
            records.append({"shape": r["shape"], "m": int(r["m"]), "n": int(r["n"]), "k": int(r["k"]),
                            "tflops": float(r["tflops"]), "check": r["check"]})
    return records


def gemm_occupancy(m, n, sms, splits_last_wave):
    """models/kernels.cc's gemm_occupancy for 128 x 256 output tiles."""
    tiles = math.ceil(m / GEMM_TILE_M) * math.ceil(n / GEMM_TILE_N)
    if splits_last_wave:
        return min(1.0, tiles / sms)
    return tiles / (math.ceil(tiles / sms) * sms)


def schedule_traffic(text):
    """(nranks, device-memory bytes moved per byte of the collective's size S) from `tandem schedule`'s text.

    The first line reads "all_reduce ring: 8 ranks, 8 chunks per block, ..."; an op line
    "  r0 L0 recv-reduce Out[1] = In[1] + r2" moves its destination's chunks ([a..b]: b - a + 1).
    """
    head = re.search(r"^\S+ \S+: (\d+) ranks, (\d+) chunks per block", text, re.M)
    if not head:
        return None
    nranks, chunks_per_block = int(head.group(1)), int(head.group(2))
    moved_chunks = 0
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or not re.fullmatch(r"r\d+", fields[0]) or fields[2] not in TRAFFIC_PER_BYTE:
            continue
        chunks = re.search(r"\[(\d+)(?:\.\.(\d+))?\]", fields[3])
        if not chunks:
            return None
        first, last = int(chunks.group(1)), int(chunks.group(2) or chunks.group(1))
        moved_chunks += TRAFFIC_PER_BYTE[fields[2]] * (last - first + 1)
    return nranks, moved_chunks / chunks_per_block


def all_reduce_busbw_factor(nranks):
    return 2.0 * (nranks - 1) / nranks


def value_text(result, key):
    """A result's field for a text column: busbw with 2 decimals, n/a where there is none."""
    value = result.get(key) if result else None
    if value is None:
        return "n/a"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def size_text(size):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} B"


class Table:
    def __init__(self):
        self.rows = []

    def add(self, label, result, verdict):
        if len(result) > RESULT_MAX_CHARS:
            result = result[:RESULT_MAX_CHARS - 3] + "..."
        self.rows.append((label, result, verdict))

    def counts(self):
        return (sum(1 for r in self.rows if r[2] == "PASS"), sum(1 for r in self.rows if r[2] == "FAIL"))

    def render(self):
        lines = [f"{'check':<{LABEL_WIDTH}} {'result':<{RESULT_WIDTH}} verdict"]
        for label, result, verdict in self.rows:
            lines.append(f"{label:<{LABEL_WIDTH}} {result:<{RESULT_WIDTH}} {verdict}")
        return "\n".join(lines)


def add_build_rows(table, steps):
    build = steps.get("build")
    if build and build.status == "reused":
        table.add("build", "reused the build folder (SKIP_BUILD=1)", "PASS")
    else:
        parts, verdict = [], "PASS"
        for name in ("configure", "build"):
            step = steps.get(name)
            if step is None:
                parts.append(f"{name}: not run")
                verdict = "FAIL"
            elif step.ok:
                parts.append(f"{name} {step.seconds:.0f} s")
            else:
                parts.append(f"{name}: {step.failure()}")
                verdict = "FAIL"
        table.add("build (cuda + nccl, Release)", ", ".join(parts), verdict)
    if "binaries" in steps:
        table.add("binaries", "tandem or tandem_kernel_bench missing after the build", "FAIL")


def add_estimate_row(table, steps):
    """Returns {algorithm: (nranks, traffic per S)} from the schedule steps."""
    traffic = {}
    for algo in BUSBW_ALGORITHMS:
        step = steps.get(f"schedule_all_reduce_{algo}")
        if step is None:
            continue
        parsed = schedule_traffic(step.text()) if step.ok else None
        if parsed is None:
            table.add(f"schedule all_reduce {algo}", step.failure() if not step.ok else "unreadable schedule", "FAIL")
            continue
        traffic[algo] = parsed
    if traffic:
        parts = [f"{algo}: T = {moved:.1f} S, busbw <= {all_reduce_busbw_factor(n) / moved:.4f} x copy"
                 for algo, (n, moved) in traffic.items()]
        nranks = next(iter(traffic.values()))[0]
        table.add(f"copy-bound estimate ({nranks} ranks)", "; ".join(parts), "info")
    return traffic


def add_kernel_rows(table, steps):
    """Returns the best copy GB/s measured (None when the kernel bench failed)."""
    step = steps.get("kernel_bench")
    if step is None:
        table.add("kernel bench", "not run", "FAIL")
        return None
    device, copies, reduces = parse_kernel_bench(step.text())
    if not step.ok and not copies:
        table.add("kernel bench", step.failure(), "FAIL")
        return None
    if not step.ok:
        table.add("kernel bench", step.failure(), "FAIL")
    table.add("D2D copy (read+write bytes / s)",
              ", ".join(f"{size_text(b)} {g:.0f} GB/s" for b, g in sorted(copies.items())), "info")
    for dtype in REDUCE_DTYPES:
        records = [r for r in reduces if r["dtype"] == dtype and r["op"] == "sum"]
        gated = dtype in REDUCE_GATED_DTYPES
        big = [r for r in records if r["bytes"] >= REDUCE_GATED_MIN_BYTES]
        result = ", ".join(f"{size_text(r['bytes'])} {r['fraction']:.2f}" for r in records)
        result = f"{result} of copy ({max((r['GBps'] for r in records), default=0):.0f} GB/s best)"
        wrong = [r for r in records if r["check"] != "ok"]
        if not records:
            verdict, result = ("FAIL" if gated else "WARN"), "not measured"
        elif wrong:
            verdict = "FAIL"
            result = f"wrong results at {', '.join(size_text(r['bytes']) for r in wrong)}"
        elif gated and not big:
            verdict, result = "FAIL", f"{result}; nothing measured at >= {size_text(REDUCE_GATED_MIN_BYTES)}"
        elif gated:
            verdict = "PASS" if all(r["fraction"] >= REDUCE_FRACTION_MIN for r in big) else "FAIL"
            result += f", needs >= {REDUCE_FRACTION_MIN:.2f}"
        else:
            verdict = "info"
        table.add(f"reduce kernel {dtype} sum", result, verdict)
    return max(copies.values(), default=None)


def add_busbw_rows(table, steps, traffic, copy_GBps, out):
    lines = ["# cuda all_reduce busbw (GB/s) against the copy-bound estimate = copy GB/s x 2(n-1)/n / (T/S)",
             f"# copy GB/s (best measured): {copy_GBps if copy_GBps else 'n/a'}",
             f"{'algo':<6} {'size (B)':>12} {'oop busbw':>10} {'ip busbw':>10} {'estimate':>10} {'oop/est':>8}"]
    for algo in BUSBW_ALGORITHMS:
        step = steps.get(f"cuda_busbw_all_reduce_{algo}")
        label = f"cuda all_reduce {algo} busbw"
        if step is None:
            table.add(label, "not run", "FAIL")
            continue
        rows = parse_bench_table(step.text())
        estimate = None
        if copy_GBps and algo in traffic:
            nranks, moved = traffic[algo]
            estimate = copy_GBps * all_reduce_busbw_factor(nranks) / moved
        for row in rows:
            oop, ip = row["out_of_place"], row["in_place"]
            ratio = f"{oop['busbw'] / estimate:8.2f}" if oop and estimate else f"{'n/a':>8}"
            lines.append(f"{algo:<6} {row['size']:>12} {oop['busbw'] if oop else 0:>10.2f} "
                         f"{ip['busbw'] if ip else 0:>10.2f} {estimate or 0:>10.2f} {ratio}")
        if not rows:
            table.add(label, step.failure() if not step.ok else "no table rows", "FAIL")
            continue
        last = rows[-1]
        busbw = last["out_of_place"]["busbw"] if last["out_of_place"] else 0.0
        result = f"{size_text(last['size'])}: {busbw:.1f} GB/s"
        if estimate:
            result += f" = {busbw / estimate:.2f} x estimate {estimate:.1f} GB/s"
        table.add(label, result, "info" if step.ok else "FAIL")
    with open(os.path.join(out, "busbw.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def add_graph_row(table, steps):
    """The ring sweep launched as CUDA graphs against the default launch: time per call at the
    smallest size and busbw at the largest, and #wrong (optional: a failed run only warns)."""
    step, default = steps.get("cuda_graph_busbw_all_reduce_ring"), steps.get("cuda_busbw_all_reduce_ring")
    if step is None:
        return
    label = "cuda graph all_reduce ring"
    ok, wrong, checked, reason = check_bench(step)
    if wrong:
        table.add(label, reason, "FAIL")
        return
    if not ok:
        table.add(label, reason, "WARN")
        return
    rows = {row["size"]: row["out_of_place"] for row in parse_bench_table(step.text()) if row["out_of_place"]}
    base = {row["size"]: row["out_of_place"] for row in parse_bench_table(default.text())
            if row["out_of_place"]} if default else {}
    small, large = min(rows), max(rows)
    def versus(size, key, unit, digits):
        text = f"{rows[size][key]:.{digits}f} {unit}"
        return text + (f" (default {base[size][key]:.{digits}f})" if size in base else "")
    table.add(label, f"{size_text(small)}: {versus(small, 'time_us', 'us', 1)}; {size_text(large)}: "
                     f"{versus(large, 'busbw', 'GB/s busbw', 1)}; #wrong 0 in {checked}", "info")


def add_wrong_rows(table, steps, out):
    # (The optional CUDA-graph sweep has its own row: add_graph_row.)
    cuda = [s for name, s in steps.items() if name.startswith("cuda_") and not name.startswith("cuda_graph_")]
    host = [s for name, s in steps.items() if name.startswith("host_")]
    checked, failures = 0, []
    for step in cuda:
        ok, _, results, reason = check_bench(step)
        checked += results
        if not ok:
            failures.append((step.name, reason))
    if not cuda:
        table.add("#wrong, cuda backend", "not run", "FAIL")
    elif not failures:
        table.add("#wrong, cuda backend", f"0 in {checked} checked results over {len(cuda)} runs "
                  "(every collective x algorithm, dtypes, ops)", "PASS")
    else:
        table.add("#wrong, cuda backend", f"{len(failures)} of {len(cuda)} runs failed; {checked} checked results",
                  "FAIL")
        for name, reason in failures:
            table.add(f"  {name}", reason, "FAIL")

    # Side by side: the host backend on the same cells at the sizes both ran.
    lines = [f"{'cell':<34} {'size (B)':>10} {'cuda #wrong':>11} {'host #wrong':>11} "
             f"{'cuda busbw':>10} {'host busbw':>10}"]
    host_checked, host_failures, host_skipped = 0, [], 0
    for step in host:
        if step.status == "skip":
            host_skipped += 1
            continue
        ok, _, results, reason = check_bench(step)
        host_checked += results
        if not ok:
            host_failures.append((step.name, reason))
        cell = step.name[len("host_"):]
        cuda_rows = {row["size"]: row for row in parse_bench_table(steps[f"cuda_{cell}"].text())} \
            if f"cuda_{cell}" in steps else {}
        for row in parse_bench_table(step.text()):
            other = cuda_rows.get(row["size"])
            for placement in ("out_of_place", "in_place"):
                mine = row[placement]
                theirs = other[placement] if other else None
                if mine is None:
                    continue
                lines.append(f"{cell + (' (in place)' if placement == 'in_place' else ''):<34} {row['size']:>10} "
                             f"{value_text(theirs, 'wrong'):>11} {value_text(mine, 'wrong'):>11} "
                             f"{value_text(theirs, 'busbw'):>10} {value_text(mine, 'busbw'):>10}")
    with open(os.path.join(out, "side_by_side.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    if host:
        ran = len(host) - host_skipped
        result = f"0 in {host_checked} checked results over {ran} runs, same cells and sizes"
        verdict = "PASS" if ran else "skip"
        if host_skipped:
            result += f" ({host_skipped} skipped: time budget)"
        if host_failures:
            verdict = "WARN"
            result = f"{len(host_failures)} of {ran} runs failed: {host_failures[0][0]}: {host_failures[0][1]}"
        table.add("#wrong, host side by side", result, verdict)


def add_nccl_rows(table, steps):
    for name, label in (("nccl_native_all_reduce", "nccl-native init + all_reduce g=1"),
                        ("nccl_native_send_recv", "nccl-native self send/recv g=1"),
                        ("nccl_all_reduce", "nccl schedule all_reduce g=1")):
        step = steps.get(name)
        if step is None:
            table.add(label, "not run", "FAIL")
            continue
        ok, _, results, reason = check_bench(step)
        rows = parse_bench_table(step.text())
        if ok:
            last = rows[-1]
            table.add(label, f"ok, {size_text(rows[0]['size'])} .. {size_text(last['size'])}, #wrong 0 in {results} "
                      f"results; {size_text(last['size'])} algbw {last['out_of_place']['algbw']:.1f} GB/s", "PASS")
        else:
            table.add(label, reason, "FAIL")


def add_fault_rows(table, steps):
    for name, step in steps.items():
        if not name.startswith("fault_"):
            continue
        label = f"fault {name[len('fault_'):]} --backend cuda"
        verdicts = [line.strip() for line in step.text().splitlines() if line.strip().lower().startswith("verdict:")]
        if step.ok:
            table.add(label, "exit 0: expectations held" + (f" ({verdicts[-1]})" if verdicts else ""), "PASS")
        else:
            table.add(label, (verdicts[-1] if verdicts else step.failure()), "FAIL")


def add_gemm_rows(table, steps, sms, out):
    """The GEMM sweep: TFLOP/s by token count, and which of the step model's two occupancy rules
    (the last wave of tiles split among the SMs, or run part-empty) the measured curve follows."""
    step = steps.get("gemm_sweep")
    if step is None:
        return
    records = parse_gemm_sweep(step.text())
    if not records:
        table.add("GEMM sweep (bf16, cuBLAS)", step.failure() if not step.ok else "no gemm records", "FAIL")
        return
    wrong = [r for r in records if r["check"] != "ok"]
    if wrong:
        table.add("GEMM sweep (bf16, cuBLAS)", f"wrong products at {len(wrong)} shapes, first m={wrong[0]['m']}", "FAIL")
    if not step.ok:
        table.add("GEMM sweep (bf16, cuBLAS)", f"{step.failure()} after {len(records)} shapes", "FAIL")
    if not sms or any(not r["tflops"] > 0 for r in records):
        table.add("GEMM by tokens (bf16, cuBLAS)",
                  "not classified: " + ("the device's SM count is unknown" if not sms else "a shape measured 0 TFLOP/s"),
                  "FAIL" if sms else "info")
        return
    lines = ["# bf16 GEMM TFLOP/s by tokens (m); measured/best against the step model's two occupancy rules",
             f"{'shape':<18} {'m':>6} {'tiles':>6} {'TFLOP/s':>8} {'meas/best':>9} {'split':>6} {'wave':>6}"]
    errors = {True: [], False: []}
    for shape in sorted({r["shape"] for r in records}):
        rows = [r for r in records if r["shape"] == shape]
        best = max(r["tflops"] for r in rows)
        for r in rows:
            measured = r["tflops"] / best
            predicted = {rule: gemm_occupancy(r["m"], r["n"], sms, rule) for rule in (True, False)}
            for rule in (True, False):
                errors[rule].append(measured - predicted[rule] / max(gemm_occupancy(x["m"], x["n"], sms, rule)
                                                                     for x in rows))
            tiles = math.ceil(r["m"] / GEMM_TILE_M) * math.ceil(r["n"] / GEMM_TILE_N)
            lines.append(f"{shape:<18} {r['m']:>6} {tiles:>6} {r['tflops']:>8.1f} {measured:>9.3f} "
                         f"{predicted[True]:>6.3f} {predicted[False]:>6.3f}")
    rms = {rule: math.sqrt(sum(e * e for e in errs) / len(errs)) for rule, errs in errors.items()}
    follows = "split (stream-K)" if rms[True] <= rms[False] else "wave quantization"
    with open(os.path.join(out, "gemm.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    best_all = max(r["tflops"] for r in records)
    table.add("GEMM by tokens (bf16, cuBLAS)",
              f"{len(records)} shapes, best {best_all:.0f} TFLOP/s; follows {follows}: rms {rms[True]:.3f} split, "
              f"{rms[False]:.3f} wave (gemm.txt)", "info" if not wrong and step.ok else "FAIL")


def add_ctest_row(table, steps):
    step = steps.get("ctest_gpu")
    if step is None:
        table.add("gpu tests (ctest -L gpu)", "not run", "FAIL")
        return
    summary = re.search(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", step.text())
    if step.ok and summary:
        total = int(summary.group(3))
        table.add("gpu tests (ctest -L gpu)", f"{total - int(summary.group(2))} of {total} passed", "PASS")
    elif summary:
        failed = re.findall(r"^\s*\d+ - (\S+) \(", step.text(), re.M)
        table.add("gpu tests (ctest -L gpu)",
                  f"{summary.group(2)} of {summary.group(3)} failed: {', '.join(failed)}", "FAIL")
    elif "No tests were found" in step.text():
        table.add("gpu tests (ctest -L gpu)", "no tests labelled gpu were found", "FAIL")
    else:
        table.add("gpu tests (ctest -L gpu)", step.failure(), "FAIL")


def time_row(steps, elapsed, budget):
    groups = [("build", ("configure", "build")), ("gpu tests", ("ctest_gpu",)),
              ("kernel bench", ("kernel_bench", "gemm_sweep")),
              ("cuda bench", ("cuda_",)), ("nccl", ("nccl_",)), ("faults", ("fault_",)), ("host", ("host_",))]
    spent = {}
    for step in steps.values():
        group = next((g for g, prefixes in groups if any(step.name == p or (p.endswith("_") and
                                                                            step.name.startswith(p))
                                                        for p in prefixes)), "other")
        spent[group] = spent.get(group, 0.0) + step.seconds
    parts = [f"{g} {spent[g]:.0f}" for g, _ in groups + [("other", ())] if spent.get(g)]
    total = f"{elapsed:.0f} s" if elapsed is not None else "?"
    of_budget = f" of {budget:.0f} s" if budget else ""
    return f"{total}{of_budget}: " + ", ".join(parts)


def summarize(out, elapsed=None, budget=None):
    """Prints the table; returns the exit status."""
    steps = read_steps(out)
    table = Table()
    title = "tandem GPU check"
    add_build_rows(table, steps)
    traffic = add_estimate_row(table, steps)

    try:
        with open(os.path.join(out, "gpu_state"), encoding="utf-8") as f:
            gpu_state = f.read().strip()
    except OSError:
        gpu_state = ""
    probe = steps.get("probe")
    no_gpu = False
    if probe is None:
        table.add("GPU", "not probed (the build failed)", "skip")
    elif probe.ok:
        device = next((parse_key_values(line) for line in probe.text().splitlines() if line.startswith("device ")), {})
        title += f": {device.get('name', 'GPU')} (cc {device.get('cc', '?')}, {device.get('sms', '?')} SMs, " \
                 f"driver {device.get('driver', '?')}, runtime {device.get('runtime', '?')})"
    else:
        reason = next((line for line in probe.text().splitlines() if line.startswith("no GPU")), probe.failure())
        if probe.status == "77" and gpu_state == "absent":
            no_gpu = True
            table.add("GPU", reason, "skip")
            table.add("GPU measurements", "not run: no GPU", "skip")
        else:
            table.add("GPU", (gpu_state if gpu_state.startswith("unusable") else reason), "FAIL")

    if probe is not None and probe.ok:
        copy_GBps = add_kernel_rows(table, steps)
        add_ctest_row(table, steps)
        add_busbw_rows(table, steps, traffic, copy_GBps, out)
        add_graph_row(table, steps)
        add_wrong_rows(table, steps, out)
        add_nccl_rows(table, steps)
        add_fault_rows(table, steps)
        sms = device.get("sms", "")
        add_gemm_rows(table, steps, int(sms) if sms.isdigit() else 0, out)
    table.add("time", time_row(steps, elapsed, budget), "info")

    passed, failed = table.counts()
    if failed:
        status, verdict = EXIT_FAIL, f"FAIL ({failed} failed, {passed} passed)"
    elif no_gpu:
        status, verdict = EXIT_NO_GPU, f"NO GPU: built, nothing measured (exit {EXIT_NO_GPU}; {passed} passed)"
    else:
        status, verdict = EXIT_OK, f"PASS ({passed} passed)"
    text = f"== {title} ==\n{table.render()}\nverdict: {verdict}; logs in {out}\n"
    with open(os.path.join(out, "summary.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    sys.stdout.write(text)
    return status


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the folder bench/gpu/run.sh wrote")
    parser.add_argument("--elapsed", type=float, help="seconds the whole run took")
    parser.add_argument("--budget", type=float, help="the run's time budget in seconds")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.out, "steps.tsv")):
        print(f"summarize.py: {args.out} has no steps.tsv (not a bench/gpu/run.sh folder)", file=sys.stderr)
        return 2
    return summarize(args.out, args.elapsed, args.budget)


if __name__ == "__main__":
    sys.exit(main())
