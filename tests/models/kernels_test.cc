// The kernel model: GEMM roofline and occupancy, flash attention by stack, memory-bound kernels,
// and what a layer's kernels add up to.
#include "models/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "models/workload.h"

namespace tandem::models {
namespace {

KernelEnv h100(Precision precision = Precision::kBF16, KernelStack stack = KernelStack::kFused) {
  return {cluster_preset("dgx-h100").gpu, precision, stack};
}

TEST(Kernels, ALargeGemmRunsAtTheSustainedCeiling) {
  // 8192^3: 4,096 tiles of 128 x 256 fill the 132 SMs; compute-bound (1.1 TFLOP vs 400 MB).
  const KernelCost c = gemm(h100(), {8192, 8192, 8192});
  EXPECT_DOUBLE_EQ(c.flops, 2.0 * 8192.0 * 8192 * 8192);
  const double ceiling = 989e12 * 0.803 * kSustainedClockShare;
  EXPECT_NEAR(c.seconds, c.flops / ceiling + kKernelGapSeconds, 1e-12);
  // fp8: 1,978.9 TFLOP/s x 0.709.
  const KernelCost f = gemm(h100(Precision::kFP8), {8192, 8192, 8192});
  EXPECT_NEAR(f.seconds - kKernelGapSeconds, c.flops / (1978.9e12 * 0.709 * kSustainedClockShare), 1e-12);
  EXPECT_THROW(gemm({cluster_preset("hgx-a100").gpu, Precision::kFP8, KernelStack::kFused}, {8192, 8192, 8192}),
               Error);
}

TEST(Kernels, SmallGemmsPayForTilesAndBytes) {
  // 1024 x 1024 x 8192: 32 tiles on 132 SMs, a quarter occupied.
  const KernelCost small = gemm(h100(), {1024, 1024, 8192});
  const double ceiling = 989e12 * 0.803 * kSustainedClockShare;
  EXPECT_NEAR(small.seconds - kKernelGapSeconds, small.flops / (ceiling * 32.0 / 132), 1e-12);
  // A skinny GEMM (n = 8) is HBM-bound: its operands' bytes at 80% of 3.35 TB/s.
  const KernelCost skinny = gemm(h100(), {65536, 8, 8192});
  const double bytes = 2.0 * (65536.0 * 8192 + 8192.0 * 8) + 2.0 * 65536 * 8;
  EXPECT_NEAR(skinny.seconds - kKernelGapSeconds, bytes / (3.35e12 * kHbmEfficiency), 1e-12);
}

TEST(Kernels, AttentionAndMemoryBoundKernels) {
  const double flops = 1e12;
  const double fused_fwd = flash_attention(h100(), flops, false).seconds;
  const double fused_bwd = flash_attention(h100(), flops, true).seconds;
  const double eager_fwd = flash_attention(h100(Precision::kBF16, KernelStack::kEager), flops, false).seconds;
  EXPECT_NEAR(fused_fwd - kKernelGapSeconds, flops / (989e12 * 0.62 * kSustainedClockShare), 1e-12);
  EXPECT_GT(fused_bwd, fused_fwd);            // FA3's backward runs at a lower share
  EXPECT_NEAR((eager_fwd - kKernelGapSeconds) / (fused_fwd - kKernelGapSeconds), 0.62 / 0.35, 1e-9);
  // fp8 leaves attention in bf16 (Transformer Engine's default).
  EXPECT_DOUBLE_EQ(flash_attention(h100(Precision::kFP8), flops, false).seconds, fused_fwd);
  EXPECT_NEAR(memory_bound(h100(), 2.68e9).seconds, 1e-3 + kKernelGapSeconds, 1e-12);
  EXPECT_DOUBLE_EQ(memory_bound(h100(), 0).seconds, 0);
}

TEST(Kernels, APowerCapSlowsTheTensorCoresNotHbm) {
  GpuSpec capped = cluster_preset("dgx-h100").gpu;
  EXPECT_DOUBLE_EQ(sustained_clock_share(capped), kSustainedClockShare);
  capped.power_limit_w = 500;
  EXPECT_NEAR(sustained_clock_share(capped), kSustainedClockShare * std::cbrt(500.0 / 700.0), 1e-12);
  const KernelEnv full = h100(), slow{capped, Precision::kBF16, KernelStack::kFused};
  EXPECT_NEAR((gemm(slow, {8192, 8192, 8192}).seconds - kKernelGapSeconds) /
                  (gemm(full, {8192, 8192, 8192}).seconds - kKernelGapSeconds),
              std::cbrt(700.0 / 500.0), 1e-9);
  EXPECT_DOUBLE_EQ(memory_bound(slow, 1e9).seconds, memory_bound(full, 1e9).seconds);
  capped.power_limit_w = 900;  // above the TDP: no boost beyond the specified clocks
  EXPECT_DOUBLE_EQ(sustained_clock_share(capped), kSustainedClockShare);
}

TEST(Kernels, AmpereRunsTheLastWaveOfTilesPartEmptyHopperSplitsIt) {
  const KernelEnv a100{cluster_preset("hgx-a100").gpu, Precision::kBF16, KernelStack::kFused};
  const GpuKernelTable& ampere = kernel_table(a100.gpu);
  const GpuKernelTable& hopper = kernel_table(h100().gpu);
  // BLOOM-176B's QKV GEMM at TP4: n = 3 x 14336 / 4 = 10752 (42 tile columns). 2,048 tokens: 16 x 42
  // = 672 tiles, 6.2 waves of 108 run as 7; 4,096 tokens: 1,344 tiles, 12.4 waves as 13.
  const GemmShape mbs1{2048, 10752, 14336}, mbs2{4096, 10752, 14336};
  EXPECT_DOUBLE_EQ(gemm_occupancy(ampere, mbs1), 672.0 / (7 * 108));
  EXPECT_DOUBLE_EQ(gemm_occupancy(ampere, mbs2), 1344.0 / (13 * 108));
  EXPECT_DOUBLE_EQ(gemm_occupancy(hopper, mbs1), 1.0);
  // Under one wave both run part-empty: 32 tiles.
  EXPECT_DOUBLE_EQ(gemm_occupancy(ampere, {1024, 1024, 8192}), 32.0 / 108);
  EXPECT_DOUBLE_EQ(gemm_occupancy(hopper, {1024, 1024, 8192}), 32.0 / 132);
  // Per token the A100 runs twice the tokens 7% faster (0.889 -> 0.957 of its SMs busy).
  const double per_token1 = (gemm(a100, mbs1).seconds - kKernelGapSeconds) / 2048;
  const double per_token2 = (gemm(a100, mbs2).seconds - kKernelGapSeconds) / 4096;
  EXPECT_NEAR(per_token1 / per_token2, (1344.0 / 13) / (672.0 / 7), 1e-9);
}

TEST(Kernels, UnknownGpusTakeTheirArchitecturesRow) {
  GpuSpec custom = cluster_preset("dgx-h100").gpu;
  custom.name = "H100-custom";
  EXPECT_EQ(kernel_table(custom).sms, 132);
  custom.arch = GpuArch::kAmpere;
  EXPECT_EQ(kernel_table(custom).sms, 108);
  custom.arch = GpuArch::kBlackwell;
  EXPECT_EQ(kernel_table(custom).sms, 148);  // B200's row
  // Blackwell's MAMF: B200 1,745 of 2,250 bf16; GB200 1,822 of 2,500.
  EXPECT_NEAR(kernel_table(cluster_preset("dgx-b200").gpu).gemm_bf16 * 2250, 1745, 1);
  EXPECT_NEAR(kernel_table(cluster_preset("gb200-nvl72").gpu).gemm_bf16 * 2500, 1822, 1);
  EXPECT_EQ(parse_kernel_stack("Eager"), KernelStack::kEager);
  EXPECT_THROW(parse_kernel_stack("compiled"), Error);
}

TEST(LayerKernels, AddUpFromTheLayersShapes) {
  TrainingConfig c;
  c.model = transformer_preset("llama3-70b");
  c.seq_len = 8192;
  const GpuSpec gpu = cluster_preset("dgx-h100").gpu;
  const LayerKernels one = layer_kernels(c, gpu);
  // Forward GEMMs: 2 x tokens x the layer's matmul parameters; the causal core adds half of
  // 4 x tokens x seq x d.
  const double t = 8192, h = 8192;
  const double matmul_params = 2 * h * h + 2 * h * 1024 + 3 * h * 28672;
  const double core = 4.0 * t * (8192 / 2.0) * h;
  EXPECT_NEAR(one.attention_fwd.flops + one.mlp_fwd.flops, 2 * t * matmul_params + core, 1e-6 * core);
  EXPECT_NEAR(one.core_fwd.flops, core, 1e-6 * core);
  // Backward: twice the GEMMs, 2.5x the attention core.
  EXPECT_NEAR(one.attention_bwd.flops + one.mlp_bwd.flops, 4 * t * matmul_params + 2.5 * core, 1e-6 * core);
  // TP4 and CP2 divide one rank's work by 8 (all of it splits).
  c.layout.tp = 4;
  c.layout.cp = 2;
  const LayerKernels split = layer_kernels(c, gpu);
  EXPECT_NEAR((split.attention_fwd.flops + split.mlp_fwd.flops) * 8, one.attention_fwd.flops + one.mlp_fwd.flops,
              1e-6 * one.mlp_fwd.flops);
  // Eager kernels move more bytes for the same math, and their selective recompute costs time.
  c = TrainingConfig{};
  c.model = transformer_preset("llama3-8b");
  c.kernels = KernelStack::kEager;
  c.recompute = Recompute::kSelective;
  const LayerKernels eager = layer_kernels(c, gpu);
  c.kernels = KernelStack::kFused;
  const LayerKernels fused = layer_kernels(c, gpu);
  EXPECT_GT(eager.mlp_fwd.bytes, 1.5 * fused.mlp_fwd.bytes);
  EXPECT_GT(eager.selective_recompute.seconds, 0);
  EXPECT_DOUBLE_EQ(fused.selective_recompute.seconds, 0);  // Megatron's: flash attention recomputes anyway
}

TEST(LayerKernels, UnfusedAttentionComputesTheWholeScoreMatrixAndKeepsIt) {
  TrainingConfig c;
  c.model = transformer_preset("llama3-8b");
  c.seq_len = 2048;
  c.layout.tp = 8;
  const GpuSpec gpu = cluster_preset("dgx-h100").gpu;
  const LayerKernels flash = layer_kernels(c, gpu);
  c.attention = AttentionImpl::kUnfused;
  const LayerKernels unfused = layer_kernels(c, gpu);
  // The causal mask saves nothing: twice flash's forward FLOPs (QK^T and PV over all s x s scores).
  EXPECT_NEAR(unfused.core_fwd.flops, 2 * flash.core_fwd.flops, 1e-9 * flash.core_fwd.flops);
  // Backward: the two GEMMs' two gradients each (4 GEMMs to the forward's 2), not flash's 2.5x.
  EXPECT_NEAR(unfused.core_bwd.flops, 2 * unfused.core_fwd.flops, 1e-9 * unfused.core_fwd.flops);
  // The scores go through HBM: bytes flash never moves, and a slower core for more than the FLOPs.
  EXPECT_GT(unfused.core_fwd.bytes, 0);
  EXPECT_DOUBLE_EQ(flash.core_fwd.bytes, 0);
  EXPECT_GT(unfused.core_fwd.seconds, 2 * flash.core_fwd.seconds);
  // The same math everywhere else.
  EXPECT_DOUBLE_EQ(unfused.mlp_fwd.seconds, flash.mlp_fwd.seconds);
  // Megatron's selective recompute is free with flash and costs the core's forward here.
  c.recompute = Recompute::kSelective;
  EXPECT_DOUBLE_EQ(layer_kernels(c, gpu).selective_recompute.seconds, unfused.core_fwd.seconds);

  // What the layer keeps: the probabilities, heads x seq_len bf16 elements a token (before the
  // division by tp), unless selective recompute drops them.
  c.recompute = Recompute::kNone;
  double probabilities = 0;
  for (const SavedTensor& t : saved_activations(c, false)) {
    if (t.what == std::string("attention probabilities (unfused)")) probabilities = t.bytes_per_token();
  }
  EXPECT_DOUBLE_EQ(probabilities, 2.0 * 32 * 2048);
  c.recompute = Recompute::kSelective;
  for (const SavedTensor& t : saved_activations(c, false)) EXPECT_NE(t.what, std::string("attention probabilities (unfused)"));
}

TEST(Kernels, AttentionKindsByName) {
  EXPECT_EQ(resolved(AttentionImpl::kAuto, KernelStack::kFused), AttentionImpl::kCudnn);
  EXPECT_EQ(resolved(AttentionImpl::kAuto, KernelStack::kEager), AttentionImpl::kFlash2);
  EXPECT_EQ(resolved(AttentionImpl::kUnfused, KernelStack::kEager), AttentionImpl::kUnfused);
  for (AttentionImpl impl : {AttentionImpl::kAuto, AttentionImpl::kFlash2, AttentionImpl::kFlash3,
                             AttentionImpl::kCudnn, AttentionImpl::kUnfused}) {
    EXPECT_EQ(parse_attention_impl(name(impl)), impl);
  }
  try {
    parse_attention_impl("flash4");
    ADD_FAILURE() << "flash4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown attention 'flash4' (expected: auto, flash2"), std::string::npos);
  }
  // FlashAttention-2 runs at the eager row's share, cuDNN and FlashAttention-3 at the fused row's.
  KernelEnv env = h100();
  env.attention = AttentionImpl::kFlash2;
  const double flash2 = flash_attention(env, 1e15, false).seconds;
  env.attention = AttentionImpl::kFlash3;
  EXPECT_LT(flash_attention(env, 1e15, false).seconds, flash2);
  env.attention = AttentionImpl::kUnfused;
  EXPECT_THROW(flash_attention(env, 1e15, false), Error);
}

