// core/dtype: f16 / bf16 conversions (known bit patterns, exhaustive round trips, ties to even),
// element load / store, and the element-wise reductions the host backend runs.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"

namespace tandem {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool is_half_nan(uint16_t bits) { return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0; }
bool is_bf16_nan(uint16_t bits) { return (bits & 0x7f80u) == 0x7f80u && (bits & 0x7fu) != 0; }

// The value of a binary16 pattern from its definition, independent of the code under test.
double half_by_definition(uint16_t bits) {
  const int sign = (bits & 0x8000) ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa == 0 ? sign * std::numeric_limits<double>::infinity() : std::nan("");
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(HalfTest, KnownBitPatterns) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.5f), 0xc100);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(float_to_half(std::ldexp(1023.0f, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(float_to_half(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(float_to_half(kInf), 0x7c00);
  EXPECT_EQ(float_to_half(-kInf), 0xfc00);
  EXPECT_TRUE(is_half_nan(float_to_half(kNaN)));
  EXPECT_TRUE(is_half_nan(float_to_half(-kNaN)));
  // A signalling NaN whose payload sits only in the low 13 bits must not become infinity.
  EXPECT_TRUE(is_half_nan(float_to_half(std::bit_cast<float>(0x7f800001u))));

  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc100), -2.5f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(std::bit_cast<uint32_t>(half_to_float(0x8000)), 0x80000000u);
  EXPECT_EQ(half_to_float(0x7c00), kInf);
  EXPECT_EQ(half_to_float(0xfc00), -kInf);
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7c01)));
}

TEST(HalfTest, RoundsToNearestEvenAndOverflowsToInfinity) {
  const float ulp_at_one = std::ldexp(1.0f, -10);
  EXPECT_EQ(float_to_half(1.0f + ulp_at_one / 2), 0x3c00);      // tie, 0x3c00 is even
  EXPECT_EQ(float_to_half(1.0f + 3 * ulp_at_one / 2), 0x3c02);  // tie, rounds up to even
  EXPECT_EQ(float_to_half(std::nextafter(1.0f + ulp_at_one / 2, 2.0f)), 0x3c01);
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);  // below the 65504 / inf midpoint
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // the midpoint: even is infinity
  EXPECT_EQ(float_to_half(-65520.0f), 0xfc00);
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::max()), 0x7c00);
  // Subnormal ties: 2^-25 is half the smallest subnormal (tie to even zero), 3 * 2^-25 is 1.5
  // subnormal ulps (tie to even 2).
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(float_to_half(std::ldexp(5.0f, -25)), 0x0002);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000);
  // The largest subnormal plus half an ulp ties to the (even) smallest normal.
  EXPECT_EQ(float_to_half(std::ldexp(2047.0f, -25)), 0x0400);
}

TEST(HalfTest, EveryPatternDecodesByDefinitionAndRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float value = half_to_float(h);
    if (is_half_nan(h)) {
      ASSERT_TRUE(std::isnan(value)) << std::hex << bits;
      ASSERT_TRUE(is_half_nan(float_to_half(value))) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), half_by_definition(h)) << std::hex << bits;
    ASSERT_EQ(float_to_half(value), h) << std::hex << bits;
  }
}

TEST(HalfTest, MidpointsBetweenNeighboursRoundToEven) {
  // Between two adjacent positive finite halves: the exact midpoint goes to the even one, a float
  // step either side goes to the nearer one.
  for (uint16_t low = 0; low < 0x7bff; ++low) {
    const auto high = static_cast<uint16_t>(low + 1);
    const float mid = (half_to_float(low) + half_to_float(high)) / 2;  // exact in float
    const uint16_t even = (low & 1) ? high : low;
    ASSERT_EQ(float_to_half(mid), even) << std::hex << low;
    ASSERT_EQ(float_to_half(std::nextafter(mid, 0.0f)), low) << std::hex << low;
    ASSERT_EQ(float_to_half(std::nextafter(mid, kInf)), high) << std::hex << low;
    ASSERT_EQ(float_to_half(-mid), even | 0x8000) << std::hex << low;
  }
}

TEST(BFloat16Test, KnownBitPatternsAndTies) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(-2.5f), 0xc020);
  EXPECT_EQ(float_to_bfloat16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bfloat16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bfloat16(kInf), 0x7f80);
  EXPECT_EQ(float_to_bfloat16(-kInf), 0xff80);
  EXPECT_TRUE(is_bf16_nan(float_to_bfloat16(kNaN)));
  EXPECT_TRUE(is_bf16_nan(float_to_bfloat16(std::bit_cast<float>(0x7f800001u))));  // payload below 16 bits
  EXPECT_TRUE(is_bf16_nan(float_to_bfloat16(std::bit_cast<float>(0xffffffffu))));
  // Ties to even on the 16 dropped bits.
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // 1 + 2^-8: down to even
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // up to even
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x3f807fffu)), 0x3f80);  // below the tie
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);  // overflow to infinity
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x7f7f7fffu)), 0x7f7f);  // largest finite stays
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x00010000u)), 0x0001);  // subnormal
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x00008000u)), 0x0000);  // subnormal tie to even

  EXPECT_EQ(bfloat16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bfloat16_to_float(0xc020), -2.5f);
  EXPECT_EQ(bfloat16_to_float(0x7f80), kInf);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(0x7fc0)));
}

