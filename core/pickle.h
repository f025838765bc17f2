// A small pickle writer and reader for the plain types flight-recorder dumps and memory snapshots
// use: None, bool, int (of any size), float, str, bytes, list, tuple and dict. The writer emits
// protocol 2 (what PyTorch's dumps use, so Python's pickle and torchfrtrace read ours); the reader
// accepts protocols 0-5 for these types (what Python writes for them by default), and rejects
// anything else (classes, globals, reduce) with Error(kFormat) naming the byte offset. No Python
// at run time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tandem::pickle {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<Value, Value>>;  // insertion order, as Python keeps it

struct None {
  bool operator==(const None&) const = default;
};
struct Tuple {
  List items;
  bool operator==(const Tuple&) const = default;
};
struct Bytes {
  std::string data;
  bool operator==(const Bytes&) const = default;
};
// An int that does not fit in int64_t (PyTorch writes SIZE_MAX, 2^64 - 1, for an unknown line
// number): kept unparsed as Python's LONG1 payload, little-endian two's complement, shortest form.
struct BigInt {
  std::string bytes;
  bool operator==(const BigInt&) const = default;
  std::string decimal() const;  // "18446744073709551615"; "of N bytes" past 64 bytes
};

struct Value {
  std::variant<None, bool, int64_t, double, std::string, Bytes, BigInt, List, Tuple, Dict> v;

  Value() = default;
  Value(None) {}
  Value(bool b) : v(b) {}
  Value(int i) : v(int64_t{i}) {}
  Value(int64_t i) : v(i) {}
  Value(uint64_t i) : v(static_cast<int64_t>(i)) {}
  Value(double d) : v(d) {}
  Value(const char* s) : v(std::string(s)) {}
  Value(std::string s) : v(std::move(s)) {}
  Value(Bytes b) : v(std::move(b)) {}
  Value(BigInt i) : v(std::move(i)) {}
  Value(List l) : v(std::move(l)) {}
  Value(Tuple t) : v(std::move(t)) {}
  Value(Dict d) : v(std::move(d)) {}

  bool is_none() const { return std::holds_alternative<None>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }  // false for a BigInt
  bool is_big_int() const { return std::holds_alternative<BigInt>(v); }
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_list() const { return std::holds_alternative<List>(v); }
  bool is_tuple() const { return std::holds_alternative<Tuple>(v); }
  bool is_dict() const { return std::holds_alternative<Dict>(v); }

  // Typed access; each throws Error(kFormat) "expected <type>, got <type>" on a mismatch, and
  // as_int() "integer 18446744073709551615 does not fit in 64 bits" on a BigInt.
  bool as_bool() const;
  int64_t as_int() const;
  double as_number() const;  // int or float
  const std::string& as_string() const;
  const List& as_list() const;  // a list, or a tuple's items
  const Dict& as_dict() const;

  // Dict lookup by string key: nullptr when absent (or when this is not a dict).
  const Value* find(std::string_view key) const;
  // Dict lookup by string key; throws Error(kFormat) "missing key '<key>'" when absent.
  const Value& at(std::string_view key) const;

  std::string type_name() const;  // "None", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict"
                                  // (a BigInt is an "int")
  bool operator==(const Value&) const = default;
};

// Protocol 2: PROTO 2 ... STOP, plain-type opcodes only. Bytes are written with protocol 3's
// SHORT_BINBYTES / BINBYTES (protocol 2 itself would need a GLOBAL), which Python reads anyway.
std::string dumps(const Value& value);

// What loads() leaves out, and what it hands its caller as it reads.
struct LoadOptions {
  // A dict entry whose key is one of these strings is left out of its dict, and its value is not
  // built: for the large parts of a file that its reader does not use (a memory snapshot's stack
  // frames, hundreds of bytes in memory per byte of pickle once built). The value's opcodes are
  // still read, so a malformed one is still an error.
  std::vector<std::string> skip_keys;
  // Called with each item as a list receives it (tuples' items aside), in the order of the
  // pickle, once per copy of a shared one; it may replace the item, e.g. by a small stand-in for
  // what the caller took from it, so that a long list of records need not be held as Values.
  std::function<void(Value& item)> list_item;
};

// Parses one pickle. Throws Error(kFormat) with the offset and what was wrong ("truncated pickle
// (no STOP) at byte 123", "unsupported pickle opcode 0x63 (GLOBAL) at byte 4"). Shared references
// (memo, DUP) come back as copies; nesting deeper than 1000 containers and self-references are
// rejected, and so is a pickle whose copies would take far more memory than its size (or of 2 GiB
// or more).
Value loads(std::string_view bytes);
Value loads(std::string_view bytes, const LoadOptions& options);

}  // namespace tandem::pickle
