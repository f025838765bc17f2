// The input decoding both pickle readers share (pickle_direct_reader.cc, pickle_graph_reader.cc):
// opcode arguments, scalars, framing and memo opcodes, decoded once for both so that they read the
// same values; the memo (key -> what a reader keeps of an object); the limits of a load. Inline: the
// readers run it for every opcode. Not a public header: only those two files include it.
#pragma once

#include <bit>
#include <cctype>
#include <charconv>
#include <clocale>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/pickle_internal.h"

namespace tandem::pickle::detail {

constexpr uint8_t kHighestProtocol = 5;
// Containers nested deeper than this are rejected (Python's own limit is the recursion limit,
// also about 1000); it keeps every recursion over a loaded value shallow.
constexpr int kMaxDepth = 1000;
// Memo references (GET, DUP) share one object many times; copying it out can multiply the input.
// A load may use at most kMaxExpansion bytes of memory per input byte, plus a fixed allowance.
constexpr uint64_t kMaxExpansion = 256;
constexpr uint64_t kExpansionAllowanceBytes = uint64_t{64} << 20;

enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kString, kBytes, kBigInt, kList, kTuple, kDict };

// Text-like scalars: their payload is a view into the input (or into Input::decoded_).
constexpr bool has_text(Kind kind) { return kind == Kind::kString || kind == Kind::kBytes || kind == Kind::kBigInt; }

constexpr uint32_t kNoIndex = std::numeric_limits<uint32_t>::max();
// Indices are 32-bit: every input byte adds at most one node, stack entry, item or chunk, and
// protocol 0's decoded text is at most twice its input. Anything below 2 GiB fits.
constexpr uint64_t kMaxInputBytes = uint64_t{1} << 31;

inline void append_utf8(std::string& out, uint32_t code_point) {
  // Surrogates are encoded like any other code point, as Python's "surrogatepass" does.
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  }
}

// A dict key's hash: of its canonical bytes and of a number for its type.
inline uint64_t hash_bytes(size_t type, std::string_view bytes) {
  return std::hash<std::string_view>{}(bytes) ^ (static_cast<uint64_t>(type + 1) * 0x9e3779b97f4a7c15);
}

// A scalar opcode's argument, decoded.
struct Scalar {
  Kind kind = Kind::kNone;
  uint64_t bits = 0;      // kBool, kInt, kFloat: the value
  std::string_view text;  // kString, kBytes, kBigInt: in the input, or in Input::decoded_ when `decoded`
  bool decoded = false;
};

enum class MemoOp : uint8_t { kNone, kPut, kMemoize, kGet };

// Memo keys -> T. Python numbers them 0, 1, 2, ..., so keys below `dense_keys` live in a vector
// and the rest in a map.
template <typename T>
class Memo {
 public:
  explicit Memo(uint64_t dense_keys = 0) : dense_keys_(dense_keys) {}

  // Empties it, keeping the vector's memory.
  void clear(uint64_t dense_keys) {
    dense_keys_ = dense_keys;
    dense_.clear();
    sparse_.clear();
    size_ = 0;
  }

  size_t kept_bytes() const {
    return dense_.capacity() * sizeof(dense_[0]) + sparse_.bucket_count() * sizeof(void*);
  }

  void put(uint64_t key, const T& value) {
    if (key < dense_keys_) {
      if (key >= dense_.size()) dense_.resize(key + 1);
      if (!dense_[key]) ++size_;
      dense_[key] = value;
    } else if (sparse_.insert_or_assign(key, value).second) {
      ++size_;
    }
  }

  const T* find(uint64_t key) const {
    if (key < dense_.size()) return dense_[key] ? &*dense_[key] : nullptr;
    const auto it = sparse_.find(key);
    return it == sparse_.end() ? nullptr : &it->second;
  }

  uint64_t size() const { return size_; }  // distinct keys: MEMOIZE's next key

 private:
  uint64_t dense_keys_;
  std::vector<std::optional<T>> dense_;
  std::unordered_map<uint64_t, T> sparse_;
  uint64_t size_ = 0;
};

// The input and what both readers decode the same way: opcode arguments, scalars, framing.
class Input {
 protected:
  explicit Input(std::string_view bytes) : in_(bytes) {}

  void reset(std::string_view bytes) {
    in_ = bytes;
    pos_ = 0;
    op_offset_ = 0;
    decoded_.clear();
  }

  [[noreturn]] void bad(const std::string& what) const { fail(ErrorCode::kFormat, "{} at byte {}", what, op_offset_); }

