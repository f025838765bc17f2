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

int64_t TransformerSpec::attention_parameters() const {
  const int64_t kv_dim = d_model / heads * kv_heads;
  return 2 * d_model * d_model + 2 * d_model * kv_dim;  // q, o; k, v
}

int64_t TransformerSpec::expert_parameters() const { return 3 * d_model * moe_ffn; }

int64_t TransformerSpec::layer_parameters() const {
  return attention_parameters() + 3 * d_model * ffn + 2 * d_model;  // + gate, up, down; two RMSNorms
}

int64_t TransformerSpec::layer_dense_parameters(int layer) const {
  if (!moe_layer(layer)) return layer_parameters();
  // Attention, the shared experts, the router and the two norms.
  return attention_parameters() + shared_experts * expert_parameters() + d_model * experts + 2 * d_model;
}

int64_t TransformerSpec::layer_expert_parameters(int layer) const {
  return moe_layer(layer) ? experts * expert_parameters() : 0;
}

int64_t TransformerSpec::other_parameters() const {
  return (tied_embeddings ? 1 : 2) * vocab * d_model + d_model;  // embedding (+ head) + final norm
}

int64_t TransformerSpec::parameters() const {
  int64_t total = other_parameters();
  for (int l = 0; l < layers; ++l) total += layer_dense_parameters(l) + layer_expert_parameters(l);
  return total;
}

int64_t TransformerSpec::active_parameters() const {
  int64_t total = other_parameters();
  for (int l = 0; l < layers; ++l)
    total += layer_dense_parameters(l) + (moe_layer(l) ? top_k * expert_parameters() : 0);
  return total;
}

