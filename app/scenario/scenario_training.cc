// Reading `workload: {type: training}` and its `expect` entries: the model (a preset or its
// architecture key by key), the step's settings, the layouts to compare and what each expectation
// bounds. Plan sweeps read the same workload (scenario_yaml.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "app/scenario/scenario_internal.h"
#include "core/error.h"

namespace tandem::app {
namespace {

// The keys each section accepts, in the order docs/scenarios.md lists them.
constexpr std::array<std::string_view, 16> kTrainingKeys{
    "type",      "model",   "seq_len",   "global_batch",      "batch_per_gpu",     "micro_batch",
    "precision", "mfu",     "kernels",   "attention",         "recompute",         "grad_reduce_dtype",
    "grad_accumulation",    "algorithm", "capacity_factor",   "layouts"};
constexpr std::array<std::string_view, 22> kModelKeys{
    "name",          "layers",           "d_model",          "ffn",        "mlp",          "heads",
    "kv_heads",      "head_dim",         "vocab",            "tied_embeddings", "experts", "top_k",
    "moe_ffn",       "shared_experts",   "dense_layers",     "positions",  "max_positions", "q_lora_rank",
    "kv_lora_rank",  "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"};
constexpr std::array<std::string_view, 12> kTrainingLayoutKeys{
    "name",     "tp",          "pp",        "vp",          "cp",         "ep",
    "etp",      "sharding",    "shard_group", "recompute", "micro_batch", "tp_overlap"};
constexpr std::array<std::string_view, 13> kTrainingExpectKeys{
    "variant",      "layout",         "backend",  "fits",      "step_time_s",
    "achieved_mfu", "exposed_comm_s", "bubble_s", "memory_GB", "tokens_per_s_per_gpu",
    "relative_to",  "speedup",        "culprit_ranks"};

// Limits of a training workload.
constexpr size_t kMaxTrainingLayouts = 32;
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 24;

// recompute: none | selective | full, or a boolean (true: full), as scenarios before selective had.
models::Recompute read_recompute(const Reader& reader, const YAML::Node& node, const std::string& path) {
  const std::string text = reader.scalar(node, path);
  return reader.at(node, path, [&] { return models::parse_recompute(text); });
}

// A workload's `model:`: a preset's name, or the architecture key by key.
models::TransformerSpec read_model(const Reader& reader, const YAML::Node& model, const std::string& path) {
  if (!model.IsMap()) {
    const std::string text = reader.text(model, path);
    return reader.at(model, path, [&] { return models::transformer_preset(text); });
  }
  models::TransformerSpec out;
  Mapping m(reader, model, path, kModelKeys);
  out.name = reader.text(m.require("name"), m.path("name"));
  out.layers = static_cast<int>(reader.integer(m.require("layers"), m.path("layers"), 1, 100000));
  out.d_model = reader.integer(m.require("d_model"), m.path("d_model"), 1, int64_t{1} << 20);
  out.ffn = reader.integer(m.require("ffn"), m.path("ffn"), 1, int64_t{1} << 24);
  if (const YAML::Node* v = m.find("positions")) {
    const std::string text = reader.scalar(*v, m.path("positions"));
    out.positions = reader.at(*v, m.path("positions"), [&] { return models::parse_position_kind(text); });
  }
  if (const YAML::Node* v = m.find("max_positions"))
    out.max_positions = reader.integer(*v, m.path("max_positions"), 1, models::kMaxSeqLen);
  // Multi-head latent attention: all five dimensions or none.
  int mla_keys = 0;
  for (auto [key, field] : {std::pair<std::string_view, int64_t*>{"q_lora_rank", &out.q_lora_rank},
                            {"kv_lora_rank", &out.kv_lora_rank},
                            {"qk_nope_head_dim", &out.qk_nope_dim},
                            {"qk_rope_head_dim", &out.qk_rope_dim},
                            {"v_head_dim", &out.v_head_dim}}) {
    if (const YAML::Node* v = m.find(key)) {
      *field = reader.integer(*v, m.path(key), 1, 1 << 16);
      ++mla_keys;
    }
  }
  if (mla_keys != 0 && mla_keys != 5)
    reader.fail_at(model, "{}: multi-head latent attention needs all of q_lora_rank, kv_lora_rank, qk_nope_head_dim, "
                   "qk_rope_head_dim and v_head_dim", path);
  if (out.positions == models::PositionKind::kLearned && out.max_positions == 0)
    reader.fail_at(model, "{}: positions: learned needs max_positions (the table's rows)", path);
  if (const YAML::Node* v = m.find("mlp")) {
    const std::string text = reader.scalar(*v, m.path("mlp"));
    out.mlp = reader.at(*v, m.path("mlp"), [&] { return models::parse_mlp_kind(text); });
  }
  out.heads = static_cast<int>(reader.integer(m.require("heads"), m.path("heads"), 1, 1 << 16));
  out.kv_heads = out.heads;
  if (const YAML::Node* v = m.find("head_dim")) out.head_dim = reader.integer(*v, m.path("head_dim"), 1, 1 << 16);
  if (const YAML::Node* v = m.find("kv_heads")) {
    out.kv_heads = static_cast<int>(reader.integer(*v, m.path("kv_heads"), 1, 1 << 16));
  }
  out.vocab = reader.integer(m.require("vocab"), m.path("vocab"), 1, int64_t{1} << 24);
  if (const YAML::Node* v = m.find("tied_embeddings"))
    out.tied_embeddings = reader.boolean(*v, m.path("tied_embeddings"));
  if (const YAML::Node* v = m.find("experts"))
    out.experts = static_cast<int>(reader.integer(*v, m.path("experts"), 0, 4096));
  if (const YAML::Node* v = m.find("top_k"))
    out.top_k = static_cast<int>(reader.integer(*v, m.path("top_k"), 1, 4096));
  if (const YAML::Node* v = m.find("moe_ffn"))
    out.moe_ffn = reader.integer(*v, m.path("moe_ffn"), 1, int64_t{1} << 24);
  if (const YAML::Node* v = m.find("shared_experts"))
    out.shared_experts = static_cast<int>(reader.integer(*v, m.path("shared_experts"), 0, 64));
  if (const YAML::Node* v = m.find("dense_layers"))
    out.dense_layers = static_cast<int>(reader.integer(*v, m.path("dense_layers"), 0, 100000));
  reader.at(model, path, [&] { models::validate(out); });
  return out;
}

// One entry of `layouts:` at `path`, its name unlike every earlier one's.
TrainingLayoutEntry read_layout_entry(const Reader& reader, const YAML::Node& node, const std::string& path,
                                      const std::vector<TrainingLayoutEntry>& earlier_entries) {
  Mapping m(reader, node, path, kTrainingLayoutKeys);
  TrainingLayoutEntry entry;
  entry.mark = source_mark(node.Mark());
  entry.layout.name = reader.text(m.require("name"), m.path("name"));
  if (!valid_variant_name(entry.layout.name)) {
    reader.fail_at(m.require("name"), "{} '{}' may hold only letters, digits and - _ . +", m.path("name"),
                   entry.layout.name);
  }
  for (const TrainingLayoutEntry& earlier : earlier_entries) {
    if (earlier.layout.name == entry.layout.name) {
      reader.fail_at(m.require("name"), "{}: a layout named '{}' comes earlier", m.path("name"), entry.layout.name);
    }
  }
  if (const YAML::Node* v = m.find("tp"))
    entry.layout.tp = static_cast<int>(reader.integer(*v, m.path("tp"), 1, 256));
  if (const YAML::Node* v = m.find("pp"))
    entry.layout.pp = static_cast<int>(reader.integer(*v, m.path("pp"), 1, 1024));
  if (const YAML::Node* v = m.find("sharding")) {
    const std::string text = reader.scalar(*v, m.path("sharding"));
    entry.layout.sharding = reader.at(*v, m.path("sharding"), [&] { return models::parse_sharding(text); });
  }
  if (const YAML::Node* v = m.find("shard_group")) {
    if (entry.layout.sharding != models::Sharding::kHsdp)
      reader.fail_at(*v, "{} goes with sharding: hsdp", m.path("shard_group"));
    entry.layout.shard_group = static_cast<int>(reader.integer(*v, m.path("shard_group"), 1, kMaxScenarioGpus));
  }
  if (const YAML::Node* v = m.find("vp"))
    entry.layout.vp = static_cast<int>(reader.integer(*v, m.path("vp"), 1, 1024));
  if (const YAML::Node* v = m.find("cp"))
    entry.layout.cp = static_cast<int>(reader.integer(*v, m.path("cp"), 1, 1024));
  if (const YAML::Node* v = m.find("ep"))
    entry.layout.ep = static_cast<int>(reader.integer(*v, m.path("ep"), 1, 4096));
  if (const YAML::Node* v = m.find("etp"))
    entry.layout.etp = static_cast<int>(reader.integer(*v, m.path("etp"), 1, 256));
  if (const YAML::Node* v = m.find("tp_overlap")) entry.layout.tp_overlap = reader.boolean(*v, m.path("tp_overlap"));
  if (const YAML::Node* v = m.find("recompute")) entry.recompute = read_recompute(reader, *v, m.path("recompute"));
  if (const YAML::Node* v = m.find("micro_batch")) {
    entry.micro_batch = static_cast<int>(reader.integer(*v, m.path("micro_batch"), 1, 4096));
  }
  return entry;
}

const std::string* find_layout(const TrainingWorkload& training, const std::string& layout_name) {
  for (const TrainingLayoutEntry& entry : training.layouts) {
    if (entry.layout.name == layout_name) return &entry.layout.name;
  }
  return nullptr;
}

}  // namespace

std::string parse_training_algorithm(std::string_view text) {
  if (text == "auto" || text == "ring" || text == "tree") return std::string(text);
  fail(ErrorCode::kInvalidArgument,
       "'{}': a training step's collectives run with auto (NCCL's tuner), ring or tree (all_reduce; NCCL's pick "
       "for the others)",
       text);
}

TrainingWorkload read_training_workload(const Reader& reader, const YAML::Node& node, const std::string& path) {
  Mapping workload(reader, node, path, kTrainingKeys);
  TrainingWorkload training;
  models::TrainingConfig& base = training.base;
  base.model = read_model(reader, workload.require("model"), workload.path("model"));
  if (const YAML::Node* v = workload.find("seq_len")) {
    base.seq_len = static_cast<int>(reader.integer(*v, workload.path("seq_len"), 1, models::kMaxSeqLen));
  }
  const YAML::Node* global = workload.find("global_batch");
  const YAML::Node* per_gpu = workload.find("batch_per_gpu");
  if (global != nullptr && per_gpu != nullptr) {
    reader.fail_at(*per_gpu, "{}: give global_batch or batch_per_gpu, not both", workload.path("batch_per_gpu"));
  }
  if (global != nullptr) {
    base.global_batch = static_cast<int>(reader.integer(*global, workload.path("global_batch"), 1, kMaxGlobalBatch));
  }
  if (per_gpu != nullptr)
    training.batch_per_gpu = reader.number(*per_gpu, workload.path("batch_per_gpu"), 0, 4096, true);
  if (const YAML::Node* v = workload.find("micro_batch")) {
    base.micro_batch = static_cast<int>(reader.integer(*v, workload.path("micro_batch"), 1, 4096));
  }
  if (const YAML::Node* v = workload.find("precision")) {
    const std::string text = reader.scalar(*v, workload.path("precision"));
    base.precision = reader.at(*v, workload.path("precision"), [&] { return models::parse_precision(text); });
  }
  if (const YAML::Node* v = workload.find("mfu")) base.mfu = reader.number(*v, workload.path("mfu"), 0, 1, true);
  if (const YAML::Node* v = workload.find("capacity_factor"))
    base.capacity_factor = reader.number(*v, workload.path("capacity_factor"), 1, 16, false);
  if (const YAML::Node* v = workload.find("kernels")) {
    const std::string text = reader.scalar(*v, workload.path("kernels"));
    base.kernels = reader.at(*v, workload.path("kernels"), [&] { return models::parse_kernel_stack(text); });
  }
  if (const YAML::Node* v = workload.find("attention")) {
    const std::string text = reader.scalar(*v, workload.path("attention"));
    base.attention = reader.at(*v, workload.path("attention"), [&] { return models::parse_attention_impl(text); });
  }
  if (const YAML::Node* v = workload.find("recompute"))
    base.recompute = read_recompute(reader, *v, workload.path("recompute"));
  if (const YAML::Node* v = workload.find("grad_reduce_dtype")) {
    const std::string text = reader.scalar(*v, workload.path("grad_reduce_dtype"));
    base.grad_reduce_dtype = reader.at(*v, workload.path("grad_reduce_dtype"), [&] { return parse_data_type(text); });
    if (base.grad_reduce_dtype != DataType::kBF16 && base.grad_reduce_dtype != DataType::kF32) {
      reader.fail_at(*v, "{} must be bf16 or f32", workload.path("grad_reduce_dtype"));
    }
  }
  if (const YAML::Node* v = workload.find("grad_accumulation")) {
    const std::string text = reader.scalar(*v, workload.path("grad_accumulation"));
    base.grad_accumulation =
        reader.at(*v, workload.path("grad_accumulation"), [&] { return models::parse_grad_accumulation(text); });
  }
  if (const YAML::Node* v = workload.find("algorithm")) {
    const std::string text = reader.scalar(*v, workload.path("algorithm"));
    base.algorithm = reader.at(*v, workload.path("algorithm"), [&] { return parse_training_algorithm(text); });
  }
  const YAML::Node& layouts = workload.require("layouts");
  const std::vector<YAML::Node> entries = reader.list(layouts, workload.path("layouts"));
  if (entries.size() > kMaxTrainingLayouts) {
    reader.fail_at(layouts, "{} has {} entries, above the limit of {}", workload.path("layouts"), entries.size(),
                   kMaxTrainingLayouts);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    training.layouts.push_back(read_layout_entry(reader, entries[i], fmt::format("{}[{}]", workload.path("layouts"), i),
                                                 training.layouts));
  }
  return training;
}

models::TrainingConfig TrainingWorkload::config_for(size_t index, int gpus) const {
  const TrainingLayoutEntry& entry = layouts.at(index);
  models::TrainingConfig config = base;
  config.layout = entry.layout;
  if (entry.recompute) config.recompute = *entry.recompute;
  if (entry.micro_batch) config.micro_batch = *entry.micro_batch;
  if (batch_per_gpu) config.global_batch = std::max(1, static_cast<int>(std::llround(*batch_per_gpu * gpus)));
  return config;
}

TrainingExpectation read_training_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                                              const Scenario& scenario, const TrainingWorkload& training) {
  Mapping mapping(reader, node, path, kTrainingExpectKeys);
  TrainingExpectation e;
  e.mark = source_mark(node.Mark());
  if (const YAML::Node* v = mapping.find("variant")) {
    e.variant = read_variant_name(reader, *v, mapping.path("variant"), scenario.variants);
  }
  const YAML::Node& layout = mapping.require("layout");
  e.layout = reader.text(layout, mapping.path("layout"));
  if (find_layout(training, e.layout) == nullptr) {
    std::vector<std::string_view> names;
    for (const TrainingLayoutEntry& entry : training.layouts) names.push_back(entry.layout.name);
    reader.fail_at(layout, "{}: no layout named '{}' (layouts: {})", mapping.path("layout"), e.layout,
                   fmt::join(names, ", "));
  }
  if (const YAML::Node* v = mapping.find("backend")) {
    const std::string text = reader.scalar(*v, mapping.path("backend"));
    e.backend = reader.at(*v, mapping.path("backend"), [&] { return parse_backend(text); });
  }
  if (const YAML::Node* v = mapping.find("fits")) e.fits = reader.boolean(*v, mapping.path("fits"));
  if (const YAML::Node* v = mapping.find("culprit_ranks")) {
    if (scenario.faults.empty()) {
      reader.fail_at(*v, "{}: culprit_ranks needs faults: to rehearse", mapping.path("culprit_ranks"));
    }
    e.culprit_ranks = read_rank_list(reader, *v, mapping.path("culprit_ranks"));
  }
  const std::array<std::pair<std::string_view, Bound*>, 7> bounds{{{"step_time_s", &e.step_time_s},
                                                                   {"achieved_mfu", &e.achieved_mfu},
                                                                   {"exposed_comm_s", &e.exposed_comm_s},
                                                                   {"bubble_s", &e.bubble_s},
                                                                   {"memory_GB", &e.memory_GB},
                                                                   {"tokens_per_s_per_gpu", &e.tokens_per_s_per_gpu},
                                                                   {"speedup", &e.speedup}}};
  bool any = e.fits.has_value() || e.culprit_ranks.has_value();
  for (const auto& [key, bound] : bounds) {
    if (const YAML::Node* v = mapping.find(key)) {
      *bound = read_bound(reader, *v, mapping.path(key));
      any = true;
    }
  }
  if (const YAML::Node* v = mapping.find("relative_to")) {
    e.relative_to = read_variant_name(reader, *v, mapping.path("relative_to"), scenario.variants);
    if (!e.speedup.set()) reader.fail_at(*v, "{} needs a speedup bound", mapping.path("relative_to"));
  } else if (e.speedup.set()) {
    reader.fail_at(node, "{}.speedup needs relative_to: the variant it is measured against", path);
  }
  if (!any) {
    reader.fail_at(node,
                   "{} checks nothing (expected fits, step_time_s, achieved_mfu, exposed_comm_s, bubble_s, "
                   "memory_GB, tokens_per_s_per_gpu, speedup or culprit_ranks)",
                   path);
  }
  return e;
}

}  // namespace tandem::app
