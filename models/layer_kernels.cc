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
  double gelu;      // per element of ffn (a non-gated MLP)
  double loss;      // per logit: softmax cross-entropy
};
// Fused: norm reads x, writes y (2 + 2); rotary reads and writes q, k (2 + 2); residual add reads
// two, writes one (6); SwiGLU reads gate and up, writes the product (6); bias-GELU reads fc1's
// output, writes the activation (2 + 2; Megatron's fused bias_gelu); vocab-parallel cross-entropy
// reads the bf16 logits and writes the fp32 softmax it keeps for backward (2 + 4).
constexpr ElementwiseBytes kFusedBytes{4, 4, 6, 6, 4, 6};
// Eager: RMSNorm = x.float() (2 + 4), pow (4 + 4), mean (4), rsqrt-multiply (4 + 4), type_as
// (4 + 2), weight multiply (2 + 2) = 36; rotary = float (2 + 4), complex multiply (4 + 4), type_as
// (4 + 2) = 20; SiLU (2 + 2) and multiply (4 + 2) = 10; GELU (2 + 2) = 4; cross-entropy on fp32
// logits: float (2 + 4), log_softmax (4 + 4) = 14.
constexpr ElementwiseBytes kEagerBytes{36, 20, 6, 10, 4, 14};
// Backward of a memory-bound op: reads the saved input and the incoming gradient, writes the
// outgoing one: twice the forward's traffic.
constexpr double kElementwiseBackwardFactor = 2.0;
// Flash attention's backward: five matmuls to the forward's two (FlashAttention-2, §3.1.2).
constexpr double kAttentionBackwardFlopsFactor = 2.5;
// fp8 GEMMs (Transformer Engine): each input is cast from bf16 to fp8 by its own kernel.
constexpr double kFp8CastBytesPerElement = 3;
// Unfused attention's softmax, HBM bytes per score, forward. Fused stack: Megatron's
// FusedScaleMaskSoftmax (megatron/core/fusions/fused_softmax.py; BLOOM's Megatron-DeepSpeed has the
// same kernel) reads the bf16 scores and writes the bf16 probabilities in one kernel (2 + 2).
// Eager: the scale, the causal mask (masked_fill) and the softmax each read and write the
// scores (3 x (2 + 2)). Attention dropout (0 in the runs tandem models) is not counted.
constexpr double kUnfusedSoftmaxBytesFused = 4;
constexpr double kUnfusedSoftmaxBytesEager = 12;

// One layer's shapes on one rank: t tokens of width h, its share of the q and kv widths, of the
// FFN and of the vocabulary under tensor parallelism.
struct LayerShapes {
  LayerShapes(const TrainingConfig& config) : e(config.kernels == KernelStack::kEager ? kEagerBytes : kFusedBytes) {
    const TransformerSpec& m = config.model;
    const double tp = config.layout.tp;
    t = tokens_per_rank(config);
    h = static_cast<double>(m.d_model);
    head_dim = static_cast<double>(m.head_size());
    seq = config.seq_len;
    q = static_cast<double>(m.q_dim()) / tp;
    o = static_cast<double>(m.o_dim()) / tp;
    ranks = tp;
    // Grouped-query attention under TP: each rank keeps its share of the KV heads, or one when
    // there are fewer KV heads than TP ranks (replicated, as Megatron does).
    kv = head_dim * std::max(1.0, static_cast<double>(m.kv_heads) / tp);
    f = static_cast<double>(m.ffn) / tp;
    vocab = static_cast<double>(m.vocab) / tp;
    // Sequence parallelism: norms and residuals run on the rank's 1/tp of the tokens.
    norm = e.norm * t * h / tp;
    residual = e.residual * t * h / tp;
    embedding = 4.0 * t * h / tp;
    // A learned position table: its rows added to the token embeddings (read both, write: 6 B).
    if (m.positions == PositionKind::kLearned) embedding += 6.0 * t * h / tp;
    // Rotary embeddings rotate q and k; ALiBi and learned positions have no per-layer kernel (ALiBi's
    // bias is computed inside the attention kernel).
    rotary = m.positions == PositionKind::kRope ? e.rotary : 0.0;
    // Causal flash attention: QK^T and PV over half the score matrix; with context parallelism
    // the load-balanced chunks give each rank 1/cp of the work.
    // (QK^T over q's width, PV over the output's: the same without MLA.)
    attention_flops = 2.0 * t * (config.seq_len / 2.0) * (q + o);
  }
  const ElementwiseBytes& e;
  double t, h, head_dim, seq, q, o, kv, f, vocab, norm, residual, embedding, rotary, attention_flops, ranks;
};

