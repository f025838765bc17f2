// The model: a transformer's parameters layer by layer, the presets, the checks of a model given
// key by key, and the model FLOPs a step's MFU counts (workload.h declares them).
#include <array>
#include <cmath>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "models/workload.h"
#include "models/workload_internal.h"

namespace tandem::models {

// ---- the model -----------------------------------------------------------------------------------

int64_t TransformerSpec::attention_parameters() const {
  if (mla()) {
    // q: down-projection, latent norm, up-projection; k / v: down-projection (with k's rope part),
    // latent norm, up-projection (k's nope part and v); the output projection.
    return d_model * q_lora_rank + q_lora_rank + q_lora_rank * q_dim() + d_model * (kv_lora_rank + qk_rope_dim) +
           kv_lora_rank + kv_lora_rank * heads * (qk_nope_dim + v_head_dim) + o_dim() * d_model;
  }
  return 2 * d_model * q_dim() + 2 * d_model * kv_dim();  // q, o; k, v
}

int64_t TransformerSpec::layer_replicated_parameters() const {
  return mla() ? d_model * q_lora_rank + q_lora_rank + d_model * (kv_lora_rank + qk_rope_dim) + kv_lora_rank : 0;
}

int64_t TransformerSpec::expert_parameters() const { return 3 * d_model * moe_ffn; }

int64_t TransformerSpec::layer_parameters() const {
  // + (gate,) up, down; two norms
  return attention_parameters() + mlp_matrices() * d_model * ffn + 2 * d_model;
}

std::string_view name(MlpKind kind) { return kind == MlpKind::kGelu ? "gelu" : "swiglu"; }

MlpKind parse_mlp_kind(std::string_view text) { return parse_named(text, {MlpKind::kSwiGlu, MlpKind::kGelu}, "mlp"); }

std::string_view name(PositionKind kind) {
  switch (kind) {
    case PositionKind::kRope:
      return "rope";
    case PositionKind::kAlibi:
      return "alibi";
    case PositionKind::kLearned:
      return "learned";
  }
  return "?";
}

PositionKind parse_position_kind(std::string_view text) {
  return parse_named(text, {PositionKind::kRope, PositionKind::kAlibi, PositionKind::kLearned}, "positions");
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
  // embedding (+ head) + final norm
  return embedding_parameters() + (tied_embeddings ? 0 : vocab * d_model) + d_model;
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
constexpr std::array<std::string_view, 6> kModelPresetNames{"llama3-8b",    "llama3-70b",    "llama3-405b",
                                                       "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3"};

}  // namespace

TransformerSpec transformer_preset(std::string_view name) {
  const std::string key = name_key(name);
  if (key == "llama3-8b") return {"llama3-8b", 32, 4096, 14336, 32, 8, 128256, false};
  if (key == "llama3-70b") return {"llama3-70b", 80, 8192, 28672, 64, 8, 128256, false};
  if (key == "llama3-405b") return {"llama3-405b", 126, 16384, 53248, 128, 8, 128256, false};
  // Mixtral: every layer's MLP is 8 experts of the dense width, 2 per token (46.7 B, 12.9 B active).
  if (key == "mixtral-8x7b") return {"mixtral-8x7b", 32, 4096, 14336, 32, 8, 32000, false, 8, 2, 14336, 0, 0};
  if (key == "mixtral-8x22b") return {"mixtral-8x22b", 56, 6144, 16384, 48, 8, 32768, false, 8, 2, 16384, 0, 0};
  // DeepSeek-V3: 61 layers, the first 3 dense (ffn 18,432), then 256 routed experts of 2,048 (8 per
  // token) and one shared; 128 heads of multi-head latent attention (187 M parameters a layer).
  if (key == "deepseek-v3") {
    // Multi-head latent attention as its config.json gives it (arXiv 2412.19437 §2.1.1).
    TransformerSpec spec{"deepseek-v3", 61, 7168, 18432, 128, 128, 129280, false, 256, 8, 2048, 1, 3};
    spec.q_lora_rank = 1536;
    spec.kv_lora_rank = 512;
    spec.qk_nope_dim = 128;
    spec.qk_rope_dim = 64;
    spec.v_head_dim = 128;
    return spec;
  }
  fail(ErrorCode::kInvalidArgument, "unknown model '{}' (expected one of: {}, or a custom model's dimensions)", name,
       fmt::join(kModelPresetNames, ", "));
}

std::vector<std::string> transformer_preset_names() { return {kModelPresetNames.begin(), kModelPresetNames.end()}; }

void validate(const TransformerSpec& model) {
  auto bad = [&](std::string_view field, int64_t value, std::string_view rule) {
    fail(ErrorCode::kInvalidArgument, "model {}: {} = {}: {}", model.name, field, value, rule);
  };
  if (model.layers < 1 || model.layers > 100000) bad("layers", model.layers, "must be 1..100000");
  if (model.d_model < 1 || model.d_model > (int64_t{1} << 20)) bad("d_model", model.d_model, "must be 1..1048576");
  if (model.ffn < 1 || model.ffn > (int64_t{1} << 24)) bad("ffn", model.ffn, "must be 1..16777216");
  if (model.heads < 1 || (model.head_dim == 0 && model.d_model % model.heads != 0))
    bad("heads", model.heads, "must divide d_model (or give head_dim)");
  if (model.head_dim < 0 || model.head_dim > (int64_t{1} << 16)) bad("head_dim", model.head_dim, "must be 1..65536");
  if (model.kv_lora_rank < 0 || model.kv_lora_rank > (int64_t{1} << 16))
    bad("kv_lora_rank", model.kv_lora_rank, "must be 0..65536");
  if (model.mla()) {
    for (auto [field, value] : {std::pair<std::string_view, int64_t>{"q_lora_rank", model.q_lora_rank},
                                {"qk_nope_head_dim", model.qk_nope_dim},
                                {"qk_rope_head_dim", model.qk_rope_dim},
                                {"v_head_dim", model.v_head_dim}}) {
      if (value < 1 || value > (int64_t{1} << 16)) bad(field, value, "multi-head latent attention needs it: 1..65536");
    }
    if (model.kv_heads != model.heads) bad("kv_heads", model.kv_heads, "must equal heads with multi-head latent attention");
  }
  if (model.positions == PositionKind::kLearned && (model.max_positions < 1 || model.max_positions > kMaxSeqLen))
    bad("max_positions", model.max_positions, "a learned position table needs its rows: 1..1048576");
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

double model_flops_per_token(const TransformerSpec& model, int seq_len) {
  // Lookups, not matmuls: the token embedding (when the head does not share it) and a learned
  // position table.
  const double lookups = (model.tied_embeddings ? 0.0 : static_cast<double>(model.vocab * model.d_model)) +
                         static_cast<double>(model.embedding_parameters() - model.vocab * model.d_model);
  // Scores and context per token and layer: QK^T over q's width, PV over the output's (2 d without
  // MLA: the classic 12 L d s).
  const double attention_width =
      model.mla() ? static_cast<double>(model.q_dim() + model.o_dim()) : 2.0 * static_cast<double>(model.d_model);
  return 6.0 * (static_cast<double>(model.active_parameters()) - lookups) +
         6.0 * model.layers * attention_width * seq_len;
}

}  // namespace tandem::models
