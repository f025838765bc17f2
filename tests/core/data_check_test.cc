#include "core/data_check.h"

#include <cmath>
#include <cstddef>
#include <vector>

#include <gtest/gtest.h>

#include "backend/host/host_executor.h"
#include "core/algorithms.h"
#include "core/communicator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/schedule.h"

namespace tandem {
namespace {

// Per-rank allocations large enough for a collective's input and output blocks.
struct Allocations {
  Allocations(const CheckSpec& spec) {
    const BufferGeometry geometry = buffer_geometry(spec.collective, spec.nranks);
    const size_t element = size_bytes(spec.dtype);
    for (int rank = 0; rank < spec.nranks; ++rank) {
      inputs.emplace_back(geometry.input_blocks * static_cast<size_t>(spec.count) * element + 1);
      outputs.emplace_back(geometry.output_blocks * static_cast<size_t>(spec.count) * element + 1);
    }
  }
  std::vector<RankBuffers> place(const CheckSpec& spec, bool in_place) {
    std::vector<RankBuffers> buffers;
    for (int rank = 0; rank < spec.nranks; ++rank) {
      buffers.push_back(place_buffers(spec.collective, rank, spec.count, spec.dtype, in_place,
                                      inputs[static_cast<size_t>(rank)].data(),
                                      outputs[static_cast<size_t>(rank)].data()));
    }
    return buffers;
  }
  std::vector<std::vector<std::byte>> inputs, outputs;
};

// An oracle written independently of count_wrong: the collective done sequentially on the input
// buffers with core/dtype.h element access, out of place.
void naive_collective(const CheckSpec& spec, std::span<const RankBuffers> b) {
  const int n = spec.nranks;
  const int64_t count = spec.count;
  auto in = [&](int rank, int64_t i) { return load_element(spec.dtype, b[size_t(rank)].input, i); };
  auto out = [&](int rank, int64_t i, double v) { store_element(spec.dtype, b[size_t(rank)].output, i, v); };
  auto reduce = [&](int64_t i) {
    double v = in(0, i);
    for (int rank = 1; rank < n; ++rank) {
      double x = in(rank, i);
      switch (spec.op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          v += x;
          break;
        case ReduceOp::kProd:
          v *= x;
          break;
        case ReduceOp::kMin:
          v = std::min(v, x);
          break;
        case ReduceOp::kMax:
          v = std::max(v, x);
          break;
      }
    }
    if (spec.op == ReduceOp::kAvg) v = is_floating(spec.dtype) ? v / n : std::trunc(v / n);
    return v;
  };
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < count; ++i) {
      switch (spec.collective) {
        case Collective::kAllReduce:
          out(r, i, reduce(i));
          break;
        case Collective::kReduce:
          if (r == spec.root) out(r, i, reduce(i));
          break;
        case Collective::kReduceScatter:
          out(r, i, reduce(r * count + i));
          break;
        case Collective::kBroadcast:
          out(r, i, in(spec.root, i));
          break;
        case Collective::kSendRecv:
          out(r, i, in((r + n - 1) % n, i));
          break;
        case Collective::kAllGather:
          for (int block = 0; block < n; ++block) out(r, block * count + i, in(block, i));
          break;
        case Collective::kAllToAll:
          for (int block = 0; block < n; ++block) out(r, block * count + i, in(block, r * count + i));
          break;
      }
    }
  }
}

std::vector<CheckSpec> oracle_cases() {
  std::vector<CheckSpec> cases;
  for (Collective c : all_collectives()) {
    for (DataType t : all_data_types()) {
      for (int n : {1, 2, 3, 8}) {
        std::vector<ReduceOp> ops{ReduceOp::kSum};
        if (is_reduction(c)) ops.assign(all_reduce_ops().begin(), all_reduce_ops().end());
        for (ReduceOp op : ops) cases.push_back({c, t, op, n - 1, n, 37, 5});
      }
    }
  }
  return cases;
}

TEST(BenchCheck, CorrectOutputsHaveNoWrongElementsAndEveryCorruptionCounts) {
  for (const CheckSpec& spec : oracle_cases()) {
    SCOPED_TRACE(::testing::Message() << name(spec.collective) << " " << name(spec.dtype) << " " << name(spec.op)
                                      << " n=" << spec.nranks);
    Allocations memory(spec);
    std::vector<RankBuffers> buffers = memory.place(spec, false);
    poison_outputs(spec, buffers);
    fill_inputs(spec, buffers);
    naive_collective(spec, buffers);
    ASSERT_EQ(count_wrong(spec, buffers), 0);

    // One wrong element on the last rank (the root for reduce): counted once.
    int rank = spec.collective == Collective::kReduce ? spec.root : spec.nranks - 1;
    double value = load_element(spec.dtype, buffers[size_t(rank)].output, 3);
    store_element(spec.dtype, buffers[size_t(rank)].output, 3, value + 1);
    EXPECT_EQ(count_wrong(spec, buffers), 1);

    // Untouched (poisoned) outputs are all wrong.
    poison_outputs(spec, buffers);
    const int64_t checked_ranks = spec.collective == Collective::kReduce ? 1 : spec.nranks;
    const int64_t blocks = buffer_geometry(spec.collective, spec.nranks).output_blocks;
    EXPECT_EQ(count_wrong(spec, buffers), checked_ranks * blocks * spec.count);
  }
}

