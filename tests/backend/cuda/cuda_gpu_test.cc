// The cuda backend on a real GPU (label `gpu`; every test skips where there is no device):
//   - the reduction kernels against core/dtype.h's reduce_elements / divide_elements, for every
//     dtype x op, aligned, equally misaligned (vector body with a scalar head) and differently
//     misaligned (all scalar) pointers, in place, and counts around the vector width;
//   - CudaExecutor against HostExecutor, bit for bit, for every algorithm x collective;
//   - faults: fail, corrupt (with and without checksums), stall (a short timeout) and delay.
// Without a device, only CudaExecutor's constructor error is checked.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/cuda_executor.h"
#include "backend/kernels/reduce.h"
#include "backend/host/host_executor.h"
#include "core/algorithms.h"
#include "core/dtype.h"
#include "core/error.h"
#include "tests/backend/host/collective_check.h"

namespace tandem::cuda {
namespace {

#define SKIP_WITHOUT_GPU()                                        \
  if (::tandem::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device"

TEST(CudaExecutor, WithoutDeviceThrowsUnsupported) {
  if (device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  try {
    CudaExecutor executor;
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(error.what()).find("no CUDA device"), std::string::npos) << error.what();
  }
}

// ---- kernels ----

// Device memory for one test, freed at the end.
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t bytes) : bytes_(bytes) { TANDEM_CUDA_CHECK(cudaMalloc(&data_, bytes)); }
  ~DeviceBytes() { (void)cudaFree(data_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  std::byte* get() const { return static_cast<std::byte*>(data_); }
  void upload(const std::vector<std::byte>& host) const {
    TANDEM_CUDA_CHECK(cudaMemcpy(data_, host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  std::vector<std::byte> download() const {
    std::vector<std::byte> host(bytes_);
    TANDEM_CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

// Element `i` of operand `which`: a mix of ordinary values and the awkward ones (NaN, infinities,
// signed zeros, subnormals, integer extremes that wrap).
double operand_value(DataType type, int which, int64_t i) {
  const int64_t k = (i * 7 + which * 13) % 23;
  if (type == DataType::kI32 || type == DataType::kI64) {
    const double big = type == DataType::kI32 ? 2147483647.0 : 9.2e18;
    if (k == 0) return big;
    if (k == 1) return -big;
    return static_cast<double>((i * 37 + which * 11) % 201 - 100);
  }
  switch (k) {
    case 0: return std::numeric_limits<double>::quiet_NaN();
    case 1: return std::numeric_limits<double>::infinity();
    case 2: return -std::numeric_limits<double>::infinity();
    case 3: return -0.0;
    case 4: return 3e-8;  // a subnormal in f16
    case 5: return 1e-40;  // a subnormal in f32 (bf16)
    case 6: return 65504.0;  // f16's largest; sums overflow to infinity
    default: return std::ldexp(static_cast<double>((i * 31 + which * 17) % 1001 - 500), -5);
  }
}

bool both_nan(DataType type, const std::byte* a, const std::byte* b) {
  if (type == DataType::kI32 || type == DataType::kI64) return false;
  return std::isnan(load_element(type, a, 0)) && std::isnan(load_element(type, b, 0));
}

TEST(CudaKernels, ReduceMatchesHostForEveryTypeOpAndAlignment) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kCounts[] = {0, 1, 7, 8, 9, 15, 17, 4099};
  // Element offsets of (a, b, dst): aligned, equally misaligned, differently misaligned, in place.
  struct Offsets {
    int64_t a, b, dst;
    bool in_place;
  };
  constexpr Offsets kOffsets[] = {{0, 0, 0, false}, {1, 1, 1, false}, {3, 3, 3, false},
                                  {0, 1, 2, false}, {1, 0, 0, false}, {0, 0, 0, true}, {1, 1, 1, true}};
  constexpr int64_t kSlack = 8;  // elements of room for the offsets
  int failures = 0;
  for (DataType type : all_data_types()) {
    const auto element = static_cast<int64_t>(size_bytes(type));
    for (ReduceOp op : all_reduce_ops()) {
      for (int64_t count : kCounts) {
        for (const Offsets& offsets : kOffsets) {
          const int64_t elements = count + kSlack;
          std::vector<std::byte> a(static_cast<size_t>(elements * element));
          std::vector<std::byte> b(a.size());
          std::vector<std::byte> dst(a.size(), std::byte{0x5a});
          for (int64_t i = 0; i < elements; ++i) {
            store_element(type, a.data(), i, operand_value(type, 0, i));
            store_element(type, b.data(), i, operand_value(type, 1, i));
          }
          DeviceBytes da(a.size()), db(b.size()), ddst(dst.size());
          da.upload(a);
          db.upload(b);
          ddst.upload(dst);
          std::byte* device_dst = offsets.in_place ? da.get() + offsets.a * element : ddst.get() + offsets.dst * element;
          launch_reduce(type, op, da.get() + offsets.a * element, db.get() + offsets.b * element, device_dst, count,
                        nullptr);
          TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<std::byte> expected = offsets.in_place ? a : dst;
          std::byte* expected_dst = expected.data() + (offsets.in_place ? offsets.a : offsets.dst) * element;
          reduce_elements(type, op, a.data() + offsets.a * element, b.data() + offsets.b * element, expected_dst, count);
          const std::vector<std::byte> got = offsets.in_place ? da.download() : ddst.download();
          for (int64_t i = 0; i < elements; ++i) {
            const std::byte* want = expected.data() + i * element;
            const std::byte* have = got.data() + i * element;
            if (std::memcmp(want, have, static_cast<size_t>(element)) == 0 || both_nan(type, want, have)) continue;
            if (++failures <= 10) {
              ADD_FAILURE() << fmt::format("{} {} count {} offsets ({}, {}, {}){}: element {} is {}, host {}",
                                           name(type), name(op), count, offsets.a, offsets.b, offsets.dst,
                                           offsets.in_place ? " in place" : "", i, load_element(type, have, 0),
                                           load_element(type, want, 0));
            }
            break;
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(CudaKernels, DivideMatchesHost) {
  SKIP_WITHOUT_GPU();
  constexpr int64_t kCount = 4099;
  for (DataType type : all_data_types()) {
    for (int divisor : {1, 3, 8}) {
      const auto element = static_cast<int64_t>(size_bytes(type));
      std::vector<std::byte> data(static_cast<size_t>(kCount * element));
      for (int64_t i = 0; i < kCount; ++i) store_element(type, data.data(), i, operand_value(type, 0, i));
      DeviceBytes device(data.size());
      device.upload(data);
      launch_divide(type, device.get() + element, kCount - 1, divisor, nullptr);  // misaligned on purpose
      TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
      divide_elements(type, data.data() + element, kCount - 1, divisor);
      const std::vector<std::byte> got = device.download();
      for (int64_t i = 0; i < kCount; ++i) {
        const std::byte* want = data.data() + i * element;
        const std::byte* have = got.data() + i * element;
        if (std::memcmp(want, have, static_cast<size_t>(element)) != 0 && !both_nan(type, want, have)) {
          ADD_FAILURE() << name(type) << " / " << divisor << ": element " << i << " differs";
          break;
        }
      }
    }
  }
}

// ---- the executor against the host ----

// Mirrors a host CollectiveData on the device (same aliasing), runs, and copies the results back.
class DeviceCollective {
 public:
  DeviceCollective(BufferSpace& space, const test::CollectiveData& host, const CollectiveSpec& spec) : space_(space) {
    const BufferGeometry geometry = buffer_geometry(spec.collective, spec.nranks);
    const auto element = static_cast<int64_t>(size_bytes(spec.dtype));
    for (int rank = 0; rank < spec.nranks; ++rank) {
      const RankBuffers& buffers = host.buffers()[static_cast<size_t>(rank)];
      Region input{static_cast<std::byte*>(buffers.input), geometry.input_blocks * spec.count * element};
      Region output{static_cast<std::byte*>(buffers.output), geometry.output_blocks * spec.count * element};
      RankBuffers device;
      if (input.begin < output.begin + output.bytes && output.begin < input.begin + input.bytes) {
        // In place: one allocation spanning both, at the host's relative offsets.
        std::byte* base = std::min(input.begin, output.begin);
        const int64_t bytes = std::max(input.begin + input.bytes, output.begin + output.bytes) - base;
        std::byte* memory = allocate(rank, {base, bytes});
        device = {memory + (input.begin - base), memory + (output.begin - base)};
      } else {
        device = {allocate(rank, input), allocate(rank, output)};
      }
      buffers_.push_back(device);
    }
  }
  ~DeviceCollective() {
    for (const Allocation& allocation : allocations_) space_.release(allocation.device);
  }
  DeviceCollective(const DeviceCollective&) = delete;
  DeviceCollective& operator=(const DeviceCollective&) = delete;

  std::span<const RankBuffers> buffers() const { return buffers_; }
  void download() const {
    for (const Allocation& allocation : allocations_) {
      space_.download(allocation.host.begin, allocation.device, static_cast<size_t>(allocation.host.bytes));
    }
  }

 private:
  struct Region {
    std::byte* begin = nullptr;
    int64_t bytes = 0;
  };
  struct Allocation {
    Region host;
    std::byte* device = nullptr;
  };
  std::byte* allocate(int rank, Region host) {
    auto* device = static_cast<std::byte*>(space_.allocate(rank, static_cast<size_t>(host.bytes)));
    space_.upload(device, host.begin, static_cast<size_t>(host.bytes));
    allocations_.push_back({host, device});
    return device;
  }

  BufferSpace& space_;
  std::vector<Allocation> allocations_;
  std::vector<RankBuffers> buffers_;
};

std::vector<RankLayout> layouts_for(Algorithm algorithm, int n) {
  if (algorithm == Algorithm::kHierarchical) {
    const int per_node = n % 4 == 0 ? 4 : (n % 2 == 0 ? 2 : n);
    return {RankLayout::nodes(n / per_node, per_node)};
  }
  return {RankLayout::flat(n)};
}

// The bytes of every rank's output.
std::vector<std::byte> outputs(const test::CollectiveData& data, const CollectiveSpec& spec) {
  const int64_t bytes =
      buffer_geometry(spec.collective, spec.nranks).output_blocks * spec.count * static_cast<int64_t>(size_bytes(spec.dtype));
  std::vector<std::byte> all;
  for (int rank = 0; rank < spec.nranks; ++rank) all.insert(all.end(), data.output(rank), data.output(rank) + bytes);
  return all;
}

TEST(CudaExecutor, MatchesHostExecutorForEveryAlgorithm) {
  SKIP_WITHOUT_GPU();
  constexpr int kRankCounts[] = {1, 2, 3, 5, 8};
  constexpr int64_t kCounts[] = {0, 7, 1000, 4099};
  constexpr uint32_t kTiles[] = {1, 3};
  constexpr DataType kTypes[] = {DataType::kF32, DataType::kBF16, DataType::kI32};
  constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg};
  CudaExecutor executor;
  HostExecutor host;
  int failures = 0;
  int cases = 0;
  for (Algorithm algorithm : all_algorithms()) {
    for (Collective collective : all_collectives()) {
      if (!implements(algorithm, collective)) continue;
      for (int n : kRankCounts) {
        for (const RankLayout& layout : layouts_for(algorithm, n)) {
          CollectiveSpec spec{.collective = collective, .root = n / 2, .nranks = n};
          const Schedule schedule = build_checked_schedule(spec, layout, algorithm);
          for (int64_t count : kCounts) {
            for (uint32_t tiles : kTiles) {
              for (DataType dtype : kTypes) {
                for (ReduceOp op : kOps) {
                  if (!is_reduction(collective) && op != ReduceOp::kSum) continue;
                  for (bool in_place : {false, true}) {
                    if (in_place && !buffer_geometry(collective, n).in_place_supported) continue;
                    spec.count = count;
                    spec.dtype = dtype;
                    spec.op = op;
                    ++cases;
                    const std::string what = fmt::format("{} tiles {}", test::describe(spec, algorithm, in_place), tiles);
                    try {
                      const RunContext context{.tiles = tiles};
                      test::CollectiveData expected(spec, in_place);
                      host.run(schedule, spec, expected.buffers(), context);
                      test::CollectiveData got(spec, in_place);
                      {
                        DeviceCollective device(*executor.buffer_space(), got, spec);
                        executor.run(schedule, spec, device.buffers(), context);
                        device.download();
                      }
                      const ::testing::AssertionResult checked = got.check();
                      if (!checked) {
                        if (++failures <= 10) ADD_FAILURE() << what << ": " << checked.message();
                      } else if (outputs(expected, spec) != outputs(got, spec)) {
                        if (++failures <= 10) ADD_FAILURE() << what << ": not bitwise equal to the host";
                      }
                    } catch (const std::exception& error) {
                      if (++failures <= 10) ADD_FAILURE() << what << " threw: " << error.what();
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << cases << " cases failed";
}

// ---- faults ----

struct FaultRun {
  CollectiveSpec spec{.collective = Collective::kAllReduce, .count = 4099, .dtype = DataType::kF32, .nranks = 4};
  Schedule schedule = build_checked_schedule(spec, RankLayout::flat(4), Algorithm::kRing);
  test::CollectiveData data{spec, false};

  // Runs with `effect` applied to rank `src`'s first send; returns the result or throws.
  RunResult run(CudaExecutor& executor, TransferEffect effect, bool checksums,
                std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    RunContext context{.timeout = timeout, .checksums = checksums};
    context.on_send = [effect](int src, int, int64_t op_index) {
      return src == 1 && op_index == 0 ? effect : TransferEffect{};
    };
    DeviceCollective device(*executor.buffer_space(), data, spec);
    const RunResult result = executor.run(schedule, spec, device.buffers(), context);
    device.download();
    return result;
  }
};

template <typename Fn>
void expect_error(Fn fn, ErrorCode code, const char* fragment) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), code) << error.what();
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

TEST(CudaFaults, FailedTransferThrowsNamingIt) {
  SKIP_WITHOUT_GPU();
  CudaExecutor executor;
  FaultRun run;
  expect_error([&] { run.run(executor, TransferEffect{.fail = true, .fault_index = 0}, false); }, ErrorCode::kFault,
               "cuda rank 1 lane 0 op 0: send to 2 failed (injected fault #0)");
}

TEST(CudaFaults, CorruptionIsCaughtByChecksums) {
  SKIP_WITHOUT_GPU();
  CudaExecutor executor;
  FaultRun run;
  expect_error([&] { run.run(executor, TransferEffect{.corrupt = true}, true); }, ErrorCode::kCorrupt,
               "the message from 1 failed its checksum");
}

TEST(CudaFaults, CorruptionWithoutChecksumsGivesWrongData) {
  SKIP_WITHOUT_GPU();
  CudaExecutor executor;
  FaultRun run;
  run.run(executor, TransferEffect{.corrupt = true}, false);
  EXPECT_FALSE(run.data.check());
}

TEST(CudaFaults, ChecksumsPassWithoutCorruption) {
  SKIP_WITHOUT_GPU();
  CudaExecutor executor;
  FaultRun run;
  run.run(executor, TransferEffect{}, true);
  EXPECT_TRUE(run.data.check());
}

TEST(CudaFaults, StallTimesOutNamingTheStalledRank) {
  SKIP_WITHOUT_GPU();
  constexpr auto kTimeout = std::chrono::milliseconds(100);
  CudaExecutor executor;
  FaultRun run;
  const auto start = std::chrono::steady_clock::now();
  expect_error([&] { run.run(executor, TransferEffect{.stall = true, .fault_index = 2}, false, kTimeout); },
               ErrorCode::kTimeout, "its message from rank 1 was lost (injected fault #2)");
  EXPECT_GE(std::chrono::steady_clock::now() - start, kTimeout);
}

TEST(CudaFaults, DelayedTransferIsSlowerAndCorrect) {
  SKIP_WITHOUT_GPU();
  constexpr double kFactor = 50;  // of at least 20 us: the spin alone takes 1 ms
  CudaExecutor executor;
  FaultRun run;
  const RunResult result = run.run(executor, TransferEffect{.delay_factor = kFactor}, false);
  EXPECT_TRUE(run.data.check());
  EXPECT_GE(result.seconds, (kFactor - 1) * 20e-6);
}

}  // namespace
}  // namespace tandem::cuda
