#!/usr/bin/env python3
"""Tests of bench/gpu/summarize.py on canned logs (fixtures/): the table's rows, the verdicts and the
exit status, for a passing run and for each way a run can fail. No GPU needed.

The fixtures: `tandem schedule` and `tandem run` outputs captured from the host build; tables, kernel
bench and ctest outputs in the exact formats the tools print, with plausible H200 numbers.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
FIXTURES = os.path.join(HERE, "fixtures")
SUMMARIZE = os.path.join(ROOT, "bench", "gpu", "summarize.py")
sys.path.insert(0, os.path.dirname(SUMMARIZE))
sys.dont_write_bytecode = True  # CTest runs this from the source tree: leave no __pycache__ in bench/gpu
import summarize  # noqa: E402  (the module under test, found through the path above)

CELLS = ["all_reduce_ring", "all_reduce_tree", "all_reduce_recursive_doubling", "all_reduce_halving_doubling",
         "all_reduce_direct", "all_reduce_hierarchical", "reduce_scatter_ring", "reduce_scatter_halving_doubling",
         "reduce_scatter_direct", "all_gather_ring", "all_gather_recursive_doubling", "all_gather_direct",
         "all_gather_hierarchical", "broadcast_ring", "broadcast_recursive_doubling", "broadcast_direct",
         "reduce_ring", "reduce_recursive_doubling", "reduce_direct", "all_to_all_direct", "send_recv_direct"]
VARIANTS = ["all_reduce_ring_half", "all_reduce_ring_bfloat16", "all_reduce_ring_double", "all_reduce_ring_int32",
            "all_reduce_ring_int64", "all_reduce_tree_bfloat16", "all_reduce_tree_int32", "all_reduce_ring_prod",
            "all_reduce_ring_min", "all_reduce_ring_max", "all_reduce_ring_avg"]
PROBE_OK = ('device index=0 of=1 name="NVIDIA H200" cc=9.0 sms=132 memory_bytes=150754820096 driver=13000 '
            'runtime=13000\n')
NO_GPU = ("no GPU: cudaGetDeviceCount failed: CUDA driver version is insufficient for CUDA runtime version "
          "(cudaErrorInsufficientDriver, error 35)\n")


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return f.read()


def gemm_log(splits_last_wave, sms=132, peak=800.0, wrong_m=None):
    """tandem_kernel_bench --gemm's output (its printf format) for a GPU whose GEMMs follow one of the
    step model's occupancy rules exactly: synthetic, a test of the summary's classification only."""
    lines = ["# bf16 GEMM C[m,n] = A[m,k] B[k,n] through cublasGemmEx (fp32 compute, default algorithm); "
             "TFLOP/s = 2mnk / best of 10 event-timed runs after 3 warmups"]
    for shape, n, k in (("bloom-qkv-tp4", 10752, 14336), ("llama70b-fc1-tp4", 14336, 8192)):
        for m in range(1024, 8192 + 1, 256):
            tflops = peak * summarize.gemm_occupancy(m, n, sms, splits_last_wave)
            best_us = 2.0 * m * n * k / (tflops * 1e12) * 1e6
            check = "FAILED" if m == wrong_m else "ok"
            lines.append(f"gemm shape={shape} m={m} n={n} k={k} best_us={best_us:.2f} tflops={tflops:.1f} "
                         f"median_tflops={tflops:.1f} check={check}")
    return "\n".join(lines) + "\n"


def passing_run():
    """Step name -> [status, seconds, required, log text], in run.sh's order, every check passing."""
    steps = {
        "configure": ["0", 14.2, "1", "-- Build files have been written to: build/gpu\n"],
        "build": ["0", 201.7, "1", "[412/412] Linking CXX executable app/tandem\n"],
        "schedule_all_reduce_ring": ["0", 0.1, "1", fixture("schedule_all_reduce_ring8.txt")],
        "schedule_all_reduce_tree": ["0", 0.1, "1", fixture("schedule_all_reduce_tree8.txt")],
        "probe": ["0", 0.4, "1", PROBE_OK],
        "kernel_bench": ["0", 4.1, "1", fixture("kernel_bench.txt")],
        "gemm_sweep": ["0", 2.0, "1", gemm_log(splits_last_wave=True)],
        "ctest_gpu": ["0", 9.3, "1", fixture("ctest_gpu_pass.txt")],
        "nccl_native_all_reduce": ["0", 2.5, "1", fixture("nccl_native_all_reduce.txt")],
        "nccl_native_send_recv": ["0", 2.1, "1", fixture("nccl_native_send_recv.txt")],
        "nccl_all_reduce": ["0", 2.4, "1", fixture("nccl_native_all_reduce.txt").replace("nccl-native", "nccl")],
        "fault_link-flap-host": ["0", 3.0, "1", fixture("fault_link_flap_host.txt")],
        "fault_rank-hang-host": ["0", 2.0, "1", fixture("fault_link_flap_host.txt")],
        "cuda_busbw_all_reduce_ring": ["0", 30.5, "1", fixture("cuda_all_reduce_ring.txt")],
        "cuda_busbw_all_reduce_tree": ["0", 31.0, "1", fixture("cuda_all_reduce_tree.txt")],
    }
    for cell in CELLS:
        steps[f"cuda_{cell}"] = ["0", 1.5, "1", fixture("cuda_cell.txt")]
    for variant in VARIANTS:
        steps[f"cuda_{variant}"] = ["0", 1.5, "1", fixture("cuda_cell.txt")]
    for cell in CELLS:
        steps[f"host_{cell}"] = ["0", 0.5, "0", fixture("host_cell.txt")]
    return steps


