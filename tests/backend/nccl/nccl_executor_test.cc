// The nccl executor. Without a GPU (CI): the constructor's Error(kUnsupported) "no CUDA device".
// With GPUs (label gpu, tandem_nccl_executor_gpu_test): a world of one (native all_reduce, a self
// send / recv in both modes, faults and checksums on it), then schedule mode and native mode
// against the sequential reference for ring and tree on as many ranks as there are GPUs.
#include "backend/nccl/nccl_executor.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/kernels/reduce.h"
#include "core/algorithms.h"
#include "core/error.h"
#include "tests/backend/host/collective_check.h"

namespace tandem::nccl {
namespace {

#ifndef TANDEM_NCCL_GPU_TESTS

TEST(NcclExecutor, WithoutADeviceTheConstructorSaysSo) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present; tandem_nccl_executor_gpu_test covers it";
  for (const NcclMode mode : {NcclMode::kSchedule, NcclMode::kNative}) {
    try {
      NcclExecutor executor(NcclOptions{.mode = mode});
      ADD_FAILURE() << "constructed without a GPU";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
      EXPECT_EQ(std::string(error.what()).rfind("no CUDA device: ", 0), 0u) << error.what();
    }
  }
}

#else  // the GPU tests

int gpus() { return cuda::device_count(); }

// Runs `spec` on `executor` with the data in device memory from its buffer space; results land
// back in `data`'s host outputs for data.check(). Out of place only.
RunResult run_on_device(NcclExecutor& executor, const Schedule& schedule, const CollectiveSpec& spec,
                        tandem::test::CollectiveData& data, const RunContext& context = {}) {
  BufferSpace& space = *executor.buffer_space();
  const BufferGeometry geometry = buffer_geometry(spec.collective, spec.nranks);
  const size_t element = size_bytes(spec.dtype);
  const size_t in_bytes = static_cast<size_t>(geometry.input_blocks * spec.count) * element;
  const size_t out_bytes = static_cast<size_t>(geometry.output_blocks * spec.count) * element;
  std::vector<RankBuffers> device(static_cast<size_t>(spec.nranks));
  for (int r = 0; r < spec.nranks; ++r) {
    const RankBuffers& host = data.buffers()[static_cast<size_t>(r)];
    device[static_cast<size_t>(r)] = {space.allocate(r, in_bytes), space.allocate(r, out_bytes)};
    space.upload(device[static_cast<size_t>(r)].input, host.input, in_bytes);
    space.upload(device[static_cast<size_t>(r)].output, host.output, out_bytes);  // poisoned
  }
  struct Release {
    BufferSpace& space;
    std::vector<RankBuffers>& buffers;
    ~Release() {
      for (const RankBuffers& b : buffers) {
        space.release(b.input);
        space.release(b.output);
      }
    }
  } release{space, device};
  const RunResult result = executor.run(schedule, spec, device, context);
  for (int r = 0; r < spec.nranks; ++r)
    space.download(data.output(r), device[static_cast<size_t>(r)].output, out_bytes);
  return result;
}

class NcclGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpus() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(NcclGpu, NativeAllReduceWorldOfOne) {
  NcclExecutor executor(NcclOptions{.mode = NcclMode::kNative});
  const CollectiveSpec spec{.collective = Collective::kAllReduce, .count = 1000, .nranks = 1};
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(1), Algorithm::kRing);
  tandem::test::CollectiveData data(spec, false);
  run_on_device(executor, schedule, spec, data);
  EXPECT_TRUE(data.check());
}

TEST_F(NcclGpu, SelfSendRecvBothModes) {
  const CollectiveSpec spec{.collective = Collective::kSendRecv, .count = 4097, .dtype = DataType::kI32, .nranks = 1};
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(1), Algorithm::kDirect);
  for (const NcclMode mode : {NcclMode::kSchedule, NcclMode::kNative}) {
    NcclExecutor executor(NcclOptions{.mode = mode});
    tandem::test::CollectiveData data(spec, false);
    run_on_device(executor, schedule, spec, data, RunContext{.tiles = 3});
    EXPECT_TRUE(data.check()) << (mode == NcclMode::kSchedule ? "schedule" : "native");
  }
}

