// What the pieces of the training-step model (transformer.cc: the model; workload.cc: layout and memory;
// layer_kernels.cc; step_program.cc; step_timeline.cc) share. Internal to models/.
#pragma once

#include <cstddef>

#include "models/names_internal.h"
#include "models/workload.h"

namespace tandem::models {

// The first layer of virtual stage v.
inline int first_layer(const DerivedLayout& d, int v) {
  int layer = 0;
  for (int u = 0; u < v; ++u) layer += d.layers_of_stage[static_cast<size_t>(u)];
  return layer;
}

// Tokens of one microbatch on one rank: context parallelism splits each sequence.
inline double tokens_per_rank(const TrainingConfig& config) {
  return static_cast<double>(config.micro_batch) * config.seq_len / config.layout.cp;
}

// Whether the core attention runs unfused (the score matrix through HBM, kept for backward).
inline bool unfused_attention(const TrainingConfig& config) {
  return resolved(config.attention, config.kernels) == AttentionImpl::kUnfused;
}

// Bytes of one gradient element as it is reduced.
inline double grad_bytes(const TrainingConfig& config) { return static_cast<double>(size_bytes(config.grad_reduce_dtype)); }

// Adam's state per parameter: its two fp32 moments, and the fp32 master weights a bf16 model keeps.
inline constexpr double kAdamMomentBytes = 8;
inline constexpr double kMasterWeightBytes = 4;
// What FSDP's mixed precision computes in (param_dtype bf16): the gathered parameters and the
// unsharded gradients of a unit.
inline constexpr double kFsdpComputeBytes = 2;

// Bytes per parameter a rank keeps between steps, before sharding divides them.
struct StateBytes {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
};
// Megatron's DDP / distributed optimizer and PyTorch DDP: bf16 weights (FP8 runs with NeMo's
// fp8_param_gather keep FP8 weights and their FP8 transposes: the same 2 bytes), gradients in the
// reduce dtype (the grad buffer), fp32 master weights and Adam's moments: 18 bytes with fp32
// gradients, as Megatron's docs/user-guide/features/dist_optimizer.md counts. FSDP / FSDP2 with
// bf16 mixed precision: the fp32 shard is both the parameter and the optimizer's master
// (MixedPrecisionPolicy: it "keeps the high-precision sharded parameters in memory anyway"), the
// sharded gradient is cast back to fp32 whatever the reduce dtype (FSDP2's foreach_reduce, FSDP1's
// _cast_grad_to_param_dtype), and Adam's moments: 16 bytes.
StateBytes state_bytes_per_parameter(const TrainingConfig& config);

// HBM bytes per local parameter that config.grad_accumulation's pass moves after each microbatch's
// backward (0 for kFused: the GEMMs accumulate).
double grad_accumulation_bytes_per_parameter(const TrainingConfig& config);

// Bytes an Adam update moves per local parameter (reads master weight, gradient, both moments;
// writes them back and the bf16 copy): what bounds the optimizer step, HBM-bound.
inline constexpr double kOptimizerTrafficBytesPerParam = 30;

}  // namespace tandem::models