TEST(BenchCheck, PatternsStayInTheirDocumentedRanges) {
  CheckSpec moved{Collective::kAllGather, DataType::kF32, ReduceOp::kSum, 0, 8, 1000, 1};
  CheckSpec summed{Collective::kAllReduce, DataType::kF32, ReduceOp::kSum, 0, 8, 1000, 1};
  CheckSpec product{Collective::kAllReduce, DataType::kF32, ReduceOp::kProd, 0, 8, 1000, 1};
  bool saw_negative = false, saw_positive = false;
  for (int64_t i = 0; i < 1000; ++i) {
    double p = 1;
    for (int rank = 0; rank < 8; ++rank) {
      double m = input_value(moved, rank, i);
      EXPECT_TRUE(m >= -100 && m <= 100 && m == std::floor(m));
      double s = input_value(summed, rank, i);
      EXPECT_TRUE(s >= -2 && s <= 2 && s == std::floor(s));
      saw_negative |= s < 0;
      saw_positive |= s > 0;
      p *= input_value(product, rank, i);
    }
    EXPECT_EQ(std::abs(p), 2.0);
  }
  EXPECT_TRUE(saw_negative && saw_positive);
  // The seed changes the inputs.
  CheckSpec reseeded = summed;
  reseeded.seed = 2;
  int differ = 0;
  for (int64_t i = 0; i < 100; ++i) differ += input_value(summed, 0, i) != input_value(reseeded, 0, i);
  EXPECT_GT(differ, 50);
}

TEST(BenchCheck, ToleranceIsExactWhereTheArithmeticIsExact) {
  EXPECT_EQ(reduction_tolerance(DataType::kI32, ReduceOp::kAvg, 8, 1.0, 16), 0.0);
  EXPECT_EQ(reduction_tolerance(DataType::kF32, ReduceOp::kSum, 8, 3.0, 16), 0.0);
  EXPECT_EQ(reduction_tolerance(DataType::kBF16, ReduceOp::kSum, 128, 3.0, 256), 0.0);
  EXPECT_EQ(reduction_tolerance(DataType::kF16, ReduceOp::kMax, 8, 2.0, 16), 0.0);
  EXPECT_EQ(reduction_tolerance(DataType::kF32, ReduceOp::kProd, 8, 2.0, 9), 0.0);
  // bfloat16 beyond 2^8: partial sums may round; bound (n-1) * 2^-8 * sum|x|.
  EXPECT_DOUBLE_EQ(reduction_tolerance(DataType::kBF16, ReduceOp::kSum, 200, 0.0, 400), 199.0 / 256.0 * 400.0);
  // avg: one rounded division.
  EXPECT_DOUBLE_EQ(reduction_tolerance(DataType::kF32, ReduceOp::kAvg, 3, 1.0 / 3.0, 4), 2.0 / 3.0 * 0x1p-24);
}

TEST(BenchCheck, InPlaceBuffersAliasAsNcclDefines) {
  std::vector<std::byte> input(64), output(64);
  RankBuffers gather = place_buffers(Collective::kAllGather, 2, 3, DataType::kF32, true, input.data(), output.data());
  EXPECT_EQ(gather.output, output.data());
  EXPECT_EQ(gather.input, output.data() + 2 * 3 * 4);
  RankBuffers scatter =
      place_buffers(Collective::kReduceScatter, 2, 3, DataType::kF16, true, input.data(), output.data());
  EXPECT_EQ(scatter.input, input.data());
  EXPECT_EQ(scatter.output, input.data() + 2 * 3 * 2);
  RankBuffers all_reduce =
      place_buffers(Collective::kAllReduce, 2, 3, DataType::kF32, true, input.data(), output.data());
  EXPECT_EQ(all_reduce.input, all_reduce.output);
  RankBuffers out_of_place =
      place_buffers(Collective::kAllGather, 2, 3, DataType::kF32, false, input.data(), output.data());
  EXPECT_EQ(out_of_place.input, input.data());
  EXPECT_EQ(out_of_place.output, output.data());
}

// The check against the real host executor: every collective, every algorithm that builds it,
// awkward rank counts and sizes, out of place and in place.
TEST(BenchCheck, HostExecutorResultsPassTheCheck) {
  HostExecutor executor;
  for (int n : {1, 2, 3, 5, 8}) {
    Communicator communicator(executor, RankLayout::flat(n));
    for (Collective c : all_collectives()) {
      for (Algorithm algorithm : all_algorithms()) {
        if (!implements(algorithm, c)) continue;
        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100}}) {
          for (bool in_place : {false, true}) {
            if (in_place && !buffer_geometry(c, n).in_place_supported) continue;
            CheckSpec spec{c, DataType::kF32, ReduceOp::kSum, n / 2, n, count, 11};
            SCOPED_TRACE(::testing::Message() << name(c) << " " << name(algorithm) << " n=" << n << " count=" << count
                                              << (in_place ? " in place" : ""));
            Allocations memory(spec);
            std::vector<RankBuffers> buffers = memory.place(spec, in_place);
            poison_outputs(spec, buffers);
            fill_inputs(spec, buffers);
            CollectiveSpec collective{c, count, spec.dtype, spec.op, spec.root, n};
            try {
              communicator.run(collective, buffers, algorithm);
            } catch (const Error& error) {
              // An algorithm may refuse a rank count (e.g. a layout it needs); that is not the
              // check's business. Anything else is.
              ASSERT_TRUE(error.code() == ErrorCode::kUnsupported || error.code() == ErrorCode::kInvalidArgument)
                  << error.what();
              continue;
            }
            EXPECT_EQ(count_wrong(spec, buffers), 0);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem
