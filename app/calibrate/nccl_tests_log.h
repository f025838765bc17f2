// Measurements for `tandem calibrate`: nccl-tests 2.x logs (all_reduce_perf, all_gather_perf,
// reduce_scatter_perf, alltoall_perf, sendrecv_perf, as NVIDIA/nccl-tests prints them, and the
// tables `tandem bench` prints on every backend) and the project's published-rows CSV
// (../shared/reference/h100_calibration.csv), read into one list of timed rows.
//
// Lines of `mpirun --tag-output` ("[1,0]<stdout>:") and `srun --label` ("0: ") are read without
// their tag, and a UTF-8 byte-order mark at the start is dropped. A log is read strictly: every
// table row must have nccl-tests' 13 columns with numbers where numbers belong, its size and count
// must agree for its type and collective, and any other line must be a comment (#...), an NCCL line
// (NCCL INFO/WARN, "NCCL version"), blank, or an elision mark ("...", rows cut by whoever posted the
// log: skipped and listed in `skipped`). The first malformed line ends the read with Error(kFormat)
// "FILE:LINE: what is wrong" (control bytes of the input shown as \xNN).
//
// Runs. A log may hold several runs one after another (all_reduce_perf then all_gather_perf, two
// `tandem bench` tables): a run header line ("# nccl-tests version", "# Collective test starting:",
// "# tandem V bench", "# nThread", "# Using devices") after table rows starts the next run, and each
// run's rows get that run's collective, algorithm and protocol. The runs of one file must have run
// on the same GPUs (count, hosts) under one NCCL version: a run that did not is an error at its
// first line. In a file of several runs every run must name its collective (or --collective is
// given): a file name names one collective, not several.
//
// What the reader takes from each run besides the rows:
//   ranks      the "#  Rank N Group G Pid P on HOST device D" lines (their count, when they are
//              ranks 0..N-1), else nThread x nGpus of the "# nThread .. nGpus .." header line,
//              else (all_gather, reduce_scatter, alltoall) size / (count x type size) of its rows
//   nodes      the distinct HOSTs of those Rank lines (0 when the log has none or only some)
//   collective "# Collective test starting: all_reduce_perf" (nccl-tests), "# tandem V bench
//              all_reduce:" (tandem bench), "# Collective: all_reduce", else a file name with
//              "<collective>_perf" in it (a file of one run), else the caller's
//   algorithm / protocol  "NCCL_ALGO set by environment to Ring" (and NCCL_PROTO) in NCCL INFO
//              lines, "# NCCL_ALGO=ring" / "# NCCL_PROTO=Simple" comments, or the "algorithm: ring"
//              of tandem bench's "# Backend:" line; else (or a list, "Ring,Tree") auto
//   version    "NCCL version 2.x.y" when shown
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"
#include "models/cluster.h"

namespace tandem::app {

// A log larger than this is not an nccl-tests log.
inline constexpr uint64_t kMaxMeasurementFileBytes = 16ull << 20;
// A GPU (rank) count beyond this is a typo or a wrapped integer, not a cluster: models::kMaxNodes
// nodes of models::kMaxGpusPerNode GPUs. Node counts are checked against models::kMaxNodes.
inline constexpr int64_t kMaxMeasuredRanks = int64_t{models::kMaxNodes} * models::kMaxGpusPerNode;

// One measured point: a collective of `bytes` (nccl-tests' size column) that took time_us.
struct MeasuredRow {
  std::string label;  // "FILE:LINE" for a log row, "FILE#ID" for a CSV row (what --hold-out names)
  Collective collective = Collective::kAllReduce;
  int64_t bytes = 0;
  DataType dtype = DataType::kF32;
  std::string algorithm = "auto";       // NCCL_ALGO when the log shows it (simulator spelling: ring, nvls, ...)
  std::string protocol = "auto";        // NCCL_PROTO when the log shows it (LL, LL128, Simple)
  int gpus = 0;                         // ranks that ran it
  int nodes = 0;                        // nodes they ran on; 0: the log does not say
  double time_us = 0;                   // measured (out-of-place); from busbw / algbw when only they are given
  std::string system;                   // CSV rows: the system column ("8xH100-SXM"); empty for logs
  std::optional<double> nics_per_node;  // multi-node CSV rows: the system's NICs, when stated
  std::optional<double> nic_gbps;       // and their line rate in Gb/s
};

struct MeasurementFile {
  std::string path;
  bool published = false;    // a published-rows CSV: each row has its own system, GPU and node count
  std::string nccl_version;  // empty when the log does not show it
  int nranks = 0;            // 0 for a CSV, and for a log that does not say (rows' gpus are 0 too)
  int least_ranks = 0;       // a log that does not say: the ranks it must have had (highest Rank line + 1)
  int nodes = 0;             // 0 when the log does not say
  int runs = 0;              // a log: the runs (tables) it holds
  std::vector<MeasuredRow> rows;
  std::vector<std::string> skipped;  // "FILE:LINE: what" for each line read but not taken (elided rows)
};

// Reads an nccl-tests log from `text` (`path` names it in errors and labels). `collective` is used
// for runs that do not name one; a run that names none and is given none is an error, as is a log
// with no rows or one whose collective is none of the five above.
MeasurementFile parse_nccl_tests_log(std::string_view text, const std::string& path,
                                     std::optional<Collective> collective = std::nullopt);

// Reads a published-rows CSV: ../shared/reference/h100_calibration.csv's format (header "id,system,gpus,
// nodes,collective,algorithm,size_bytes,metric,value_low,value_high,source") or
// multinode_calibration.csv's (with gpus_per_node, nics_per_node, nic_gbps, fabric, protocol and
// notes). Metric time_us, algbw_GBps, busbw_GBps or busbw_per_nic_GBps; the value is the middle of
// low..high.
MeasurementFile parse_reference_csv(std::string_view text, const std::string& path);

// Reads `path`: a .csv as parse_reference_csv, anything else as parse_nccl_tests_log.
MeasurementFile read_measurement_file(const std::string& path, std::optional<Collective> collective = std::nullopt);

}  // namespace tandem::app
