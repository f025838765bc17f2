// Training workloads: a dense transformer (Llama-3 8B / 70B / 405B, or any from its dimensions)
// trained with data, fully sharded (FSDP / ZeRO-3), hybrid sharded (HSDP), tensor (with sequence
// parallelism) and pipeline (1F1B) parallelism. build_step() turns a configuration into one
// training step's program: per pipeline stage, the ordered compute and collective tasks of a
// representative rank on its streams, with the dependencies that say what overlaps what, and the
// communicator groups those collectives run on (placed on the cluster's GPUs). The simulator times
// every collective on its groups (sim/training.h) and run_timeline() lays the step out.
//
// Conventions (docs/workloads.md has the formulas and their sources):
//   - model FLOPs per token = 6N + 12 L d s (torchtitan / PaLM; non-causal attention; N without
//     an untied input embedding, see model_flops_per_token), split forward 1/3, backward 2/3;
//     full activation recompute adds one more forward (hardware FLOPs, not model FLOPs);
//   - collective sizes follow nccl-tests' convention: all_gather / reduce_scatter give the total
//     (the gathered tensor), all_reduce the buffer, send/recv what one rank sends;
//   - ranks are placed Megatron-style: tensor-parallel index fastest, then data-parallel, then the
//     pipeline stage, on GPUs numbered node-major.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"
#include "models/caching_allocator.h"
#include "models/cluster.h"
#include "models/kernels.h"

namespace tandem::models {

// The dense MLP: gated (SwiGLU, Llama and most models since 2023: gate, up and down matrices) or
// not (GELU, GPT-3, BLOOM, MPT: up and down). Experts are always gated.
enum class MlpKind : uint8_t { kSwiGlu, kGelu };
std::string_view name(MlpKind kind);
MlpKind parse_mlp_kind(std::string_view text);  // "swiglu", "gelu"

// How the model knows a token's position: rotary embeddings on q and k in every layer (Llama and
// most models since 2023), ALiBi's per-head linear bias on the attention scores (BLOOM, MPT: no
// parameters, computed inside the attention kernels), or a learned table of max_positions rows
// added to the token embeddings (GPT-2 and GPT-3, OPT).
enum class PositionKind : uint8_t { kRope, kAlibi, kLearned };
std::string_view name(PositionKind kind);
PositionKind parse_position_kind(std::string_view text);  // "rope", "alibi", "learned"

// A decoder-only transformer with grouped-query attention and a gated (SwiGLU) MLP; with experts > 0
// a mixture of experts: after the first dense_layers layers, each layer's MLP is `experts` routed
// experts of width moe_ffn (each token to top_k of them) plus shared_experts always-on ones.
struct TransformerSpec {
  std::string name;  // "llama3-70b"
  int layers = 0;
  int64_t d_model = 0;
  int64_t ffn = 0;  // the MLP's hidden size
  int heads = 0;
  int kv_heads = 0;  // grouped-query attention: heads sharing one K/V head
  int64_t vocab = 0;
  bool tied_embeddings = false;  // one matrix for the embedding and the output head
  int experts = 0;               // routed experts per MoE layer (0: a dense model)
  int top_k = 0;                 // experts each token is routed to
  int64_t moe_ffn = 0;           // one expert's hidden size
  int shared_experts = 0;        // experts every token goes through
  int dense_layers = 0;          // MoE models: the first layers keep a dense MLP of width ffn
  MlpKind mlp = MlpKind::kSwiGlu;  // the dense MLP's kind
  int64_t head_dim = 0;            // 0: d_model / heads; Qwen3 and others set it apart (q is heads x head_dim wide)
  PositionKind positions = PositionKind::kRope;
  int64_t max_positions = 0;  // rows of a learned position table (positions: learned)
  // Multi-head latent attention (DeepSeek-V2 / V3: kv_lora_rank > 0): q comes from a latent of
  // q_lora_rank, k and v from one of kv_lora_rank, each through a down- and an up-projection; a
  // head's q and k have qk_nope_dim + qk_rope_dim dimensions (the rope part of k one for all heads),
  // its v v_head_dim. heads = kv_heads.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t qk_rope_dim = 0;
  int64_t v_head_dim = 0;

