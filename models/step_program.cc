#include "models/workload.h"

// One training step as a program of tasks per rank (compute, collectives, pipeline sends) with
// their dependencies: build_step.

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <queue>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "models/workload_internal.h"

namespace tandem::models {

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

  // The communicators of the step, in the order they are made: TP, CP, EP, data, pipeline.
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
    make_data_groups();
    const Sharding sharding = config_.layout.sharding;
    if (m_.moe() && sharding != Sharding::kFsdp && sharding != Sharding::kHsdp) {
      // Without expert parallelism or TP the experts reduce over the data group like the rest.
      if (config_.layout.expert_shards() == 1 && tp_ == 1) {
        expert_data_group_ = data_group_;
      } else {
        make_expert_groups();
      }
    }
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

  // Megatron-Core's MoE parallel folding: the experts lay their own grid over the tp x cp x dp ranks
  // of a stage (megatron/core/parallel_state.py, the expert rank generator's order "tp-ep-dp": expert
  // TP innermost, then EP, then expert DP): rank offset t + etp (e + ep f) within the stage. An EP
  // group is ep ranks etp apart, an expert-TP group etp consecutive ranks, and the ranks holding the
  // same expert shard (edp) are etp x ep apart. With ep = etp = 1 every rank of the stage holds
  // every expert: edp is the whole stage.
  void make_expert_groups() {
    const int ep = config_.layout.ep, etp = config_.layout.etp, stage_ranks = tp_ * d_.data_ranks;
    const int edp = d_.expert_data_ranks;
    auto at = [&](int s, int t, int e, int f) { return s * stage_ranks + t + etp * (e + ep * f); };
    std::vector<std::vector<int>> expert, expert_tensor, expert_data;
    for (int s = 0; s < pp_; ++s) {
      for (int f = 0; f < edp; ++f) {
        for (int t = 0; t < etp; ++t) {
          std::vector<int> g;
          for (int e = 0; e < ep; ++e) g.push_back(at(s, t, e, f));
          expert.push_back(std::move(g));
        }
        for (int e = 0; e < ep; ++e) {
          std::vector<int> g;
          for (int t = 0; t < etp; ++t) g.push_back(at(s, t, e, f));
          expert_tensor.push_back(std::move(g));
        }
      }
      for (int e = 0; e < ep; ++e) {
        for (int t = 0; t < etp; ++t) {
          std::vector<int> g;
          for (int f = 0; f < edp; ++f) g.push_back(at(s, t, e, f));
          expert_data.push_back(std::move(g));
        }
      }
    }
    if (ep > 1) ep_group_ = add_group("ep", std::move(expert));
    if (etp > 1) etp_group_ = add_group("etp", std::move(expert_tensor));
    if (edp > 1) expert_data_group_ = add_group("edp", std::move(expert_data));
  }

  // The data-parallel ranks (with CP: every rank holding the same parameters) of (stage, tp
  // index): `blocks` groups of `count`, ranks `stride` apart, blocks `block_stride` apart.
  std::vector<std::vector<int>> data_instances(int count, int stride, int blocks, int block_stride) const {
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
  }

  // The data-parallel groups: one (dp, fsdp), or HSDP's shard and replicate groups.
  void make_data_groups() {
    const int data = d_.data_ranks;
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
    // K and V of the rank's KV heads (one when there are fewer KV heads than TP ranks), bf16.
    const double kv_width = std::max(1.0, static_cast<double>(m_.kv_heads) / tp_) *
                            static_cast<double>(m_.qk_head_size() + m_.v_head_size());
    const double block_bytes = (backward ? 2.0 : 1.0) * kv_width * tokens_per_rank(config_) * 2.0;
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
    // Multi-head latent attention gathers its latents (and k's rope part), not the hidden state:
    // forward the all_gather is that narrow, backward the reduce_scatter of their gradients.
    double gathered = activation_bytes_, scattered = activation_bytes_;
    if (core != nullptr && m_.mla()) {
      const double narrow = activation_bytes_ *
                            static_cast<double>(m_.q_lora_rank + m_.kv_lora_rank + m_.qk_rope_dim) /
                            static_cast<double>(m_.d_model);
      (backward ? scattered : gathered) = narrow;
    }
    if (tp_ > 1) {
      deps.push_back(last_tp_ >= 0 ? last_tp_ : last_compute_);
      std::erase(deps, -1);
      if (config_.layout.tp_overlap) {
        const int head =
            comm(stage, "tp", Collective::kAllGather, gathered / tp_, tp_group_, "TP all_gather (overlapped)", deps);
        gather_rest = comm(stage, "tp", Collective::kAllGather, gathered * (tp_ - 1) / tp_, tp_group_,
                           "TP all_gather (overlapped)", {head});
        work_deps = {head};
      } else {
        work_deps = {comm(stage, "tp", Collective::kAllGather, gathered, tp_group_, "TP all_gather", deps)};
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
        const int rest = comm(stage, "tp", Collective::kReduceScatter, scattered * (tp_ - 1) / tp_, tp_group_,
                              "TP reduce_scatter (overlapped)", {gather_rest});
        last_tp_ = comm(stage, "tp", Collective::kReduceScatter, scattered / tp_, tp_group_,
                        "TP reduce_scatter (overlapped)", {work, rest});
      } else {
        last_tp_ = comm(stage, "tp", Collective::kReduceScatter, scattered, tp_group_, "TP reduce_scatter", {work});
      }
    }
  }

