#include "models/workload.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <queue>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace tandem::models {

// ---- the model -----------------------------------------------------------------------------------

int64_t TransformerSpec::layer_parameters() const {
  const int64_t kv_dim = d_model / heads * kv_heads;
  const int64_t attention = 2 * d_model * d_model + 2 * d_model * kv_dim;  // q, o; k, v
  const int64_t mlp = 3 * d_model * ffn;                                   // gate, up, down
  return attention + mlp + 2 * d_model;                                    // + two RMSNorm weights
}

int64_t TransformerSpec::other_parameters() const {
  return (tied_embeddings ? 1 : 2) * vocab * d_model + d_model;  // embedding (+ head) + final norm
}

int64_t TransformerSpec::parameters() const { return layers * layer_parameters() + other_parameters(); }

namespace {

// The Llama 3 Herd of Models, Table 3; vocabulary 128,256 (the released config.json).
constexpr std::array<std::string_view, 3> kPresetNames{"llama3-8b", "llama3-70b", "llama3-405b"};

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

TransformerSpec transformer_preset(std::string_view name) {
  const std::string key = lower(name);
  if (key == "llama3-8b") return {"llama3-8b", 32, 4096, 14336, 32, 8, 128256, false};
  if (key == "llama3-70b") return {"llama3-70b", 80, 8192, 28672, 64, 8, 128256, false};
  if (key == "llama3-405b") return {"llama3-405b", 126, 16384, 53248, 128, 8, 128256, false};
  fail(ErrorCode::kInvalidArgument, "unknown model '{}' (expected one of: {}, or a custom model's dimensions)", name,
       fmt::join(kPresetNames, ", "));
}

std::vector<std::string> transformer_preset_names() { return {kPresetNames.begin(), kPresetNames.end()}; }

void validate(const TransformerSpec& model) {
  auto bad = [&](std::string_view field, int64_t value, std::string_view rule) {
    fail(ErrorCode::kInvalidArgument, "model {}: {} = {}: {}", model.name, field, value, rule);
  };
  if (model.layers < 1 || model.layers > 100000) bad("layers", model.layers, "must be 1..100000");
  if (model.d_model < 1 || model.d_model > (int64_t{1} << 20)) bad("d_model", model.d_model, "must be 1..1048576");
  if (model.ffn < 1 || model.ffn > (int64_t{1} << 24)) bad("ffn", model.ffn, "must be 1..16777216");
  if (model.heads < 1 || model.d_model % model.heads != 0) bad("heads", model.heads, "must divide d_model");
  if (model.kv_heads < 1 || model.heads % model.kv_heads != 0) bad("kv_heads", model.kv_heads, "must divide heads");
  if (model.vocab < 1 || model.vocab > (int64_t{1} << 24)) bad("vocab", model.vocab, "must be 1..16777216");
}

std::string_view name(Sharding sharding) {
  switch (sharding) {
    case Sharding::kNone:
      return "none";
    case Sharding::kZero1:
      return "zero1";
    case Sharding::kFsdp:
      return "fsdp";
    case Sharding::kHsdp:
      return "hsdp";
  }
  return "?";
}

Sharding parse_sharding(std::string_view text) {
  for (Sharding s : {Sharding::kNone, Sharding::kZero1, Sharding::kFsdp, Sharding::kHsdp}) {
    if (lower(text) == name(s)) return s;
  }
  fail(ErrorCode::kInvalidArgument, "unknown sharding '{}' (expected: none, zero1, fsdp, hsdp)", text);
}

std::string_view name(Precision precision) { return precision == Precision::kFP8 ? "fp8" : "bf16"; }

Precision parse_precision(std::string_view text) {
  if (lower(text) == "bf16") return Precision::kBF16;
  if (lower(text) == "fp8") return Precision::kFP8;
  fail(ErrorCode::kInvalidArgument, "unknown precision '{}' (expected: bf16, fp8)", text);
}

// ---- layout --------------------------------------------------------------------------------------

DerivedLayout derive(const TrainingConfig& config, int gpus, int gpus_per_node) {
  validate(config.model);
  const ParallelLayout& layout = config.layout;
  auto bad = [&](std::string_view what, auto&&... args) {
    fail(ErrorCode::kInvalidArgument, "layout '{}' on {} GPUs: {}", layout.name, gpus,
         fmt::format(fmt::runtime(what), args...));
  };
  if (layout.tp < 1 || layout.pp < 1) bad("tp and pp must be at least 1");
  if (gpus % (layout.tp * layout.pp) != 0) bad("tp x pp = {} does not divide the GPUs", layout.tp * layout.pp);
  const int kv_heads = config.model.kv_heads;
  if (config.model.heads % layout.tp != 0 || (kv_heads % layout.tp != 0 && layout.tp % kv_heads != 0)) {
    bad("tp = {} does not split the model's {} heads and {} KV heads", layout.tp, config.model.heads, kv_heads);
  }
  if (layout.tp > gpus_per_node || gpus_per_node % layout.tp != 0) {
    bad("tensor parallelism stays inside a node: tp = {} must divide the {} GPUs of a node", layout.tp, gpus_per_node);
  }
  if (layout.pp > config.model.layers)
    bad("pp = {} is more than the model's {} layers", layout.pp, config.model.layers);
  if (config.seq_len < 1 || config.seq_len > kMaxSeqLen) bad("seq_len must be 1..{}", kMaxSeqLen);
  if (config.micro_batch < 1) bad("micro_batch must be at least 1");
  if (!(config.mfu > 0 && config.mfu <= 1)) bad("mfu must be in (0, 1] (got {})", config.mfu);
  DerivedLayout d;
  d.gpus = gpus;
  d.dp = gpus / (layout.tp * layout.pp);
  if (config.global_batch < 1 || config.global_batch % (d.dp * config.micro_batch) != 0) {
    bad("global_batch {} does not split into {} data-parallel ranks x micro_batch {}", config.global_batch, d.dp,
        config.micro_batch);
  }
  d.microbatches = config.global_batch / (d.dp * config.micro_batch);
  if (d.microbatches > kMaxMicrobatches)
    bad("{} microbatches, above the limit of {}", d.microbatches, kMaxMicrobatches);
  switch (layout.sharding) {
    case Sharding::kNone:
    case Sharding::kZero1:
      d.shard_group = 1;
      break;
    case Sharding::kFsdp:
      d.shard_group = d.dp;
      break;
    case Sharding::kHsdp: {
      d.shard_group = layout.shard_group > 0 ? layout.shard_group : std::max(1, gpus_per_node / layout.tp);
      if (d.shard_group > d.dp || d.dp % d.shard_group != 0) {
        bad("hsdp shard_group {} does not divide the {} data-parallel ranks", d.shard_group, d.dp);
      }
      break;
    }
  }
  d.replicas = d.dp / d.shard_group;
  const int layers = config.model.layers;
  for (int s = 0; s < layout.pp; ++s)
    d.layers_of_stage.push_back(layers / layout.pp + (s < layers % layout.pp ? 1 : 0));
  return d;
}

// ---- memory --------------------------------------------------------------------------------------

double MemoryBreakdown::total_bytes() const {
  return weights_bytes + gradients_bytes + optimizer_bytes + unsharded_bytes + activations_bytes + logits_bytes +
         runtime_bytes;
}

namespace {

// Parameters a stage holds before tensor parallelism: its layers, the embedding on the first, the
// output head (and final norm) on the last.
double stage_parameters(const TrainingConfig& config, const DerivedLayout& d, int stage) {
  const TransformerSpec& m = config.model;
  const int pp = config.layout.pp;
  double params =
      static_cast<double>(d.layers_of_stage[static_cast<size_t>(stage)]) * static_cast<double>(m.layer_parameters());
  const double matrix = static_cast<double>(m.vocab * m.d_model);
  if (stage == 0) params += matrix;
  if (stage == pp - 1 && (!m.tied_embeddings || pp > 1)) params += matrix + static_cast<double>(m.d_model);
  return params;
}

// Activation bytes one layer saves per token for backward (bf16), with flash attention: the two
// norms' inputs, q / k / v and the attention output, and the gated MLP's gate, up, SiLU and product.
double activation_bytes_per_token(const TransformerSpec& m) {
  const double kv_dim = static_cast<double>(m.d_model / m.heads * m.kv_heads);
  return 2.0 * (4.0 * static_cast<double>(m.d_model) + 2.0 * kv_dim + 4.0 * static_cast<double>(m.ffn));
}

double grad_bytes(const TrainingConfig& config) { return static_cast<double>(size_bytes(config.grad_reduce_dtype)); }

// Bytes of optimizer state per parameter: fp32 master weights and Adam's two fp32 moments.
constexpr double kOptimizerBytesPerParam = 12;
// Bytes an Adam update moves per local parameter (reads master weight, gradient, both moments;
// writes them back and the bf16 copy): what bounds the optimizer step, HBM-bound.
constexpr double kOptimizerTrafficBytesPerParam = 30;
// The fp32 and bf16 logits of the output layer, per element.
constexpr double kLogitBytes = 6;

MemoryBreakdown stage_memory(const TrainingConfig& config, const DerivedLayout& d, int stage) {
  const TransformerSpec& m = config.model;
  const ParallelLayout& layout = config.layout;
  const double tp = layout.tp;
  const double local = stage_parameters(config, d, stage) / tp;
  const bool sharded = layout.sharding == Sharding::kFsdp || layout.sharding == Sharding::kHsdp;
  const double shard = sharded ? d.shard_group : 1;
  MemoryBreakdown mem;
  mem.weights_bytes = 2.0 * local / shard;
  mem.gradients_bytes = grad_bytes(config) * local / shard;
  const double optimizer_shard = layout.sharding == Sharding::kZero1 ? d.dp : shard;
  mem.optimizer_bytes = kOptimizerBytesPerParam * local / optimizer_shard;
  if (sharded && d.shard_group > 1) {
    const double layer = static_cast<double>(m.layer_parameters()) / tp;
    mem.unsharded_bytes = 2.0 * 2.0 * layer + grad_bytes(config) * layer;
  }
  const double tokens = static_cast<double>(config.micro_batch) * config.seq_len;
  const double in_flight = std::min(layout.pp - stage, d.microbatches);
  const double layers = d.layers_of_stage[static_cast<size_t>(stage)];
  const double full = activation_bytes_per_token(m) / tp;
  if (config.recompute) {
    const double input = 2.0 * static_cast<double>(m.d_model) / tp;  // each layer's input only
    mem.activations_bytes = in_flight * tokens * layers * input + tokens * full;
  } else {
    mem.activations_bytes = in_flight * tokens * layers * full;
  }
  if (stage == layout.pp - 1) mem.logits_bytes = tokens * static_cast<double>(m.vocab) * kLogitBytes / tp;
  mem.runtime_bytes = kRuntimeReserveBytes;
  return mem;
}

}  // namespace

MemoryBreakdown memory_per_gpu(const TrainingConfig& config, const DerivedLayout& derived) {
  MemoryBreakdown busiest;
  for (int s = 0; s < config.layout.pp; ++s) {
    const MemoryBreakdown mem = stage_memory(config, derived, s);
    if (s == 0 || mem.total_bytes() > busiest.total_bytes()) busiest = mem;
  }
  return busiest;
}

void check_fits(const TrainingConfig& config, const DerivedLayout& derived, const GpuSpec& gpu) {
  const MemoryBreakdown mem = memory_per_gpu(config, derived);
  if (mem.total_bytes() <= gpu.memory_bytes) return;
  std::string advice;
  if (!config.recompute && mem.activations_bytes > 0.3 * mem.total_bytes()) advice = "recompute: true, ";
  if (config.micro_batch > 1) advice += "a smaller micro_batch, ";
  advice += "more sharding, tensor or pipeline parallelism, or more GPUs";
  fail(ErrorCode::kUnsupported,
       "{} with layout '{}' on {} GPUs needs {:.1f} GB per GPU (weights {:.1f}, gradients {:.1f}, optimizer {:.1f}, "
       "gathered {:.1f}, activations {:.1f}, logits {:.1f}, runtime {:.1f}) but the {} has {:.0f} GB: try {}",
       config.model.name, config.layout.name, derived.gpus, mem.total_bytes() / 1e9, mem.weights_bytes / 1e9,
       mem.gradients_bytes / 1e9, mem.optimizer_bytes / 1e9, mem.unsharded_bytes / 1e9, mem.activations_bytes / 1e9,
       mem.logits_bytes / 1e9, mem.runtime_bytes / 1e9, gpu.name, gpu.memory_bytes / 1e9, advice);
}

double model_flops_per_token(const TransformerSpec& model, int seq_len) {
  const double embedding = model.tied_embeddings ? 0.0 : static_cast<double>(model.vocab * model.d_model);
  return 6.0 * (static_cast<double>(model.parameters()) - embedding) +
         12.0 * model.layers * static_cast<double>(model.d_model) * seq_len;
}

double compute_seconds(const StepTask& task, const GpuSpec& gpu, Precision precision, double mfu) {
  const double peak = precision == Precision::kFP8 ? gpu.fp8_flops : gpu.bf16_flops;
  if (!(peak > 0)) fail(ErrorCode::kUnsupported, "the {} has no {} tensor cores", gpu.name, name(precision));
  return task.flops / (peak * mfu) + task.fixed_s;
}

// ---- the step program ----------------------------------------------------------------------------

namespace {

// Builds one step's tasks. Ranks: r = (stage * dp + dp_index) * tp + tp_index, rank r on GPU r.
class StepBuilder {
 public:
  StepBuilder(const TrainingConfig& config, const ClusterSpec& cluster, const DerivedLayout& d)
      : config_(config), cluster_(cluster), d_(d), m_(config.model), tp_(config.layout.tp), pp_(config.layout.pp) {}