TEST(BFloat16Test, EveryPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = static_cast<uint16_t>(bits);
    const float value = bfloat16_to_float(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(value), bits << 16);
    if (is_bf16_nan(b)) {
      ASSERT_TRUE(is_bf16_nan(float_to_bfloat16(value))) << std::hex << bits;
    } else {
      ASSERT_EQ(float_to_bfloat16(value), b) << std::hex << bits;
    }
  }
}

TEST(ElementTest, LoadAndStoreEveryType) {
  for (DataType type :
       {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64, DataType::kI32, DataType::kI64}) {
    std::vector<std::byte> buffer(8 * 4);
    store_element(type, buffer.data(), 2, -2.5);
    store_element(type, buffer.data(), 3, 3.0);
    const double expected = (type == DataType::kI32 || type == DataType::kI64) ? -2.0 : -2.5;
    EXPECT_EQ(load_element(type, buffer.data(), 2), expected) << static_cast<int>(type);
    EXPECT_EQ(load_element(type, buffer.data(), 3), 3.0) << static_cast<int>(type);
  }
  std::vector<std::byte> buffer(8);
  store_element(DataType::kF16, buffer.data(), 0, 1.0 / 3);
  EXPECT_EQ(load_element(DataType::kF16, buffer.data(), 0), half_to_float(float_to_half(1.0f / 3)));
  store_element(DataType::kBF16, buffer.data(), 0, 1.0 / 3);
  EXPECT_EQ(load_element(DataType::kBF16, buffer.data(), 0), bfloat16_to_float(float_to_bfloat16(1.0f / 3)));
}

TEST(ElementTest, IntegersTruncateTowardZeroAndSaturate) {
  std::vector<std::byte> buffer(8);
  const auto round_trip = [&](DataType type, double value) {
    store_element(type, buffer.data(), 0, value);
    return load_element(type, buffer.data(), 0);
  };
  EXPECT_EQ(round_trip(DataType::kI32, -2.7), -2.0);
  EXPECT_EQ(round_trip(DataType::kI32, 2.7), 2.0);
  EXPECT_EQ(round_trip(DataType::kI32, 1e12), 2147483647.0);
  EXPECT_EQ(round_trip(DataType::kI32, -1e12), -2147483648.0);
  EXPECT_EQ(round_trip(DataType::kI32, std::nan("")), 0.0);
  EXPECT_EQ(round_trip(DataType::kI64, 1e30), 9223372036854775807.0);
  EXPECT_EQ(round_trip(DataType::kI64, -1e30), -9223372036854775808.0);
  EXPECT_EQ(round_trip(DataType::kI64, 1099511627776.0), 1099511627776.0);
}

// Reduces two small arrays given as doubles and returns the result as doubles.
std::vector<double> reduce_doubles(DataType type, ReduceOp op, const std::vector<double>& a,
                                   const std::vector<double>& b) {
  const auto n = static_cast<int64_t>(a.size());
  std::vector<std::byte> ba(a.size() * 8), bb(a.size() * 8), out(a.size() * 8);
  for (int64_t i = 0; i < n; ++i) {
    store_element(type, ba.data(), i, a[i]);
    store_element(type, bb.data(), i, b[i]);
  }
  reduce_elements(type, op, ba.data(), bb.data(), out.data(), n);
  std::vector<double> result(a.size());
  for (int64_t i = 0; i < n; ++i) result[i] = load_element(type, out.data(), i);
  return result;
}

TEST(ReduceTest, EveryTypeAndOp) {
  const std::vector<double> a = {1, -2, 3, 0, 5, -6};
  const std::vector<double> b = {4, 5, -1, 7, 5, -2};
  for (DataType type :
       {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64, DataType::kI32, DataType::kI64}) {
    SCOPED_TRACE(static_cast<int>(type));
    EXPECT_EQ(reduce_doubles(type, ReduceOp::kSum, a, b), (std::vector<double>{5, 3, 2, 7, 10, -8}));
    EXPECT_EQ(reduce_doubles(type, ReduceOp::kAvg, a, b), (std::vector<double>{5, 3, 2, 7, 10, -8}));
    EXPECT_EQ(reduce_doubles(type, ReduceOp::kProd, a, b), (std::vector<double>{4, -10, -3, 0, 25, 12}));
    EXPECT_EQ(reduce_doubles(type, ReduceOp::kMin, a, b), (std::vector<double>{1, -2, -1, 0, 5, -6}));
    EXPECT_EQ(reduce_doubles(type, ReduceOp::kMax, a, b), (std::vector<double>{4, 5, 3, 7, 5, -2}));
  }
}