  void check_size() const {
    if (in_.size() >= kMaxInputBytes) bad(fmt::format("pickle of {} bytes is too large (at most 2 GiB)", in_.size()));
  }

  // The next opcode, with op_offset_ at it.
  uint8_t next_opcode() {
    op_offset_ = pos_;
    if (pos_ >= in_.size()) bad("truncated pickle (no STOP)");
    return static_cast<uint8_t>(take_uint(1));
  }

  uint8_t opcode() const { return static_cast<uint8_t>(in_[op_offset_]); }

  [[noreturn]] void unsupported(uint8_t code) const {
    bad(fmt::format("unsupported pickle opcode 0x{:02x} ({})", code, opcode_name(code)));
  }

  // PROTO and FRAME, which only check their argument.
  bool read_framing(uint8_t code) {
    switch (static_cast<Op>(code)) {
      case Op::kProto: {
        const uint64_t protocol = take_uint(1);
        if (protocol > kHighestProtocol) bad(fmt::format("unsupported pickle protocol {}", protocol));
        return true;
      }
      case Op::kFrame: {
        // Framing only helps buffered readers; the frame must still lie inside the input.
        const uint64_t length = take_uint(8);
        if (length > in_.size() - pos_)
          bad(fmt::format("truncated pickle: FRAME of {} bytes, {} left", length, in_.size() - pos_));
        return true;
      }
      default: return false;
    }
  }

  // The memo opcodes, with their key (MEMOIZE's is the memo's size, which the reader knows).
  MemoOp read_memo(uint8_t code, uint64_t& key) {
    switch (static_cast<Op>(code)) {
      case Op::kMemoize: return MemoOp::kMemoize;
      case Op::kBinPut: key = take_uint(1); return MemoOp::kPut;
      case Op::kLongBinPut: key = take_uint(4); return MemoOp::kPut;
      case Op::kPut: key = parse_memo_key(take_line()); return MemoOp::kPut;
      case Op::kBinGet: key = take_uint(1); return MemoOp::kGet;
      case Op::kLongBinGet: key = take_uint(4); return MemoOp::kGet;
      case Op::kGet: key = parse_memo_key(take_line()); return MemoOp::kGet;
      default: return MemoOp::kNone;
    }
  }

  // A scalar opcode and its argument; false when `code` is not one.
  bool read_scalar(uint8_t code, Scalar& scalar) {
    const auto number = [&](Kind kind, uint64_t bits) {
      scalar.kind = kind;
      scalar.bits = bits;
      return true;
    };
    const auto integer = [&](int64_t value) { return number(Kind::kInt, static_cast<uint64_t>(value)); };
    const auto text = [&](Kind kind, std::string_view data) {
      scalar.kind = kind;
      scalar.text = data;
      scalar.decoded = false;
      return true;
    };
    switch (static_cast<Op>(code)) {
      case Op::kNone: return number(Kind::kNone, 0);
      case Op::kNewTrue: return number(Kind::kBool, 1);
      case Op::kNewFalse: return number(Kind::kBool, 0);
      case Op::kBinInt1: return integer(static_cast<int64_t>(take_uint(1)));
      case Op::kBinInt2: return integer(static_cast<int64_t>(take_uint(2)));
      case Op::kBinInt: return integer(int64_t{static_cast<int32_t>(take_uint(4))});
      case Op::kLong1:
        return long_value(take(take_uint(1)), scalar);
      case Op::kLong4: {
        const auto length = static_cast<int32_t>(take_uint(4));
        if (length < 0) bad("pickle LONG4 with a negative length");
        return long_value(take(static_cast<uint64_t>(length)), scalar);
      }
      case Op::kInt: {
        // Protocol 0 writes bools as INT "01" / "00".
        const std::string_view line = take_line();
        if (line == "00" || line == "01") return number(Kind::kBool, line == "01" ? 1 : 0);
        return decimal_value(line, scalar);
      }
      case Op::kLong: {
        std::string_view line = take_line();
        if (line.ends_with('L')) line.remove_suffix(1);
        return decimal_value(line, scalar);
      }
      case Op::kFloat: return number(Kind::kFloat, std::bit_cast<uint64_t>(parse_float(take_line())));
      case Op::kBinFloat: return number(Kind::kFloat, take_uint_big_endian(8));
      case Op::kShortBinUnicode: return text(Kind::kString, take(take_uint(1)));
      case Op::kBinUnicode: return text(Kind::kString, take(take_uint(4)));
      case Op::kBinUnicode8: return text(Kind::kString, take(take_uint(8)));
      case Op::kUnicode: {
        const size_t offset = decoded_.size();
        decode_raw_unicode_escape(take_line(), decoded_);
        text(Kind::kString, std::string_view(decoded_).substr(offset));
        scalar.decoded = true;
        return true;
      }
      case Op::kShortBinBytes: return text(Kind::kBytes, take(take_uint(1)));
      case Op::kBinBytes: return text(Kind::kBytes, take(take_uint(4)));
      case Op::kBinBytes8: return text(Kind::kBytes, take(take_uint(8)));
      default: return false;
    }
  }