TEST(LayerKernels, ANonGatedMlpRunsUpGeluDown) {
  // BLOOM-176B: 70 layers of d 14,336 with a GELU MLP of 4d, tied embeddings of 250,880 tokens.
  TransformerSpec bloom{"bloom-176b", 70, 14336, 57344, 112, 112, 250880, true};
  bloom.mlp = MlpKind::kGelu;
  // 12 d^2 a layer + the embedding: 176.236 B (BLOOM's 176.247 B adds the biases and the embedding
  // norm, not modelled).
  EXPECT_NEAR(static_cast<double>(bloom.parameters()), 176.236e9, 0.001e9);
  TrainingConfig c;
  c.model = bloom;
  c.seq_len = 2048;
  c.layout.tp = 4;
  const LayerKernels gelu = layer_kernels(c, cluster_preset("dgx-h100").gpu);
  const double t = 2048, h = 14336, f = 57344;
  EXPECT_NEAR(gelu.mlp_fwd.flops, 2 * t * 2 * h * f / 4, 1e-6 * gelu.mlp_fwd.flops);  // up and down only
  c.model.mlp = MlpKind::kSwiGlu;
  const LayerKernels swiglu = layer_kernels(c, cluster_preset("dgx-h100").gpu);
  EXPECT_NEAR(swiglu.mlp_fwd.flops, 1.5 * gelu.mlp_fwd.flops, 1e-6 * gelu.mlp_fwd.flops);
  // What the MLP keeps for backward (Megatron + TE): GELU's input f instead of SwiGLU's 2f.
  auto mlp_bytes = [](const TrainingConfig& config) {
    double bytes = 0;
    for (const SavedTensor& saved : saved_activations(config, false)) bytes += saved.bytes_per_token();
    return bytes;
  };
  const double gated = mlp_bytes(c);
  c.model.mlp = MlpKind::kGelu;
  EXPECT_DOUBLE_EQ(gated - mlp_bytes(c), 2.0 * f);
  EXPECT_EQ(parse_mlp_kind("gelu"), MlpKind::kGelu);
  EXPECT_THROW(parse_mlp_kind("relu"), Error);
}