  StepProgram build() {
    program_.stages = pp_;
    make_groups();
    for (int s = 0; s < pp_; ++s) {
      program_.compute_stream.push_back(stream(s, "compute"));
    }
    fwd_send_.assign(static_cast<size_t>(pp_), std::vector<int>(static_cast<size_t>(d_.microbatches), -1));
    bwd_send_ = fwd_send_;
    for (int s = 0; s < pp_; ++s) build_stage(s);
    // Backward of stage s waits for stage s+1's gradient send, which was built after it.
    for (const auto& [task, stage_mb] : bwd_fixups_) {
      program_.tasks[static_cast<size_t>(task)].deps.push_back(
          bwd_send_[static_cast<size_t>(stage_mb.first + 1)][static_cast<size_t>(stage_mb.second)]);
    }
    const double tokens = static_cast<double>(config_.global_batch) * config_.seq_len;
    program_.tokens = tokens;
    program_.model_flops = tokens * model_flops_per_token(m_, config_.seq_len);
    return std::move(program_);
  }

 private:
  int rank(int stage, int dp_index, int tp_index) const { return (stage * d_.dp + dp_index) * tp_ + tp_index; }

  int stream(int stage, std::string_view what) {
    const std::string key = fmt::format("s{}/{}", stage, what);
    for (size_t i = 0; i < program_.streams.size(); ++i) {
      if (program_.streams[i] == key) return static_cast<int>(i);
    }
    program_.streams.push_back(key);
    return static_cast<int>(program_.streams.size() - 1);
  }

