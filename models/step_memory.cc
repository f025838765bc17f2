#include "models/step_memory.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "models/memory_snapshot.h"
#include "models/workload_internal.h"

namespace tandem::models {
namespace {

constexpr int64_t kComputeStream = 0;
constexpr int64_t kCommStream = 1;  // FSDP's all-gather stream: its outputs live in that stream's pool
constexpr uint64_t kNoTensor = 0;   // the trace's tensor addresses start at 1

// Where in the step an entry of the trace was issued.
enum class PhaseKind : uint8_t { kSetup, kForward, kBackward, kOptimizer };
struct Phase {
  PhaseKind kind = PhaseKind::kSetup;
  int step = 0;
  int microbatch = 0;
  int layer = -1;  // -1: the embedding / output head, or none
};

std::string describe(const Phase& p) {
  switch (p.kind) {
    case PhaseKind::kSetup:
      return "parameters (before the first step)";
    case PhaseKind::kOptimizer:
      return fmt::format("optimizer step {}", p.step + 1);
    case PhaseKind::kForward:
    case PhaseKind::kBackward:
      break;
  }
  const char* what = p.kind == PhaseKind::kForward ? "forward" : "backward";
  const std::string where = p.layer >= 0 ? fmt::format("layer {}", p.layer) : std::string("embedding / output head");
  return fmt::format("step {}, {} of microbatch {}, {}", p.step + 1, what, p.microbatch + 1, where);
}

// One parameter tensor of the stage: its local elements (after tensor / expert parallelism).
struct ParamTensor {
  double elements = 0;
  bool expert = false;  // a routed expert's (sharded over expert_data_ranks by zero1)
};

// The unit FSDP gathers at once (a layer, the embedding, the output head) and its tensors.
struct Unit {
  int layer = -1;  // -1: embedding or head
  std::vector<ParamTensor> tensors;
  double elements() const {
    double sum = 0;
    for (const ParamTensor& t : tensors) sum += t.elements;
    return sum;
  }
};

class TraceBuilder {
 public:
  uint64_t alloc(double bytes, int64_t stream) {
    const uint64_t address = next_address_++;
    trace_.push_back({TraceAction::kAlloc, address, static_cast<uint64_t>(std::ceil(std::max(bytes, 1.0))), stream, 0});
    phases_.push_back(phase_);
    return address;
  }
  // free_completed alone: the replay reads it as free_requested and free_completed at once.
  void free(uint64_t address) {
    trace_.push_back({TraceAction::kFreeCompleted, address, 0, kComputeStream, 0});
    phases_.push_back(phase_);
  }
  void free_all(std::vector<uint64_t>& addresses) {
    for (uint64_t a : addresses) free(a);
    addresses.clear();
  }
  void set_phase(const Phase& phase) { phase_ = phase; }
  const std::vector<TraceEntry>& trace() const { return trace_; }
  const Phase& phase_at(size_t index) const { return phases_[index]; }

 private:
  std::vector<TraceEntry> trace_;
  std::vector<Phase> phases_;
  Phase phase_;
  uint64_t next_address_ = 1;
};

// The step program of one rank of `stage`, emitted into a TraceBuilder.
class StepProgramMemory {
 public:
  StepProgramMemory(const TrainingConfig& config, const DerivedLayout& d, int stage, int microbatches)
      : config_(config), d_(d), stage_(stage), m_(config.model), microbatches_(microbatches) {
    const ParallelLayout& layout = config.layout;
    sharded_ = layout.sharding == Sharding::kFsdp || layout.sharding == Sharding::kHsdp;
    shard_ = sharded_ ? d.shard_group : 1;
    gather_ = sharded_ && d.shard_group > 1;
    state_ = state_bytes_per_parameter(config);
    reduce_bytes_ = grad_bytes(config);
    tokens_ = static_cast<double>(config.micro_batch) * config.seq_len / layout.cp;
    for (int v = stage; v < layout.pp * layout.vp; v += layout.pp) chunks_.push_back(v);
    for (int v : chunks_) build_units(v);
  }

