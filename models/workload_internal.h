// What the pieces of the training-step model (workload.cc: the model, layout and memory;
// layer_kernels.cc; step_program.cc; step_timeline.cc) share. Internal to models/.
#pragma once

#include <cstddef>

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

// Bytes of one gradient element as it is reduced.
inline double grad_bytes(const TrainingConfig& config) { return static_cast<double>(size_bytes(config.grad_reduce_dtype)); }

// Bytes an Adam update moves per local parameter (reads master weight, gradient, both moments;
// writes them back and the bf16 copy): what bounds the optimizer step, HBM-bound.
inline constexpr double kOptimizerTrafficBytesPerParam = 30;

}  // namespace tandem::models