  int label(std::string_view text) {
    for (size_t i = 0; i < program_.labels.size(); ++i) {
      if (program_.labels[i] == text) return static_cast<int>(i);
    }
    program_.labels.emplace_back(text);
    return static_cast<int>(program_.labels.size() - 1);
  }

  // A group from its instances; every instance must lie the same way on the nodes.
  int add_group(std::string name, std::vector<std::vector<int>> instances) {
    const int per_node_total = cluster_.gpus_per_node;
    auto shape = [&](const std::vector<int>& gpus) {
      std::map<int, int> per_node;
      for (int g : gpus) ++per_node[g / per_node_total];
      const int count = per_node.begin()->second;
      for (const auto& [node, c] : per_node) {
        if (c != count) {
          fail(ErrorCode::kInvalidArgument, "layout '{}': the {} group {} spreads unevenly over nodes",
               config_.layout.name, name, fmt::join(gpus, ","));
        }
      }
      return std::pair{static_cast<int>(per_node.size()), count};
    };
    const auto [nodes, per_node] = shape(instances.front());
    for (const auto& instance : instances) {
      if (shape(instance) != std::pair{nodes, per_node}) {
        fail(ErrorCode::kInvalidArgument, "layout '{}': the {} groups lie differently on the nodes",
             config_.layout.name, name);
      }
    }
    program_.groups.push_back({std::move(name), nodes, per_node, std::move(instances)});
    return static_cast<int>(program_.groups.size() - 1);
  }