namespace {

// The Llama 3 Herd of Models, Table 3; vocabulary 128,256 (the released config.json).
constexpr std::array<std::string_view, 6> kPresetNames{"llama3-8b",    "llama3-70b",    "llama3-405b",
                                                       "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3"};

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
  // Mixtral: every layer's MLP is 8 experts of the dense width, 2 per token (46.7 B, 12.9 B active).
  if (key == "mixtral-8x7b") return {"mixtral-8x7b", 32, 4096, 14336, 32, 8, 32000, false, 8, 2, 14336, 0, 0};
  if (key == "mixtral-8x22b") return {"mixtral-8x22b", 56, 6144, 16384, 48, 8, 32768, false, 8, 2, 16384, 0, 0};
  // DeepSeek-V3: 61 layers, the first 3 dense (ffn 18,432), then 256 routed experts of 2,048 (8 per
  // token) and one shared; 128 heads. Its multi-head latent attention is modelled as 128-head
  // attention of d_model 7,168 (205 M parameters a layer against MLA's 187 M).
  if (key == "deepseek-v3") return {"deepseek-v3", 61, 7168, 18432, 128, 128, 129280, false, 256, 8, 2048, 1, 3};
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
  if (model.experts < 0 || model.experts > 4096) bad("experts", model.experts, "must be 0..4096");
  if (model.moe()) {
    if (model.top_k < 1 || model.top_k > model.experts) bad("top_k", model.top_k, "must be 1..experts");
    if (model.moe_ffn < 1 || model.moe_ffn > (int64_t{1} << 24)) bad("moe_ffn", model.moe_ffn, "must be 1..16777216");
    if (model.shared_experts < 0 || model.shared_experts > 64)
      bad("shared_experts", model.shared_experts, "must be 0..64");
    if (model.dense_layers < 0 || model.dense_layers >= model.layers)
      bad("dense_layers", model.dense_layers, "must leave at least one MoE layer");
  }
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

std::string_view name(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

Recompute parse_recompute(std::string_view text) {
  const std::string key = lower(text);
  if (key == "none" || key == "false") return Recompute::kNone;
  if (key == "selective") return Recompute::kSelective;
  if (key == "full" || key == "true") return Recompute::kFull;
  fail(ErrorCode::kInvalidArgument, "unknown recompute '{}' (expected: none, selective, full)", text);
}

// ---- layout --------------------------------------------------------------------------------------

DerivedLayout derive(const TrainingConfig& config, int gpus, int gpus_per_node) {
  validate(config.model);
  const ParallelLayout& layout = config.layout;
  auto bad = [&](std::string_view what, auto&&... args) {
    fail(ErrorCode::kInvalidArgument, "layout '{}' on {} GPUs: {}", layout.name, gpus,
         fmt::format(fmt::runtime(what), args...));
  };
  if (layout.tp < 1 || layout.pp < 1 || layout.vp < 1 || layout.cp < 1 || layout.ep < 1)
    bad("tp, pp, vp, cp and ep must be at least 1");
  if (layout.ep > 1 && !config.model.moe()) bad("ep = {} needs a mixture-of-experts model", layout.ep);
  if (config.model.moe() && config.model.experts % layout.ep != 0)
    bad("ep = {} does not divide the model's {} experts", layout.ep, config.model.experts);
  if (layout.ep > 1 && (layout.sharding == Sharding::kFsdp || layout.sharding == Sharding::kHsdp))
    bad("expert parallelism runs with sharding zero1 or none (FSDP of expert-parallel experts is not modelled)");
  if (!(config.capacity_factor >= 1 && config.capacity_factor <= 16))
    bad("capacity_factor must be in [1, 16] (got {})", config.capacity_factor);
  const int64_t model_ranks = int64_t{layout.tp} * layout.pp * layout.cp;
  if (gpus % model_ranks != 0) bad("tp x pp x cp = {} does not divide the GPUs", model_ranks);
  const int kv_heads = config.model.kv_heads;
  if (config.model.heads % layout.tp != 0 || (kv_heads % layout.tp != 0 && layout.tp % kv_heads != 0)) {
    bad("tp = {} does not split the model's {} heads and {} KV heads", layout.tp, config.model.heads, kv_heads);
  }
  if (layout.tp > gpus_per_node || gpus_per_node % layout.tp != 0) {
    bad("tensor parallelism stays inside a node: tp = {} must divide the {} GPUs of a node", layout.tp, gpus_per_node);
  }
  if (int64_t{layout.pp} * layout.vp > config.model.layers) {
    bad("pp x vp = {} is more than the model's {} layers", int64_t{layout.pp} * layout.vp, config.model.layers);
  }
  if (layout.vp > 1 && layout.pp < 2) bad("vp = {} needs pipeline parallelism (pp of at least 2)", layout.vp);
  if (config.seq_len < 1 || config.seq_len > kMaxSeqLen) bad("seq_len must be 1..{}", kMaxSeqLen);
  if (layout.cp > 1 && config.seq_len % (2 * layout.cp) != 0) {
    bad("cp = {} splits each sequence into 2 x cp load-balanced chunks: seq_len {} must be a multiple of {}", layout.cp,
        config.seq_len, 2 * layout.cp);
  }
  if (config.micro_batch < 1) bad("micro_batch must be at least 1");
  if (config.mfu && !(*config.mfu > 0 && *config.mfu <= 1)) bad("mfu must be in (0, 1] (got {})", *config.mfu);
  DerivedLayout d;
  d.gpus = gpus;
  d.dp = static_cast<int>(gpus / model_ranks);
  d.data_ranks = d.dp * layout.cp;
  if (d.dp % layout.ep != 0) bad("ep = {} must divide the {} data-parallel ranks", layout.ep, d.dp);
  d.expert_data_ranks = d.data_ranks / layout.ep;
  if (config.global_batch < 1 || config.global_batch % (d.dp * config.micro_batch) != 0) {
    bad("global_batch {} does not split into {} data-parallel ranks x micro_batch {}", config.global_batch, d.dp,
        config.micro_batch);
  }
  d.microbatches = config.global_batch / (d.dp * config.micro_batch);
  if (d.microbatches > kMaxMicrobatches)
    bad("{} microbatches, above the limit of {}", d.microbatches, kMaxMicrobatches);
  if (layout.vp > 1 && d.microbatches % layout.pp != 0) {
    bad("the interleaved schedule runs microbatches in groups of pp: {} microbatches is not a multiple of pp = {}",
        d.microbatches, layout.pp);
  }
  switch (layout.sharding) {
    case Sharding::kNone:
    case Sharding::kZero1:
      d.shard_group = 1;
      break;
    case Sharding::kFsdp:
      d.shard_group = d.data_ranks;
      break;
    case Sharding::kHsdp: {
      d.shard_group = layout.shard_group > 0 ? layout.shard_group : std::max(1, gpus_per_node / layout.tp);
      if (d.shard_group > d.data_ranks || d.data_ranks % d.shard_group != 0) {
        bad("hsdp shard_group {} does not divide the {} data-parallel ranks", d.shard_group, d.data_ranks);
      }
      break;
    }
  }
  d.replicas = d.data_ranks / d.shard_group;
  const int layers = config.model.layers;
  const int virtual_stages = layout.pp * layout.vp;
  for (int v = 0; v < virtual_stages; ++v)
    d.layers_of_stage.push_back(layers / virtual_stages + (v < layers % virtual_stages ? 1 : 0));
  return d;
}

// ---- memory --------------------------------------------------------------------------------------

double MemoryBreakdown::total_bytes() const {
  return weights_bytes + gradients_bytes + optimizer_bytes + unsharded_bytes + activations_bytes + logits_bytes +
         runtime_bytes;
}

namespace {

int virtual_stages(const TrainingConfig& config) { return config.layout.pp * config.layout.vp; }

// The first layer of virtual stage v.
int first_layer(const DerivedLayout& d, int v) {
  int layer = 0;
  for (int u = 0; u < v; ++u) layer += d.layers_of_stage[static_cast<size_t>(u)];
  return layer;
}

// Parameters a virtual stage holds before tensor (dense) and expert (routed experts) parallelism:
// its layers, the embedding on the first, the output head (and final norm) on the last.
struct StageParameters {
  double dense = 0;
  double expert = 0;
  int moe_layers = 0;
};
StageParameters virtual_stage_parameters(const TrainingConfig& config, const DerivedLayout& d, int v) {
  const TransformerSpec& m = config.model;
  const int last = virtual_stages(config) - 1;
  StageParameters p;
  const int first = first_layer(d, v);
  for (int l = first; l < first + d.layers_of_stage[static_cast<size_t>(v)]; ++l) {
    p.dense += static_cast<double>(m.layer_dense_parameters(l));
    p.expert += static_cast<double>(m.layer_expert_parameters(l));
    p.moe_layers += m.moe_layer(l) ? 1 : 0;
  }
  const double matrix = static_cast<double>(m.vocab * m.d_model);
  if (v == 0) p.dense += matrix;
  if (v == last && (!m.tied_embeddings || last > 0)) p.dense += matrix + static_cast<double>(m.d_model);
  return p;
}

// The microbatches whose activations a rank holds at its peak, in units of one virtual stage's
// layers: the warm-up forwards of its schedule plus the one in flight (1F1B: pp - stage;
// interleaved: Megatron's (pp - stage - 1) x 2 + (vp - 1) x pp + 1).
int units_in_flight(const TrainingConfig& config, const DerivedLayout& d, int stage) {
  const int pp = config.layout.pp, vp = config.layout.vp;
  const int total = d.microbatches * vp;
  const int warmup = vp == 1 ? pp - stage - 1 : (pp - stage - 1) * 2 + (vp - 1) * pp;
  return std::min(total, warmup + 1);
}

// Activation bytes one layer saves per token for backward (bf16), with flash attention: the two
// norms' inputs, q / k / v and the attention output, and the gated MLP's gate, up, SiLU and product.
// torchtitan's selective policy keeps only the outputs of the matmuls but every second one (q/k/v,
// the output projection, w1, w3, w2: the 1st, 3rd and 5th) and of attention.
// An MoE layer keeps, for the MLP, the routed copies of each token's hidden state before and after
// the experts (top_k x capacity of them) and each expert's gate, up, SiLU and product.
double activation_bytes_per_token(const TrainingConfig& config, bool moe_layer = false) {
  const TransformerSpec& m = config.model;
  const double h = static_cast<double>(m.d_model), f = static_cast<double>(m.ffn);
  const double kv_dim = static_cast<double>(m.d_model / m.heads * m.kv_heads);
  if (moe_layer) {
    const double routed = m.top_k * config.capacity_factor;
    const double experts = routed + m.shared_experts;
    return 2.0 * (4.0 * h + 2.0 * kv_dim + 2.0 * routed * h + 4.0 * experts * static_cast<double>(m.moe_ffn));
  }
  if (config.recompute == Recompute::kSelective && config.kernels == KernelStack::kEager) {
    return 2.0 * ((h + 2.0 * kv_dim) + f + h + h);  // qkv, w1, w2 outputs; attention output
  }
  return 2.0 * (4.0 * h + 2.0 * kv_dim + 4.0 * f);
}

double grad_bytes(const TrainingConfig& config) { return static_cast<double>(size_bytes(config.grad_reduce_dtype)); }

// Tokens of one microbatch on one rank: context parallelism splits each sequence.
double tokens_per_rank(const TrainingConfig& config) {
  return static_cast<double>(config.micro_batch) * config.seq_len / config.layout.cp;
}

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
  double dense = 0, expert = 0, layers = 0, moe_layers = 0;
  for (int v = stage; v < virtual_stages(config); v += layout.pp) {
    const StageParameters p = virtual_stage_parameters(config, d, v);
    dense += p.dense;
    expert += p.expert;
    moe_layers += p.moe_layers;
    layers += d.layers_of_stage[static_cast<size_t>(v)];
  }
  // Routed experts split over the expert-parallel ranks (not over tensor parallelism); their
  // optimizer state over the ranks that hold the same experts.
  const double local = dense / tp + expert / layout.ep;
  const bool sharded = layout.sharding == Sharding::kFsdp || layout.sharding == Sharding::kHsdp;
  const double shard = sharded ? d.shard_group : 1;
  MemoryBreakdown mem;
  mem.weights_bytes = 2.0 * local / shard;
  mem.gradients_bytes = grad_bytes(config) * local / shard;
  if (layout.sharding == Sharding::kZero1) {
    mem.optimizer_bytes =
        kOptimizerBytesPerParam * (dense / tp / d.data_ranks + expert / layout.ep / d.expert_data_ranks);
  } else {
    mem.optimizer_bytes = kOptimizerBytesPerParam * local / shard;
  }
  if (sharded && d.shard_group > 1) {
    // The largest layer (an MoE layer holds its experts too: FSDP runs with ep = 1).
    const int largest = m.moe() ? m.dense_layers : 0;
    const double layer = static_cast<double>(m.layer_dense_parameters(largest)) / tp +
                         static_cast<double>(m.layer_expert_parameters(largest));
    mem.unsharded_bytes = 2.0 * 2.0 * layer + grad_bytes(config) * layer;
  }
  const double tokens = tokens_per_rank(config);
  const double chunk_layers = layers / layout.vp;  // one virtual stage's layers, on average
  const double in_flight = units_in_flight(config, d, stage);
  const double moe_share = layers > 0 ? moe_layers / layers : 0;
  const double full =
      ((1 - moe_share) * activation_bytes_per_token(config) + moe_share * activation_bytes_per_token(config, true)) /
      tp;
  if (config.recompute == Recompute::kFull) {
    const double input = 2.0 * static_cast<double>(m.d_model) / tp;  // each layer's input only
    mem.activations_bytes = in_flight * tokens * chunk_layers * input + tokens * full;
  } else {
    mem.activations_bytes = in_flight * tokens * chunk_layers * full;
  }
  if (stage == layout.pp - 1) mem.logits_bytes = tokens * static_cast<double>(m.vocab) * kLogitBytes / tp;
  mem.runtime_bytes = kRuntimeReserveBytes;
  mem.stage = stage;
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

int activation_units_in_flight(const TrainingConfig& config, const DerivedLayout& derived, int stage) {
  return units_in_flight(config, derived, stage);
}

void check_fits(const TrainingConfig& config, const DerivedLayout& derived, const GpuSpec& gpu) {
  const MemoryBreakdown mem = memory_per_gpu(config, derived);
  if (mem.total_bytes() <= gpu.memory_bytes) return;
  std::string advice;
  if (config.recompute != Recompute::kFull && mem.activations_bytes > 0.3 * mem.total_bytes())
    advice = "recompute: full, context parallelism (cp), ";
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
  return 6.0 * (static_cast<double>(model.active_parameters()) - embedding) +
         12.0 * model.layers * static_cast<double>(model.d_model) * seq_len;
}

double compute_seconds(const StepTask& task, const GpuSpec& gpu, Precision precision, std::optional<double> mfu) {
  if (!mfu) return task.kernel_s;
  const double peak = precision == Precision::kFP8 ? gpu.fp8_flops : gpu.bf16_flops;
  if (!(peak > 0)) fail(ErrorCode::kUnsupported, "the {} has no {} tensor cores", gpu.name, name(precision));
  return task.flops / (peak * *mfu) + task.fixed_s;
}

std::string describe_compute(const TrainingConfig& config) {
  if (config.mfu) return fmt::format("compute at {:.1f}% MFU (override)", 100 * *config.mfu);
  return fmt::format("compute timed from the {} kernels", name(config.kernels));
}

// ---- kernels -------------------------------------------------------------------------------------

namespace {

// HBM bytes per element of the memory-bound ops, forward (docs/kernels.md counts them). Fused: one
// kernel reads its inputs and writes its output once, in bf16. Eager: every PyTorch op of the
// layer as torchtitan writes it reads and writes its own tensors, RMSNorm and rotary in fp32.
struct ElementwiseBytes {
  double norm;      // per element of d_model
  double rotary;    // per element of q and k
  double residual;  // per element of d_model
  double swiglu;    // per element of ffn
  double loss;      // per logit: softmax cross-entropy
};
// Fused: norm reads x, writes y (2 + 2); rotary reads and writes q, k (2 + 2); residual add reads
// two, writes one (6); SwiGLU reads gate and up, writes the product (6); vocab-parallel
// cross-entropy reads the bf16 logits and writes the fp32 softmax it keeps for backward (2 + 4).
constexpr ElementwiseBytes kFusedBytes{4, 4, 6, 6, 6};
// Eager: RMSNorm = x.float() (2 + 4), pow (4 + 4), mean (4), rsqrt-multiply (4 + 4), type_as
// (4 + 2), weight multiply (2 + 2) = 36; rotary = float (2 + 4), complex multiply (4 + 4), type_as
// (4 + 2) = 20; SiLU (2 + 2) and multiply (4 + 2) = 10; cross-entropy on fp32 logits: float (2 + 4),
// log_softmax (4 + 4) = 14.
constexpr ElementwiseBytes kEagerBytes{36, 20, 6, 10, 14};
// Backward of a memory-bound op: reads the saved input and the incoming gradient, writes the
// outgoing one: twice the forward's traffic.
constexpr double kElementwiseBackwardFactor = 2.0;
// Flash attention's backward: five matmuls to the forward's two (FlashAttention-2, §3.1.2).
constexpr double kAttentionBackwardFlopsFactor = 2.5;
// fp8 GEMMs (Transformer Engine): each input is cast from bf16 to fp8 by its own kernel.
constexpr double kFp8CastBytesPerElement = 3;

}  // namespace

LayerKernels layer_kernels(const TrainingConfig& config, const GpuSpec& gpu) {
  const TransformerSpec& m = config.model;
  const KernelEnv env{gpu, config.precision, config.kernels};
  const bool eager = config.kernels == KernelStack::kEager;
  const ElementwiseBytes& e = eager ? kEagerBytes : kFusedBytes;
  const double tp = config.layout.tp;
  const double t = tokens_per_rank(config);
  const double h = static_cast<double>(m.d_model);
  const double head_dim = h / m.heads;
  const double q = h / tp;
  // Grouped-query attention under TP: each rank keeps its share of the KV heads, or one when
  // there are fewer KV heads than TP ranks (replicated, as Megatron does).
  const double kv = head_dim * std::max(1.0, static_cast<double>(m.kv_heads) / tp);
  const double f = static_cast<double>(m.ffn) / tp;
  const double vocab = static_cast<double>(m.vocab) / tp;

  // A GEMM's forward, or its backward (data gradient and weight gradient), with fp8's casts.
  auto forward = [&](GemmShape s) {
    KernelCost cost = gemm(env, s);
    if (config.precision == Precision::kFP8) cost += memory_bound(env, kFp8CastBytesPerElement * s.m * s.k);
    return cost;
  };
  auto backward = [&](GemmShape s) {
    KernelCost cost = gemm(env, {s.m, s.k, s.n});  // dX = dY W^T
    cost += gemm(env, {s.k, s.n, s.m});            // dW = X^T dY
    if (config.precision == Precision::kFP8) cost += memory_bound(env, kFp8CastBytesPerElement * s.m * s.n);
    return cost;
  };
  // Sequence parallelism: norms and residuals run on the rank's 1/tp of the tokens.
  const double norm = e.norm * t * h / tp, residual = e.residual * t * h / tp;
  const GemmShape qkv{t, q + 2 * kv, h}, out{t, h, q};
  // eager: two GEMMs for gate and up (torchtitan's w1, w3); fused: one of twice the width.
  const GemmShape gate_up{t, 2 * f, h}, gate{t, f, h}, down{t, h, f};
  // Causal flash attention: QK^T and PV over half the score matrix; with context parallelism the
  // load-balanced chunks give each rank 1/cp of the work.
  const double attention_flops = 4.0 * t * (config.seq_len / 2.0) * q;

  LayerKernels k;
  for (bool is_backward : {false, true}) {
    KernelCost attention, mlp, gemms, elementwise_ops;
    auto gemm_of = [&](GemmShape s) {
      const KernelCost cost = is_backward ? backward(s) : forward(s);
      gemms += cost;
      return cost;
    };
    auto elementwise = [&](double bytes, bool backward_pass) {
      const KernelCost cost = memory_bound(env, backward_pass ? kElementwiseBackwardFactor * bytes : bytes);
      elementwise_ops += cost;
      return cost;
    };
    attention += elementwise(norm, is_backward);
    attention += gemm_of(qkv);
    attention += elementwise(e.rotary * t * (q + kv), is_backward);
    const KernelCost core = flash_attention(
        env, is_backward ? kAttentionBackwardFlopsFactor * attention_flops : attention_flops, is_backward);
    attention += core;
    attention += gemm_of(out);
    attention += elementwise(residual, is_backward);
    mlp += elementwise(norm, is_backward);
    if (eager) {
      mlp += gemm_of(gate);
      mlp += gemm_of(gate);
    } else {
      mlp += gemm_of(gate_up);
    }
    mlp += elementwise(e.swiglu * t * f, is_backward);
    mlp += gemm_of(down);
    mlp += elementwise(residual, is_backward);
    if (!is_backward && config.recompute == Recompute::kSelective && eager) {
      // Half the layer's forward GEMMs and all of its elementwise ops, again.
      k.selective_recompute.seconds = gemms.seconds / 2 + elementwise_ops.seconds;
      k.selective_recompute.flops = gemms.flops / 2;
      k.selective_recompute.bytes = elementwise_ops.bytes;
      k.selective_recompute.kernels = gemms.kernels / 2 + elementwise_ops.kernels;
    }
    if (m.moe()) {
      // Routed tokens on this rank (sequence-parallel share), as the dispatcher pads them.
      const double t_moe = t / tp;
      const double routed = t_moe * m.top_k * config.capacity_factor;
      const double local_experts = static_cast<double>(m.experts) / config.layout.ep;
      const double per_expert = routed / local_experts;
      const double e_ffn = static_cast<double>(m.moe_ffn);
      KernelCost moe = elementwise(norm, is_backward);
      moe += gemm_of({t_moe, static_cast<double>(m.experts), h});  // the router
      moe += elementwise(2.0 * routed * h * 2.0, is_backward);     // permute, unpermute
      KernelCost expert = gemm_of({per_expert, 2 * e_ffn, h});
      expert += elementwise(e.swiglu * per_expert * e_ffn, is_backward);
      expert += gemm_of({per_expert, h, e_ffn});
      expert.seconds *= local_experts;  // the grouped GEMM: the local experts one after another
      expert.flops *= local_experts;
      expert.bytes *= local_experts;
      expert.kernels = static_cast<int>(expert.kernels * local_experts);
      moe += expert;
      if (m.shared_experts > 0) {
        const double shared = m.shared_experts * e_ffn;
        moe += gemm_of({t_moe, 2 * shared, h});
        moe += elementwise(e.swiglu * t_moe * shared, is_backward);
        moe += gemm_of({t_moe, h, shared});
      }
      moe += elementwise(residual, is_backward);
      (is_backward ? k.moe_bwd : k.moe_fwd) = moe;
      k.moe_dispatch_bytes = routed * h * 2.0;
    }
    KernelCost head = elementwise(norm, is_backward);
    head += gemm_of({t, vocab, h});
    head += elementwise(e.loss * t * vocab, is_backward);
    // The lookup reads a row and writes it (forward); the backward scatter-adds into the table.
    const KernelCost embedding = elementwise(4.0 * t * h / tp, is_backward);
    (is_backward ? k.attention_bwd : k.attention_fwd) = attention;
    (is_backward ? k.core_bwd : k.core_fwd) = core;
    (is_backward ? k.mlp_bwd : k.mlp_fwd) = mlp;
    (is_backward ? k.head_bwd : k.head_fwd) = head;
    (is_backward ? k.embedding_bwd : k.embedding_fwd) = embedding;
  }
  return k;
}

// ---- the step program ----------------------------------------------------------------------------

namespace {

// Builds one step's tasks. Ranks are placed Megatron-style, tensor-parallel index fastest, then
// context-parallel, data-parallel, pipeline stage: r = (stage * data_ranks + data) * tp + tp_index
// with data = dp_index * cp + cp_index; rank r on GPU r. Virtual pipeline stage v (pp * vp of them)
// runs on rank stage v mod pp.
class StepBuilder {
 public:
  StepBuilder(const TrainingConfig& config, const ClusterSpec& cluster, const DerivedLayout& d)
      : config_(config),
        cluster_(cluster),
        d_(d),
        m_(config.model),
        tp_(config.layout.tp),
        pp_(config.layout.pp),
        vp_(config.layout.vp),
        cp_(config.layout.cp),
        kernels_(layer_kernels(config, cluster.gpu)) {}

  StepProgram build() {
    program_.stages = pp_;
    make_groups();
    for (int s = 0; s < pp_; ++s) program_.compute_stream.push_back(stream(s, "compute"));
    const auto virtual_stages = static_cast<size_t>(pp_ * vp_);
    fwd_send_.assign(virtual_stages, std::vector<int>(static_cast<size_t>(d_.microbatches), -1));
    bwd_send_ = fwd_send_;
    for (int s = 0; s < pp_; ++s) build_rank(s);
    // A virtual stage's forward waits for the previous one's activations and its backward for the
    // next one's gradients: sends built later than the task that needs them are tied in here.
    for (const Pending& p : pending_) {
      const auto& sends = p.forward ? fwd_send_ : bwd_send_;
      const int send = sends[static_cast<size_t>(p.from)][static_cast<size_t>(p.microbatch)];
      if (send < 0) fail(ErrorCode::kInvalidArgument, "step program: a pipeline send was never built (a bug)");
      program_.tasks[static_cast<size_t>(p.task)].deps.push_back(send);
    }
    const double tokens = static_cast<double>(config_.global_batch) * config_.seq_len;
    program_.tokens = tokens;
    program_.model_flops = tokens * model_flops_per_token(m_, config_.seq_len);
    return std::move(program_);
  }

 private:
  int rank(int stage, int data, int tp_index) const { return (stage * d_.data_ranks + data) * tp_ + tp_index; }

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
    const int data = d_.data_ranks;
    if (tp_ > 1) {
      std::vector<std::vector<int>> instances;
      for (int s = 0; s < pp_; ++s) {
        for (int i = 0; i < data; ++i) {
          std::vector<int> g;
          for (int j = 0; j < tp_; ++j) g.push_back(rank(s, i, j));
          instances.push_back(std::move(g));
        }
      }
      tp_group_ = add_group("tp", std::move(instances));
    }
    if (cp_ > 1) {
      std::vector<std::vector<int>> instances;
      for (int s = 0; s < pp_; ++s) {
        for (int i = 0; i < d_.dp; ++i) {
          for (int j = 0; j < tp_; ++j) {
            std::vector<int> g;
            for (int c = 0; c < cp_; ++c) g.push_back(rank(s, i * cp_ + c, j));
            instances.push_back(std::move(g));
          }
        }
      }
      cp_group_ = add_group("cp", std::move(instances));
    }
    // Expert parallelism: ep ranks of the data-parallel dimension (Megatron's order tp, cp, ep, dp:
    // data index (block x ep + e) x cp + c); the expert-data group joins the ranks holding the same
    // experts across the blocks and the CP ranks.
    const int ep = config_.layout.ep;
    if (ep > 1) {
      std::vector<std::vector<int>> expert, expert_data;
      for (int s = 0; s < pp_; ++s) {
        for (int j = 0; j < tp_; ++j) {
          for (int c = 0; c < cp_; ++c) {
            for (int b = 0; b < d_.dp / ep; ++b) {
              std::vector<int> g;
              for (int e = 0; e < ep; ++e) g.push_back(rank(s, (b * ep + e) * cp_ + c, j));
              expert.push_back(std::move(g));
            }
          }
          for (int e = 0; e < ep; ++e) {
            std::vector<int> g;
            for (int b = 0; b < d_.dp / ep; ++b) {
              for (int c = 0; c < cp_; ++c) g.push_back(rank(s, (b * ep + e) * cp_ + c, j));
            }
            expert_data.push_back(std::move(g));
          }
        }
      }
      ep_group_ = add_group("ep", std::move(expert));
      if (d_.expert_data_ranks > 1) expert_data_group_ = add_group("edp", std::move(expert_data));
    }
    // The data-parallel ranks (with CP: every rank holding the same parameters) of (stage, tp
    // index): `blocks` groups of `count`, ranks `stride` apart, blocks `block_stride` apart.
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
    if (data > 1) {
      if (sharding == Sharding::kHsdp) {
        const int shard = d_.shard_group, replicas = d_.replicas;
        if (shard > 1) data_group_ = add_group("hsdp-shard", data_instances(shard, 1, replicas, shard));
        if (replicas > 1) replicate_group_ = add_group("hsdp-replicate", data_instances(replicas, shard, shard, 1));
      } else {
        data_group_ = add_group(sharding == Sharding::kFsdp ? "fsdp" : "dp", data_instances(data, 1, 1, 0));
      }
    }
    // Without expert parallelism the routed experts reduce over the data group like the rest.
    if (m_.moe() && ep == 1 && sharding != Sharding::kFsdp && sharding != Sharding::kHsdp)
      expert_data_group_ = data_group_;
    // Point to point between consecutive stages; the interleaved schedule also sends from the last
    // stage back to the first (virtual stage pp - 1 to pp, and so on).
    const int links = vp_ > 1 ? pp_ : pp_ - 1;
    for (int s = 0; s < links; ++s) {
      const int next = (s + 1) % pp_;
      std::vector<std::vector<int>> instances;
      for (int i = 0; i < data; ++i) {
        for (int j = 0; j < tp_; ++j) instances.push_back({rank(s, i, j), rank(next, i, j)});
      }
      pp_group_.push_back(add_group(fmt::format("pp{}-{}", s, next), std::move(instances)));
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

  // A compute task: `flops` are what an mfu override times (model-style hardware FLOPs), `kernels`
  // what the kernel model times.
  int compute(int stage, double flops, const KernelCost& kernels, std::string_view what, std::vector<int> deps) {
    StepTask t;
    t.kind = TaskKind::kCompute;
    t.stage = stage;
    t.stream = program_.compute_stream[static_cast<size_t>(stage)];
    t.flops = flops;
    t.kernel_s = kernels.seconds;
    t.label = label(what);
    t.deps = std::move(deps);
    std::erase(t.deps, -1);
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
    std::erase(t.deps, -1);
    return add(std::move(t));
  }

  static std::vector<int> maybe(int task) { return task >= 0 ? std::vector<int>{task} : std::vector<int>{}; }

  // The attention core with context parallelism: the rank's share of the flash-attention work in
  // cp steps, each on the KV block that the previous ring step brought (send/recv with the next
  // CP rank, overlapped with the current step's compute, as Transformer Engine's ring attention
  // does). The backward passes the KV blocks and their gradients.
  void ring_attention(int stage, const KernelCost& core, double flops, bool backward, std::string_view what) {
    const double kv_dim =
        static_cast<double>(m_.d_model / m_.heads) * std::max(1.0, static_cast<double>(m_.kv_heads) / tp_);
    const double block_bytes = (backward ? 2.0 : 1.0) * 2.0 * kv_dim * tokens_per_rank(config_) * 2.0;
    KernelCost step = core;
    step.seconds /= cp_;
    int exchange = -1;
    for (int i = 0; i < cp_; ++i) {
      compute(stage, flops / cp_, step, what, maybe(exchange));
      if (i + 1 < cp_) {
        // The block for step i + 1 travels while step i computes: the first once q, k, v exist,
        // each later one after the previous (one block in flight per direction).
        exchange =
            comm(stage, "cp", Collective::kSendRecv, block_bytes, cp_group_,
                 backward ? "CP send/recv (KV, dKV)" : "CP send/recv (KV)", {i == 0 ? last_before_core_ : exchange});
      }
    }
  }

  // One block's compute (attention or MLP). With tp > 1 it sits between the sequence-parallel
  // all_gather and reduce_scatter; with tp_overlap those are split in tp chunks pipelined with the
  // GEMMs (Transformer Engine's userbuffers): only the first gather chunk and the last
  // reduce-scatter chunk wait on or hold up the compute.
  void block(int stage, double flops, const KernelCost& kernels, const KernelCost* core, double core_flops,
             bool backward, std::string_view what, std::vector<int> deps) {
    std::vector<int> work_deps = deps;
    int gather_rest = -1;
    if (tp_ > 1) {
      deps.push_back(last_tp_ >= 0 ? last_tp_ : last_compute_);
      std::erase(deps, -1);
      if (config_.layout.tp_overlap) {
        const int head = comm(stage, "tp", Collective::kAllGather, activation_bytes_ / tp_, tp_group_,
                              "TP all_gather (overlapped)", deps);
        gather_rest = comm(stage, "tp", Collective::kAllGather, activation_bytes_ * (tp_ - 1) / tp_, tp_group_,
                           "TP all_gather (overlapped)", {head});
        work_deps = {head};
      } else {
        work_deps = {comm(stage, "tp", Collective::kAllGather, activation_bytes_, tp_group_, "TP all_gather", deps)};
      }
    }
    int work;
    if (core != nullptr && cp_ > 1) {
      KernelCost rest = kernels;
      rest.seconds -= core->seconds;
      work = compute(stage, flops - core_flops, rest, what, work_deps);
      last_before_core_ = work;
      ring_attention(stage, *core, core_flops, backward, what);
      work = last_compute_;
    } else {
      work = compute(stage, flops, kernels, what, work_deps);
    }
    if (tp_ > 1) {
      if (config_.layout.tp_overlap) {
        const int rest = comm(stage, "tp", Collective::kReduceScatter, activation_bytes_ * (tp_ - 1) / tp_, tp_group_,
                              "TP reduce_scatter (overlapped)", {gather_rest});
        last_tp_ = comm(stage, "tp", Collective::kReduceScatter, activation_bytes_ / tp_, tp_group_,
                        "TP reduce_scatter (overlapped)", {work, rest});
      } else {
        last_tp_ =
            comm(stage, "tp", Collective::kReduceScatter, activation_bytes_, tp_group_, "TP reduce_scatter", {work});
      }
    }
  }

  // FLOPs of one layer's attention and MLP forward for the mfu override: 6N + 12 L d s style
  // (non-causal attention), this rank's share.
  double attention_flops() const {
    const double kv_dim = static_cast<double>(m_.d_model / m_.heads * m_.kv_heads);
    const double h = static_cast<double>(m_.d_model);
    return tokens_per_rank(config_) * (2.0 * (2.0 * h * h + 2.0 * h * kv_dim) + 4.0 * h * config_.seq_len) / tp_;
  }
  double core_flops() const {
    return tokens_per_rank(config_) * 4.0 * static_cast<double>(m_.d_model) * config_.seq_len / tp_;
  }
  double mlp_flops() const {
    return tokens_per_rank(config_) * 2.0 * 3.0 * static_cast<double>(m_.d_model) * static_cast<double>(m_.ffn) / tp_;
  }

  // The forward (or recomputed forward) of one layer.
  // An MoE layer's MLP: the tokens' hidden states travel to their experts' ranks (all_to_all on the
  // expert-parallel group), the local experts run, and the results travel back. Tokens stay
  // sequence-parallel around it (no TP collectives); the next block waits for the second
  // all_to_all. Backward: the gradients take the same two trips in reverse order.
  void moe_block(int stage, double flops, const KernelCost& kernels, bool backward, std::string_view what,
                 std::vector<int> deps) {
    deps.push_back(last_tp_ >= 0 ? last_tp_ : last_compute_);
    std::erase(deps, -1);
    if (ep_group_ < 0) {
      compute(stage, flops, kernels, what, deps);
      last_tp_ = -1;
      return;
    }
    const double bytes = kernels_.moe_dispatch_bytes;
    const int out = comm(stage, "ep", Collective::kAllToAll, bytes, ep_group_,
                         backward ? "EP all_to_all (combine grad)" : "EP all_to_all (dispatch)", deps);
    const int work = compute(stage, flops, kernels, what, {out});
    last_tp_ = comm(stage, "ep", Collective::kAllToAll, bytes, ep_group_,
                    backward ? "EP all_to_all (dispatch grad)" : "EP all_to_all (combine)", {work});
  }

  void layer_forward(int stage, int layer, std::vector<int> deps, std::string_view what) {
    block(stage, attention_flops(), kernels_.attention_fwd, &kernels_.core_fwd, core_flops(), false, what,
          std::move(deps));
    if (m_.moe_layer(layer)) {
      moe_block(stage, moe_flops(), kernels_.moe_fwd, false, what, {});
    } else {
      block(stage, mlp_flops(), kernels_.mlp_fwd, nullptr, 0, false, what, {});
    }
  }

  void layer_backward(int stage, int layer, std::vector<int> deps) {
    if (m_.moe_layer(layer)) {
      moe_block(stage, 2.0 * moe_flops(), kernels_.moe_bwd, true, "backward", std::move(deps));
    } else {
      block(stage, 2.0 * mlp_flops(), kernels_.mlp_bwd, nullptr, 0, true, "backward", std::move(deps));
    }
    block(stage, 2.0 * attention_flops(), kernels_.attention_bwd, &kernels_.core_bwd, 2.0 * core_flops(), true,
          "backward", {});
  }

  // An MoE MLP's forward FLOPs for the mfu override: the routed experts each token visits and the
  // shared ones (2 x 3 d moe_ffn each), on this rank's sequence-parallel share.
  double moe_flops() const {
    return tokens_per_rank(config_) / tp_ * (m_.top_k * config_.capacity_factor + m_.shared_experts) * 2.0 * 3.0 *
           static_cast<double>(m_.d_model) * static_cast<double>(m_.moe_ffn);
  }

  // The sharded units of a virtual stage, in forward order: its layers, and the embedding / head
  // matrices.
  struct Unit {
    double params = 0;         // before tensor parallelism
    double expert_params = 0;  // routed experts, before expert parallelism
    bool layer = false;
    bool head = false;
    int index = -1;  // the layer's index in the model
  };
  std::vector<Unit> units(int v) const {
    std::vector<Unit> out;
    const int last = pp_ * vp_ - 1;
    const double matrix = static_cast<double>(m_.vocab * m_.d_model);
    if (v == 0) out.push_back({matrix, 0, false, false, -1});
    const int first = first_layer(d_, v);
    for (int l = first; l < first + d_.layers_of_stage[static_cast<size_t>(v)]; ++l) {
      out.push_back({static_cast<double>(m_.layer_dense_parameters(l)),
                     static_cast<double>(m_.layer_expert_parameters(l)), true, false, l});
    }
    if (v == last && (!m_.tied_embeddings || last > 0))
      out.push_back({matrix + static_cast<double>(m_.d_model), 0, false, true, -1});
    return out;
  }

  double head_flops(double factor) const {
    return factor * tokens_per_rank(config_) * 2.0 * static_cast<double>(m_.vocab * m_.d_model) / tp_;
  }

  // One microbatch's forward through virtual stage v (on rank stage s).
  void forward(int s, int v, int mb) {
    const Sharding sharding = config_.layout.sharding;
    const bool fsdp = (sharding == Sharding::kFsdp || sharding == Sharding::kHsdp) && data_group_ >= 0;
    const std::vector<Unit> u = units(v);
    const size_t n = u.size();
    int first_task = -1;
    std::vector<int> ends(n, -1);
    for (size_t i = 0; i < n; ++i) {
      std::vector<int> deps;
      const bool gathers = fsdp || (sharding == Sharding::kZero1 && data_group_ >= 0 && mb == 0);
      if (gathers) {
        // At most two units gathered ahead: unit i's all_gather waits for unit i-2's compute.
        const int after = i >= 2 ? ends[i - 2] : -1;
        deps.push_back(comm(s, "data", Collective::kAllGather,
                            2.0 * (u[i].params / tp_ + (fsdp ? u[i].expert_params : 0)), data_group_,
                            fsdp ? "FSDP all_gather (fwd)" : "DP all_gather (params)", maybe(after)));
      }
      if (!fsdp && sharding == Sharding::kZero1 && expert_data_group_ >= 0 && mb == 0 && u[i].expert_params > 0) {
        deps.push_back(comm(s, "data", Collective::kAllGather, 2.0 * u[i].expert_params / config_.layout.ep,
                            expert_data_group_, "EDP all_gather (expert params)", {}));
      }
      // The microbatch's activations gate its first layer's first task (the TP all_gather of
      // them, or the compute), not the parameter gathers before it.
      if (i == 0) first_task = static_cast<int>(program_.tasks.size());
      if (u[i].layer) {
        layer_forward(s, u[i].index, deps, "forward");
      } else if (u[i].head) {
        compute(s, head_flops(1.0), kernels_.head_fwd, "head forward", deps);
      } else {
        compute(s, 0, kernels_.embedding_fwd, "embedding", deps);
      }
      ends[i] = last_compute_;
    }
    // The first compute of this microbatch waits for the previous virtual stage's activations.
    if (v > 0) pending_.push_back({first_task, true, v - 1, mb});
    if (v + 1 < pp_ * vp_) {
      fwd_send_[static_cast<size_t>(v)][static_cast<size_t>(mb)] =
          comm(s, "pp-fwd", Collective::kSendRecv, activation_bytes_ / tp_, pp_group_[static_cast<size_t>(s)],
               "PP send (activations)", maybe(last_compute_));
    }
  }

  // One microbatch's backward through virtual stage v; `grad_reductions` collects the collectives
  // the optimizer waits for.
  void backward(int s, int v, int mb, std::vector<int>& grad_reductions) {
    const Sharding sharding = config_.layout.sharding;
    const bool fsdp = (sharding == Sharding::kFsdp || sharding == Sharding::kHsdp) && data_group_ >= 0;
    const std::vector<Unit> u = units(v);
    const size_t n = u.size();
    const bool last_mb = mb == d_.microbatches - 1;
    int first_task = -1;
    std::vector<int> ends(n, -1);
    auto gather = [&](size_t i, int after) {
      return comm(s, "data", Collective::kAllGather, 2.0 * (u[i].params / tp_ + u[i].expert_params), data_group_,
                  "FSDP all_gather (bwd)", maybe(after));
    };
    // FSDP gathers the next unit's parameters (backward order) before it reduce-scatters this
    // unit's gradients, so that the gather is not queued behind the reduction.
    int gathered = fsdp ? gather(n - 1, -1) : -1;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = n - 1 - k;
      std::vector<int> deps = maybe(gathered);
      if (k == 0) first_task = static_cast<int>(program_.tasks.size());
      if (u[i].layer) {
        if (config_.recompute == Recompute::kFull) {
          layer_forward(s, u[i].index, deps, "recompute");
          deps.clear();
        } else if (kernels_.selective_recompute.seconds > 0) {
          compute(s, kernels_.selective_recompute.flops, kernels_.selective_recompute, "recompute", deps);
          deps.clear();
        }
        layer_backward(s, u[i].index, deps);
      } else if (u[i].head) {
        compute(s, head_flops(2.0), kernels_.head_bwd, "head backward", deps);
      } else {
        compute(s, 0, kernels_.embedding_bwd, "embedding backward", deps);
      }
      ends[i] = last_compute_;
      if (fsdp && i > 0) gathered = gather(i - 1, k >= 1 ? ends[i + 1] : -1);
      const double grads = grad_bytes(config_) * u[i].params / tp_;
      // FSDP and HSDP shard the routed experts with the rest (they run with ep = 1).
      const double all_grads = grads + grad_bytes(config_) * u[i].expert_params;
      if (last_mb && expert_data_group_ >= 0 && u[i].expert_params > 0) {
        // The routed experts' gradients reduce over the ranks that hold the same experts.
        const double expert_grads = grad_bytes(config_) * u[i].expert_params / config_.layout.ep;
        const bool zero1 = sharding == Sharding::kZero1;
        grad_reductions.push_back(comm(
            s, "data", zero1 ? Collective::kReduceScatter : Collective::kAllReduce, expert_grads, expert_data_group_,
            zero1 ? "EDP reduce_scatter (expert grads)" : "EDP all_reduce (expert grads)", {last_compute_}));
      }
      if (data_group_ < 0 && replicate_group_ < 0) continue;
      if (fsdp) {
        const int rs = comm(s, "data", Collective::kReduceScatter, all_grads, data_group_,
                            "FSDP reduce_scatter (grads)", {last_compute_});
        grad_reductions.push_back(rs);
        if (last_mb && replicate_group_ >= 0) {
          grad_reductions.push_back(comm(s, "replicate", Collective::kAllReduce, all_grads / d_.shard_group,
                                         replicate_group_, "HSDP all_reduce (replicas)", {rs}));
        }
      } else if (last_mb && replicate_group_ >= 0) {  // hsdp with shard groups of one: plain DDP
        grad_reductions.push_back(comm(s, "replicate", Collective::kAllReduce, all_grads, replicate_group_,
                                       "HSDP all_reduce (replicas)", {last_compute_}));
      } else if (last_mb && sharding == Sharding::kZero1) {
        grad_reductions.push_back(comm(s, "data", Collective::kReduceScatter, grads, data_group_,
                                       "DP reduce_scatter (grads)", {last_compute_}));
      } else if (last_mb) {
        grad_reductions.push_back(
            comm(s, "data", Collective::kAllReduce, grads, data_group_, "DP all_reduce (grads)", {last_compute_}));
      }
    }
    // The first compute of this microbatch's backward waits for the next virtual stage's gradients.
    if (v + 1 < pp_ * vp_) pending_.push_back({first_task, false, v + 1, mb});
    if (v > 0) {
      bwd_send_[static_cast<size_t>(v)][static_cast<size_t>(mb)] =
          comm(s, "pp-bwd", Collective::kSendRecv, activation_bytes_ / tp_,
               pp_group_[static_cast<size_t>((s + pp_ - 1) % pp_)], "PP send (gradients)", maybe(last_compute_));
    }
  }

  // Rank stage s's schedule: 1F1B (vp = 1: pp - s - 1 warm-up forwards, then one forward and one
  // backward in turn, then the rest) or Megatron's interleaved 1F1B over its vp model chunks, in
  // groups of pp microbatches per chunk.
  void build_rank(int s) {
    activation_bytes_ = tokens_per_rank(config_) * static_cast<double>(m_.d_model) * 2.0;
    last_compute_ = -1;
    last_tp_ = -1;
    const int total = d_.microbatches * vp_;
    const int group = pp_ * vp_;
    const int warmup = std::min(total, vp_ == 1 ? pp_ - s - 1 : (pp_ - s - 1) * 2 + (vp_ - 1) * pp_);
    auto microbatch = [&](int k) { return vp_ == 1 ? k : (k / group) * pp_ + k % pp_; };
    auto forward_chunk = [&](int k) { return vp_ == 1 ? 0 : (k % group) / pp_; };
    auto backward_chunk = [&](int k) { return vp_ - 1 - forward_chunk(k); };
    std::vector<int> grad_reductions;
    int next_forward = 0, next_backward = 0;
    auto run_forward = [&] {
      forward(s, forward_chunk(next_forward) * pp_ + s, microbatch(next_forward));
      ++next_forward;
    };
    auto run_backward = [&] {
      backward(s, backward_chunk(next_backward) * pp_ + s, microbatch(next_backward), grad_reductions);
      ++next_backward;
    };
    while (next_forward < warmup) run_forward();
    while (next_forward < total) {
      run_forward();
      run_backward();
    }
    while (next_backward < total) run_backward();

    // The optimizer step once this rank's gradients are reduced: HBM-bound over its shard.
    const Sharding sharding = config_.layout.sharding;
    double local = 0, local_experts = 0;
    for (int v = s; v < pp_ * vp_; v += pp_) {
      for (const Unit& unit : units(v)) {
        local += unit.params / tp_;
        local_experts += unit.expert_params / config_.layout.ep;
      }
    }
    if (sharding == Sharding::kZero1) {
      local /= d_.data_ranks;
      local_experts /= d_.expert_data_ranks;
    }
    if (sharding == Sharding::kFsdp || sharding == Sharding::kHsdp) local /= d_.shard_group;
    local += local_experts;
    const double traffic = local * kOptimizerTrafficBytesPerParam;
    StepTask optimizer;
    optimizer.kind = TaskKind::kCompute;
    optimizer.stage = s;
    optimizer.stream = program_.compute_stream[static_cast<size_t>(s)];
    optimizer.fixed_s = traffic / cluster_.gpu.hbm_Bps;
    optimizer.kernel_s = memory_bound(KernelEnv{cluster_.gpu, config_.precision, config_.kernels}, traffic).seconds;
    optimizer.label = label("optimizer");
    // FSDP reduces every microbatch's gradients; the optimizer waits for the last of each unit.
    optimizer.deps = grad_reductions;
    last_compute_ = add(std::move(optimizer));
  }

  struct Pending {
    int task = 0;
    bool forward = true;  // waits for fwd_send_[from] (else bwd_send_[from])
    int from = 0;         // virtual stage
    int microbatch = 0;
  };

  const TrainingConfig& config_;
  const ClusterSpec& cluster_;
  const DerivedLayout& d_;
  const TransformerSpec& m_;
  const int tp_, pp_, vp_, cp_;
  const LayerKernels kernels_;
  StepProgram program_;
  int tp_group_ = -1, cp_group_ = -1, ep_group_ = -1, expert_data_group_ = -1, data_group_ = -1, replicate_group_ = -1;
  std::vector<int> pp_group_;
  std::vector<std::vector<int>> fwd_send_, bwd_send_;  // by virtual stage, microbatch
  std::vector<Pending> pending_;
  int last_compute_ = -1, last_tp_ = -1, last_before_core_ = -1;
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