TEST(LayerKernels, PositionsRotaryAlibiOrALearnedTable) {
  TrainingConfig c;
  c.model = transformer_preset("llama3-8b");
  c.layout = {"tp1", 1, 1, Sharding::kZero1, 0};
  c.seq_len = 2048;
  const GpuSpec gpu = cluster_preset("dgx-h100").gpu;
  const LayerKernels rope = layer_kernels(c, gpu);
  // ALiBi: no rotary kernel on q and k (its bias lives inside the attention kernel), no parameters.
  c.model.positions = PositionKind::kAlibi;
  const LayerKernels alibi = layer_kernels(c, gpu);
  EXPECT_EQ(alibi.attention_fwd.kernels, rope.attention_fwd.kernels - 1);
  EXPECT_NEAR(rope.attention_fwd.bytes - alibi.attention_fwd.bytes, 4.0 * 2048 * (4096 + 1024), 1.0);
  EXPECT_EQ(c.model.parameters(), transformer_preset("llama3-8b").parameters());
  // Learned: a table of max_positions rows on the first stage, added to each token's embedding.
  c.model.positions = PositionKind::kLearned;
  c.model.max_positions = 2048;
  EXPECT_EQ(c.model.parameters() - transformer_preset("llama3-8b").parameters(), 2048 * 4096);
  EXPECT_NEAR(layer_kernels(c, gpu).embedding_fwd.bytes - rope.embedding_fwd.bytes, 6.0 * 2048 * 4096, 1.0);
  c.seq_len = 4096;  // longer than the table
  EXPECT_THROW(derive(c, 8, 8), Error);
  EXPECT_EQ(parse_position_kind("ALiBi"), PositionKind::kAlibi);
  EXPECT_THROW(parse_position_kind("sinusoidal"), Error);
  EXPECT_EQ(parse_mlp_kind("GELU"), MlpKind::kGelu);
}