  void make_groups() {
    const int dp = d_.dp;
    if (tp_ > 1) {
      std::vector<std::vector<int>> instances;
      for (int s = 0; s < pp_; ++s) {
        for (int i = 0; i < dp; ++i) {
          std::vector<int> g;
          for (int j = 0; j < tp_; ++j) g.push_back(rank(s, i, j));
          instances.push_back(std::move(g));
        }
      }
      tp_group_ = add_group("tp", std::move(instances));
    }
    // The data-parallel ranks of (stage, tp index) i in [first, first + count) step `stride`.
    auto data_instances = [&](int count, int stride, int blocks, int block_stride) {
      std::vector<std::vector<int>> instances;
      for (int s = 0; s < pp_; ++s) {
        for (int j = 0; j < tp_; ++j) {
          for (int b = 0; b < blocks; ++b) {
            std::vector<int> g;
            for (int k = 0; k < count; ++k) g.push_back(rank(s, b * block_stride + k * stride, j));
            instances.push_back(std::move(g));
          }
        }
      }
      return instances;
    };
    const Sharding sharding = config_.layout.sharding;
    if (dp > 1) {
      if (sharding == Sharding::kHsdp) {
        const int shard = d_.shard_group, replicas = d_.replicas;
        if (shard > 1) data_group_ = add_group("hsdp-shard", data_instances(shard, 1, replicas, shard));
        if (replicas > 1) replicate_group_ = add_group("hsdp-replicate", data_instances(replicas, shard, shard, 1));
      } else {
        data_group_ = add_group(sharding == Sharding::kFsdp ? "fsdp" : "dp", data_instances(dp, 1, 1, 0));
      }
    }
    for (int s = 0; s + 1 < pp_; ++s) {
      std::vector<std::vector<int>> instances;
      for (int i = 0; i < dp; ++i) {
        for (int j = 0; j < tp_; ++j) instances.push_back({rank(s, i, j), rank(s + 1, i, j)});
      }
      pp_group_.push_back(add_group(fmt::format("pp{}-{}", s, s + 1), std::move(instances)));
    }
  }