  void emit(TraceBuilder& t) {
    t.set_phase({PhaseKind::kSetup, 0, 0, -1});
    for (Unit& u : units_flat()) {
      for (const ParamTensor& p : u.tensors) t.alloc(state_.weights * p.elements / shard_, kComputeStream);
    }
    // Without FSDP the gradients live in buffers made when the model is wrapped (Megatron's
    // DistributedDataParallel grad buffer, DDP's buckets) and never freed; FSDP2 makes them at the
    // first backward and zero_grad(set_to_none=True) frees them after each step.
    if (!gather_) {
      for (size_t c = 0; c < units_.size(); ++c) {
        size_t base = 0;
        for (size_t k = 0; k < c; ++k) base += units_[k].size();
        for (size_t i = 0; i < units_[c].size(); ++i) keep_gradients(t, units_[c][i], base + i);
      }
      persistent_gradients_ = true;
    }
    for (int step = 0; step < 2; ++step) {
      step_ = step;
      run_schedule(t);
      t.set_phase({PhaseKind::kOptimizer, step, 0, -1});
      if (step == 0) {
        // optimizer.step() creates Adam's states at its first call: fp32 master weights (not with
        // FSDP: its fp32 shard is the master) and two moments, one fp32 tensor each.
        const int tensors = static_cast<int>(std::lround(state_.optimizer / 4));
        for (Unit& u : units_flat()) {
          for (const ParamTensor& p : u.tensors) {
            for (int k = 0; k < tensors; ++k) t.alloc(optimizer_bytes(p) / tensors, kComputeStream);
          }
        }
      }
      if (!persistent_gradients_) {
        t.free_all(gradients_);  // zero_grad(set_to_none=True)
        gradient_allocated_.assign(gradient_allocated_.size(), false);
      }
    }
  }

 private:
  // Units of virtual stage v, in forward order.
  void build_units(int v) {
    const ParallelLayout& layout = config_.layout;
    const double tp = layout.tp, ep = layout.ep;
    const double h = static_cast<double>(m_.d_model), f = static_cast<double>(m_.ffn);
    const double kv = static_cast<double>(m_.kv_dim()), q = static_cast<double>(m_.q_dim());
    const double o = static_cast<double>(m_.o_dim());
    const double vocab = static_cast<double>(m_.vocab);
    std::vector<Unit> units;
    const int last = layout.pp * layout.vp - 1;
    if (v == 0) units.push_back({-1, {{static_cast<double>(m_.embedding_parameters()) / tp, false}}});
    int first = 0;
    for (int u = 0; u < v; ++u) first += d_.layers_of_stage[static_cast<size_t>(u)];
    for (int l = first; l < first + d_.layers_of_stage[static_cast<size_t>(v)]; ++l) {
      Unit unit{l, {}};
      auto add = [&](double elements, bool expert = false) { unit.tensors.push_back({elements, expert}); };
      add(h / tp);                                          // attention norm
      if (m_.mla()) {
        const double ql = static_cast<double>(m_.q_lora_rank), kl = static_cast<double>(m_.kv_lora_rank);
        const double heads = m_.heads;
        // The down-projections and latent norms are whole on every TP rank (Megatron: duplicated).
        for (double p : {h * ql, ql, h * (kl + static_cast<double>(m_.qk_rope_dim)), kl}) add(p);
        for (double p : {ql * q, kl * heads * static_cast<double>(m_.qk_nope_dim + m_.v_head_dim), o * h})
          add(p / tp);  // q up, kv up, o
      } else {
        for (double out : {q, kv, kv, o}) add(h * out / tp);  // q, k, v, o
      }
      add(h / tp);                                          // MLP norm
      if (m_.moe_layer(l)) {
        add(h * m_.experts / tp);  // router
        for (int e = 0; e < m_.shared_experts; ++e) {
          for (int k = 0; k < 3; ++k) add(h * static_cast<double>(m_.moe_ffn) / tp);
        }
        for (int e = 0; e < static_cast<int>(m_.experts / ep); ++e) {
          for (int k = 0; k < 3; ++k) add(h * static_cast<double>(m_.moe_ffn) / layout.etp, true);
        }
      } else {
        for (int k = 0; k < m_.mlp_matrices(); ++k) add(h * f / tp);  // (gate,) up, down
      }
      units.push_back(std::move(unit));
    }
    if (v == last && (!m_.tied_embeddings || last > 0))
      units.push_back({-1, {{h / tp, false}, {vocab * h / tp, false}}});
    units_.push_back(std::move(units));
    gradient_allocated_.resize(gradient_allocated_.size() + units_.back().size(), false);
  }

