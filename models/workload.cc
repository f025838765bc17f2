#include "models/workload.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "models/workload_internal.h"

namespace tandem::models {
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
  return parse_named(text, {Sharding::kNone, Sharding::kZero1, Sharding::kFsdp, Sharding::kHsdp}, "sharding");
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
  const std::string key = name_key(text);
  if (key == "none" || key == "false") return Recompute::kNone;
  if (key == "selective") return Recompute::kSelective;
  if (key == "full" || key == "true") return Recompute::kFull;
  fail(ErrorCode::kInvalidArgument, "unknown recompute '{}' (expected: none, selective, full)", text);
}

std::string_view name(GradAccumulation mode) {
  switch (mode) {
    case GradAccumulation::kFused:
      return "fused";
    case GradAccumulation::kHook:
      return "hook";
    case GradAccumulation::kDeepSpeed:
      return "deepspeed";
  }
  return "?";
}

GradAccumulation parse_grad_accumulation(std::string_view text) {
  return parse_named(text, {GradAccumulation::kFused, GradAccumulation::kHook, GradAccumulation::kDeepSpeed},
                     "grad_accumulation");
}

// The model (TransformerSpec, presets, model FLOPs): transformer.cc.

// ---- layout --------------------------------------------------------------------------------------

namespace {

// What in a configuration's sequence, kernels and options contradicts itself or the layout (empty:
// nothing); derive() reports it with the layout's name.
std::string workload_conflict(const TrainingConfig& config) {
  const ParallelLayout& layout = config.layout;
  const TransformerSpec& m = config.model;
  if (config.seq_len < 1 || config.seq_len > kMaxSeqLen) return fmt::format("seq_len must be 1..{}", kMaxSeqLen);
  if (m.positions == PositionKind::kLearned && config.seq_len > m.max_positions)
    return fmt::format("seq_len {} is longer than the model's learned position table ({} rows)", config.seq_len,
                       m.max_positions);
  if (m.mla() && unfused_attention(config))
    return "multi-head latent attention runs on flash kernels (attention 'unfused' is not modelled for it)";
  if (m.mla() && config.kernels == KernelStack::kEager)
    return "multi-head latent attention is modelled with the fused kernels (Megatron-Core's MLASelfAttention)";
  if (layout.cp > 1 && unfused_attention(config))
    return fmt::format(
        "cp = {}: context parallelism runs ring attention on flash kernels; attention 'unfused' needs cp = 1", layout.cp);
  if (layout.cp > 1 && config.seq_len % (2 * layout.cp) != 0)
    return fmt::format("cp = {} splits each sequence into 2 x cp load-balanced chunks: seq_len {} must be a multiple of {}",
                       layout.cp, config.seq_len, 2 * layout.cp);
  if (config.micro_batch < 1) return "micro_batch must be at least 1";
  if (config.grad_accumulation == GradAccumulation::kDeepSpeed && config.grad_reduce_dtype != DataType::kF32)
    return "grad_accumulation 'deepspeed' keeps and reduces fp32 gradients (BF16_Optimizer): set grad_reduce_dtype: f32";
  if (layout.etp > 1 && config.kernels == KernelStack::kEager)
    return "expert tensor parallelism (etp) is modelled with the fused kernels (Megatron-Core's grouped experts)";
  if (config.grad_accumulation != GradAccumulation::kFused &&
      (layout.sharding == Sharding::kFsdp || layout.sharding == Sharding::kHsdp))
    return fmt::format("grad_accumulation '{}' is a Megatron / DeepSpeed path; FSDP accumulates its own way (use fused)",
                       name(config.grad_accumulation));
  if (config.mfu && !(*config.mfu > 0 && *config.mfu <= 1))
    return fmt::format("mfu must be in (0, 1] (got {})", *config.mfu);
  return "";
}

}  // namespace