def write_run(out, steps, gpu_state="present"):
    os.makedirs(os.path.join(out, "logs"), exist_ok=True)
    with open(os.path.join(out, "steps.tsv"), "w", encoding="utf-8") as tsv:
        tsv.write("step\tstatus\tseconds\trequired\tlog\n")
        for index, (name, (status, seconds, required, text)) in enumerate(steps.items(), 1):
            log = f"logs/{index:02d}-{name}.log"
            with open(os.path.join(out, log), "w", encoding="utf-8") as f:
                f.write(text)
            tsv.write(f"{name}\t{status}\t{seconds}\t{required}\t{log}\n")
    if gpu_state is not None:
        with open(os.path.join(out, "gpu_state"), "w", encoding="utf-8") as f:
            f.write(gpu_state + "\n")


def row(output, label):
    """The table row whose check column is `label`: (result, verdict)."""
    for line in output.splitlines():
        if line.startswith(label + " ") and len(line) > summarize.LABEL_WIDTH:
            return line[summarize.LABEL_WIDTH + 1:].rstrip().rsplit(" ", 1)[0].strip(), line.split()[-1]
    raise AssertionError(f"no row '{label}' in:\n{output}")


class SummarizeRunTest(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp(prefix="summarize_test.")

    def tearDown(self):
        shutil.rmtree(self.out)

    def summarize(self, steps, gpu_state="present"):
        write_run(self.out, steps, gpu_state)
        result = subprocess.run([sys.executable, SUMMARIZE, self.out, "--elapsed", "412", "--budget", "470"],
                                capture_output=True, text=True, check=False)
        return result.returncode, result.stdout

    def test_passing_run_prints_every_row_and_exits_0(self):
        status, output = self.summarize(passing_run())
        self.assertEqual(status, 0, output)
        lines = output.rstrip("\n").splitlines()
        self.assertEqual(lines[0], "== tandem GPU check: NVIDIA H200 (cc 9.0, 132 SMs, driver 13000, runtime 13000) ==")
        self.assertTrue(lines[-1].startswith("verdict: PASS ("), lines[-1])
        self.assertEqual(row(output, "build (cuda + nccl, Release)"), ("configure 14 s, build 202 s", "PASS"))
        self.assertEqual(row(output, "D2D copy (read+write bytes / s)"), ("256 MiB 3900 GB/s, 1 GiB 4000 GB/s", "info"))
        self.assertEqual(row(output, "reduce kernel f32 sum"),
                         ("256 MiB 0.93, 1 GiB 0.93 of copy (3720 GB/s best), needs >= 0.85", "PASS"))
        self.assertEqual(row(output, "reduce kernel bf16 sum")[1], "PASS")
        self.assertEqual(row(output, "reduce kernel i64 sum")[1], "info")
        self.assertEqual(row(output, "gpu tests (ctest -L gpu)"), ("2 of 2 passed", "PASS"))
        # 8-rank ring and tree all_reduce both move 35 S (5(n-1) S): estimate = 4000 * 1.75 / 35 = 200 GB/s.
        self.assertEqual(row(output, "copy-bound estimate (8 ranks)")[0],
                         "ring: T = 35.0 S, busbw <= 0.0500 x copy; tree: T = 35.0 S, busbw <= 0.0500 x copy")
        self.assertEqual(row(output, "cuda all_reduce ring busbw"),
                         ("256 MiB: 180.0 GB/s = 0.90 x estimate 200.0 GB/s", "info"))
        self.assertEqual(row(output, "cuda all_reduce tree busbw"),
                         ("256 MiB: 150.0 GB/s = 0.75 x estimate 200.0 GB/s", "info"))
        # 21 cells and 11 variants at 3 sizes x 2 placements, the two sweeps at 5 x 2.
        self.assertEqual(row(output, "#wrong, cuda backend"),
                         ("0 in 212 checked results over 34 runs (every collective x algorithm, dtypes, ops)", "PASS"))
        self.assertEqual(row(output, "#wrong, host side by side"),
                         ("0 in 84 checked results over 21 runs, same cells and sizes", "PASS"))
        self.assertEqual(row(output, "nccl-native init + all_reduce g=1")[1], "PASS")
        self.assertEqual(row(output, "nccl-native self send/recv g=1"),
                         ("ok, 8 B .. 128 MiB, #wrong 0 in 9 results; 128 MiB algbw 1500.0 GB/s", "PASS"))
        self.assertEqual(row(output, "nccl schedule all_reduce g=1")[1], "PASS")
        self.assertEqual(row(output, "fault link-flap-host --backend cuda"),
                         ("exit 0: expectations held (Verdict: PASS)", "PASS"))
        self.assertEqual(row(output, "time")[0],
                         "412 s of 470 s: build 216, gpu tests 9, kernel bench 6, cuda bench 110, nccl 7, faults 5, "
                         "host 10, other 1")
        with open(os.path.join(self.out, "summary.txt"), encoding="utf-8") as f:
            self.assertEqual(f.read(), output)

    def test_gemm_sweep_says_which_occupancy_rule_the_gpu_follows(self):
        status, output = self.summarize(passing_run())
        result, verdict = row(output, "GEMM by tokens (bf16, cuBLAS)")
        self.assertEqual(verdict, "info")
        self.assertIn("58 shapes, best 800 TFLOP/s; follows split (stream-K): rms 0.000 split", result)
        with open(os.path.join(self.out, "gemm.txt"), encoding="utf-8") as f:
            table = f.read().splitlines()
        # BLOOM's QKV at 2,048 tokens: 672 tiles, 6.2 waves of 132 SMs; part-empty it would run at 0.848.
        self.assertIn(f"{'bloom-qkv-tp4':<18} {2048:>6} {672:>6} {800.0:>8.1f} {1.0:>9.3f} {1.0:>6.3f} {0.848:>6.3f}",
                      table)
        steps = passing_run()
        steps["gemm_sweep"][3] = gemm_log(splits_last_wave=False)
        status, output = self.summarize(steps)
        self.assertEqual(status, 0, output)
        self.assertIn("follows wave quantization", row(output, "GEMM by tokens (bf16, cuBLAS)")[0])
        timed_out = passing_run()
        timed_out["gemm_sweep"][0] = "124"
        status, output = self.summarize(timed_out)
        self.assertEqual(status, 1, output)
        self.assertEqual(row(output, "GEMM sweep (bf16, cuBLAS)")[1], "FAIL")
        steps["gemm_sweep"][3] = gemm_log(splits_last_wave=True, wrong_m=4096)
        status, output = self.summarize(steps)
        self.assertEqual(status, 1, output)
        self.assertEqual(row(output, "GEMM sweep (bf16, cuBLAS)"), ("wrong products at 2 shapes, first m=4096", "FAIL"))

    def test_cuda_graph_sweep_is_compared_and_optional(self):
        steps = passing_run()
        steps["cuda_graph_busbw_all_reduce_ring"] = ["0", 20.0, "0", fixture("cuda_all_reduce_ring.txt")]
        status, output = self.summarize(steps)
        self.assertEqual(status, 0, output)
        result, verdict = row(output, "cuda graph all_reduce ring")
        self.assertEqual(verdict, "info")
        self.assertTrue(result.startswith("1 MiB: "), result)
        self.assertIn("(default ", result)
        # The #wrong row still counts the 34 default runs only.
        self.assertIn("over 34 runs", row(output, "#wrong, cuda backend")[0])
        steps["cuda_graph_busbw_all_reduce_ring"] = ["1", 1.0, "0", "error: operation not permitted when stream is capturing\n"]
        status, output = self.summarize(steps)
        self.assertEqual(status, 0, output)  # optional: a warning, not a failure
        self.assertEqual(row(output, "cuda graph all_reduce ring")[1], "WARN")

    def test_busbw_and_side_by_side_files(self):
        self.summarize(passing_run())
        with open(os.path.join(self.out, "busbw.txt"), encoding="utf-8") as f:
            busbw = f.read().splitlines()
        self.assertIn("ring      268435456     180.00     176.47     200.00     0.90", busbw)
        self.assertIn("tree        1048576      22.50      22.06     200.00     0.11", busbw)
        with open(os.path.join(self.out, "side_by_side.txt"), encoding="utf-8") as f:
            side = f.read().splitlines()
        self.assertIn(f"{'all_reduce_ring':<34} {1000:>10} {0:>11} {0:>11} {'0.02':>10} {'0.00':>10}", side)
        self.assertEqual(len(side), 1 + 21 * 2 * 2)

    def test_reduce_below_threshold_fails(self):
        steps = passing_run()
        steps["kernel_bench"][3] = re.sub(
            r"(reduce dtype=bf16 op=sum bytes=268435456 .*) GBps=\S+ (.*) fraction_of_copy=\S+",
            r"\1 GBps=3120.0 \2 fraction_of_copy=0.800", steps["kernel_bench"][3])
        status, output = self.summarize(steps)
        self.assertEqual(status, 1, output)
        self.assertEqual(row(output, "reduce kernel bf16 sum"),
                         ("256 MiB 0.80, 1 GiB 0.92 of copy (3680 GB/s best), needs >= 0.85", "FAIL"))
        self.assertTrue(output.rstrip().splitlines()[-1].startswith("verdict: FAIL (1 failed"))

    def test_slow_ungated_dtype_is_information_only(self):
        steps = passing_run()
        steps["kernel_bench"][3] = steps["kernel_bench"][3].replace("fraction_of_copy=0.950", "fraction_of_copy=0.500")
        status, output = self.summarize(steps)
        self.assertEqual(status, 0, output)
        self.assertEqual(row(output, "reduce kernel f64 sum")[1], "info")

    def test_wrong_reduce_result_fails(self):
        steps = passing_run()
        steps["kernel_bench"][3] = steps["kernel_bench"][3].replace(
            "fraction_of_copy=0.930 check=ok", "fraction_of_copy=0.930 check=FAILED wrong=5 of 67108864", 1)
        status, output = self.summarize(steps)
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "reduce kernel f32 sum"), ("wrong results at 256 MiB", "FAIL"))

    def test_kernel_bench_without_large_sizes_fails(self):
        steps = passing_run()
        steps["kernel_bench"][3] = "\n".join(line for line in fixture("kernel_bench.txt").splitlines()
                                             if "bytes=" not in line or "bytes=1048576 " in line)
        status, output = self.summarize(steps)
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "reduce kernel f32 sum"), ("not measured", "FAIL"))
        self.assertEqual(row(output, "reduce kernel f16 sum"), ("not measured", "WARN"))

    def test_wrong_elements_fail_and_name_the_run(self):
        steps = passing_run()
        lines = fixture("cuda_cell.txt").splitlines()
        wrong_row = next(i for i, line in enumerate(lines) if line.split()[:1] == ["64000"])
        fields = lines[wrong_row].split()
        self.assertEqual(fields[12], "0")
        lines[wrong_row] = lines[wrong_row][:-1] + "12"
        text = "\n".join(lines) + "\ntandem: error: 1 result(s) had wrong elements\n"
        steps["cuda_reduce_scatter_direct"] = ["1", 1.4, "1", text]
        status, output = self.summarize(steps)
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "#wrong, cuda backend"), ("1 of 34 runs failed; 212 checked results", "FAIL"))
        self.assertEqual(row(output, "  cuda_reduce_scatter_direct"),
                         ("exit 1: tandem: error: 1 result(s) had wrong elements", "FAIL"))

    def test_unchecked_results_fail(self):
        steps = passing_run()
        lines = fixture("cuda_cell.txt").splitlines()
        lines = [line if line.startswith("#") else line.rsplit(" ", 1)[0] + " N/A" for line in lines]
        steps["cuda_broadcast_ring"] = ["0", 1.0, "1", "\n".join(lines) + "\n"]
        status, output = self.summarize(steps)
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "  cuda_broadcast_ring"), ("3 results not checked (#wrong N/A)", "FAIL"))

    def test_timed_out_sweep_fails(self):
        steps = passing_run()
        cut_short = fixture("cuda_all_reduce_tree.txt").split("   67108864")[0]
        steps["cuda_busbw_all_reduce_tree"] = ["124", 120.0, "1", cut_short]
        status, output = self.summarize(steps)
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "cuda all_reduce tree busbw"),
                         ("16 MiB: 112.5 GB/s = 0.56 x estimate 200.0 GB/s", "FAIL"))
        self.assertEqual(row(output, "  cuda_busbw_all_reduce_tree"), ("timed out after 120 s", "FAIL"))

    def test_budget_skips_fail_required_steps_only(self):
        steps = passing_run()
        steps["fault_rank-hang-host"] = ["skip", 0.0, "1", "skipped: the time budget (BUDGET_S=470) is spent\n"]
        for cell in CELLS[10:]:
            steps[f"host_{cell}"] = ["skip", 0.0, "0", "skipped: the time budget (BUDGET_S=470) is spent\n"]
        status, output = self.summarize(steps)
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "fault rank-hang-host --backend cuda"),
                         ("skipped: the time budget was spent", "FAIL"))
        self.assertEqual(row(output, "#wrong, host side by side"),
                         ("0 in 40 checked results over 10 runs, same cells and sizes (11 skipped: time budget)",
                          "PASS"))

    def test_optional_host_failure_warns_without_failing(self):
        steps = passing_run()
        steps["host_all_to_all_direct"] = ["1", 0.3, "0", "tandem: error: something broke\n"]
        status, output = self.summarize(steps)
        self.assertEqual(status, 0, output)
        self.assertEqual(row(output, "#wrong, host side by side"),
                         ("1 of 21 runs failed: host_all_to_all_direct: exit 1: tandem: error: something broke",
                          "WARN"))

    def test_missing_backend_names_the_error(self):
        steps = passing_run()
        steps["nccl_native_send_recv"] = [
            "2", 0.1, "1", "tandem: error: unknown backend 'nccl-native'; backends: host, sim, cuda, nccl\n"]
        status, output = self.summarize(steps)
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "nccl-native self send/recv g=1"),
                         ("exit 2: tandem: error: unknown backend 'nccl-native'; backends: host, sim, cuda, nccl",
                          "FAIL"))

    def test_failed_gpu_test_is_named(self):
        steps = passing_run()
        steps["ctest_gpu"] = ["8", 9.3, "1", fixture("ctest_gpu_fail.txt")]
        status, output = self.summarize(steps)
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "gpu tests (ctest -L gpu)"),
                         ("1 of 2 failed: tandem_backend_cuda_gpu_test", "FAIL"))

    def test_no_gpu_tests_found_fails(self):
        steps = passing_run()
        steps["ctest_gpu"] = ["8", 0.1, "1",
                              "Test project /tmp/b\nNo tests were found!!!\nErrors while running CTest\n"]
        status, output = self.summarize(steps)
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "gpu tests (ctest -L gpu)"), ("no tests labelled gpu were found", "FAIL"))

    def test_failed_fault_scenario_shows_its_verdict(self):
        steps = passing_run()
        steps["fault_link-flap-host"] = ["1", 3.0, "1", fixture("fault_link_flap_host.txt").replace(
            "Verdict: PASS", "Verdict: FAIL (1 of 4 expectations failed)")]
        status, output = self.summarize(steps)
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "fault link-flap-host --backend cuda"),
                         ("Verdict: FAIL (1 of 4 expectations failed)", "FAIL"))

    def cpu_only_steps(self, probe_status, probe_text):
        steps = passing_run()
        return {name: steps[name] for name in ("configure", "build", "schedule_all_reduce_ring",
                                               "schedule_all_reduce_tree")} | {
            "probe": [probe_status, 0.3, "1", probe_text]}

    def test_no_gpu_exits_77_with_the_reason(self):
        status, output = self.summarize(self.cpu_only_steps("77", NO_GPU), gpu_state="absent")
        self.assertEqual(status, 77, output)
        self.assertEqual(row(output, "GPU"), (NO_GPU.strip(), "skip"))
        self.assertEqual(row(output, "GPU measurements"), ("not run: no GPU", "skip"))
        self.assertEqual(row(output, "copy-bound estimate (8 ranks)")[1], "info")
        self.assertTrue(output.rstrip().splitlines()[-1].startswith(
            "verdict: NO GPU: built, nothing measured (exit 77; 1 passed)"), output)
        self.assertFalse(os.path.exists(os.path.join(self.out, "busbw.txt")))

    def test_gpu_listed_but_unusable_fails(self):
        status, output = self.summarize(self.cpu_only_steps("77", NO_GPU),
                                        gpu_state="unusable: nvidia-smi lists 1 GPU(s) but CUDA cannot use them")
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "GPU"), ("unusable: nvidia-smi lists 1 GPU(s) but CUDA cannot use them", "FAIL"))

    def test_failed_build_stops_with_a_failure(self):
        steps = passing_run()
        steps = {"configure": steps["configure"], "build": ["1", 80.0, "1", "FAILED: app/tandem\nninja: build stopped: "
                                                                             "subcommand failed.\n"]}
        status, output = self.summarize(steps, gpu_state=None)
        self.assertEqual(status, 1)
        self.assertEqual(row(output, "build (cuda + nccl, Release)"),
                         ("configure 14 s, build: exit 1: ninja: build stopped: subcommand failed.", "FAIL"))
        self.assertEqual(row(output, "GPU"), ("not probed (the build failed)", "skip"))

    def test_reused_build(self):
        steps = self.cpu_only_steps("77", NO_GPU)
        del steps["configure"]
        steps["build"] = ["reused", 0.0, "1", ""]
        write_run(self.out, steps, "absent")
        with open(os.path.join(self.out, "steps.tsv"), encoding="utf-8") as f:
            text = f.read().replace("logs/01-build.log", "-")
        with open(os.path.join(self.out, "steps.tsv"), "w", encoding="utf-8") as f:
            f.write(text)
        status, output = self.summarize_existing()
        self.assertEqual(status, 77)
        self.assertEqual(row(output, "build"), ("reused the build folder (SKIP_BUILD=1)", "PASS"))

    def summarize_existing(self):
        result = subprocess.run([sys.executable, SUMMARIZE, self.out], capture_output=True, text=True, check=False)
        return result.returncode, result.stdout

    def test_not_a_run_folder_is_a_usage_error(self):
        result = subprocess.run([sys.executable, SUMMARIZE, self.out], capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 2)
        self.assertIn("has no steps.tsv", result.stderr)