  std::vector<Unit> units_flat() const {
    std::vector<Unit> all;
    for (const auto& chunk : units_) all.insert(all.end(), chunk.begin(), chunk.end());
    return all;
  }

  double optimizer_bytes(const ParamTensor& p) const {
    if (config_.layout.sharding == Sharding::kZero1)
      return state_.optimizer * p.elements / (p.expert ? d_.expert_data_ranks : d_.data_ranks);
    return state_.optimizer * p.elements / shard_;
  }

  // Activation tensors one layer keeps per microbatch for its backward: saved_activations's
  // (workload.h), one tensor each; with full recompute (and not full_set), the layer's input only.
  std::vector<SavedTensor> layer_activations(int layer, bool full_set) const {
    if (config_.recompute == Recompute::kFull && !full_set) {
      return {{"layer input", static_cast<double>(m_.d_model), 2}};
    }
    return saved_activations(config_, m_.moe_layer(layer));
  }
  double bytes_of(const SavedTensor& tensor) const { return tensor.bytes_per_token() * tokens_ / config_.layout.tp; }

  // The 1F1B order of (microbatch, chunk) units on this stage: warm-up forwards, then one forward
  // and one backward in turn, then the cool-down backwards. Interleaved (vp > 1): Megatron's order,
  // microbatches in groups of pp, the chunks in turn (backward: the chunks reversed).
  void run_schedule(TraceBuilder& t) {
    const int pp = config_.layout.pp, vp = config_.layout.vp, mbs = microbatches_;
    std::vector<std::pair<int, int>> forwards, backwards;
    const int group = vp == 1 ? mbs : pp;
    for (int g = 0; g < mbs; g += group) {
      for (int c = 0; c < vp; ++c) {
        for (int mb = g; mb < std::min(mbs, g + group); ++mb) {
          forwards.push_back({mb, c});
          backwards.push_back({mb, vp - 1 - c});
        }
      }
    }
    const size_t warmup = static_cast<size_t>(activation_units_in_flight(config_, d_, stage_) - 1);
    size_t f = 0, b = 0;
    for (; f < std::min(warmup, forwards.size()); ++f) forward(t, forwards[f].first, forwards[f].second);
    while (f < forwards.size()) {
      forward(t, forwards[f].first, forwards[f].second);
      ++f;
      backward(t, backwards[b].first, backwards[b].second);
      ++b;
    }
    for (; b < backwards.size(); ++b) backward(t, backwards[b].first, backwards[b].second);
  }

  // FSDP: the all-gather output of unit u of chunk c, on the comm stream (bf16, all its parameters).
  uint64_t gather(TraceBuilder& t, const Unit& u) { return t.alloc(2.0 * u.elements(), kCommStream); }