DerivedLayout derive(const TrainingConfig& config, int gpus, int gpus_per_node) {
  validate(config.model);
  const ParallelLayout& layout = config.layout;
  auto bad = [&](std::string_view what, auto&&... args) {
    fail(ErrorCode::kInvalidArgument, "layout '{}' on {} GPUs: {}", layout.name, gpus,
         fmt::format(fmt::runtime(what), args...));
  };
  if (layout.tp < 1 || layout.pp < 1 || layout.vp < 1 || layout.cp < 1 || layout.ep < 1 || layout.etp < 1)
    bad("tp, pp, vp, cp, ep and etp must be at least 1");
  if (layout.ep > 1 && !config.model.moe()) bad("ep = {} needs a mixture-of-experts model", layout.ep);
  if (config.model.moe() && config.model.experts % layout.ep != 0)
    bad("ep = {} does not divide the model's {} experts", layout.ep, config.model.experts);
  if (layout.etp > 1 && (!config.model.moe() || config.model.moe_ffn % layout.etp != 0))
    bad("etp = {} splits each routed expert: it needs an MoE model whose moe_ffn it divides", layout.etp);
  if (layout.etp > gpus_per_node || gpus_per_node % layout.etp != 0)
    bad("expert tensor parallelism stays inside a node: etp = {} must divide the {} GPUs of a node", layout.etp,
        gpus_per_node);
  if (layout.expert_shards() > 1 && (layout.sharding == Sharding::kFsdp || layout.sharding == Sharding::kHsdp))
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
  if (const std::string why = workload_conflict(config); !why.empty()) bad("{}", why);
  DerivedLayout d;
  d.gpus = gpus;
  d.dp = static_cast<int>(gpus / model_ranks);
  d.data_ranks = d.dp * layout.cp;
  // Megatron-Core's MoE parallel folding: the experts lay their own grid (expert TP, EP, expert DP)
  // over the tp x cp x dp ranks of a pipeline stage, so ep may take ranks of tp and cp too.
  const int stage_ranks = layout.tp * d.data_ranks;
  if (stage_ranks % layout.expert_shards() != 0)
    bad("ep x etp = {} must divide the {} ranks of a stage (tp x cp x dp: expert parallelism folds over them)",
        layout.expert_shards(), stage_ranks);
  d.expert_data_ranks = stage_ranks / layout.expert_shards();
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

// Parameters a virtual stage holds before tensor (dense) and expert (routed experts) parallelism:
// its layers, the embedding on the first, the output head (and final norm) on the last.
struct StageParameters {
  double dense = 0;
  double replicated = 0;  // of dense, held whole by every TP rank (TransformerSpec::layer_replicated_parameters)
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
    p.replicated += static_cast<double>(m.layer_replicated_parameters());
    p.expert += static_cast<double>(m.layer_expert_parameters(l));
    p.moe_layers += m.moe_layer(l) ? 1 : 0;
  }
  const double matrix = static_cast<double>(m.vocab * m.d_model);
  if (v == 0) p.dense += static_cast<double>(m.embedding_parameters());
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

// The bytes of a saved tensor of Transformer Engine's GEMM inputs: FP8 GEMMs keep the FP8 copy of
// their input they quantized and no bf16 one (transformer_engine/pytorch/module/linear.py and
// layernorm_linear.py, "Prepare backward state": inputmat / ln_out saved quantized).
double te_gemm_input_bytes(Precision precision) { return precision == Precision::kFP8 ? 1.0 : 2.0; }

// Multi-head latent attention (Megatron-Core's MLASelfAttention with TE): the norm's input, the
// down-projections' input (the norm output, on the rank's sequence-parallel tokens), each latent's
// norm input and its up-projection's input (gathered over TP), k's rope part, then q, k and v for
// the fused attention's backward and the attention output. Under `recompute: selective` q, k and v
// are not kept: the up-projections run again before the attention's backward (NeMo's MLA recipes
// recompute "mla_up_proj"), so only the latents stay.
std::vector<SavedTensor> megatron_te_mla(const TrainingConfig& config, double h) {
  const TransformerSpec& m = config.model;
  const double gemm = te_gemm_input_bytes(config.precision);
  const double ql = static_cast<double>(m.q_lora_rank), kl = static_cast<double>(m.kv_lora_rank);
  const double o = static_cast<double>(m.o_dim());
  std::vector<SavedTensor> out = {
      {"attention norm input", h, 2},
      {"q / kv down-projection input (attention norm output)", h, gemm},
      {"q latent (norm input)", ql, 2},
      {"q up-projection input (normed latent)", ql, gemm, true},
      {"kv latent (norm input)", kl, 2},
      {"kv up-projection input (normed latent)", kl, gemm, true},
      {"k rope part", static_cast<double>(m.qk_rope_dim), 2},
  };
  if (config.recompute != Recompute::kSelective) {
    out.insert(out.end(), {{"q", static_cast<double>(m.q_dim()), 2},
                           {"k", static_cast<double>(m.k_dim()), 2},
                           {"v", static_cast<double>(m.v_dim()), 2}});
  }
  out.push_back({"attention output", o, 2});
  if (config.precision == Precision::kFP8) out.push_back({"output projection input (FP8 copy)", o, 1});
  return out;
}

// The attention half of Megatron-Core's layer with Transformer Engine (below).
std::vector<SavedTensor> megatron_te_attention(const TrainingConfig& config, double h, double q, double kv) {
  const TransformerSpec& m = config.model;
  if (m.mla()) return megatron_te_mla(config, h);
  std::vector<SavedTensor> out = {
      {"attention norm input", h, 2},
      {"qkv input (attention norm output)", h, te_gemm_input_bytes(config.precision), true},
      {"q", q, 2},
      {"k", kv, 2},
      {"v", kv, 2},
      {"attention output", q, 2},
  };
  if (config.precision == Precision::kFP8) out.push_back({"output projection input (FP8 copy)", q, 1});
  return out;
}

// Megatron-Core's layer with Transformer Engine (KernelStack::kFused) and FlashAttention, dense:
// the norms' inputs (the residual stream), the GEMM inputs TE saves (the norms' outputs and the
// SwiGLU output, FP8 in FP8 runs), q / k / v and the attention output for the fused attention's
// backward, and the SwiGLU input (fc1's output, 2 x ffn: megatron/core/fusions/fused_bias_swiglu.py
// keeps only its input). bf16 per token: 12h + 4kv + 6f bytes, Korthikanti et al. 2022's sbh(34 +
// 5as/h) for gated MLPs and GQA without dropout and without the s^2 term flash never stores
// (docs/memory.md). FP8 with delayed scaling (NeMo's bf16_with_fp8_mixed recipe): the output
// projection's TE Linear keeps its own FP8 copy of the attention output (megatron/core/transformer/
// attention.py drops it only for non-delayed recipes): 11h + 4kv + 5f. Selective recompute drops
// only what flash never keeps (the softmax and its dropout), so it saves the same set. A non-gated
// MLP keeps its GELU's input (fc1's output, f: Megatron's bias_gelu saves only its input) instead.
std::vector<SavedTensor> megatron_te_layer(const TrainingConfig& config, double h, double q, double kv, double f) {
  const double gemm = te_gemm_input_bytes(config.precision);
  std::vector<SavedTensor> out = megatron_te_attention(config, h, q, kv);
  out.insert(out.end(), {
                            {"MLP norm input", h, 2},
                            {"fc1 input (MLP norm output)", h, gemm, true},
                            config.model.gated() ? SavedTensor{"SwiGLU input (fc1 output)", 2 * f, 2}
                                                 : SavedTensor{"GELU input (fc1 output)", f, 2},
                            {"fc2 input (activation output)", f, gemm},
                        });
  return out;
}

// Megatron-Core's MoE layer with Transformer Engine (the alltoall dispatcher, fused permutation),
// per token of the rank's sequence-parallel share: the attention as
// in a dense layer; the router's input (the MLP norm output, bf16) and its scores (fp32, one per
// expert); for each routed copy (top_k x capacity_factor) the grouped GEMMs' inputs TE saves (FP8
// in FP8 runs: GroupedLinear keeps its quantized input), the SwiGLU input and the expert output
// the unpermutation keeps to take the routing probabilities' gradient (probabilities applied at
// unpermute, Megatron's default); the shared experts as a dense MLP of their width. With expert
// tensor parallelism the grouped fc1 keeps the tokens its etp group gathered (etp times the rank's
// own) and the rest is split by the width as the tokens are multiplied: the same bytes.
std::vector<SavedTensor> megatron_te_moe_layer(const TrainingConfig& config, double h, double q, double kv) {
  const TransformerSpec& m = config.model;
  const double gemm = te_gemm_input_bytes(config.precision);
  const double routed = m.top_k * config.capacity_factor, e = static_cast<double>(m.moe_ffn);
  std::vector<SavedTensor> out = megatron_te_attention(config, h, q, kv);
  out.insert(out.end(), {
                            {"MLP norm input", h, 2},
                            {"router input (MLP norm output)", h, 2},
                            {"router scores (fp32)", static_cast<double>(m.experts), 4},
                            {"expert fc1 input (routed tokens)", routed * h * config.layout.etp, gemm},
                            {"expert SwiGLU input", routed * 2 * e, 2},
                            {"expert fc2 input", routed * e, gemm},
                            {"expert output (kept by unpermute)", routed * h, 2},
                        });
  if (m.shared_experts > 0) {
    const double shared = m.shared_experts * e;
    // In bf16 the shared experts' fc1 keeps the router's input tensor itself; FP8 quantizes a copy.
    if (config.precision == Precision::kFP8) out.push_back({"shared expert fc1 input (FP8 copy)", h, 1});
    out.push_back({"shared expert SwiGLU input", 2 * shared, 2});
    out.push_back({"shared expert fc2 input", shared, gemm});
  }
  return out;
}

}  // namespace