TEST_F(NcclGpu, FaultsOnASelfSend) {
  NcclExecutor executor;
  const CollectiveSpec spec{.collective = Collective::kSendRecv, .count = 1024, .nranks = 1};
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(1), Algorithm::kDirect);
  {
    tandem::test::CollectiveData data(spec, false);
    RunContext context;
    context.on_send = [](int, int, int64_t) { return TransferEffect{.fail = true, .fault_index = 0}; };
    try {
      run_on_device(executor, schedule, spec, data, context);
      ADD_FAILURE() << "a failing send passed";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kFault) << error.what();
    }
  }
  {
    tandem::test::CollectiveData data(spec, false);
    RunContext context{.checksums = true};
    context.on_send = [](int, int, int64_t) { return TransferEffect{.corrupt = true, .fault_index = 0}; };
    try {
      run_on_device(executor, schedule, spec, data, context);
      ADD_FAILURE() << "a corrupted message passed its checksum";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
    }
  }
  {
    tandem::test::CollectiveData data(spec, false);
    RunContext context{.timeout = std::chrono::milliseconds(500)};
    context.on_send = [](int, int, int64_t) { return TransferEffect{.stall = true, .fault_index = 0}; };
    try {
      run_on_device(executor, schedule, spec, data, context);
      ADD_FAILURE() << "a stalled send finished";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kTimeout) << error.what();
    }
  }
  // The communicators were aborted by the timeout; the next run rebuilds them.
  tandem::test::CollectiveData data(spec, false);
  run_on_device(executor, schedule, spec, data, RunContext{.checksums = true});
  EXPECT_TRUE(data.check());
}

TEST_F(NcclGpu, MoreRanksThanGpusIsUnsupported) {
  NcclExecutor executor;
  const int n = gpus() + 1;
  const CollectiveSpec spec{.collective = Collective::kAllReduce, .count = 16, .nranks = n};
  const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(n), Algorithm::kRing);
  std::vector<RankBuffers> buffers(static_cast<size_t>(n));
  try {
    executor.run(schedule, spec, buffers, RunContext{});
    ADD_FAILURE() << n << " ranks ran on " << gpus() << " GPUs";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUnsupported) << error.what();
    EXPECT_NE(std::string(error.what()).find("two ranks of one communicator on one GPU"), std::string::npos);
  }
}

TEST_F(NcclGpu, ScheduleAndNativeMatchTheReference) {
  NcclExecutor schedule_mode;
  NcclExecutor native_mode(NcclOptions{.mode = NcclMode::kNative});
  int cases = 0;
  for (int n = 1; n <= std::min(gpus(), 8); ++n) {
    for (const Algorithm algorithm : {Algorithm::kRing, Algorithm::kTree}) {
      for (const Collective collective : all_collectives()) {
        if (!implements(algorithm, collective)) continue;
        for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          if (op != ReduceOp::kSum && !is_reduction(collective)) continue;
          const CollectiveSpec spec{
              .collective = collective, .count = 1001, .dtype = DataType::kF32, .op = op, .root = n / 2, .nranks = n};
          const Schedule schedule = build_checked_schedule(spec, RankLayout::flat(n), algorithm);
          const std::string what = tandem::test::describe(spec, algorithm, false);
          for (const uint32_t tiles : {1u, 2u}) {
            tandem::test::CollectiveData data(spec, false);
            run_on_device(schedule_mode, schedule, spec, data, RunContext{.tiles = tiles});
            EXPECT_TRUE(data.check()) << what << " schedule mode, tiles " << tiles;
            ++cases;
          }
          tandem::test::CollectiveData data(spec, false);
          run_on_device(native_mode, schedule, spec, data);
          EXPECT_TRUE(data.check()) << what << " native mode";
          ++cases;
        }
      }
    }
  }
  RecordProperty("cases", cases);
}

#endif

}  // namespace
}  // namespace tandem::nccl