// The kernels of one pass, forward or backward: each GEMM (a backward's data and weight gradients,
// with fp8's casts) and memory-bound op, and their totals.
class Pass {
 public:
  Pass(const TrainingConfig& config, const GpuSpec& gpu, bool backward)
      : config_(config), env_{gpu, config.precision, config.kernels, config.attention}, backward_(backward) {}

  KernelCost gemm_of(GemmShape s) {
    const bool fp8 = config_.precision == Precision::kFP8;
    KernelCost cost;
    if (backward_) {
      cost = gemm(env_, {s.m, s.k, s.n});  // dX = dY W^T
      cost += gemm(env_, {s.k, s.n, s.m});  // dW = X^T dY
      if (fp8) cost += memory_bound(env_, kFp8CastBytesPerElement * s.m * s.n);
    } else {
      cost = gemm(env_, s);
      if (fp8) cost += memory_bound(env_, kFp8CastBytesPerElement * s.m * s.k);
    }
    gemms += cost;
    return cost;
  }
  KernelCost elementwise(double bytes) {
    const KernelCost cost = memory_bound(env_, backward_ ? kElementwiseBackwardFactor * bytes : bytes);
    elementwise_ops += cost;
    return cost;
  }
  KernelCost flash(double flops) const {
    return flash_attention(env_, backward_ ? kAttentionBackwardFlopsFactor * flops : flops, backward_);
  }
  // A batched GEMM of the core attention (scores or context), in bf16 even in fp8 runs (Transformer
  // Engine runs only the linear layers in fp8), with its backward's two GEMMs; counted in `core`.
  KernelCost attention_bmm(GemmShape s) const {
    const KernelEnv bf16{env_.gpu, Precision::kBF16, env_.stack, env_.attention};
    if (!backward_) return gemm(bf16, s);
    KernelCost cost = gemm(bf16, {s.m, s.k, s.n});
    cost += gemm(bf16, {s.k, s.n, s.m});
    return cost;
  }
  bool backward() const { return backward_; }

  KernelCost gemms, elementwise_ops;

 private:
  const TrainingConfig& config_;
  const KernelEnv env_;
  const bool backward_;
};

// Unfused core attention on the rank's heads (h_r = q / head_dim), as Megatron ran it before flash:
// scores S = Q K^T, one [s, s] GEMM of depth head_dim per sequence and head (the batch folded into
// the rows: m = tokens x h_r); the softmax through HBM; the context P V, [s, head_dim] of depth s.
// Causal masking saves no FLOPs here. Backward: each GEMM's two gradients and the softmax's.
KernelCost unfused_core(Pass& pass, const LayerShapes& s, KernelStack stack) {
  const double rows = s.t * s.q / s.head_dim;  // tokens x heads on the rank
  const double scores = rows * s.seq;
  KernelCost core = pass.attention_bmm({rows, s.seq, s.head_dim});
  core += pass.elementwise((stack == KernelStack::kEager ? kUnfusedSoftmaxBytesEager : kUnfusedSoftmaxBytesFused) *
                           scores);
  core += pass.attention_bmm({rows, s.head_dim, s.seq});
  return core;
}