// PyTorch eager as torchtitan writes the layer (KernelStack::kEager), bf16: the two norms' inputs,
// q / k / v and the attention output (SDPA's flash), and the gated MLP's gate, up, SiLU and
// product; torchtitan's selective policy keeps only the outputs of the matmuls but every second
// one (q/k/v, the output projection, w1, w3, w2: the 1st, 3rd and 5th) and of attention.
// An MoE layer in eager PyTorch keeps, for the MLP, the routed copies of each token's hidden state
// before and after the experts (top_k x capacity of them) and each expert's gate, up, SiLU and
// product (the fused stack: megatron_te_moe_layer).
std::vector<SavedTensor> saved_activations(const TrainingConfig& config, bool moe_layer) {
  const TransformerSpec& m = config.model;
  const double h = static_cast<double>(m.d_model), f = static_cast<double>(m.ffn);
  const double kv = static_cast<double>(m.kv_dim()), q = static_cast<double>(m.q_dim());
  std::vector<SavedTensor> out;
  if (moe_layer && config.kernels == KernelStack::kFused) {
    out = megatron_te_moe_layer(config, h, q, kv);
  } else if (moe_layer) {
    const double routed = m.top_k * config.capacity_factor;
    const double experts = (routed + m.shared_experts) * static_cast<double>(m.moe_ffn);
    out = {{"attention norm input", h, 2, true}, {"q", q}, {"k", kv}, {"v", kv}, {"attention output", q},
           {"MLP norm input", h, 2, true}, {"routed tokens before the experts", routed * h},
           {"routed tokens after the experts", routed * h}, {"expert gate", experts}, {"expert up", experts},
           {"expert SiLU", experts}, {"expert product", experts}};
  } else if (config.kernels == KernelStack::kFused) {
    out = megatron_te_layer(config, h, q, kv, f);
  } else if (config.recompute == Recompute::kSelective) {
    out = {{"qkv output", q + 2 * kv, 2, true}, {"w1 output", f}, {"w2 output", h}, {"attention output", q}};
  } else if (m.gated()) {
    out = {{"attention norm input", h, 2, true}, {"q", q}, {"k", kv}, {"v", kv}, {"attention output", q},
           {"MLP norm input", h, 2, true}, {"gate", f}, {"up", f}, {"SiLU", f}, {"product", f}};
  } else {
    out = {{"attention norm input", h, 2, true}, {"q", q}, {"k", kv}, {"v", kv}, {"attention output", q},
           {"MLP norm input", h, 2, true}, {"fc1 output", f}, {"GELU output", f}};
  }
  // Unfused attention keeps its softmax output for backward (P V's and the softmax's gradients):
  // a row of seq_len scores per token and head, bf16 (Korthikanti et al. 2022, Table 2: 2 a s^2 b,
  // without dropout). Selective recompute recomputes it instead (what the policy was made for).
  if (unfused_attention(config) && config.recompute != Recompute::kSelective) {
    out.push_back({"attention probabilities (unfused)", static_cast<double>(m.heads) * config.seq_len, 2});
  }
  return out;
}