TEST(ReduceTest, HalfPrecisionRoundsOncePerElement) {
  // 2048 + 1 is not representable in f16 (ulp 2 there): the sum rounds to even, 2048.
  EXPECT_EQ(reduce_doubles(DataType::kF16, ReduceOp::kSum, {2048}, {1}), (std::vector<double>{2048}));
  EXPECT_EQ(reduce_doubles(DataType::kF16, ReduceOp::kSum, {2048}, {3}), (std::vector<double>{2052}));
  EXPECT_EQ(reduce_doubles(DataType::kF16, ReduceOp::kSum, {65504}, {65504}), (std::vector<double>{INFINITY}));
  // bf16 has 8 significant bits: 256 + 1 ties to 256.
  EXPECT_EQ(reduce_doubles(DataType::kBF16, ReduceOp::kSum, {256}, {1}), (std::vector<double>{256}));
}

TEST(ReduceTest, MinAndMaxPropagateNaNFromEitherOperand) {
  for (DataType type : {DataType::kF32, DataType::kF16, DataType::kBF16, DataType::kF64}) {
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kSum, ReduceOp::kProd}) {
      const auto result =
          reduce_doubles(type, op, {std::nan(""), 1.0, std::nan("")}, {1.0, std::nan(""), std::nan("")});
      for (double value : result)
        EXPECT_TRUE(std::isnan(value)) << static_cast<int>(type) << " " << static_cast<int>(op);
    }
  }
}

TEST(ReduceTest, IntegerSumAndProductWrap) {
  std::vector<int32_t> a = {std::numeric_limits<int32_t>::max(), 65536};
  std::vector<int32_t> b = {1, 65536};
  std::vector<int32_t> out(2);
  reduce_elements(DataType::kI32, ReduceOp::kSum, a.data(), b.data(), out.data(), 1);
  EXPECT_EQ(out[0], std::numeric_limits<int32_t>::min());
  reduce_elements(DataType::kI32, ReduceOp::kProd, a.data() + 1, b.data() + 1, out.data() + 1, 1);
  EXPECT_EQ(out[1], 0);
  std::vector<int64_t> c = {std::numeric_limits<int64_t>::min()};
  std::vector<int64_t> d = {-1};
  reduce_elements(DataType::kI64, ReduceOp::kSum, c.data(), d.data(), c.data(), 1);
  EXPECT_EQ(c[0], std::numeric_limits<int64_t>::max());
}

TEST(ReduceTest, DestinationMayAliasAnOperandAndCountZeroIsANoOp) {
  std::vector<float> a = {1, 2, 3};
  std::vector<float> b = {10, 20, 30};
  reduce_elements(DataType::kF32, ReduceOp::kSum, a.data(), b.data(), a.data(), 3);
  EXPECT_EQ(a, (std::vector<float>{11, 22, 33}));
  reduce_elements(DataType::kF32, ReduceOp::kMax, a.data(), b.data(), b.data(), 3);
  EXPECT_EQ(b, (std::vector<float>{11, 22, 33}));
  reduce_elements(DataType::kF32, ReduceOp::kSum, nullptr, nullptr, nullptr, 0);
}

TEST(ReduceTest, LargeArraysReduceEveryElement) {
  constexpr int64_t kCount = 1 << 20;
  std::vector<float> a(kCount), b(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    a[i] = static_cast<float>(i % 1000);
    b[i] = static_cast<float>(-(i % 7));
  }
  reduce_elements(DataType::kF32, ReduceOp::kSum, a.data(), b.data(), a.data(), kCount);
  for (int64_t i = 0; i < kCount; ++i) ASSERT_EQ(a[i], static_cast<float>(i % 1000 - i % 7)) << i;
  std::vector<uint16_t> h(kCount, float_to_half(1.5f));
  reduce_elements(DataType::kF16, ReduceOp::kProd, h.data(), h.data(), h.data(), kCount);
  for (int64_t i = 0; i < kCount; ++i) ASSERT_EQ(h[i], float_to_half(2.25f)) << i;
}

TEST(DivideTest, FloatsDivideAndIntegersTruncateTowardZero) {
  std::vector<int32_t> ints = {-7, 7, 8, -1};
  divide_elements(DataType::kI32, ints.data(), 4, 2);
  EXPECT_EQ(ints, (std::vector<int32_t>{-3, 3, 4, 0}));
  std::vector<int64_t> longs = {-9, 9};
  divide_elements(DataType::kI64, longs.data(), 2, 4);
  EXPECT_EQ(longs, (std::vector<int64_t>{-2, 2}));
  std::vector<double> doubles = {1, -3};
  divide_elements(DataType::kF64, doubles.data(), 2, 4);
  EXPECT_EQ(doubles, (std::vector<double>{0.25, -0.75}));
  std::vector<uint16_t> halves = {float_to_half(3.0f), float_to_half(1.0f)};
  divide_elements(DataType::kF16, halves.data(), 2, 3);
  EXPECT_EQ(halves[0], float_to_half(1.0f));
  EXPECT_EQ(halves[1], float_to_half(1.0f / 3));
  std::vector<uint16_t> brains = {float_to_bfloat16(6.0f)};
  divide_elements(DataType::kBF16, brains.data(), 1, 4);
  EXPECT_EQ(brains[0], float_to_bfloat16(1.5f));
  EXPECT_THROW(divide_elements(DataType::kF32, doubles.data(), 1, 0), Error);
}

}  // namespace
}  // namespace tandem