// Attention: norm, qkv, rotary, the core attention (`core`: flash, or unfused), the output
// projection, the residual.
// Multi-head latent attention (Megatron-Core's MLASelfAttention): the down-projections of q and of
// k / v (with k's shared rope part) run on the rank's sequence-parallel tokens (duplicated over TP),
// their latents are normed, then the up-projections give q and k's nope part and v of the rank's
// heads; rope rotates q's rope part and k's shared one. `up`: the up-projections and the rope, what
// selective recompute (NeMo's MLA recipes' "mla_up_proj") runs again.
KernelCost mla_projections(Pass& pass, const LayerShapes& s, const TransformerSpec& m, KernelCost& up) {
  const double ql = static_cast<double>(m.q_lora_rank), kl = static_cast<double>(m.kv_lora_rank);
  const double rope = static_cast<double>(m.qk_rope_dim);
  const double heads = m.heads / s.ranks;
  KernelCost down = pass.gemm_of({s.t / s.ranks, ql + kl + rope, s.h});
  down += pass.elementwise(s.e.norm * s.t / s.ranks * (ql + kl));
  up = pass.gemm_of({s.t, s.q, ql});
  up += pass.gemm_of({s.t, heads * static_cast<double>(m.qk_nope_dim + m.v_head_dim), kl});
  if (s.rotary > 0) up += pass.elementwise(s.rotary * s.t * (heads + 1) * rope);
  down += up;
  return down;
}

KernelCost attention_kernels(Pass& pass, const LayerShapes& s, const TrainingConfig& config, KernelCost& core,
                             KernelCost& mla_up) {
  KernelCost attention = pass.elementwise(s.norm);
  if (config.model.mla()) {
    attention += mla_projections(pass, s, config.model, mla_up);
  } else {
    attention += pass.gemm_of({s.t, s.q + 2 * s.kv, s.h});
    if (s.rotary > 0) attention += pass.elementwise(s.rotary * s.t * (s.q + s.kv));
  }
  core = unfused_attention(config) ? unfused_core(pass, s, config.kernels) : pass.flash(s.attention_flops);
  attention += core;
  attention += pass.gemm_of({s.t, s.h, s.o});
  attention += pass.elementwise(s.residual);
  return attention;
}

// The gated MLP: eager runs two GEMMs for gate and up (torchtitan's w1, w3), fused one of twice
// the width. Not gated: fc1, GELU, fc2.
KernelCost mlp_kernels(Pass& pass, const LayerShapes& s, bool eager, bool gated) {
  KernelCost mlp = pass.elementwise(s.norm);
  if (!gated) {
    mlp += pass.gemm_of({s.t, s.f, s.h});
    mlp += pass.elementwise(s.e.gelu * s.t * s.f);
  } else if (eager) {
    mlp += pass.gemm_of({s.t, s.f, s.h});
    mlp += pass.gemm_of({s.t, s.f, s.h});
  } else {
    mlp += pass.gemm_of({s.t, 2 * s.f, s.h});
  }
  if (gated) mlp += pass.elementwise(s.e.swiglu * s.t * s.f);
  mlp += pass.gemm_of({s.t, s.h, s.f});
  mlp += pass.elementwise(s.residual);
  return mlp;
}

