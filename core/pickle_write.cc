// The pickle writer: dumps(), protocol 2 with plain-type opcodes only (see core/pickle.h).
#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>

#include "core/error.h"
#include "core/pickle.h"
#include "core/pickle_internal.h"

namespace tandem::pickle {
namespace {

using detail::Op;

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void put_op(std::string& out, Op op) { out.push_back(static_cast<char>(op)); }

void write_int(std::string& out, int64_t value) {
  if (value >= 0 && value < 0x100) {
    put_op(out, Op::kBinInt1);
    put_le(out, static_cast<uint64_t>(value), 1);
  } else if (value >= 0 && value < 0x10000) {
    put_op(out, Op::kBinInt2);
    put_le(out, static_cast<uint64_t>(value), 2);
  } else if (value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max()) {
    put_op(out, Op::kBinInt);
    put_le(out, static_cast<uint64_t>(value), 4);
  } else {
    // LONG1: the shortest little-endian two's complement that holds the value (5 to 8 bytes here).
    int bytes = 5;
    while (bytes < 8 && (value < -(int64_t{1} << (8 * bytes - 1)) || value >= (int64_t{1} << (8 * bytes - 1)))) ++bytes;
    put_op(out, Op::kLong1);
    put_le(out, static_cast<uint64_t>(bytes), 1);
    put_le(out, static_cast<uint64_t>(value), bytes);
  }
}

void write_sized(std::string& out, Op op, std::string_view data, int length_bytes);

void write_big_int(std::string& out, const BigInt& value) {
  if (value.bytes.size() < 0x100) {
    write_sized(out, Op::kLong1, value.bytes, 1);
  } else if (value.bytes.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    write_sized(out, Op::kLong4, value.bytes, 4);
  } else {
    fail(ErrorCode::kInvalidArgument, "pickle: an integer of {} bytes does not fit LONG4", value.bytes.size());
  }
}

void write_float(std::string& out, double value) {
  put_op(out, Op::kBinFloat);
  const auto bits = std::bit_cast<uint64_t>(value);
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));  // big-endian
}

void write_sized(std::string& out, Op op, std::string_view data, int length_bytes) {
  put_op(out, op);
  put_le(out, data.size(), length_bytes);
  out.append(data);
}

void write_value(std::string& out, const Value& value);

void write_items(std::string& out, const List& items) {
  for (const Value& item : items) write_value(out, item);
}

void write_tuple(std::string& out, const Tuple& tuple) {
  static constexpr Op kSmallTuples[] = {Op::kEmptyTuple, Op::kTuple1, Op::kTuple2, Op::kTuple3};
  if (tuple.items.size() < 4) {
    write_items(out, tuple.items);
    put_op(out, kSmallTuples[tuple.items.size()]);
    return;
  }
  put_op(out, Op::kMark);
  write_items(out, tuple.items);
  put_op(out, Op::kTuple);
}

struct WriteVisitor {
  std::string& out;

  void operator()(const None&) const { put_op(out, Op::kNone); }
  void operator()(bool b) const { put_op(out, b ? Op::kNewTrue : Op::kNewFalse); }
  void operator()(int64_t i) const { write_int(out, i); }
  void operator()(double d) const { write_float(out, d); }
  void operator()(const std::string& s) const {
    if (s.size() > std::numeric_limits<uint32_t>::max()) {
      fail(ErrorCode::kInvalidArgument, "pickle: a string of {} bytes does not fit protocol 2", s.size());
    }
    write_sized(out, Op::kBinUnicode, s, 4);
  }
  // SHORT_BINBYTES / BINBYTES belong to protocol 3, but every Python 3 reads them under PROTO 2;
  // protocol 2's own encoding of bytes goes through a GLOBAL (codecs.encode), which we refuse.
  void operator()(const Bytes& b) const {
    if (b.data.size() < 0x100) {
      write_sized(out, Op::kShortBinBytes, b.data, 1);
    } else if (b.data.size() <= std::numeric_limits<uint32_t>::max()) {
      write_sized(out, Op::kBinBytes, b.data, 4);
    } else {
      fail(ErrorCode::kInvalidArgument, "pickle: {} bytes do not fit protocol 2", b.data.size());
    }
  }
  void operator()(const BigInt& i) const { write_big_int(out, i); }
  void operator()(const List& list) const {
    put_op(out, Op::kEmptyList);
    if (list.empty()) return;
    put_op(out, Op::kMark);
    write_items(out, list);
    put_op(out, Op::kAppends);
  }
  void operator()(const Tuple& tuple) const { write_tuple(out, tuple); }
  void operator()(const Dict& dict) const {
    put_op(out, Op::kEmptyDict);
    if (dict.empty()) return;
    put_op(out, Op::kMark);
    for (const auto& [key, item] : dict) {
      write_value(out, key);
      write_value(out, item);
    }
    put_op(out, Op::kSetItems);
  }
};

void write_value(std::string& out, const Value& value) { std::visit(WriteVisitor{out}, value.v); }

}  // namespace

std::string dumps(const Value& value) {
  std::string out;
  put_op(out, Op::kProto);
  out.push_back(2);
  write_value(out, value);
  put_op(out, Op::kStop);
  return out;
}

}  // namespace tandem::pickle