StateBytes state_bytes_per_parameter(const TrainingConfig& config) {
  const Sharding sharding = config.layout.sharding;
  if (sharding == Sharding::kFsdp || sharding == Sharding::kHsdp) {
    return {kMasterWeightBytes, kMasterWeightBytes, kAdamMomentBytes};
  }
  // DeepSpeed's BF16_Optimizer keeps the bf16 gradients autograd writes beside the main ones.
  const double bf16_copy = config.grad_accumulation == GradAccumulation::kDeepSpeed ? 2 : 0;
  return {2, grad_bytes(config) + bf16_copy, kMasterWeightBytes + kAdamMomentBytes};
}

double grad_accumulation_bytes_per_parameter(const TrainingConfig& config) {
  const double main = grad_bytes(config);
  // main += bf16 gradient: read both, write the main one.
  const double add_into_main = 2 + 2 * main;
  switch (config.grad_accumulation) {
    case GradAccumulation::kFused:
      return 0;
    case GradAccumulation::kHook:
      return add_into_main;
    case GradAccumulation::kDeepSpeed:
      // zero_() of the bf16 gradient (write), autograd's in-place accumulate into it (read the
      // new gradient and the old, write), then update_hp_grads.
      return 2 + 6 + add_into_main;
  }
  return 0;
}

