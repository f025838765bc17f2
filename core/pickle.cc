// The pickle code, by file:
//   pickle.cc                  Value's accessors, and loads(), which picks the reader
//   pickle_write.cc            dumps()
//   pickle_internal.h          the opcodes and their names; the readers' entry points
//   pickle_input.h             the input decoding both readers share, the memo, the limits of a load
//   pickle_direct_reader.cc    DirectReader, the one-pass reader every dump takes
//   pickle_graph_reader.cc     GraphReader, for any pickle and every error
#include "core/pickle.h"

#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"
#include "core/pickle_internal.h"

namespace tandem::pickle {
namespace {

[[noreturn]] void wrong_type(const char* expected, const Value& got) {
  fail(ErrorCode::kFormat, "expected {}, got {}", expected, got.type_name());
}

}  // namespace

bool Value::as_bool() const {
  if (!is_bool()) wrong_type("bool", *this);
  return std::get<bool>(v);
}

int64_t Value::as_int() const {
  if (const auto* big = std::get_if<BigInt>(&v))
    fail(ErrorCode::kFormat, "integer {} does not fit in 64 bits", big->decimal());
  if (!is_int()) wrong_type("int", *this);
  return std::get<int64_t>(v);
}

std::string BigInt::decimal() const {
  if (bytes.size() > 64) return fmt::format("of {} bytes", bytes.size());
  const bool negative = !bytes.empty() && (static_cast<uint8_t>(bytes.back()) & 0x80) != 0;
  // The magnitude, little-endian base 256 (two's complement negated: invert, add one).
  std::vector<uint8_t> magnitude(bytes.begin(), bytes.end());
  if (negative) {
    unsigned carry = 1;
    for (uint8_t& byte : magnitude) {
      const unsigned sum = static_cast<uint8_t>(~byte) + carry;
      byte = static_cast<uint8_t>(sum & 0xff);
      carry = sum >> 8;
    }
  }
  // Long division by 10, most significant byte first, for each digit.
  std::string digits;
  do {
    unsigned remainder = 0;
    bool nonzero = false;
    for (size_t i = magnitude.size(); i-- > 0;) {
      const unsigned current = (remainder << 8) | magnitude[i];
      magnitude[i] = static_cast<uint8_t>(current / 10);
      remainder = current % 10;
      nonzero = nonzero || magnitude[i] != 0;
    }
    digits.push_back(static_cast<char>('0' + remainder));
    if (!nonzero) break;
  } while (true);
  if (negative) digits.push_back('-');
  return {digits.rbegin(), digits.rend()};
}

double Value::as_number() const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(v));
  if (!is_float()) wrong_type("float", *this);
  return std::get<double>(v);
}

const std::string& Value::as_string() const {
  if (!is_string()) wrong_type("str", *this);
  return std::get<std::string>(v);
}

const List& Value::as_list() const {
  if (is_tuple()) return std::get<Tuple>(v).items;
  if (!is_list()) wrong_type("list", *this);
  return std::get<List>(v);
}

const Dict& Value::as_dict() const {
  if (!is_dict()) wrong_type("dict", *this);
  return std::get<Dict>(v);
}

const Value* Value::find(std::string_view key) const {
  if (!is_dict()) return nullptr;
  for (const auto& [k, item] : std::get<Dict>(v)) {
    if (k.is_string() && std::get<std::string>(k.v) == key) return &item;
  }
  return nullptr;
}

const Value& Value::at(std::string_view key) const {
  const Value* item = find(key);
  if (item == nullptr) fail(ErrorCode::kFormat, "missing key '{}'", key);
  return *item;
}

std::string Value::type_name() const {
  static constexpr const char* kNames[] = {"None",  "bool", "int",  "float", "str",
                                           "bytes", "int",  "list", "tuple", "dict"};
  static_assert(std::size(kNames) == std::variant_size_v<decltype(v)>);
  return kNames[v.index()];
}

// Python objects have reference semantics: MEMOIZE/PUT remember an object (often an empty list
// that APPENDS fills later), GET and DUP push the same object again, and a memoized list may still
// grow after it went into another container. Two readers share the input decoding (Input, in
// pickle_input.h):
//
//   DirectReader  builds the Value in one pass on a stack of Values. Python's pickler memoizes
//                 every string and container but refers back (GET) only to strings, unless an
//                 object really is shared, so this is the path every dump takes. It gives up on a
//                 GET or DUP of a container, on anything malformed and near any limit.
//   GraphReader   reads any pickle: it builds a graph of the objects and turns it into a Value
//                 only at STOP, copying shared nodes, with a depth limit (which also catches
//                 self-references) and a memory budget. loads() runs it when DirectReader gives
//                 up, so every error and every shared structure gets GraphReader's answer.
Value loads(std::string_view bytes) { return loads(bytes, LoadOptions{}); }

Value loads(std::string_view bytes, const LoadOptions& options) {
  if (std::optional<Value> value = detail::read_direct(bytes, options)) return std::move(*value);
  return detail::read_graph(bytes, options);
}

}  // namespace tandem::pickle