class ParserTest(unittest.TestCase):
    def test_schedule_traffic_matches_the_closed_form(self):
        # ring: 56 recv-reduce (3) + 56 recv (2) of S/8 chunks; tree: 14 + 14 of S/2: 5(n-1) S either way.
        self.assertEqual(summarize.schedule_traffic(fixture("schedule_all_reduce_ring8.txt")), (8, 35.0))
        self.assertEqual(summarize.schedule_traffic(fixture("schedule_all_reduce_tree8.txt")), (8, 35.0))

    def test_schedule_traffic_counts_chunk_ranges_and_local_ops(self):
        text = ("all_reduce x: 2 ranks, 4 chunks per block, 2 rounds, 3 ops\nround 0\n"
                "  r0 L0 recv Out[0..3] <- r1\n  r1 L0 copy Out[0..1] = In[0..1]\n  r1 L0 reduce Out[2] += Scr[0]\n"
                "  r0 L0 send In[0..3] -> r1\n")
        self.assertEqual(summarize.schedule_traffic(text), (2, (2 * 4 + 2 * 2 + 3 * 1) / 4))
        self.assertIsNone(summarize.schedule_traffic("tandem: error: no such algorithm\n"))

    def test_bench_table_without_in_place(self):
        rows = summarize.parse_bench_table(fixture("nccl_native_send_recv.txt"))
        self.assertEqual(len(rows), 9)
        self.assertEqual(rows[0]["size"], 8)
        self.assertIsNone(rows[0]["in_place"])
        self.assertEqual(rows[-1]["out_of_place"]["wrong"], 0)

    def test_bench_table_of_a_real_host_run(self):
        rows = summarize.parse_bench_table(fixture("host_cell.txt"))
        self.assertEqual([r["size"] for r in rows], [1000, 64000])
        self.assertEqual(rows[1]["in_place"]["busbw"], 0.12)

    def test_kernel_bench_lines(self):
        device, copies, reduces = summarize.parse_kernel_bench(fixture("kernel_bench.txt"))
        self.assertEqual(device["name"], "NVIDIA H200")
        self.assertEqual(copies, {268435456: 3900.0, 1073741824: 4000.0})
        self.assertEqual(len(reduces), 12)
        self.assertEqual(reduces[2], {"dtype": "bf16", "op": "sum", "bytes": 268435456, "GBps": 3588.0,
                                      "fraction": 0.92, "check": "ok"})


if __name__ == "__main__":
    unittest.main()