  int comm_op(Collective collective, double bytes, int group) {
    const auto b = static_cast<int64_t>(std::llround(bytes));
    for (size_t i = 0; i < program_.comms.size(); ++i) {
      const CommOp& c = program_.comms[i];
      if (c.collective == collective && c.bytes == b && c.group == group) return static_cast<int>(i);
    }
    program_.comms.push_back({collective, b, group});
    return static_cast<int>(program_.comms.size() - 1);
  }

  int add(StepTask task) {
    program_.tasks.push_back(std::move(task));
    return static_cast<int>(program_.tasks.size() - 1);
  }

  int compute(int stage, double flops, std::string_view what, std::vector<int> deps) {
    StepTask t;
    t.kind = TaskKind::kCompute;
    t.stage = stage;
    t.stream = program_.compute_stream[static_cast<size_t>(stage)];
    t.flops = flops;
    t.label = label(what);
    t.deps = std::move(deps);
    last_compute_ = add(std::move(t));
    return last_compute_;
  }

  int comm(int stage, std::string_view on_stream, Collective collective, double bytes, int group, std::string_view what,
           std::vector<int> deps) {
    StepTask t;
    t.kind = TaskKind::kComm;
    t.stage = stage;
    t.stream = stream(stage, on_stream);
    t.comm = comm_op(collective, bytes, group);
    t.label = label(what);
    t.deps = std::move(deps);
    return add(std::move(t));
  }

  static std::vector<int> maybe(int task) { return task >= 0 ? std::vector<int>{task} : std::vector<int>{}; }

  // One block's compute (attention or MLP), between the tensor-parallel all_gather and
  // reduce_scatter of sequence parallelism when tp > 1.
  void block(int stage, double flops, std::string_view what, std::vector<int> deps) {
    if (tp_ > 1) {
      deps.push_back(last_tp_ >= 0 ? last_tp_ : last_compute_);
      std::erase(deps, -1);
      const int gather = comm(stage, "tp", Collective::kAllGather, activation_bytes_, tp_group_, "TP all_gather", deps);
      const int work = compute(stage, flops, what, {gather});
      comm(stage, "tp", Collective::kReduceScatter, activation_bytes_, tp_group_, "TP reduce_scatter", {work});
      last_tp_ = static_cast<int>(program_.tasks.size() - 1);
      return;
    }
    compute(stage, flops, what, std::move(deps));
  }

  // The forward (or recomputed forward) of one layer.
  void layer_forward(int stage, std::vector<int> deps, std::string_view what) {
    const double tokens = tokens_per_microbatch();
    const double kv_dim = static_cast<double>(m_.d_model / m_.heads * m_.kv_heads);
    const double h = static_cast<double>(m_.d_model);
    const double attention = tokens * (2.0 * (2.0 * h * h + 2.0 * h * kv_dim) + 4.0 * h * config_.seq_len) / tp_;
    const double mlp = tokens * 2.0 * 3.0 * h * static_cast<double>(m_.ffn) / tp_;
    block(stage, attention, what, std::move(deps));
    block(stage, mlp, what, tp_ > 1 ? std::vector<int>{last_tp_} : std::vector<int>{});
  }

  void layer_backward(int stage, std::vector<int> deps) {
    const double tokens = tokens_per_microbatch();
    const double kv_dim = static_cast<double>(m_.d_model / m_.heads * m_.kv_heads);
    const double h = static_cast<double>(m_.d_model);
    const double attention = 2.0 * tokens * (2.0 * (2.0 * h * h + 2.0 * h * kv_dim) + 4.0 * h * config_.seq_len) / tp_;
    const double mlp = 2.0 * tokens * 2.0 * 3.0 * h * static_cast<double>(m_.ffn) / tp_;
    block(stage, mlp, "backward", std::move(deps));
    block(stage, attention, "backward", tp_ > 1 ? std::vector<int>{last_tp_} : std::vector<int>{});
  }

  double tokens_per_microbatch() const { return static_cast<double>(config_.micro_batch) * config_.seq_len; }

  // The sharded units of a stage, in forward order: its layers, and the embedding / head matrices.
  struct Unit {
    double params = 0;  // before tensor parallelism
    bool layer = false;
    bool head = false;
  };
  std::vector<Unit> units(int stage) const {
    std::vector<Unit> out;
    const double matrix = static_cast<double>(m_.vocab * m_.d_model);
    if (stage == 0) out.push_back({matrix, false, false});
    for (int l = 0; l < d_.layers_of_stage[static_cast<size_t>(stage)]; ++l) {
      out.push_back({static_cast<double>(m_.layer_parameters()), true, false});
    }
    if (stage == pp_ - 1 && (!m_.tied_embeddings || pp_ > 1)) {
      out.push_back({matrix + static_cast<double>(m_.d_model), false, true});
    }
    return out;
  }

