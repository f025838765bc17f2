#include "models/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "core/error.h"
#include "models/names_internal.h"

namespace tandem::models {
namespace {

// Per GPU, docs/kernels.md has the sources:
// - GEMM: the Maximum Achievable Matmul FLOPS (MAMF) measured by a brute-force shape search with
//   torch.matmul (stas00/ml-engineering, compute/accelerator "MAMF comparison table"): H100 SXM
//   bf16 794.5 of 989 TFLOP/s (80.3%), fp8 1,402.6 of 1,979 (70.9%); H200 bf16 the same as H100,
//   fp8 1,453.4 (73.4%); A100 SXM bf16 271.2 of 312 (86.9%).
// - Attention on Hopper, fused stack: FlashAttention-3 head dim 128 at 8K tokens, 614 TFLOP/s
//   forward (62%; pytorch/benchmark PR 2391, the FA3 paper's own shapes); the backward at about
//   470 (47%; FA3 paper, arXiv 2407.08608, Fig. 6). Eager stack: FlashAttention-2, "only 35%
//   utilization on the H100" (the FA3 paper's abstract), backward about 30% (its Fig. 6).
// - Attention on Ampere: FlashAttention-2 reaches 50-73% of the A100's peak forward and up to 63%
//   backward (arXiv 2307.08691); head dim 128 at 8K with the causal mask: 68% / 55%. Both stacks run
//   it on Ampere.
// - The last wave: Hopper's cuBLAS 12 GEMMs are persistent kernels whose stream-K scheduler shares
//   the partial last wave among all SMs; Ampere's cuBLAS 11 launches one CTA per output tile, so
//   the last wave runs with empty SMs (NVIDIA, Matrix Multiplication Background User's Guide,
//   DU-09799-001, section 3.2 "Wave Quantization", measured on an A100 with 108 SMs).
constexpr GpuKernelTable kH100{132, 0.803, 0.709, 0.62, 0.47, 0.35, 0.30, true};
constexpr GpuKernelTable kH200{132, 0.803, 0.734, 0.62, 0.47, 0.35, 0.30, true};
constexpr GpuKernelTable kA100{108, 0.869, 0.0, 0.68, 0.55, 0.68, 0.55, false};
// - Blackwell: MAMF (the same table) B200 bf16 1,745 of 2,250 TFLOP/s (77.6%), fp8 3,432.5 of 4,500
//   (76.3%); GB200 bf16 1,822 of 2,500 (72.9%), fp8 3,615.6 of 5,000 (72.3%); 148 SMs. Attention:
//   no published Blackwell measurement at hand, so Hopper's shares stand in (an assumption
//   docs/kernels.md names). cuBLAS 12.8+ on Blackwell runs persistent kernels like Hopper's.
constexpr GpuKernelTable kB200{148, 0.776, 0.763, 0.62, 0.47, 0.35, 0.30, true};
constexpr GpuKernelTable kGB200{148, 0.729, 0.723, 0.62, 0.47, 0.35, 0.30, true};

}  // namespace

std::string_view name(Precision precision) { return precision == Precision::kFP8 ? "fp8" : "bf16"; }

Precision parse_precision(std::string_view text) {
  return parse_named(text, {Precision::kBF16, Precision::kFP8}, "precision");
}

std::string_view name(KernelStack stack) { return stack == KernelStack::kEager ? "eager" : "fused"; }

KernelStack parse_kernel_stack(std::string_view text) {
  return parse_named(text, {KernelStack::kFused, KernelStack::kEager}, "kernels");
}

std::string_view name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::kAuto:
      return "auto";
    case AttentionImpl::kFlash2:
      return "flash2";
    case AttentionImpl::kFlash3:
      return "flash3";
    case AttentionImpl::kCudnn:
      return "cudnn";
    case AttentionImpl::kUnfused:
      return "unfused";
  }
  return "?";
}

AttentionImpl parse_attention_impl(std::string_view text) {
  return parse_named(text,
                     {AttentionImpl::kAuto, AttentionImpl::kFlash2, AttentionImpl::kFlash3, AttentionImpl::kCudnn,
                      AttentionImpl::kUnfused},
                     "attention");
}

AttentionImpl resolved(AttentionImpl impl, KernelStack stack) {
  if (impl != AttentionImpl::kAuto) return impl;
  return stack == KernelStack::kEager ? AttentionImpl::kFlash2 : AttentionImpl::kCudnn;
}