  // FLOPs of one layer's attention and MLP forward for the mfu override: 6N + 12 L d s style
  // (non-causal attention), this rank's share.
  double attention_flops() const {
    return tokens_per_rank(config_) * 2.0 * static_cast<double>(m_.attention_parameters()) / tp_ + core_flops();
  }
  double core_flops() const {
    return tokens_per_rank(config_) * 2.0 * static_cast<double>(m_.q_dim() + m_.o_dim()) * config_.seq_len / tp_;
  }
  double mlp_flops() const {
    return tokens_per_rank(config_) * 2.0 * m_.mlp_matrices() * static_cast<double>(m_.d_model) *
           static_cast<double>(m_.ffn) / tp_;
  }

  // The forward (or recomputed forward) of one layer.
  // An MoE layer's MLP: the tokens' hidden states travel to their experts' ranks (all_to_all on the
  // expert-parallel group), with expert tensor parallelism the expert-TP ranks gather each other's
  // (all_gather) and run their share of every local expert's width, then reduce-scatter the
  // results; the results travel back. Tokens stay sequence-parallel around it (no TP collectives);
  // the next block waits for the last collective. Backward: the gradients take the same trips in
  // reverse order.
  void moe_block(int stage, double flops, const KernelCost& kernels, bool backward, std::string_view what,
                 std::vector<int> deps) {
    deps.push_back(last_tp_ >= 0 ? last_tp_ : last_compute_);
    std::erase(deps, -1);
    const double bytes = kernels_.moe_dispatch_bytes;
    const int etp = config_.layout.etp;
    int before = -1;
    if (ep_group_ >= 0) {
      before = comm(stage, "ep", Collective::kAllToAll, bytes, ep_group_,
                    backward ? "EP all_to_all (combine grad)" : "EP all_to_all (dispatch)", deps);
      deps = {before};
    }
    if (etp_group_ >= 0) {
      before = comm(stage, "ep", Collective::kAllGather, bytes * etp, etp_group_,
                    backward ? "ETP all_gather (grad)" : "ETP all_gather (tokens)", deps);
      deps = {before};
    }
    const int work = compute(stage, flops, kernels, what, deps);
    int after = -1;
    if (etp_group_ >= 0) {
      after = comm(stage, "ep", Collective::kReduceScatter, bytes * etp, etp_group_,
                   backward ? "ETP reduce_scatter (grad)" : "ETP reduce_scatter (results)", {work});
    }
    if (ep_group_ >= 0) {
      after = comm(stage, "ep", Collective::kAllToAll, bytes, ep_group_,
                   backward ? "EP all_to_all (dispatch grad)" : "EP all_to_all (combine)", maybe(after >= 0 ? after : work));
    }
    last_tp_ = after;
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
    int index = -1;         // the layer's index in the model
    double replicated = 0;  // of params, held whole by every TP rank (MLA's down-projections)
  };
  // One rank's dense parameters of a unit.
  double tp_local(const Unit& u) const { return TransformerSpec::tp_local(u.params, u.replicated, tp_); }
  std::vector<Unit> units(int v) const {
    std::vector<Unit> out;
    const int last = pp_ * vp_ - 1;
    const double matrix = static_cast<double>(m_.vocab * m_.d_model);
    if (v == 0) out.push_back({static_cast<double>(m_.embedding_parameters()), 0, false, false, -1});
    const int first = first_layer(d_, v);
    for (int l = first; l < first + d_.layers_of_stage[static_cast<size_t>(v)]; ++l) {
      out.push_back({static_cast<double>(m_.layer_dense_parameters(l)),
                     static_cast<double>(m_.layer_expert_parameters(l)), true, false, l,
                     static_cast<double>(m_.layer_replicated_parameters())});
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
                            2.0 * (tp_local(u[i]) + (fsdp ? u[i].expert_params : 0)), data_group_,
                            fsdp ? "FSDP all_gather (fwd)" : "DP all_gather (params)", maybe(after)));
      }
      if (!fsdp && sharding == Sharding::kZero1 && expert_data_group_ >= 0 && mb == 0 && u[i].expert_params > 0) {
        deps.push_back(comm(s, "data", Collective::kAllGather, 2.0 * u[i].expert_params / config_.layout.expert_shards(),
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

  // A stack that does not accumulate in the GEMMs adds a microbatch's gradients into the main ones
  // in a pass of its own, after the microbatch's backward, before its gradients go to the previous
  // stage.
  // Returns the pass's task (-1: none).
  int accumulate_gradients(int s, const std::vector<Unit>& u) {
    const double per_param = grad_accumulation_bytes_per_parameter(config_);
    if (per_param <= 0) return -1;
    double params = 0;
    for (const Unit& unit : u) params += tp_local(unit) + unit.expert_params / config_.layout.expert_shards();
    return memory_pass(s, per_param * params, "gradient accumulation", {});
  }

  // A compute task that streams `bytes` through HBM (the optimizer, gradient accumulation); under an
  // mfu override it keeps its time at the datasheet bandwidth (fixed_s), having no FLOPs.
  int memory_pass(int s, double bytes, std::string_view what, std::vector<int> deps) {
    const int task =
        compute(s, 0, memory_bound(KernelEnv{cluster_.gpu, config_.precision, config_.kernels}, bytes), what,
                std::move(deps));
    program_.tasks[static_cast<size_t>(task)].fixed_s = bytes / cluster_.gpu.hbm_Bps;
    return task;
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
      return comm(s, "data", Collective::kAllGather, 2.0 * (tp_local(u[i]) + u[i].expert_params), data_group_,
                  "FSDP all_gather (bwd)", maybe(after));
    };
    // FSDP gathers the next unit's parameters (backward order) before it reduce-scatters this
    // unit's gradients, so that the gather is not queued behind the reduction.
    int gathered = fsdp ? gather(n - 1, -1) : -1;
    const size_t first_reduction = grad_reductions.size();
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
      const double grads = grad_bytes(config_) * tp_local(u[i]);
      // FSDP and HSDP shard the routed experts with the rest (they run with ep = 1).
      const double all_grads = grads + grad_bytes(config_) * u[i].expert_params;
      if (last_mb && expert_data_group_ >= 0 && u[i].expert_params > 0) {
        // The routed experts' gradients reduce over the ranks that hold the same experts.
        const double expert_grads = grad_bytes(config_) * u[i].expert_params / config_.layout.expert_shards();
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
    // The last microbatch's reductions reduce what the accumulation pass leaves: they wait for it.
    if (const int pass = accumulate_gradients(s, u); pass >= 0) {
      for (size_t r = first_reduction; r < grad_reductions.size(); ++r)
        program_.tasks[static_cast<size_t>(grad_reductions[r])].deps = {pass};
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
        local += tp_local(unit);
        local_experts += unit.expert_params / config_.layout.expert_shards();
      }
    }
    if (sharding == Sharding::kZero1) {
      local /= d_.data_ranks;
      local_experts /= d_.expert_data_ranks;
    }
    if (sharding == Sharding::kFsdp || sharding == Sharding::kHsdp) local /= d_.shard_group;
    local += local_experts;
    // FSDP reduces every microbatch's gradients; the optimizer waits for the last of each unit.
    memory_pass(s, local * kOptimizerTrafficBytesPerParam, "optimizer", grad_reductions);
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
  int tp_group_ = -1, cp_group_ = -1, ep_group_ = -1, etp_group_ = -1, expert_data_group_ = -1, data_group_ = -1,
      replicate_group_ = -1;
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

}  // namespace tandem::models