// An MoE layer's MLP: the router, permutes, the local experts' grouped GEMMs one after another,
// the shared experts; `dispatch_bytes` is what one all-to-all moves.
KernelCost moe_kernels(Pass& pass, const TrainingConfig& config, const LayerShapes& s, double& dispatch_bytes) {
  const TransformerSpec& m = config.model;
  // Routed tokens on this rank (sequence-parallel share), as the dispatcher pads them.
  const double t_moe = s.t / config.layout.tp;
  const double routed = t_moe * m.top_k * config.capacity_factor;
  const double local_experts = static_cast<double>(m.experts) / config.layout.ep;
  // Expert tensor parallelism: the rank runs the tokens its etp group gathered on 1/etp of each
  // local expert's width.
  const double etp = config.layout.etp;
  const double per_expert = routed * etp / local_experts;
  const double e_ffn = static_cast<double>(m.moe_ffn) / etp;
  KernelCost moe = pass.elementwise(s.norm);
  moe += pass.gemm_of({t_moe, static_cast<double>(m.experts), s.h});  // the router
  moe += pass.elementwise(2.0 * routed * s.h * 2.0);                  // permute, unpermute
  KernelCost expert = pass.gemm_of({per_expert, 2 * e_ffn, s.h});
  expert += pass.elementwise(s.e.swiglu * per_expert * e_ffn);
  expert += pass.gemm_of({per_expert, s.h, e_ffn});
  expert.seconds *= local_experts;  // the grouped GEMM: the local experts one after another
  expert.flops *= local_experts;
  expert.bytes *= local_experts;
  expert.kernels = static_cast<int>(expert.kernels * local_experts);
  moe += expert;
  if (m.shared_experts > 0) {
    const double shared = m.shared_experts * static_cast<double>(m.moe_ffn);
    moe += pass.gemm_of({t_moe, 2 * shared, s.h});
    moe += pass.elementwise(s.e.swiglu * t_moe * shared);
    moe += pass.gemm_of({t_moe, s.h, shared});
  }
  moe += pass.elementwise(s.residual);
  dispatch_bytes = routed * s.h * 2.0;
  return moe;
}

}  // namespace

LayerKernels layer_kernels(const TrainingConfig& config, const GpuSpec& gpu) {
  const bool eager = config.kernels == KernelStack::kEager;
  const LayerShapes s(config);
  LayerKernels k;
  for (bool is_backward : {false, true}) {
    Pass pass(config, gpu, is_backward);
    KernelCost core, mla_up;
    const KernelCost attention = attention_kernels(pass, s, config, core, mla_up);
    const KernelCost mlp = mlp_kernels(pass, s, eager, config.model.gated());
    if (!is_backward && config.recompute == Recompute::kSelective && eager) {
      // Half the layer's forward GEMMs and all of its elementwise ops, again.
      k.selective_recompute.seconds = pass.gemms.seconds / 2 + pass.elementwise_ops.seconds;
      k.selective_recompute.flops = pass.gemms.flops / 2;
      k.selective_recompute.bytes = pass.elementwise_ops.bytes;
      k.selective_recompute.kernels = pass.gemms.kernels / 2 + pass.elementwise_ops.kernels;
    } else if (!is_backward && config.recompute == Recompute::kSelective && unfused_attention(config)) {
      // Megatron's selective recompute: the core attention again before its backward (free with
      // flash, whose backward recomputes the scores anyway; here its GEMMs and softmax).
      k.selective_recompute = core;
    } else if (!is_backward && config.recompute == Recompute::kSelective && config.model.mla()) {
      // MLA under selective recompute keeps the latents, not q, k and v: the up-projections and the
      // rope run again before the attention's backward (Megatron's "mla_up_proj" module).
      k.selective_recompute = mla_up;
    }
    if (config.model.moe()) (is_backward ? k.moe_bwd : k.moe_fwd) = moe_kernels(pass, config, s, k.moe_dispatch_bytes);
    KernelCost head = pass.elementwise(s.norm);
    head += pass.gemm_of({s.t, s.vocab, s.h});
    head += pass.elementwise(s.e.loss * s.t * s.vocab);
    // The lookup reads a row and writes it (forward); the backward scatter-adds into the table.
    const KernelCost embedding = pass.elementwise(s.embedding);
    (is_backward ? k.attention_bwd : k.attention_fwd) = attention;
    (is_backward ? k.core_bwd : k.core_fwd) = core;
    (is_backward ? k.mlp_bwd : k.mlp_fwd) = mlp;
    (is_backward ? k.head_bwd : k.head_fwd) = head;
    (is_backward ? k.embedding_bwd : k.embedding_fwd) = embedding;
  }
  return k;
}

}  // namespace tandem::models