  void build_stage(int s) {
    const Sharding sharding = config_.layout.sharding;
    const bool fsdp = (sharding == Sharding::kFsdp || sharding == Sharding::kHsdp) && data_group_ >= 0;
    const std::vector<Unit> u = units(s);
    const size_t n = u.size();
    const int microbatches = d_.microbatches;
    activation_bytes_ = tokens_per_microbatch() * static_cast<double>(m_.d_model) * 2.0;
    const double tp = tp_;
    last_compute_ = -1;
    last_tp_ = -1;
    std::vector<int> last_grad_reduction;

    auto gather_params = [&](size_t i, std::string_view what, int prefetch_after) {
      return comm(s, "data", Collective::kAllGather, 2.0 * u[i].params / tp, data_group_, what, maybe(prefetch_after));
    };
    auto head_flops = [&](double factor) {
      return factor * tokens_per_microbatch() * 2.0 * static_cast<double>(m_.vocab * m_.d_model) / tp;
    };

    auto forward = [&](int mb) {
      std::vector<int> first_deps;
      if (s > 0) first_deps.push_back(fwd_send_[static_cast<size_t>(s - 1)][static_cast<size_t>(mb)]);
      std::vector<int> ends(n, -1);
      for (size_t i = 0; i < n; ++i) {
        std::vector<int> deps = i == 0 ? first_deps : std::vector<int>{};
        const bool gathers = fsdp || (sharding == Sharding::kZero1 && data_group_ >= 0 && mb == 0);
        if (gathers) {
          // At most two units gathered ahead: unit i's all_gather waits for unit i-2's compute.
          const int after = i >= 2 ? ends[i - 2] : -1;
          deps.push_back(gather_params(i, fsdp ? "FSDP all_gather (fwd)" : "DP all_gather (params)", after));
        }
        if (u[i].layer) {
          layer_forward(s, deps, "forward");
        } else if (u[i].head) {
          compute(s, head_flops(1.0), "head forward", deps);
        } else if (!deps.empty()) {
          compute(s, 0, "embedding", deps);  // a lookup: no FLOPs, but it waits for its parameters
        }
        ends[i] = last_compute_;
      }
      if (s + 1 < pp_) {
        fwd_send_[static_cast<size_t>(s)][static_cast<size_t>(mb)] =
            comm(s, "pp-fwd", Collective::kSendRecv, activation_bytes_ / tp, pp_group_[static_cast<size_t>(s)],
                 "PP send (activations)", maybe(last_compute_));
      }
    };

    auto backward = [&](int mb) {
      const bool last_mb = mb == microbatches - 1;
      int fixup_task = -1;
      std::vector<int> ends(n, -1);
      // FSDP gathers the next unit's parameters (backward order) before it reduce-scatters this
      // unit's gradients, so that the gather is not queued behind the reduction.
      int gathered = fsdp ? gather_params(n - 1, "FSDP all_gather (bwd)", -1) : -1;
      for (size_t k = 0; k < n; ++k) {
        const size_t i = n - 1 - k;
        std::vector<int> deps = maybe(gathered);
        // The first task after the gather takes the gradient from the next stage (fixed up later).
        const size_t before = program_.tasks.size();
        if (u[i].layer) {
          if (config_.recompute) {
            layer_forward(s, deps, "recompute");
            deps.clear();
          }
          layer_backward(s, deps);
        } else if (u[i].head) {
          compute(s, head_flops(2.0), "head backward", deps);
        } else {
          compute(s, 0, "embedding backward", deps);
        }
        if (k == 0 && s + 1 < pp_) fixup_task = static_cast<int>(before);
        ends[i] = last_compute_;
        if (fsdp && i > 0) gathered = gather_params(i - 1, "FSDP all_gather (bwd)", k >= 1 ? ends[i + 1] : -1);
        const double grads = grad_bytes(config_) * u[i].params / tp;
        if (data_group_ < 0 && replicate_group_ < 0) continue;
        if (fsdp && data_group_ >= 0) {
          const int rs = comm(s, "data", Collective::kReduceScatter, grads, data_group_, "FSDP reduce_scatter (grads)",
                              {last_compute_});
          last_grad_reduction.assign(1, rs);
          if (last_mb && replicate_group_ >= 0) {
            last_grad_reduction.push_back(comm(s, "replicate", Collective::kAllReduce, grads / d_.shard_group,
                                               replicate_group_, "HSDP all_reduce (replicas)", {rs}));
          }
        } else if (last_mb && replicate_group_ >= 0) {  // hsdp with shard groups of one: plain DDP
          last_grad_reduction.assign(1, comm(s, "replicate", Collective::kAllReduce, grads, replicate_group_,
                                             "HSDP all_reduce (replicas)", {last_compute_}));
        } else if (last_mb && sharding == Sharding::kZero1) {
          last_grad_reduction.assign(1, comm(s, "data", Collective::kReduceScatter, grads, data_group_,
                                             "DP reduce_scatter (grads)", {last_compute_}));
        } else if (last_mb) {
          last_grad_reduction.assign(
              1, comm(s, "data", Collective::kAllReduce, grads, data_group_, "DP all_reduce (grads)", {last_compute_}));
        }
      }
      if (fixup_task >= 0) bwd_fixups_.push_back({fixup_task, {s, mb}});
      if (s > 0) {
        bwd_send_[static_cast<size_t>(s)][static_cast<size_t>(mb)] =
            comm(s, "pp-bwd", Collective::kSendRecv, activation_bytes_ / tp, pp_group_[static_cast<size_t>(s - 1)],
                 "PP send (gradients)", maybe(last_compute_));
      }
    };

    // 1F1B: pp - s - 1 warm-up forwards, then one forward and one backward in turn, then the rest.
    const int warmup = std::min(pp_ - s - 1, microbatches);
    int next_forward = 0, next_backward = 0;
    for (; next_forward < warmup; ++next_forward) forward(next_forward);
    while (next_forward < microbatches) {
      forward(next_forward++);
      backward(next_backward++);
    }
    while (next_backward < microbatches) backward(next_backward++);

    // The optimizer step once this stage's gradients are reduced: HBM-bound over its shard.
    const bool sharded_optimizer = sharding != Sharding::kNone;
    double local = 0;
    for (const Unit& unit : u) local += unit.params / tp;
    local /= sharded_optimizer ? (sharding == Sharding::kZero1 ? d_.dp : d_.shard_group) : 1;
    StepTask optimizer;
    optimizer.kind = TaskKind::kCompute;
    optimizer.stage = s;
    optimizer.stream = program_.compute_stream[static_cast<size_t>(s)];
    optimizer.fixed_s = local * kOptimizerTrafficBytesPerParam / cluster_.gpu.hbm_Bps;
    optimizer.label = label("optimizer");
    optimizer.deps = last_grad_reduction;
    last_compute_ = add(std::move(optimizer));
  }