  bool moe() const { return experts > 0; }
  bool gated() const { return mlp == MlpKind::kSwiGlu; }
  bool mla() const { return kv_lora_rank > 0; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : d_model / heads; }
  int64_t qk_head_size() const { return mla() ? qk_nope_dim + qk_rope_dim : head_size(); }  // a head's q and k
  int64_t v_head_size() const { return mla() ? v_head_dim : head_size(); }                  // a head's v
  int64_t q_dim() const { return heads * qk_head_size(); }   // q's width
  int64_t k_dim() const { return kv_heads * qk_head_size(); }  // k's
  int64_t v_dim() const { return kv_heads * v_head_size(); }   // v's
  int64_t o_dim() const { return heads * v_head_size(); }      // the attention output's
  int64_t kv_dim() const { return kv_heads * head_size(); }    // k's and v's without MLA
  int mlp_matrices() const { return gated() ? 3 : 2; }  // of d_model x ffn in a dense MLP
  bool moe_layer(int layer) const { return moe() && layer >= dense_layers; }
  // The first stage's embedding: the token table (vocab x d_model) and a learned position table.
  int64_t embedding_parameters() const {
    return (vocab + (positions == PositionKind::kLearned ? max_positions : 0)) * d_model;
  }
  int64_t attention_parameters() const;  // q, k, v, o
  // The part of a layer every tensor-parallel rank holds whole (Megatron builds MLA's
  // down-projections "duplicated"), and which tensor parallelism therefore does not divide: MLA's
  // down-projections and latent norms; 0 otherwise.
  int64_t layer_replicated_parameters() const;
  // One rank's share of `dense` parameters of which `replicated` are held whole by every TP rank.
  static double tp_local(double dense, double replicated, double tp) { return (dense - replicated) / tp + replicated; }
  int64_t expert_parameters() const;     // one expert: gate, up, down
  // A layer's parameters that every tensor-parallel rank splits (attention, a dense MLP, shared
  // experts, the router, the norms), and those of its routed experts (split over expert
  // parallelism instead).
  int64_t layer_dense_parameters(int layer) const;
  int64_t layer_expert_parameters(int layer) const;
  int64_t layer_parameters() const;  // a dense layer: attention + MLP + 2 norms
  int64_t other_parameters() const;  // embedding, output head, final norm
  int64_t parameters() const;        // every layer's + other_parameters()
  // What one token's forward multiplies by: the routed experts counted top_k times, not experts.
  int64_t active_parameters() const;
};

// "llama3-8b", "llama3-70b", "llama3-405b" (The Llama 3 Herd of Models, Table 3); mixture of
// experts: "mixtral-8x7b", "mixtral-8x22b" (their config.json), "deepseek-v3" (arXiv 2412.19437,
// its multi-head latent attention approximated by grouped-query attention of the same width; see
// docs/workloads.md). Throws Error(kInvalidArgument) listing the known names.
TransformerSpec transformer_preset(std::string_view name);
std::vector<std::string> transformer_preset_names();
// Throws Error(kInvalidArgument) naming the field (heads that do not divide d_model, ...).
void validate(const TransformerSpec& model);

// How parameters, gradients and optimizer state are spread over the data-parallel ranks.
enum class Sharding : uint8_t {
  kNone,   // DDP: every replica holds everything; gradients all-reduced
  kZero1,  // optimizer state sharded (Megatron's distributed optimizer): gradients reduce-scattered,
           // parameters all-gathered once per step
  kFsdp,   // ZeRO-3: parameters, gradients and optimizer state sharded over every data-parallel rank
  kHsdp,   // FSDP within shard groups of `shard_group` ranks, replicas all-reduce their shard
};
std::string_view name(Sharding sharding);
Sharding parse_sharding(std::string_view text);  // "none", "zero1", "fsdp", "hsdp"

// Activation recomputation: none keeps every activation a layer's backward needs; full keeps each
// layer's input only and runs the layer's forward again in the backward. Selective is what the
// stack means by it: Megatron (fused kernels) recomputes the core attention, which flash
// attention's backward does anyway (no extra time, nothing more kept); torchtitan (eager kernels)
// keeps the matmul and attention outputs but every second matmul's, and recomputes the rest (its
// op-level policy): about a third of the activations, for half the forward GEMMs and every
// elementwise op again.
enum class Recompute : uint8_t { kNone, kSelective, kFull };
std::string_view name(Recompute recompute);
Recompute parse_recompute(std::string_view text);  // "none", "selective", "full" (true: full, false: none)

// How each microbatch's weight gradients reach the gradients the step reduces (the main
// gradients, in grad_reduce_dtype), as the training stack does it:
//   kFused     the weight-gradient GEMMs add into them (Megatron's --gradient-accumulation-fusion
//              and Transformer Engine's fuse_wgrad_accumulation, on by default in Megatron-Core and
//              NeMo; FSDP reduce-scatters each microbatch's gradients itself): no pass of its own.
//   kHook      Megatron without that fusion: a backward hook per parameter adds the bf16 gradient
//              into the main one (main_grad.add_(grad)) and frees it, every microbatch.
//   kDeepSpeed DeepSpeed's BF16_Optimizer (Megatron-DeepSpeed: BLOOM and its era): the bf16
//              gradients are zeroed before each microbatch's backward, autograd accumulates into
//              them, then update_hp_grads adds them into fp32 gradients, over the stage's every
//              parameter (deepspeed/runtime/pipe/engine.py, _exec_backward_pass); both copies stay
//              allocated through the step.
enum class GradAccumulation : uint8_t { kFused, kHook, kDeepSpeed };
std::string_view name(GradAccumulation mode);
GradAccumulation parse_grad_accumulation(std::string_view text);  // "fused", "hook", "deepspeed"

struct ParallelLayout {
  std::string name;  // for reports: "fsdp", "tp8-pp4"
  int tp = 1;        // tensor-parallel ranks (with sequence parallelism)
  int pp = 1;        // pipeline stages (1F1B)
  Sharding sharding = Sharding::kFsdp;
  int shard_group = 0;      // HSDP: data-parallel ranks in one shard group (0: the GPUs of a node / tp)
  int vp = 1;               // virtual pipeline stages per rank: interleaved 1F1B (Megatron) when > 1
  int cp = 1;               // context-parallel ranks: each holds seq_len / cp tokens, ring attention
  int ep = 1;  // expert-parallel ranks (MoE): the routed experts split over ep of a stage's tp x cp x dp ranks
  int etp = 1;  // expert tensor parallelism: each routed expert's matrices split over etp ranks
  bool tp_overlap = false;  // TP collectives overlapped with the GEMMs they feed (TE userbuffers)
  // The ranks one copy of the routed experts is split over: a rank holds 1 / (ep x etp) of them.
  int expert_shards() const { return ep * etp; }
};

struct TrainingConfig {
  TransformerSpec model;
  ParallelLayout layout;
  int seq_len = 8192;
  int global_batch = 128;  // sequences per step
  int micro_batch = 1;     // sequences per microbatch per data-parallel rank
  Precision precision = Precision::kBF16;
  Recompute recompute = Recompute::kNone;
  KernelStack kernels = KernelStack::kFused;  // which kernels the training stack launches
  AttentionImpl attention = AttentionImpl::kAuto;  // the core attention's kernels (models/kernels.h)
  // Unset: every compute task is timed from its kernels (models/kernels.h). Set: the share of the
  // GPU's dense peak the compute reaches while it runs, applied to the task's hardware FLOPs (the
  // old one-knob model, kept as an override). The step's achieved MFU is lower either way: exposed
  // communication and the pipeline bubble come on top.
  std::optional<double> mfu;
  DataType grad_reduce_dtype = DataType::kBF16;  // gradients reduced in bf16 or f32
  GradAccumulation grad_accumulation = GradAccumulation::kFused;  // docs/workloads.md
  std::string algorithm = "auto";                // collective algorithm: auto (NCCL's tuner), ring, tree
  // MoE: expert capacity as a multiple of the balanced load (tokens x top_k / experts); the
  // dispatcher pads every expert to it (Megatron's drop-and-pad), so compute and all_to_all bytes
  // scale with it. 1: balanced routing, no padding.
  double capacity_factor = 1.0;
  // PYTORCH_CUDA_ALLOC_CONF of the job: what the step's memory timeline runs under (step_memory.h).
  AllocatorSettings allocator;
};

// Limits checked by derive(): beyond them a configuration is a typo.
inline constexpr int kMaxMicrobatches = 4096;
inline constexpr int kMaxSeqLen = 1 << 20;

// What a configuration comes to on `gpus` GPUs (derive() checks it).
struct DerivedLayout {
  int gpus = 0;
  int dp = 0;                 // data-parallel ranks: gpus / (tp * pp * cp)
  int data_ranks = 0;         // ranks gradients are reduced over: dp * cp (Megatron's DP group with CP)
  int expert_data_ranks = 0;  // ranks holding the same routed experts: tp * data_ranks / (ep * etp) (folding)
  int microbatches = 0;       // per step and data-parallel rank: global_batch / (dp * micro_batch)
  int shard_group = 1;        // ranks sharing one copy of the sharded state (fsdp: data_ranks; hsdp: shard_group)
  int replicas = 1;           // data_ranks / shard_group
  std::vector<int> layers_of_stage;  // layers per virtual pipeline stage, pp * vp of them (stage v on
                                     // rank v mod pp; the first L mod (pp * vp) get one more)
};
// Throws Error(kInvalidArgument) with the reason when the layout does not divide the GPUs, the
// batch does not divide into microbatches, tp does not divide the heads, and so on.
DerivedLayout derive(const TrainingConfig& config, int gpus, int gpus_per_node);

// One tensor a transformer layer saves for its backward, per token of its input before tensor
// parallelism divides it (sequence parallelism: every saved tensor is split over the tp ranks).
struct SavedTensor {
  std::string_view what;          // "q", "fc1 input (MLP norm output)"
  double elements_per_token = 0;  // hidden, kv_dim, ffn, ... of one token
  double bytes_per_element = 2;   // bf16 2; a Transformer Engine FP8 GEMM input 1
  // Sequence parallelism all-gathers this tensor over the tp ranks before the GEMM it feeds: a
  // full-sequence buffer of its width and type, freed after that GEMM (not saved).
  bool gathered_for_gemm = false;
  double bytes_per_token() const { return elements_per_token * bytes_per_element; }
};
// What one layer keeps per microbatch for backward, with config's kernels, precision and
// recompute (the whole set: full recompute keeps the layer's input instead and rebuilds this set
// during the layer's backward). docs/memory.md lists each stack's tensors and their sources.
std::vector<SavedTensor> saved_activations(const TrainingConfig& config, bool moe_layer);

// Bytes per GPU at the peak of a step, on the busiest pipeline stage (the first: 1F1B keeps pp
// microbatches of activations there).
struct MemoryBreakdown {
  double weights_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;  // fp32 master weights + Adam's two moments (FSDP: the moments; the weights are the master)
  double unsharded_bytes = 0;  // FSDP: gathered parameters (two layers, prefetch), one layer's bf16 gradients
  double activations_bytes = 0;
  double logits_bytes = 0;   // the output layer's fp32 logits (last stage; counted when it is the busiest)
  double runtime_bytes = 0;  // memory outside the caching allocator: CUDA context, NCCL buffers (kRuntimeReserveBytes)
  int stage = 0;             // the pipeline stage these bytes are of
  // The analytic sum: what the allocator hands out at the peak plus the runtime, no allocator
  // slack (the step's memory timeline, step_memory.h, models that).
  double total_bytes() const;
};
// Device memory that is not the caching allocator's. The CUDA context with lazy module loading
// (~0.3 GB, pytorch PR #86509) plus cuBLAS/cuDNN handles and kernels: 0.5 GB. NCCL's buffers for
// the job's communicators (NCCL_BUFFSIZE 4 MiB per channel and peer, proxy and NVLS buffers):
// 1.5 GB. Until the memory timeline existed the reserve was 4 GB, the other 2 GB being "allocator
// slack" that the timeline now computes.
inline constexpr double kCudaContextBytes = 0.5e9;
inline constexpr double kNcclBuffersBytes = 1.5e9;
inline constexpr double kRuntimeReserveBytes = kCudaContextBytes + kNcclBuffersBytes;
MemoryBreakdown memory_per_gpu(const TrainingConfig& config, const DerivedLayout& derived);
// The units of one virtual stage's activations pipeline stage `stage` holds at its peak: the
// warm-up forwards of its schedule plus the one in flight (1F1B: pp - stage; interleaved:
// Megatron's (pp - stage - 1) x 2 + (vp - 1) x pp + 1), at most the step's units.
int activation_units_in_flight(const TrainingConfig& config, const DerivedLayout& derived, int stage);
// Throws Error(kUnsupported) naming the largest parts and what would help when the total exceeds
// the GPU's memory.
void check_fits(const TrainingConfig& config, const DerivedLayout& derived, const GpuSpec& gpu);

// ---- the step program --------------------------------------------------------------------------

// A communicator: every instance runs the same collective at the same time (all TP groups of the
// job, say), on its own GPUs, listed in the group's rank order (node-major, `per_node` per node).
struct CommGroup {
  std::string name;  // "tp", "dp", "fsdp", "hsdp-shard", "hsdp-replicate", "pp"
  int nodes = 1;     // nodes one instance spans
  int per_node = 1;  // GPUs of each of those nodes
  std::vector<std::vector<int>> instances;
  int size() const { return nodes * per_node; }
};

// A distinct collective of the step: what the simulator times once.
struct CommOp {
  Collective collective = Collective::kAllGather;
  int64_t bytes = 0;  // nccl-tests' size
  int group = 0;      // index into StepProgram::groups
};

enum class TaskKind : uint8_t { kCompute, kComm };

struct StepTask {
  TaskKind kind = TaskKind::kCompute;
  int stage = 0;
  int stream = 0;         // index into StepProgram::streams; a stream runs its tasks in order
  double flops = 0;       // compute: hardware FLOPs (recompute included)
  double kernel_s = 0;    // compute: the kernels' time (models/kernels.h)
  double fixed_s = 0;     // compute with an mfu override: time that does not scale with FLOPs (the optimizer)
  int comm = -1;          // comm: index into StepProgram::comms
  int label = 0;          // index into StepProgram::labels ("fwd", "FSDP all_gather (fwd)", ...)
  std::vector<int> deps;  // tasks that must end first (besides the stream's previous task)
};

struct StepProgram {
  int stages = 1;
  std::vector<std::string> streams;  // "s0/compute", "s0/dp", ...
  std::vector<int> compute_stream;   // per stage
  std::vector<CommGroup> groups;
  std::vector<CommOp> comms;
  std::vector<std::string> labels;
  std::vector<StepTask> tasks;
  double model_flops = 0;  // per step, whole job (model_flops_per_token x tokens)
  double tokens = 0;       // per step
};

// One step of `config` on `cluster` (every GPU of every node takes part). derive() and the fit
// check come first; throws what they throw.
StepProgram build_step(const TrainingConfig& config, const ClusterSpec& cluster);

// ---- the timeline ------------------------------------------------------------------------------

// Per-task durations in, start/end out. Every task starts when its stream's previous task and its
// dependencies have ended.
struct TaskTime {
  double start_s = 0;
  double end_s = 0;
};

struct ExposedComm {
  std::string label;  // "FSDP all_gather (fwd)"
  Collective collective = Collective::kAllGather;
  int64_t bytes = 0;  // nccl-tests size of most of them (the embedding and head units differ)
  std::string group;
  double exposed_s = 0;  // on the reported stage's compute stream
  double total_s = 0;    // the summed duration of these collectives on that stage
  int count = 0;
};

struct StepBreakdown {
  double step_s = 0;
  int stage = 0;         // the stage the breakdown is of (the one whose compute ends last)
  double compute_s = 0;  // its compute stream's busy time
  double exposed_comm_s = 0;
  double bubble_s = 0;           // idle waiting for other stages' compute
  std::vector<ExposedComm> top;  // by exposed time, largest first
  std::vector<TaskTime> times;
};

// Throws Error(kInvalidArgument) when durations do not match the tasks, or the dependencies form a
// cycle (a bug in the program).
StepBreakdown run_timeline(const StepProgram& program, const std::vector<double>& duration_s);

// Model FLOPs per training token: 6N + 12 L d s (torchtitan / PaLM), with N the parameters that
// take part in matmuls: an untied input embedding is a lookup, not a matmul, so it is left out
// (with it, Llama-3 70B is 488 GFLOP/token; without, 481.5), and so is a learned position table.
// With multi-head latent attention the 12 L d s term is 6 L (q_dim + o_dim) s, its widths. MFU is
// these over the GPU's peak, so a step's achieved MFU never exceeds the kernels' own.
double model_flops_per_token(const TransformerSpec& model, int seq_len);

// A compute task's duration: its kernels' time, or with an `mfu` override its FLOPs at that share
// of the GPU's peak for `precision` plus its fixed time.
double compute_seconds(const StepTask& task, const GpuSpec& gpu, Precision precision, std::optional<double> mfu);

// "compute timed from the fused kernels" or "compute at 40.0% MFU (override)": for report headers.
std::string describe_compute(const TrainingConfig& config);

// The kernels of one transformer layer and of the model's ends, per microbatch on one rank (its
// tensor- and context-parallel share), for `config` on `gpu`. Forward and backward apart; the
// backward of full recompute adds a forward.
struct LayerKernels {
  KernelCost attention_fwd;  // norm, QKV, rotary, flash attention, output projection, residual
  KernelCost mlp_fwd;        // norm, gate/up, SwiGLU, down, residual
  KernelCost core_fwd;       // the flash attention kernel alone (part of attention_fwd)
  KernelCost attention_bwd;
  KernelCost core_bwd;
  KernelCost mlp_bwd;
  KernelCost head_fwd;  // final norm, output projection, cross-entropy (last stage)
  KernelCost head_bwd;
  KernelCost embedding_fwd;  // the lookup (first stage)
  KernelCost embedding_bwd;
  KernelCost selective_recompute;  // per layer, before its backward (eager stack's selective only)
  // MoE layers: the MLP block instead of mlp_fwd / mlp_bwd, without its all_to_alls (norm, router,
  // permute and unpermute, the local experts' grouped GEMMs and SwiGLU, shared experts, residual).
  KernelCost moe_fwd;
  KernelCost moe_bwd;
  double moe_dispatch_bytes = 0;  // one all_to_all of the tokens' hidden states (nccl-tests size)
};
LayerKernels layer_kernels(const TrainingConfig& config, const GpuSpec& gpu);

}  // namespace tandem::models
