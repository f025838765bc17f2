// Training-step accuracy: simulates every row of two tables of published training runs,
//
//   ../shared/reference/training_steps.csv     H100 training runs with their layouts
//   ../shared/reference/planner_published.csv  layouts training teams tuned and published, with the
//                                              model's dimensions, GPUs and NICs in the row
//
// (the project's reference data beside the repository; each row names its source) as a training
// scenario would: the row's model, batch, sequence, precision and layout, the compute timed from
// the kernels, the collectives simulated with the default network model. Nothing is tuned per row;
// the rules that turn a row into a scenario are the same for every row of a table, and a row the
// checker keeps aside goes through them unchanged:
//   - what a row says about its software decides only which kernels it runs: torchtitan without
//     torch.compile: eager; NeMo / Megatron and the Llama 3 paper's stack: fused; Megatron-DeepSpeed
//     (the BigScience runs): fused kernels, attention before FlashAttention (unfused) and DeepSpeed's
//     BF16_Optimizer (fp32 gradients accumulated every microbatch, reduced in fp32);
//   - what it says of the GPUs (a memory size "96GB", a power cap "500 W") is applied to the preset;
//   - planner rows: the GPU type picks the preset (A100: hgx-a100, H200: dgx-h200, else dgx-h100);
//     a NIC text "Nx ... per node" sets the NICs per node, "Omni-Path" 100 Gb/s each and "NNNGb/s"
//     or "NNNG" their speed; the MLP kind (gated SwiGLU or a GPT-style GELU MLP) and tied
//     embeddings are the ones whose parameter count is nearest the published one;
//   - cells a team left out ("-", "unknown") take documented defaults: vp with an interleaved
//     schedule in the notes is the largest vp that keeps at least kLayersPerVirtualStage layers in
//     every virtual stage, else 1; recompute is the least of none, selective, full that fits the
//     GPU's memory (what a team would run); micro-batch 1; sharding: Megatron's distributed
//     optimizer (zero1).
//
// Prints per row the layout, the prediction, the published value and the error, then the mean
// |error| per table. Aim (the training issue): every row within 15%. Exits 0 when every row meets
// it, 1 when one misses it, 2 on an error.
//
//   build/release/bench/tandem_training_accuracy [--csv OUT] [CSV ...]   (run from the repository root;
//   default: both tables)
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/csv_table.h"
#include "core/error.h"
#include "core/file_read.h"
#include "models/cluster.h"
#include "models/workload.h"
#include "sim/training.h"