TEST(LayerKernels, MultiHeadLatentAttention) {
  // DeepSeek-V3's MLA (config.json): latents of 1,536 (q) and 512 (k, v), heads of 128 + 64 (q, k)
  // and 128 (v) dimensions: 187.1 M parameters a layer.
  TrainingConfig c;
  c.model = transformer_preset("deepseek-v3");
  ASSERT_TRUE(c.model.mla());
  EXPECT_EQ(c.model.attention_parameters(), 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 +
                                                512 * 128 * 256 + 128 * 128 * 7168);
  EXPECT_NEAR(static_cast<double>(c.model.parameters()) / 671e9, 1.0, 0.002);
  c.layout = {"tp2", 2, 1, Sharding::kZero1, 0};
  c.seq_len = 4096;
  c.recompute = Recompute::kNone;
  const GpuSpec gpu = cluster_preset("dgx-h100").gpu;
  // The flash core: QK^T over 192 dimensions a head, PV over 128, causal, the rank's 64 heads.
  const double tokens = 4096;
  const double core_flops = 2.0 * tokens * 2048 * 64 * (192 + 128);
  const LayerKernels none = layer_kernels(c, gpu);
  EXPECT_NEAR(none.core_fwd.flops, core_flops, 1.0);
  EXPECT_DOUBLE_EQ(none.selective_recompute.seconds, 0);
  // Selective recompute: the up-projections again (q: 1,536 -> 64 x 192; kv: 512 -> 64 x 256), and
  // q, k, v no longer kept.
  c.recompute = Recompute::kSelective;
  const LayerKernels selective = layer_kernels(c, gpu);
  EXPECT_NEAR(selective.selective_recompute.flops, 2.0 * tokens * (1536.0 * 64 * 192 + 512.0 * 64 * 256), 1.0);
  auto kept = [&](const TrainingConfig& config) {
    double bytes = 0;
    for (const SavedTensor& t : saved_activations(config, false)) bytes += t.bytes_per_token();
    return bytes;
  };
  TrainingConfig keep_all = c;
  keep_all.recompute = Recompute::kNone;
  EXPECT_DOUBLE_EQ(kept(keep_all) - kept(c), 2.0 * (128 * 192 + 128 * 192 + 128 * 128));
  // Unfused attention and the eager stack are not modelled with MLA.
  c.attention = AttentionImpl::kUnfused;
  EXPECT_THROW(derive(c, 16, 8), Error);
  c.attention = AttentionImpl::kAuto;
  c.kernels = KernelStack::kEager;
  EXPECT_THROW(derive(c, 16, 8), Error);
}