namespace {

double activation_bytes_per_token(const TrainingConfig& config, bool moe_layer = false) {
  double bytes = 0;
  for (const SavedTensor& t : saved_activations(config, moe_layer)) bytes += t.bytes_per_token();
  return bytes;
}

// The fp32 and bf16 logits of the output layer, per element.
constexpr double kLogitBytes = 6;

MemoryBreakdown stage_memory(const TrainingConfig& config, const DerivedLayout& d, int stage) {
  const TransformerSpec& m = config.model;
  const ParallelLayout& layout = config.layout;
  const double tp = layout.tp;
  double dense = 0, replicated = 0, expert = 0, layers = 0, moe_layers = 0;
  for (int v = stage; v < virtual_stages(config); v += layout.pp) {
    const StageParameters p = virtual_stage_parameters(config, d, v);
    dense += p.dense;
    replicated += p.replicated;
    expert += p.expert;
    moe_layers += p.moe_layers;
    layers += d.layers_of_stage[static_cast<size_t>(v)];
  }
  // Routed experts split over the expert-parallel and expert-TP ranks (not over tensor
  // parallelism); their optimizer state over the ranks that hold the same expert shard.
  const double dense_local = TransformerSpec::tp_local(dense, replicated, tp);
  const double local = dense_local + expert / layout.expert_shards();
  const bool sharded = layout.sharding == Sharding::kFsdp || layout.sharding == Sharding::kHsdp;
  const double shard = sharded ? d.shard_group : 1;
  MemoryBreakdown mem;
  const StateBytes state = state_bytes_per_parameter(config);
  mem.weights_bytes = state.weights * local / shard;
  mem.gradients_bytes = state.gradients * local / shard;
  if (layout.sharding == Sharding::kZero1) {
    mem.optimizer_bytes =
        state.optimizer * (dense_local / d.data_ranks + expert / layout.expert_shards() / d.expert_data_ranks);
  } else {
    mem.optimizer_bytes = state.optimizer * local / shard;
  }
  if (sharded && d.shard_group > 1) {
    // The largest layer (an MoE layer holds its experts too: FSDP runs with ep = 1).
    const int largest = m.moe() ? m.dense_layers : 0;
    const double layer = static_cast<double>(m.layer_dense_parameters(largest)) / tp +
                         static_cast<double>(m.layer_expert_parameters(largest));
    // Two units' gathered parameters (the one running and the one prefetched) and the unit's
    // unsharded gradients. FSDP2's reduce-scatter input (foreach_reduce copies the gradients into
    // it) comes after the unit's saved tensors are freed, so it is not part of the peak (the step's
    // memory timeline allocates it).
    mem.unsharded_bytes = (2.0 * kFsdpComputeBytes + kFsdpComputeBytes) * layer;
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

}  // namespace tandem::models
