// Kernel times on one GPU: what the compute of a training step costs, kernel by kernel, instead of
// one "MFU" knob. Three kinds of kernels make up a transformer layer:
//   - GEMMs: a roofline of the tensor cores' achievable peak (measured, not the datasheet's) and
//     the HBM traffic of the operands, with the tail of the last wave of tiles;
//   - flash attention: its FLOPs (causal mask: half the score matrix) at the implementation's
//     measured share of the tensor cores' peak, forward and backward apart;
//   - memory-bound kernels (norms, rotary, activation, residuals, casts, the optimizer): bytes at
//     the HBM bandwidth a streaming kernel reaches.
// The tables and their sources are in docs/kernels.md; every efficiency is a named constant here
// or a row of the per-GPU table in kernels.cc.
#pragma once

#include <cstdint>
#include <string_view>

#include "models/cluster.h"

namespace tandem::models {

enum class Precision : uint8_t { kBF16, kFP8 };  // what the matmuls run in (fp8: Transformer Engine's)
std::string_view name(Precision precision);
Precision parse_precision(std::string_view text);  // "bf16", "fp8"

// Which kernels the training stack launches for the same math.
enum class KernelStack : uint8_t {
  kFused,  // Megatron-Core / NeMo with Transformer Engine: fused RMSNorm, rotary, SwiGLU and
           // bias-dropout-add; cuDNN fused attention (FlashAttention-3 class on Hopper)
  kEager,  // PyTorch eager as torchtitan writes a layer without torch.compile: each elementwise op
           // its own kernel (RMSNorm in fp32, complex rotary), SDPA's FlashAttention-2
};
std::string_view name(KernelStack stack);
KernelStack parse_kernel_stack(std::string_view text);  // "fused", "eager"

// How the core attention (softmax(Q K^T) V) runs. kAuto: what the stack ships (fused: cuDNN, eager:
// SDPA's FlashAttention-2). The flash kinds never hold the score matrix: their time is their FLOPs
// (causal: half of them) at a measured share of the peak, their memory the softmax statistics.
// kUnfused is attention before FlashAttention (Megatron-LM and Megatron-DeepSpeed before 2023,
// BLOOM, GPT-3-era runs): two batched GEMMs over the whole score matrix (causal masking saves no
// FLOPs), a softmax through HBM between them, and the probabilities kept for backward, O(s^2).
enum class AttentionImpl : uint8_t { kAuto, kFlash2, kFlash3, kCudnn, kUnfused };
std::string_view name(AttentionImpl impl);
AttentionImpl parse_attention_impl(std::string_view text);  // "auto", "flash2", "flash3", "cudnn", "unfused"
// kAuto resolved for a stack; the other kinds as they are.
AttentionImpl resolved(AttentionImpl impl, KernelStack stack);

// What the kernels run on and in.
struct KernelEnv {
  GpuSpec gpu;
  Precision precision = Precision::kBF16;
  KernelStack stack = KernelStack::kFused;
  AttentionImpl attention = AttentionImpl::kAuto;
};

// A GPU's measured ceilings (kernels.cc has the table, by GPU name then by architecture).
struct GpuKernelTable {
  int sms = 0;                     // streaming multiprocessors: one output tile each per wave
  double gemm_bf16 = 0;            // best achievable bf16 GEMM as a share of the dense peak
  double gemm_fp8 = 0;             // the same for fp8 (0: none)
  double attention_fwd_fused = 0;  // flash attention forward, share of the bf16 peak (fused stack)
  double attention_bwd_fused = 0;
  double attention_fwd_eager = 0;  // FlashAttention-2 through SDPA (eager stack)
  double attention_bwd_eager = 0;
  // Whether the GEMM library splits the last partial wave of output tiles over all SMs (Hopper:
  // cuBLAS 12's persistent sm90 kernels with a stream-K tile scheduler) or runs it as a wave of
  // its own, part-empty (Ampere: cuBLAS 11's data-parallel tiles, the wave quantization of
  // NVIDIA's Matrix Multiplication Background guide, section 3.2).
  bool splits_last_wave = false;
};
const GpuKernelTable& kernel_table(const GpuSpec& gpu);

// The clock a GPU holds through a training run against the clock of a short benchmark: MAMF and
// the flash-attention figures are measured in seconds-long loops that run at the boost clock (H100
// SXM: 1,980 MHz), while hours of 700 W draw hold it at about 1,650-1,750 MHz (0.83-0.88). Applied
// to the compute-bound kernels (tensor cores) only: HBM's clock does not throttle. Checked against
// the NeMo rows of ../shared/reference/training_steps.csv (compute-only R2 and R1 land within 6% with it,
// 19% and 14% fast without), not fitted to them.
inline constexpr double kSustainedClockShare = 0.85;
// Streaming kernels reach this share of the HBM datasheet bandwidth (elementwise, norms, Adam).
inline constexpr double kHbmEfficiency = 0.80;
// The GPU-side gap between two dependent kernels (launch latency hidden by a CPU that runs ahead;
// what remains is the drain of one grid and the ramp of the next).
inline constexpr double kKernelGapSeconds = 2e-6;
// Output tile of the GEMM kernels cuBLAS / CUTLASS pick for large bf16 and fp8 GEMMs on Hopper and
// Ampere (128 x 256 threadblock tiles).
inline constexpr int kGemmTileM = 128;
inline constexpr int kGemmTileN = 256;

// C[m, n] = A[m, k] B[k, n].
struct GemmShape {
  double m = 0;
  double n = 0;
  double k = 0;
  double flops() const { return 2.0 * m * n * k; }
};

// One kernel's or a group's cost: time, and the FLOPs and bytes behind it (for reports).
struct KernelCost {
  double seconds = 0;
  double flops = 0;  // hardware FLOPs
  double bytes = 0;  // HBM bytes of the memory-bound kernels
  int kernels = 0;
  KernelCost& operator+=(const KernelCost& other);
};

// The share of the tensor cores' benchmark clock a training run holds: kSustainedClockShare at the
// GPU's TDP; under a lower power limit P the clock falls as (P / TDP)^(1/3) (dynamic power goes as
// f V^2 with the voltage following the clock along the DVFS curve: f^3).
double sustained_clock_share(const GpuSpec& gpu);

// A GEMM in the env's precision (fp8 with Transformer Engine: the cast of its input is a separate
// memory-bound kernel, counted by the caller). A grid of fewer tiles than SMs runs part-empty;
// beyond one wave, the last partial wave costs a whole wave where the table says the library does
// not split it (gemm_occupancy).
KernelCost gemm(const KernelEnv& env, const GemmShape& shape);
// The share of the SMs a GEMM's grid keeps busy over its run: tiles / (waves x SMs), waves rounded
// up unless the table's library splits the last one (then min(1, tiles / SMs)). It is what makes
// a GEMM's speed depend on its token count, and so on the micro-batch.
double gemm_occupancy(const GpuKernelTable& table, const GemmShape& shape);
// Flash attention over `flops` (already causal-halved by the caller), forward or backward, at the
// measured share of the env's attention kind: FlashAttention-2 (the table's eager row), cuDNN or
// FlashAttention-3 (its fused row). Throws Error(kInvalidArgument) for kUnfused (not a flash kernel).
KernelCost flash_attention(const KernelEnv& env, double flops, bool backward);
// A memory-bound kernel moving `bytes` through HBM.
KernelCost memory_bound(const KernelEnv& env, double bytes);

}  // namespace tandem::models