  // Where text lies: its offset in the input or in decoded_.
  uint32_t text_offset(const Scalar& scalar) const {
    const char* base = scalar.decoded ? decoded_.data() : in_.data();
    return static_cast<uint32_t>(scalar.text.data() - base);
  }

  std::string_view text_at(bool decoded, uint32_t offset, uint32_t length) const {
    return (decoded ? std::string_view(decoded_) : in_).substr(offset, length);
  }

  // Keys below this go to a Memo's vector: Python numbers the memoized objects, each one opcode to
  // make and one to memoize, so its keys stay below half the input's size.
  uint64_t dense_memo_keys() const { return in_.size() / 2 + 256; }

  std::string_view in_;
  size_t pos_ = 0;
  size_t op_offset_ = 0;  // where the opcode being run starts: every message names it
  std::string decoded_;   // protocol 0's UNICODE text, as UTF-8

 private:
  std::string_view take(uint64_t count) {
    if (count > in_.size() - pos_) {
      bad(fmt::format("truncated pickle: {} needs {} bytes, {} left", opcode_name(opcode()), count,
                      in_.size() - pos_));
    }
    const std::string_view data = in_.substr(pos_, count);
    pos_ += count;
    return data;
  }

  uint64_t take_uint(int bytes) {
    const std::string_view data = take(static_cast<uint64_t>(bytes));
    uint64_t value = 0;
    for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(data[i]);
    return value;
  }