  void forward(TraceBuilder& t, int mb, int c) {
    const std::vector<Unit>& units = units_[static_cast<size_t>(c)];
    auto& kept = activations_[{mb, c}];
    const double tp = config_.layout.tp;
    uint64_t gathered = kNoTensor, prefetched = kNoTensor;
    for (size_t i = 0; i < units.size(); ++i) {
      const Unit& u = units[i];
      t.set_phase({PhaseKind::kForward, step_, mb, u.layer});
      if (gather_) {
        gathered = prefetched != kNoTensor ? prefetched : gather(t, u);
        prefetched = i + 1 < units.size() ? gather(t, units[i + 1]) : kNoTensor;
      }
      if (u.layer >= 0) {
        // Sequence parallelism all-gathers the input of attention's and the MLP's first GEMM: a
        // full-sequence buffer (FP8 when the GEMM is), freed after the GEMM it feeds.
        for (const SavedTensor& saved : layer_activations(u.layer, false)) {
          if (tp > 1 && saved.gathered_for_gemm) {
            const uint64_t sp = t.alloc(saved.bytes_per_token() * tokens_, kComputeStream);
            kept.push_back(t.alloc(bytes_of(saved), kComputeStream));
            t.free(sp);
          } else {
            kept.push_back(t.alloc(bytes_of(saved), kComputeStream));
          }
        }
      } else if (i + 1 == units.size() && c == static_cast<int>(units_.size()) - 1 &&
                 chunks_.back() == config_.layout.pp * config_.layout.vp - 1) {
        // The output head: bf16 logits, their fp32 copy for the loss, the loss.
        const double logits = tokens_ * static_cast<double>(m_.vocab) / tp;
        logits_[{mb, c}] = {t.alloc(2.0 * logits, kComputeStream), t.alloc(4.0 * logits, kComputeStream),
                            t.alloc(4.0, kComputeStream)};
      }
      if (gathered != kNoTensor) t.free(gathered);  // reshard after forward
    }
  }

  void backward(TraceBuilder& t, int mb, int c) {
    const std::vector<Unit>& units = units_[static_cast<size_t>(c)];
    auto& kept = activations_[{mb, c}];
    const double tp = config_.layout.tp;
    const double h = static_cast<double>(m_.d_model);
    size_t unit_index_base = 0;
    for (int k = 0; k < c; ++k) unit_index_base += units_[static_cast<size_t>(k)].size();
    uint64_t gathered = kNoTensor, prefetched = kNoTensor, grad_input = kNoTensor;
    for (size_t r = units.size(); r-- > 0;) {
      const Unit& u = units[r];
      t.set_phase({PhaseKind::kBackward, step_, mb, u.layer});
      if (gather_) {
        gathered = prefetched != kNoTensor ? prefetched : gather(t, u);
        prefetched = r > 0 ? gather(t, units[r - 1]) : kNoTensor;
      }
      std::vector<uint64_t> recomputed;
      if (u.layer >= 0 && config_.recompute == Recompute::kFull) {
        for (const SavedTensor& saved : layer_activations(u.layer, true)) {
          recomputed.push_back(t.alloc(bytes_of(saved), kComputeStream));
        }
      }
      // The gradient flowing to the layer below (bf16, the layer's input shape).
      const uint64_t next_grad = t.alloc(2.0 * h * tokens_ / tp, kComputeStream);
      if (grad_input != kNoTensor) t.free(grad_input);
      grad_input = next_grad;
      // Parameter gradients: FSDP computes the unsharded ones (bf16, the gathered parameters'
      // dtype); without FSDP they are kept (and accumulated over the microbatches) from the first
      // backward on.
      const size_t unit_index = unit_index_base + r;
      std::vector<uint64_t> unsharded;
      if (gather_) {
        for (const ParamTensor& p : u.tensors) {
          unsharded.push_back(t.alloc(kFsdpComputeBytes * p.elements, kComputeStream));
        }
      } else {
        keep_gradients(t, u, unit_index);
      }
      // The unit's autograd nodes are done: their saved tensors go (the logits, the layer's
      // activations, what recompute made).
      auto logits = logits_.find({mb, c});
      if (u.layer < 0 && logits != logits_.end()) {
        for (uint64_t a : logits->second) t.free(a);
        logits_.erase(logits);
      }
      t.free_all(recomputed);
      if (u.layer >= 0) {
        const size_t n = layer_activations(u.layer, false).size();
        for (size_t k = 0; k < n && !kept.empty(); ++k) {
          t.free(kept.back());
          kept.pop_back();
        }
      }
      // FSDP2's post-backward (foreach_reduce): the unsharded gradients copied into one
      // reduce-scatter input in the reduce dtype (made on the compute stream, PyTorch 2.5 on) and
      // freed, the result cast into the sharded fp32
      // gradients (kept across microbatches), the parameters resharded.
      if (gather_) {
        const uint64_t reduce_input = t.alloc(reduce_bytes_ * u.elements(), kComputeStream);
        t.free_all(unsharded);
        keep_gradients(t, u, unit_index);
        t.free(reduce_input);
      }
      if (gathered != kNoTensor) t.free(gathered);
    }
    if (grad_input != kNoTensor) t.free(grad_input);
    activations_.erase({mb, c});
  }

