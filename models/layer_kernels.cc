#include "models/workload.h"

// The kernels of one transformer layer (docs/kernels.md): the GEMMs, attention and the memory-bound
// ops, forward and backward, as the training step model times them.

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

}  // namespace tandem::models