  const TrainingConfig& config_;
  const ClusterSpec& cluster_;
  const DerivedLayout& d_;
  const TransformerSpec& m_;
  const int tp_, pp_;
  StepProgram program_;
  int tp_group_ = -1, data_group_ = -1, replicate_group_ = -1;
  std::vector<int> pp_group_;
  std::vector<std::vector<int>> fwd_send_, bwd_send_;
  std::vector<std::pair<int, std::pair<int, int>>> bwd_fixups_;  // task, (stage, microbatch)
  int last_compute_ = -1, last_tp_ = -1;
  double activation_bytes_ = 0;
};

}  // namespace

StepProgram build_step(const TrainingConfig& config, const ClusterSpec& cluster) {
  const DerivedLayout d = derive(config, cluster.nodes * cluster.gpus_per_node, cluster.gpus_per_node);
  check_fits(config, d, cluster.gpu);
  return StepBuilder(config, cluster, d).build();
}

// ---- the timeline --------------------------------------------------------------------------------

StepBreakdown run_timeline(const StepProgram& program, const std::vector<double>& duration_s) {
  const size_t n = program.tasks.size();
  if (duration_s.size() != n) {
    fail(ErrorCode::kInvalidArgument, "timeline: {} durations for {} tasks", duration_s.size(), n);
  }
  // Edges: each task's dependencies and its stream's previous task.
  std::vector<int> stream_prev(n, -1), last_on_stream(program.streams.size(), -1);
  for (size_t i = 0; i < n; ++i) {
    const auto stream = static_cast<size_t>(program.tasks[i].stream);
    stream_prev[i] = last_on_stream[stream];
    last_on_stream[stream] = static_cast<int>(i);
  }
  std::vector<std::vector<int>> successors(n);
  std::vector<int> waiting(n, 0);
  for (size_t i = 0; i < n; ++i) {
    auto edge = [&](int from) {
      if (from < 0) return;
      successors[static_cast<size_t>(from)].push_back(static_cast<int>(i));
      ++waiting[i];
    };
    edge(stream_prev[i]);
    for (int dep : program.tasks[i].deps) edge(dep);
  }
  StepBreakdown out;
  out.times.assign(n, {});
  std::vector<int> critical(n, -1);  // the predecessor that ended last
  std::vector<int> ready;
  for (size_t i = 0; i < n; ++i) {
    if (waiting[i] == 0) ready.push_back(static_cast<int>(i));
  }
  size_t done = 0;
  while (!ready.empty()) {
    const auto i = static_cast<size_t>(ready.back());
    ready.pop_back();
    ++done;
    double start = 0;
    auto consider = [&](int from) {
      if (from < 0) return;
      const double end = out.times[static_cast<size_t>(from)].end_s;
      if (critical[i] < 0 || end > start) {
        start = end;
        critical[i] = from;
      }
    };
    consider(stream_prev[i]);
    for (int dep : program.tasks[i].deps) consider(dep);
    out.times[i] = {start, start + duration_s[i]};
    for (int next : successors[i]) {
      if (--waiting[static_cast<size_t>(next)] == 0) ready.push_back(next);
    }
  }
  if (done != n) fail(ErrorCode::kInvalidArgument, "timeline: the step's tasks wait on each other in a cycle");
  for (const TaskTime& t : out.times) out.step_s = std::max(out.step_s, t.end_s);

  // The stage reported: the one with the most compute (the critical path runs through it).
  std::vector<double> compute_of(static_cast<size_t>(program.stages), 0.0);
  for (size_t i = 0; i < n; ++i) {
    const StepTask& t = program.tasks[i];
    if (t.stream == program.compute_stream[static_cast<size_t>(t.stage)])
      compute_of[static_cast<size_t>(t.stage)] += duration_s[i];
  }
  out.stage = static_cast<int>(std::max_element(compute_of.begin(), compute_of.end()) - compute_of.begin());
  out.compute_s = compute_of[static_cast<size_t>(out.stage)];
  const int compute_stream = program.compute_stream[static_cast<size_t>(out.stage)];

  // Every idle window of that stage's compute stream is charged along the chain of critical
  // predecessors of the task that ends it: a collective's running time is exposed communication,
  // another stage's compute is pipeline bubble, and time before a collective started is charged
  // to whatever held it back.
  std::vector<double> exposed(n, 0.0);  // by task
  auto charge = [&](int task, double from, double to) {
    while (task >= 0 && to > from) {
      const StepTask& t = program.tasks[static_cast<size_t>(task)];
      const TaskTime& time = out.times[static_cast<size_t>(task)];
      if (t.kind == TaskKind::kCompute) {
        out.bubble_s += to - from;
        return;
      }
      const double overlap = std::max(0.0, std::min(to, time.end_s) - std::max(from, time.start_s));
      exposed[static_cast<size_t>(task)] += overlap;
      out.exposed_comm_s += overlap;
      to = std::min(to, time.start_s);
      task = critical[static_cast<size_t>(task)];
    }
  };
  double free_at = 0;
  for (size_t i = 0; i < n; ++i) {
    if (program.tasks[i].stream != compute_stream) continue;
    const TaskTime& time = out.times[i];
    if (time.start_s > free_at) charge(critical[i], free_at, time.start_s);
    free_at = time.end_s;
  }
  if (out.step_s > free_at) {
    // The tail: what ends the step after this stage's last compute.
    int last = 0;
    for (size_t i = 0; i < n; ++i) {
      if (out.times[i].end_s >= out.times[static_cast<size_t>(last)].end_s) last = static_cast<int>(i);
    }
    charge(last, free_at, out.step_s);
  }

  // One row per (label, group): the stage's own collectives, and those of other stages it waited
  // for (pipeline sends). Sizes differ within a row only for the embedding and head units; the
  // row shows the size most of its collectives have.
  struct Row {
    ExposedComm comm;
    std::map<int64_t, int> sizes;
  };
  std::map<std::pair<int, std::string>, Row> rows;
  for (size_t i = 0; i < n; ++i) {
    const StepTask& t = program.tasks[i];
    if (t.kind != TaskKind::kComm || (t.stage != out.stage && exposed[i] == 0)) continue;
    const CommOp& op = program.comms[static_cast<size_t>(t.comm)];
    const std::string& group = program.groups[static_cast<size_t>(op.group)].name;
    Row& row = rows[{t.label, group}];
    row.comm.label = program.labels[static_cast<size_t>(t.label)];
    row.comm.collective = op.collective;
    row.comm.group = group;
    row.comm.total_s += duration_s[i];
    row.comm.exposed_s += exposed[i];
    ++row.comm.count;
    ++row.sizes[op.bytes];
  }
  for (auto& [key, row] : rows) {
    row.comm.bytes = std::max_element(row.sizes.begin(), row.sizes.end(), [](const auto& a, const auto& b) {
                       return a.second < b.second;
                     })->first;
    out.top.push_back(row.comm);
  }
  std::stable_sort(out.top.begin(), out.top.end(),
                   [](const ExposedComm& a, const ExposedComm& b) { return a.exposed_s > b.exposed_s; });
  return out;
}

}  // namespace tandem::models