  void keep_gradients(TraceBuilder& t, const Unit& u, size_t unit_index) {
    if (gradient_allocated_[unit_index]) return;
    for (const ParamTensor& p : u.tensors)
      gradients_.push_back(t.alloc(state_.gradients * p.elements / shard_, kComputeStream));
    gradient_allocated_[unit_index] = true;
  }

  const TrainingConfig& config_;
  const DerivedLayout& d_;
  int stage_;
  const TransformerSpec& m_;
  bool sharded_ = false;
  bool gather_ = false;
  bool persistent_gradients_ = false;
  double shard_ = 1;
  StateBytes state_;
  double reduce_bytes_ = 2;  // a gradient element as it is reduced
  double tokens_ = 0;
  int microbatches_ = 1;
  int step_ = 0;
  std::vector<int> chunks_;
  std::vector<std::vector<Unit>> units_;  // per chunk
  std::vector<bool> gradient_allocated_;  // per unit, over all chunks
  std::vector<uint64_t> gradients_;
  std::map<std::pair<int, int>, std::vector<uint64_t>> activations_;
  std::map<std::pair<int, int>, std::vector<uint64_t>> logits_;
};

}  // namespace

StepMemoryResult step_memory(const TrainingConfig& config, const DerivedLayout& derived, const GpuSpec& gpu,
                             const AllocatorSettings& settings, bool all_microbatches) {
  const MemoryBreakdown breakdown = memory_per_gpu(config, derived);
  const int pp = config.layout.pp;
  const int steady = config.layout.vp > 1 ? kInterleavedMicrobatchGroups * pp : pp + kSteadyMicrobatchesBeyondPp;
  const int microbatches = all_microbatches ? derived.microbatches : std::min(derived.microbatches, steady);
  StepMemoryResult result;
  result.settings = settings;
  result.stage = breakdown.stage;
  result.runtime_bytes = kRuntimeReserveBytes;
  TraceBuilder builder;
  StepProgramMemory(config, derived, breakdown.stage, microbatches).emit(builder);
  const double device = gpu.memory_bytes - kRuntimeReserveBytes;
  const MemoryReplay replay =
      replay_memory(builder.trace(), settings, device > 0 ? static_cast<uint64_t>(device) : uint64_t{1});
  result.peak_allocated_bytes = replay.peak_allocated_bytes;
  result.peak_reserved_bytes = replay.peak_reserved_bytes;
  result.allocated_at_peak_reserved_bytes = replay.allocated_at_peak_reserved_bytes;
  result.fragmentation_at_peak = replay.fragmentation_at_peak;
  result.device_mallocs = replay.stats.num_device_alloc;
  result.allocations = replay.stats.allocation[0].allocated;
  if (!builder.trace().empty()) {
    result.peak_phase = describe(builder.phase_at(replay.peak_allocated_index));
    result.peak_reserved_phase = describe(builder.phase_at(replay.peak_reserved_index));
  }
  if (!replay.ooms.empty()) {
    const MemoryOom& oom = replay.ooms.front();
    result.oom = StepMemoryOom{oom.bytes, oom.stream, describe(builder.phase_at(oom.trace_index))};
  }
  return result;
}

}  // namespace tandem::models