  uint64_t take_uint_big_endian(int bytes) {
    const std::string_view data = take(static_cast<uint64_t>(bytes));
    uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) value = (value << 8) | static_cast<uint8_t>(data[i]);
    return value;
  }

  // The argument of a text opcode (protocol 0): up to the next newline.
  std::string_view take_line() {
    const size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) bad(fmt::format("truncated pickle: {} has no newline", opcode_name(opcode())));
    const std::string_view line = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return line;
  }

  uint64_t parse_memo_key(std::string_view text) {
    const int64_t key = parse_decimal(text);
    if (key < 0) bad(fmt::format("negative pickle memo key {}", key));
    return static_cast<uint64_t>(key);
  }

  int64_t parse_decimal(std::string_view text) {
    if (!text.empty() && text.front() == '+') text.remove_prefix(1);
    int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error == std::errc::result_out_of_range) bad("pickle integer does not fit in 64 bits");
    if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
      bad(fmt::format("bad pickle {} argument '{}'", opcode_name(opcode()), text));
    }
    return value;
  }

  // strtod in the C locale, not from_chars: Python's float() turns overflow into inf and underflow
  // into 0, which from_chars reports as one error without a value.
  double parse_float(std::string_view text) {
    static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", nullptr);
    const std::string copy(text);
    char* end = nullptr;
    const double value = strtod_l(copy.c_str(), &end, c_locale);
    const bool hex = copy.find_first_of("xX") != std::string::npos;  // strtod's, not Python's
    if (copy.empty() || end != copy.c_str() + copy.size() || hex || std::isspace(static_cast<uint8_t>(copy[0]))) {
      bad(fmt::format("bad pickle FLOAT argument '{}'", text));
    }
    return value;
  }

  // UNICODE is raw-unicode-escape: bytes are Latin-1 code points, except that \uXXXX and
  // \UXXXXXXXX after an odd number of backslashes are escapes. The UTF-8 goes to the end of `out`.
  void decode_raw_unicode_escape(std::string_view text, std::string& out) {
    size_t i = 0;
    while (i < text.size()) {
      if (text[i] != '\\') {
        append_utf8(out, static_cast<uint8_t>(text[i++]));
        continue;
      }
      size_t backslashes = 0;
      while (i < text.size() && text[i] == '\\') {
        out.push_back('\\');
        ++backslashes;
        ++i;
      }
      if (backslashes % 2 == 0 || i >= text.size() || (text[i] != 'u' && text[i] != 'U')) continue;
      out.pop_back();  // the escaping backslash
      const size_t digits = text[i] == 'u' ? 4 : 8;
      ++i;
      if (text.size() - i < digits) bad("truncated \\u escape in pickle UNICODE");
      uint32_t code_point = 0;
      const auto [end, error] = std::from_chars(text.data() + i, text.data() + i + digits, code_point, 16);
      if (error != std::errc() || end != text.data() + i + digits) bad("bad \\u escape in pickle UNICODE");
      if (code_point > 0x10ffff) bad("\\U escape out of range in pickle UNICODE");
      append_utf8(out, code_point);
      i += digits;
    }
  }

  // LONG1 / LONG4 payload: little-endian two's complement of any length. An int when it fits in
  // int64, else a BigInt of its shortest form (a prefix of `data`: the bytes dropped at the end
  // only repeat the sign).
  bool long_value(std::string_view data, Scalar& scalar) {
    scalar.decoded = false;
    const std::string_view shortest = shortest_long(data);
    if (shortest.size() > 8) {
      scalar.kind = Kind::kBigInt;
      scalar.text = shortest;
      return true;
    }
    scalar.kind = Kind::kInt;
    scalar.bits = 0;
    if (shortest.empty()) return true;
    for (size_t i = shortest.size(); i-- > 0;) scalar.bits = (scalar.bits << 8) | static_cast<uint8_t>(shortest[i]);
    const bool negative = (static_cast<uint8_t>(shortest.back()) & 0x80) != 0;
    if (shortest.size() < 8 && negative) scalar.bits |= ~uint64_t{0} << (8 * shortest.size());  // sign-extend
    return true;
  }

  // INT / LONG text: an int, or a BigInt whose two's complement bytes go to decoded_.
  bool decimal_value(std::string_view text, Scalar& scalar) {
    std::string_view digits = text;
    if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) digits.remove_prefix(1);
    const bool all_digits = !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
    if (!all_digits || digits.size() < 19) {  // 18 digits always fit; parse_decimal words the errors
      scalar.kind = Kind::kInt;
      scalar.bits = static_cast<uint64_t>(parse_decimal(text));
      return true;
    }
    int64_t value = 0;
    const std::string_view signed_text = text.front() == '+' ? text.substr(1) : text;
    const auto [end, error] = std::from_chars(signed_text.data(), signed_text.data() + signed_text.size(), value);
    if (error == std::errc() && end == signed_text.data() + signed_text.size()) {
      scalar.kind = Kind::kInt;
      scalar.bits = static_cast<uint64_t>(value);
      return true;
    }
    // Magnitude in base 256, little-endian: multiply by 10 and add each digit.
    std::string magnitude;
    for (const char digit : digits) {
      unsigned carry = static_cast<unsigned>(digit - '0');
      for (char& byte : magnitude) {
        const unsigned product = static_cast<uint8_t>(byte) * 10u + carry;
        byte = static_cast<char>(product & 0xff);
        carry = product >> 8;
      }
      if (carry != 0) magnitude.push_back(static_cast<char>(carry));
    }
    magnitude.push_back('\0');  // room for the sign bit
    if (text.front() == '-') {  // two's complement: invert, add one
      unsigned carry = 1;
      for (char& byte : magnitude) {
        const unsigned sum = static_cast<uint8_t>(~static_cast<uint8_t>(byte)) + carry;
        byte = static_cast<char>(sum & 0xff);
        carry = sum >> 8;
      }
    }
    const size_t offset = decoded_.size();
    decoded_ += shortest_long(magnitude);
    scalar.kind = Kind::kBigInt;
    scalar.text = std::string_view(decoded_).substr(offset);
    scalar.decoded = true;
    return true;
  }

  // Two's complement without the trailing bytes that only repeat the sign of the byte before.
  static std::string_view shortest_long(std::string_view data) {
    while (data.size() > 1) {
      const auto last = static_cast<uint8_t>(data.back());
      const bool sign = (static_cast<uint8_t>(data[data.size() - 2]) & 0x80) != 0;
      if (!((last == 0 && !sign) || (last == 0xff && sign))) break;
      data.remove_suffix(1);
    }
    if (data.size() == 1 && data[0] == 0) data.remove_suffix(1);
    return data;
  }
};

}  // namespace tandem::pickle::detail