const GpuKernelTable& kernel_table(const GpuSpec& gpu) {
  if (gpu.name == "H200-SXM") return kH200;
  if (gpu.name == "H100-SXM") return kH100;
  if (gpu.name == "A100-SXM-80GB") return kA100;
  if (gpu.name == "B200-SXM") return kB200;
  if (gpu.name == "GB200") return kGB200;
  // A GPU given by its figures: its architecture's row.
  if (gpu.arch == GpuArch::kBlackwell) return kB200;
  return gpu.arch == GpuArch::kAmpere || gpu.arch == GpuArch::kVolta ? kA100 : kH100;
}

KernelCost& KernelCost::operator+=(const KernelCost& other) {
  seconds += other.seconds;
  flops += other.flops;
  bytes += other.bytes;
  kernels += other.kernels;
  return *this;
}

double sustained_clock_share(const GpuSpec& gpu) {
  if (gpu.power_limit_w > 0 && gpu.tdp_w > 0 && gpu.power_limit_w < gpu.tdp_w)
    return kSustainedClockShare * std::cbrt(gpu.power_limit_w / gpu.tdp_w);
  return kSustainedClockShare;
}

KernelCost gemm(const KernelEnv& env, const GemmShape& shape) {
  const GpuKernelTable& table = kernel_table(env.gpu);
  const bool fp8 = env.precision == Precision::kFP8;
  if (fp8 && !(env.gpu.fp8_flops > 0 && table.gemm_fp8 > 0))
    fail(ErrorCode::kUnsupported, "the {} has no fp8 tensor cores", env.gpu.name);
  const double peak =
      (fp8 ? env.gpu.fp8_flops * table.gemm_fp8 : env.gpu.bf16_flops * table.gemm_bf16) * sustained_clock_share(env.gpu);
  if (!(peak > 0)) fail(ErrorCode::kUnsupported, "the {} has no tensor-core peak given", env.gpu.name);
  KernelCost cost;
  cost.flops = shape.flops();
  cost.kernels = 1;
  if (cost.flops <= 0) return cost;
  const double compute_s = cost.flops / (peak * gemm_occupancy(table, shape));
  // Operands in (fp8: one byte) and the bf16 result out, each once: the floor when a dimension is
  // too small to reuse tiles.
  const double in_bytes = fp8 ? 1.0 : 2.0;
  const double bytes = in_bytes * (shape.m * shape.k + shape.k * shape.n) + 2.0 * shape.m * shape.n;
  const double memory_s = bytes / (env.gpu.hbm_Bps * kHbmEfficiency);
  cost.seconds = std::max(compute_s, memory_s) + kKernelGapSeconds;
  return cost;
}

double gemm_occupancy(const GpuKernelTable& table, const GemmShape& shape) {
  const double tiles = std::ceil(shape.m / kGemmTileM) * std::ceil(shape.n / kGemmTileN);
  if (!(tiles > 0)) return 1.0;
  if (table.splits_last_wave) return std::min(1.0, tiles / table.sms);
  return tiles / (std::ceil(tiles / table.sms) * table.sms);
}

KernelCost flash_attention(const KernelEnv& env, double flops, bool backward) {
  const GpuKernelTable& table = kernel_table(env.gpu);
  const AttentionImpl impl = resolved(env.attention, env.stack);
  if (impl == AttentionImpl::kUnfused) fail(ErrorCode::kInvalidArgument, "unfused attention is not a flash kernel");
  const bool fused = impl != AttentionImpl::kFlash2;  // cuDNN and FlashAttention-3: the fused row
  const double share = backward ? (fused ? table.attention_bwd_fused : table.attention_bwd_eager)
                                 : (fused ? table.attention_fwd_fused : table.attention_fwd_eager);
  KernelCost cost;
  cost.flops = flops;
  cost.kernels = 1;
  if (flops > 0) cost.seconds = flops / (env.gpu.bf16_flops * share * sustained_clock_share(env.gpu)) + kKernelGapSeconds;
  return cost;
}

KernelCost memory_bound(const KernelEnv& env, double bytes) {
  KernelCost cost;
  cost.bytes = bytes;
  cost.kernels = 1;
  if (bytes > 0) cost.seconds = bytes / (env.gpu.hbm_Bps * kHbmEfficiency) + kKernelGapSeconds;
  return cost;
}

}  // namespace tandem::models