namespace tandem {
namespace {

constexpr double kAim = 0.15;
constexpr const char* kStepsFile = "../shared/reference/training_steps.csv";
constexpr const char* kPlannerFile = "../shared/reference/planner_published.csv";
constexpr std::string_view kStepsHeader =
    "id,model,precision,gpus,global_batch,seq_len,micro_batch,tp,pp,vp,cp,sharding,recompute,metric,value,source,notes";
constexpr size_t kStepsFields = 17;
constexpr std::string_view kPlannerHeader =
    "case_id,model,params_B,layers,hidden,heads,kv_heads,ffn,vocab,seq_len,global_batch_seqs,gpus,gpu_type,"
    "gpus_per_node,nic,precision,published_tp,published_pp,published_vp,published_cp,published_ep,published_dp,"
    "published_micro_batch,published_recompute,published_zero,published_tflops_per_gpu_or_mfu,"
    "published_step_s_or_tokens_per_s,source_url,notes";
constexpr size_t kPlannerFields = 29;
constexpr uint64_t kMaxFileBytes = uint64_t{1} << 20;
// vp "-" on an interleaved run: virtual stages of at least this many layers (Megatron's usual
// choice keeps a few layers per chunk so that the extra point-to-point stays small).
constexpr int kLayersPerVirtualStage = 2;
// Intel / Cornelis Omni-Path 100 Series: 100 Gb/s a port.
constexpr double kOmniPathGbps = 100;

// One published run as a training scenario, and what it measured.
struct Case {
  std::string id, model, precision;
  int gpus = 0;
  models::TrainingConfig config;
  models::ClusterSpec cluster;
  bool recompute_unknown = false;  // "-" / "unknown": the least that fits
  std::string metric;              // step_s, tok_s_gpu, tflops_per_gpu
  double value = 0;
};

int integer(const std::string& text, std::string_view field, const std::string& where) {
  try {
    size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  fail(ErrorCode::kFormat, "{}: {} '{}' is not an integer", where, field, text);
}

// The number at the start of `text` ("104.70 s/iter" -> 104.7, "64 (FSDP2)" -> 64), if any.
std::optional<double> leading_number(const std::string& text) {
  size_t end = 0;
  while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.')) ++end;
  if (end == 0) return std::nullopt;
  return std::stod(text.substr(0, end));
}

// The number right before `unit` in free text ("at 500 W" -> 500), if any.
std::optional<double> number_before(const std::string& text, std::string_view unit) {
  for (size_t at = text.find(unit); at != std::string::npos; at = text.find(unit, at + 1)) {
    size_t begin = at;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(text[begin - 1]))) --begin;
    if (begin < at) return std::stod(text.substr(begin, at - begin));
  }
  return std::nullopt;
}

bool unknown(const std::string& text) { return text.empty() || text == "-" || text == "unknown"; }

bool mentions(const std::string& text, std::string_view what) {
  std::string lower = text;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find(what) != std::string::npos;
}

// Reads a table's rows (the header decides which table), notes (the last field) may hold commas.
std::vector<std::vector<std::string>> read_table(const std::string& file, std::string_view header, size_t fields) {
  std::stringstream text(read_file_bounded(file, kMaxFileBytes, "published training table"));
  std::vector<std::vector<std::string>> rows;
  bool seen_header = false;
  int line_number = 0;
  for (std::string line; std::getline(text, line);) {
    ++line_number;
    if (line.ends_with('\r')) line.pop_back();  // a table saved with CRLF line ends
    if (line.empty() || line.starts_with('#')) continue;
    const std::string where = fmt::format("{}:{}", file, line_number);
    if (!seen_header) {
      if (line != header) fail(ErrorCode::kFormat, "{}: expected the header '{}'", where, header);
      seen_header = true;
      continue;
    }
    std::vector<std::string> f = bench::split_csv_line(line);
    if (f.size() < fields) fail(ErrorCode::kFormat, "{}: {} fields, expected {}", where, f.size(), fields);
    for (size_t i = fields; i < f.size(); ++i) f[fields - 1] += "," + f[i];
    f.resize(fields);
    f.push_back(where);
    rows.push_back(std::move(f));
  }
  if (!seen_header) fail(ErrorCode::kFormat, "{}: no header", file);
  return rows;
}

models::Sharding sharding_of(const std::string& text) {
  if (text.starts_with("distributed optimizer") || text.starts_with("zero1") || text == "1" || unknown(text))
    return models::Sharding::kZero1;
  if (mentions(text, "fsdp") || text == "3") return models::Sharding::kFsdp;
  // ZeRO-2 also shards the gradients, which tandem's zero1 keeps whole: its memory is an upper bound.
  if (text == "2") return models::Sharding::kZero1;
  if (text.starts_with("hsdp")) return models::Sharding::kHsdp;
  if (text.starts_with("none") || text.starts_with("ddp") || text == "0") return models::Sharding::kNone;
  fail(ErrorCode::kFormat, "unknown sharding '{}'", text);
}

// The software a row names decides the kernels (see the top of the file).
void apply_stack(models::TrainingConfig& c, const std::string& source_and_notes) {
  if (mentions(source_and_notes, "torchtitan")) {
    c.kernels = models::KernelStack::kEager;
  } else if (mentions(source_and_notes, "bigscience") || mentions(source_and_notes, "megatron-deepspeed")) {
    c.attention = models::AttentionImpl::kUnfused;
    c.grad_accumulation = models::GradAccumulation::kDeepSpeed;
    c.grad_reduce_dtype = DataType::kF32;
  }
}

// vp "-" / "unknown": see the top of the file.
int virtual_stages(const std::string& vp, const std::string& notes, int layers, int pp, const std::string& where) {
  if (!unknown(vp)) return integer(vp, "vp", where);
  if (mentions(notes, "interleaved") && pp > 1) return std::max(1, layers / (pp * kLayersPerVirtualStage));
  return 1;
}

models::Recompute recompute_of(const std::string& text) {
  return unknown(text) ? models::Recompute::kNone : models::parse_recompute(text);
}

// What the row says of its GPUs ("H100 96GB HBM2e at 500 W"): the memory and the power cap.
void apply_gpu_notes(models::ClusterSpec& cluster, const std::string& notes) {
  if (const std::optional<double> watts = number_before(notes, " W"))
    cluster.gpu.power_limit_w = std::min(*watts, cluster.gpu.tdp_w);
  if (const std::optional<double> gigabytes = number_before(notes, "GB")) cluster.gpu.memory_bytes = *gigabytes * 1e9;
}

// training_steps.csv: "llama3.1-70b" is the llama3-70b preset (same dimensions); dgx-h100 nodes.
std::vector<Case> steps_cases(const std::string& file) {
  std::vector<Case> cases;
  for (const std::vector<std::string>& f : read_table(file, kStepsHeader, kStepsFields)) {
    const std::string& where = f.back();
    Case k;
    k.id = f[0];
    k.model = f[1];
    k.precision = f[2];
    k.gpus = integer(f[3], "gpus", where);
    std::string preset = k.model;
    if (const size_t dot = preset.find(".1-"); dot != std::string::npos) preset.erase(dot, 2);
    models::TrainingConfig& c = k.config;
    c.model = models::transformer_preset(preset);
    c.global_batch = integer(f[4], "global_batch", where);
    c.seq_len = integer(f[5], "seq_len", where);
    c.micro_batch = integer(f[6], "micro_batch", where);
    c.precision = models::parse_precision(k.precision);
    c.layout.name = k.id;
    c.layout.tp = integer(f[7], "tp", where);
    c.layout.pp = integer(f[8], "pp", where);
    c.layout.vp = virtual_stages(f[9], f[16], c.model.layers, c.layout.pp, where);
    c.layout.cp = integer(f[10], "cp", where);
    c.layout.sharding = sharding_of(f[11]);
    c.recompute = recompute_of(f[12]);
    k.recompute_unknown = unknown(f[12]);
    apply_stack(c, f[15] + " " + f[16]);
    k.metric = f[13];
    k.value = std::stod(f[14]);
    k.cluster = models::cluster_preset("dgx-h100");
    k.cluster.nodes = std::max(1, k.gpus / k.cluster.gpus_per_node);
    apply_gpu_notes(k.cluster, f[16]);
    cases.push_back(std::move(k));
  }
  return cases;
}

// planner_published.csv: the model from its dimensions, the cluster from the GPU type and NICs.
std::vector<Case> planner_cases(const std::string& file) {
  std::vector<Case> cases;
  for (const std::vector<std::string>& f : read_table(file, kPlannerHeader, kPlannerFields)) {
    const std::string& where = f.back();
    const std::string& notes = f[28];
    Case k;
    k.id = f[0];
    k.model = f[1];
    k.gpus = integer(f[11], "gpus", where);
    models::TrainingConfig& c = k.config;
    models::TransformerSpec& m = c.model;
    m.name = f[1];
    m.layers = integer(f[3], "layers", where);
    m.d_model = integer(f[4], "hidden", where);
    m.heads = integer(f[5], "heads", where);
    m.kv_heads = integer(f[6], "kv_heads", where);
    m.ffn = integer(f[7], "ffn", where);
    m.vocab = integer(f[8], "vocab", where);
    // The MLP kind and tying nearest the published parameter count.
    const double published_b = std::stod(f[2]);
    double best = -1;
    models::TransformerSpec nearest = m;
    for (models::MlpKind mlp : {models::MlpKind::kSwiGlu, models::MlpKind::kGelu}) {
      for (bool tied : {false, true}) {
        models::TransformerSpec t = m;
        t.mlp = mlp;
        t.tied_embeddings = tied;
        const double off = std::abs(static_cast<double>(t.parameters()) / 1e9 - published_b);
        if (best < 0 || off < best) {
          best = off;
          nearest = t;
        }
      }
    }
    m = nearest;
    c.seq_len = integer(f[9], "seq_len", where);
    c.global_batch = integer(f[10], "global_batch_seqs", where);
    k.precision = mentions(f[15], "fp8") ? "fp8" : "bf16";
    c.precision = models::parse_precision(k.precision);
    c.layout.name = k.id;
    c.layout.tp = integer(f[16], "published_tp", where);
    c.layout.pp = integer(f[17], "published_pp", where);
    c.layout.vp = virtual_stages(f[18], notes, m.layers, c.layout.pp, where);
    c.layout.cp = unknown(f[19]) ? 1 : integer(f[19], "published_cp", where);
    c.layout.ep = unknown(f[20]) ? 1 : integer(f[20], "published_ep", where);
    c.layout.sharding = mentions(f[21], "fsdp") ? models::Sharding::kFsdp : sharding_of(f[24]);
    c.micro_batch = unknown(f[22]) ? 1 : integer(f[22], "published_micro_batch", where);
    c.recompute = recompute_of(f[23]);
    k.recompute_unknown = unknown(f[23]);
    apply_stack(c, f[27] + " " + notes);
    // The GPUs and their NICs.
    const std::string& gpu = f[12];
    k.cluster = models::cluster_preset(mentions(gpu, "a100") ? "hgx-a100" : mentions(gpu, "h200") ? "dgx-h200" : "dgx-h100");
    k.cluster.gpus_per_node = integer(f[13], "gpus_per_node", where);
    k.cluster.nodes = std::max(1, k.gpus / k.cluster.gpus_per_node);
    apply_gpu_notes(k.cluster, gpu + " " + notes);
    const std::string& nic = f[14];
    if (!unknown(nic)) {
      if (mentions(nic, "per node")) {
        if (const std::optional<double> count = leading_number(nic)) k.cluster.nics_per_node = static_cast<int>(*count);
      }
      std::optional<double> gbps = number_before(nic, "Gb/s");
      if (!gbps) gbps = number_before(nic, "G ");
      if (mentions(nic, "omni-path")) gbps = kOmniPathGbps;
      if (gbps) k.cluster.nic_Bps = *gbps * 1e9 / 8;
    }
    // The measurement: a step time or tokens per GPU, else the model TFLOP/s (not hardware FLOPs).
    const std::string& step = f[26];
    const std::string& tflops = f[25];
    auto number = [&](const std::string& cell) {
      const std::optional<double> value = leading_number(cell);
      if (!value) fail(ErrorCode::kFormat, "{}: '{}' does not start with a number", where, cell);
      return *value;
    };
    if (mentions(step, "s/iter")) {
      k.metric = "step_s";
      k.value = number(step);
    } else if (mentions(step, "tok/s/gpu")) {
      k.metric = "tok_s_gpu";
      k.value = number(step);
    } else if (mentions(tflops, "tflop/s") && !mentions(tflops, "hfu")) {
      k.metric = "tflops_per_gpu";
      k.value = number(tflops);
    } else {
      fail(ErrorCode::kFormat, "{}: no step time, tokens per GPU or model TFLOP/s to compare with", where);
    }
    cases.push_back(std::move(k));
  }
  return cases;
}

// The cases of one table, the header deciding which.
std::vector<Case> cases_of(const std::string& file) {
  std::stringstream text(read_file_bounded(file, kMaxFileBytes, "published training table"));
  for (std::string line; std::getline(text, line);) {
    if (line.ends_with('\r')) line.pop_back();
    if (line.empty() || line.starts_with('#')) continue;
    if (line == kStepsHeader) return steps_cases(file);
    if (line == kPlannerHeader) return planner_cases(file);
    break;
  }
  fail(ErrorCode::kFormat, "{}: neither a training_steps.csv nor a planner_published.csv header", file);
}

int run(int argc, char** argv) {
  std::vector<std::string> files;
  std::string csv_out;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--csv" && i + 1 < argc) {
      csv_out = argv[++i];
    } else if (arg.starts_with("-")) {
      fmt::print(stderr, "usage: tandem_training_accuracy [--csv OUT] [CSV ...]\n");
      return 2;
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) files = {kStepsFile, kPlannerFile};
  std::string csv = "file,id,metric,predicted,published,error,step_s,compute_s,exposed_comm_s,bubble_s,achieved_mfu\n";
  int missed = 0;
  for (const std::string& file : files) {
    const std::vector<Case> cases = cases_of(file);
    fmt::print("{}\n", file);
    fmt::print("{:<4} {:<16} {:>5} {:>5} {:<32} {:<9} {:<15} {:>10} {:>10} {:>7}  {}\n", "id", "model", "prec", "gpus",
               "layout (tp pp vp cp ep mbs)", "kernels", "metric", "predicted", "published", "error", "breakdown");
    double sum = 0;
    int count = 0;
    for (Case k : cases) {
      models::TrainingConfig& config = k.config;
      sim::TrainingRequest request;
      request.cluster = k.cluster;
      if (k.recompute_unknown) {
        for (models::Recompute recompute :
             {models::Recompute::kNone, models::Recompute::kSelective, models::Recompute::kFull}) {
          config.recompute = recompute;
          try {
            const models::DerivedLayout d = models::derive(config, k.gpus, request.cluster.gpus_per_node);
            if (models::memory_per_gpu(config, d).total_bytes() <= request.cluster.gpu.memory_bytes) break;
          } catch (const Error&) {
            break;  // the simulation reports the layout's error
          }
        }
      }
      request.configs = {config};
      const sim::TrainingStepResult s = sim::simulate_training(request).at(0);
      const std::string layout = fmt::format("{} {} {} {} {} {} {} {}", config.layout.tp, config.layout.pp,
                                             config.layout.vp, config.layout.cp, config.layout.ep, config.micro_batch,
                                             models::name(config.layout.sharding), models::name(config.recompute));
      if (!s.ok) {
        fmt::print("{:<4} {:<16} {:>5} {:>5} {:<32} does not run: {}\n", k.id, k.model, k.precision, k.gpus, layout,
                   s.error);
        ++missed;
        continue;
      }
      double predicted = 0;
      if (k.metric == "step_s") {
        predicted = s.step_s;
      } else if (k.metric == "tok_s_gpu") {
        predicted = s.tokens_per_s_per_gpu;
      } else if (k.metric == "tflops_per_gpu") {
        predicted = s.achieved_mfu * request.cluster.gpu.bf16_flops / 1e12;
      } else {
        fail(ErrorCode::kFormat, "{}: unknown metric '{}'", k.id, k.metric);
      }
      const double error = (predicted - k.value) / k.value;
      sum += std::abs(error);
      ++count;
      if (std::abs(error) > kAim) ++missed;
      fmt::print("{:<4} {:<16} {:>5} {:>5} {:<32} {:<9} {:<15} {:>10.4g} {:>10.4g} {:>+6.1f}%  step {:.3g} s = compute "
                 "{:.3g} + exposed {:.3g} + bubble {:.3g}, MFU {:.1f}%\n",
                 k.id, k.model, k.precision, k.gpus, layout, models::name(config.kernels), k.metric, predicted, k.value,
                 100 * error, s.step_s, s.compute_s, s.exposed_comm_s, s.bubble_s, 100 * s.achieved_mfu);
      csv += fmt::format("{},{},{},{:.6g},{:.6g},{:.4f},{:.6g},{:.6g},{:.6g},{:.6g},{:.4f}\n", file, k.id, k.metric,
                         predicted, k.value, error, s.step_s, s.compute_s, s.exposed_comm_s, s.bubble_s,
                         s.achieved_mfu);
    }
    fmt::print("{} rows, mean |error| {:.1f}%\n\n", cases.size(), count ? 100 * sum / count : 0.0);
  }
  fmt::print("{} rows outside {:.0f}%\n", missed, 100 * kAim);
  if (!csv_out.empty()) bench::write_csv(csv_out, csv);
  return missed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  try {
    return tandem::run(argc, argv);
  } catch (const tandem::Error& e) {
    fmt::print(stderr, "tandem_training_accuracy: {}\n", e.what());
    return 2;
  }
}