TEST(LayerKernels, AHeadDimensionApartFromTheHiddenSize) {
  // Qwen3-32B: d 5,120 but 64 heads of 128 (q 8,192 wide), 8 KV heads: 32.8 B parameters.
  TransformerSpec qwen{"qwen3-32b", 64, 5120, 25600, 64, 8, 151936, false};
  qwen.head_dim = 128;
  EXPECT_EQ(qwen.q_dim(), 8192);
  EXPECT_EQ(qwen.kv_dim(), 1024);
  EXPECT_NEAR(static_cast<double>(qwen.parameters()), 32.76e9, 0.01e9);
  TrainingConfig c;
  c.model = qwen;
  c.seq_len = 4096;
  const GpuSpec gpu = cluster_preset("dgx-h100").gpu;
  const LayerKernels wide = layer_kernels(c, gpu);
  // The core attention runs on q's width: causal 4 x tokens x (seq / 2) x q_dim.
  EXPECT_NEAR(wide.core_fwd.flops, 4.0 * 4096 * 2048 * 8192, 1e-6 * wide.core_fwd.flops);
  c.model.head_dim = 0;  // d_model / heads = 80: q as wide as d
  EXPECT_NEAR(layer_kernels(c, gpu).core_fwd.flops, wide.core_fwd.flops * 5120 / 8192, 1e-6 * wide.core_fwd.flops);
}

}  // namespace
}  // namespace tandem::models
