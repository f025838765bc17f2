#include "core/pickle.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <clocale>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <type_traits>
#include <unordered_map>

#include "core/error.h"

namespace tandem::pickle {
namespace {

// Every opcode Python knows (Lib/pickletools.py), so that a rejection names what it saw.
enum class Op : uint8_t {
  kMark = '(',
  kStop = '.',
  kPop = '0',
  kPopMark = '1',
  kDup = '2',
  kFloat = 'F',
  kInt = 'I',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kLong = 'L',
  kBinInt2 = 'M',
  kNone = 'N',
  kPersId = 'P',
  kBinPersId = 'Q',
  kReduce = 'R',
  kString = 'S',
  kBinString = 'T',
  kShortBinString = 'U',
  kUnicode = 'V',
  kBinUnicode = 'X',
  kAppend = 'a',
  kBuild = 'b',
  kGlobal = 'c',
  kDict = 'd',
  kEmptyDict = '}',
  kAppends = 'e',
  kGet = 'g',
  kBinGet = 'h',
  kInst = 'i',
  kLongBinGet = 'j',
  kList = 'l',
  kEmptyList = ']',
  kObj = 'o',
  kPut = 'p',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kEmptyTuple = ')',
  kSetItems = 'u',
  kBinFloat = 'G',
  kBinBytes = 'B',
  kShortBinBytes = 'C',
  kProto = 0x80,
  kNewObj = 0x81,
  kExt1 = 0x82,
  kExt2 = 0x83,
  kExt4 = 0x84,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kLong4 = 0x8b,
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kBinBytes8 = 0x8e,
  kEmptySet = 0x8f,
  kAddItems = 0x90,
  kFrozenSet = 0x91,
  kNewObjEx = 0x92,
  kStackGlobal = 0x93,
  kMemoize = 0x94,
  kFrame = 0x95,
  kByteArray8 = 0x96,
  kNextBuffer = 0x97,
  kReadonlyBuffer = 0x98,
};

const char* opcode_name(uint8_t code) {
  static constexpr std::pair<uint8_t, const char*> kNames[] = {
      {'(', "MARK"},          {'.', "STOP"},         {'0', "POP"},           {'1', "POP_MARK"},
      {'2', "DUP"},           {'F', "FLOAT"},        {'I', "INT"},           {'J', "BININT"},
      {'K', "BININT1"},       {'L', "LONG"},         {'M', "BININT2"},       {'N', "NONE"},
      {'P', "PERSID"},        {'Q', "BINPERSID"},    {'R', "REDUCE"},        {'S', "STRING"},
      {'T', "BINSTRING"},     {'U', "SHORT_BINSTRING"}, {'V', "UNICODE"},    {'X', "BINUNICODE"},
      {'a', "APPEND"},        {'b', "BUILD"},        {'c', "GLOBAL"},        {'d', "DICT"},
      {'}', "EMPTY_DICT"},    {'e', "APPENDS"},      {'g', "GET"},           {'h', "BINGET"},
      {'i', "INST"},          {'j', "LONG_BINGET"},  {'l', "LIST"},          {']', "EMPTY_LIST"},
      {'o', "OBJ"},           {'p', "PUT"},          {'q', "BINPUT"},        {'r', "LONG_BINPUT"},
      {'s', "SETITEM"},       {'t', "TUPLE"},        {')', "EMPTY_TUPLE"},   {'u', "SETITEMS"},
      {'G', "BINFLOAT"},      {'B', "BINBYTES"},     {'C', "SHORT_BINBYTES"}, {0x80, "PROTO"},
      {0x81, "NEWOBJ"},       {0x82, "EXT1"},        {0x83, "EXT2"},         {0x84, "EXT4"},
      {0x85, "TUPLE1"},       {0x86, "TUPLE2"},      {0x87, "TUPLE3"},       {0x88, "NEWTRUE"},
      {0x89, "NEWFALSE"},     {0x8a, "LONG1"},       {0x8b, "LONG4"},        {0x8c, "SHORT_BINUNICODE"},
      {0x8d, "BINUNICODE8"},  {0x8e, "BINBYTES8"},   {0x8f, "EMPTY_SET"},    {0x90, "ADDITEMS"},
      {0x91, "FROZENSET"},    {0x92, "NEWOBJ_EX"},   {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"},
      {0x95, "FRAME"},        {0x96, "BYTEARRAY8"},  {0x97, "NEXT_BUFFER"},  {0x98, "READONLY_BUFFER"},
  };
  for (const auto& [code_of, name_of] : kNames) {
    if (code_of == code) return name_of;
  }
  return "unknown";
}

constexpr uint8_t kHighestProtocol = 5;
// Containers nested deeper than this are rejected (Python's own limit is the recursion limit,
// also about 1000); it keeps every recursion over a loaded value shallow.
constexpr int kMaxDepth = 1000;
// Memo references (GET, DUP) share one object many times; copying it out can multiply the input.
// A load may use at most kMaxExpansion bytes of memory per input byte, plus a fixed allowance.
constexpr uint64_t kMaxExpansion = 256;
constexpr uint64_t kExpansionAllowanceBytes = uint64_t{64} << 20;

// ---------------------------------------------------------------------------------------------
// Writer
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Reading
//
// Python objects have reference semantics: MEMOIZE/PUT remember an object (often an empty list
// that APPENDS fills later), GET and DUP push the same object again, and a memoized list may still
// grow after it went into another container. Two readers share the input decoding below:
//
//   DirectReader  builds the Value in one pass on a stack of Values. Python's pickler memoizes
//                 every string and container but refers back (GET) only to strings, unless an
//                 object really is shared, so this is the path every dump takes. It gives up on a
//                 GET or DUP of a container, on anything malformed and near any limit.
//   GraphReader   reads any pickle: it builds a graph of the objects and turns it into a Value
//                 only at STOP, copying shared nodes, with a depth limit (which also catches
//                 self-references) and a memory budget. loads() runs it when DirectReader gives
//                 up, so every error and every shared structure gets GraphReader's answer.
// ---------------------------------------------------------------------------------------------

enum class Kind : uint8_t { kNone, kBool, kInt, kFloat, kString, kBytes, kBigInt, kList, kTuple, kDict };

// Text-like scalars: their payload is a view into the input (or into Input::decoded_).
constexpr bool has_text(Kind kind) { return kind == Kind::kString || kind == Kind::kBytes || kind == Kind::kBigInt; }

constexpr uint32_t kNoIndex = std::numeric_limits<uint32_t>::max();
// Indices are 32-bit: every input byte adds at most one node, stack entry, item or chunk, and
// protocol 0's decoded text is at most twice its input. Anything below 2 GiB fits.
constexpr uint64_t kMaxInputBytes = uint64_t{1} << 31;

void append_utf8(std::string& out, uint32_t code_point) {
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
uint64_t hash_bytes(size_t type, std::string_view bytes) {
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

// ---------------------------------------------------------------------------------------------
// GraphReader
//
// The graph lives in a few flat arrays indexed by uint32_t, so that reading allocates nothing per
// object and text stays a view into the input until STOP. A list or dict grows by chunks of items_:
// one per APPEND(S) or SETITEM(S), or its last chunk is extended when nothing came between. A
// tuple's items are one contiguous run (tuples never grow). [[1], 2], read as EMPTY_LIST
// EMPTY_LIST K(1) APPEND APPEND K(2) APPEND:
//
//   nodes_   0 list: chunks 1..1, 2 items     chunks_  0 items_[0, 1)  node 1's APPEND
//            1 list: chunks 0..0, 1 item               1 items_[1, 3)  node 0's APPENDs: the second
//            2 int 1                                                   extends the first
//            3 int 2
//   items_   [2 | 1 3]                        (a dict's chunks hold key, value, key, value, ...)
//
// Dict keys must be hashable, and two keys are equal when they pickle alike: the first time a node
// is used as a key it gets the id of its canonical bytes in an intern table (keys_), so repeated
// keys are found with one array lookup per key when a dict is copied out.
// ---------------------------------------------------------------------------------------------

struct Node {  // 24 bytes
  Kind kind = Kind::kNone;
  bool decoded = false;        // kString: the text is in decoded_, not in the input
  bool hashable = true;        // false for lists, dicts and tuples that hold one
  uint32_t key_id = kNoIndex;  // in keys_, once used as a dict key
  uint32_t first = kNoIndex;   // kString, kBytes, kBigInt: offset of the text; kTuple: first item in items_;
                               // kList, kDict: first chunk
  uint32_t count = 0;          // kString, kBytes, kBigInt: bytes; kList, kTuple: items; kDict: key-value
                               // pairs, repeated keys included
  uint64_t bits = 0;           // kBool, kInt, kFloat: the value; kList, kDict: last chunk
};

struct Chunk {
  uint32_t begin;  // in items_
  uint32_t count;
  uint32_t next = kNoIndex;
};

struct Key {  // one distinct dict key: its kind and canonical bytes (key_text_[offset, +length))
  uint64_t hash;
  uint64_t offset;
  uint64_t length;
  Kind kind;
};

class GraphReader : Input {
 public:
  GraphReader(std::string_view bytes, const LoadOptions& options)
      : Input(bytes),
        options_(options),
        memo_(dense_memo_keys()),
        budget_bytes_(kMaxExpansion * bytes.size() + kExpansionAllowanceBytes) {}

  Value run() {
    check_size();
    while (true) {
      const uint8_t code = next_opcode();
      if (static_cast<Op>(code) == Op::kStop) return finish();
      step(code);
    }
  }

 private:
  // --- stack ---

  // Values below the innermost MARK belong to an enclosing opcode; only mark opcodes reach them.
  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }

  [[noreturn]] void underflow() const { bad(fmt::format("pickle stack underflow in {}", opcode_name(opcode()))); }

  uint32_t top() const {
    if (stack_.size() <= fence()) underflow();
    return stack_.back();
  }

  // Pops the innermost MARK and returns the stack position it marked.
  size_t pop_mark() {
    if (marks_.empty()) bad(fmt::format("pickle {} without a MARK", opcode_name(opcode())));
    const size_t mark = marks_.back();
    marks_.pop_back();
    return mark;
  }

  // The container just below a MARK (APPENDS, SETITEMS) must sit above the enclosing fence.
  uint32_t container_below(size_t mark) const {
    if (mark == 0 || mark - 1 < fence()) underflow();
    return stack_[mark - 1];
  }

  // --- nodes ---

  uint32_t add_node(const Node& node) {
    nodes_.push_back(node);
    return static_cast<uint32_t>(nodes_.size() - 1);
  }

  void push_scalar(const Scalar& scalar) {
    Node node{.kind = scalar.kind, .bits = scalar.bits};
    if (has_text(scalar.kind)) {
      node.decoded = scalar.decoded;
      node.first = text_offset(scalar);
      node.count = static_cast<uint32_t>(scalar.text.size());
    }
    stack_.push_back(add_node(node));
  }

  std::string_view text(const Node& node) const { return text_at(node.decoded, node.first, node.count); }

  uint32_t add_container(Kind kind) { return add_node(Node{.kind = kind, .hashable = false, .bits = kNoIndex}); }

  // A list made of stack_[from, end), which is then removed.
  void push_list(size_t from) {
    const uint32_t list = add_container(Kind::kList);
    grow(list, from);
    stack_.resize(from);
    stack_.push_back(list);
  }

  // A tuple made of stack_[from, end), which is then removed.
  void push_tuple(size_t from) {
    Node tuple{.kind = Kind::kTuple,
               .first = static_cast<uint32_t>(items_.size()),
               .count = static_cast<uint32_t>(stack_.size() - from)};
    for (size_t i = from; i < stack_.size(); ++i) tuple.hashable = tuple.hashable && nodes_[stack_[i]].hashable;
    items_.insert(items_.end(), stack_.begin() + static_cast<ptrdiff_t>(from), stack_.end());
    stack_.resize(from);
    stack_.push_back(add_node(tuple));
  }

  void push_small_tuple(size_t count) {
    if (stack_.size() < fence() + count) underflow();
    push_tuple(stack_.size() - count);
  }

  // Appends stack_[from, end) to a list's or dict's items (the caller checked its kind).
  void grow(uint32_t container, size_t from) {
    const auto count = static_cast<uint32_t>(stack_.size() - from);
    if (count == 0) return;
    Node& node = nodes_[container];
    const auto last = static_cast<uint32_t>(node.bits);
    if (last != kNoIndex && chunks_[last].begin + chunks_[last].count == items_.size()) {
      chunks_[last].count += count;
    } else {
      const auto chunk = static_cast<uint32_t>(chunks_.size());
      chunks_.push_back(Chunk{.begin = static_cast<uint32_t>(items_.size()), .count = count});
      if (last == kNoIndex) {
        node.first = chunk;
      } else {
        chunks_[last].next = chunk;
      }
      node.bits = chunk;
    }
    node.count += node.kind == Kind::kDict ? count / 2 : count;
    items_.insert(items_.end(), stack_.begin() + static_cast<ptrdiff_t>(from), stack_.end());
  }

  const char* kind_name(uint32_t node) const {
    switch (nodes_[node].kind) {
      case Kind::kList: return "list";
      case Kind::kTuple: return "tuple";
      case Kind::kDict: return "dict";
      default: return "scalar";
    }
  }

  // --- containers ---

  // APPEND, APPENDS: stack_[from, end) go to the end of `list`.
  void append(uint32_t list, size_t from) {
    if (nodes_[list].kind != Kind::kList)
      bad(fmt::format("pickle {} to a {}", opcode_name(opcode()), kind_name(list)));
    grow(list, from);
    stack_.resize(from);
  }

  // SETITEM, SETITEMS, DICT: stack_[from, end) hold keys and values, alternating. Later values
  // replace earlier ones for an equal key, as in Python (sorted out when the dict is copied out).
  void set_items(uint32_t dict, size_t from) {
    if (nodes_[dict].kind != Kind::kDict)
      bad(fmt::format("pickle {} on a {}", opcode_name(opcode()), kind_name(dict)));
    if ((stack_.size() - from) % 2 != 0)
      bad(fmt::format("pickle {} with an odd number of items", opcode_name(opcode())));
    for (size_t i = from; i < stack_.size(); i += 2) {
      require_hashable(stack_[i]);
      key_id(stack_[i], 0);
    }
    grow(dict, from);
    stack_.resize(from);
  }

  // Keys must be immutable all the way down; the error names the first mutable container inside.
  void require_hashable(uint32_t key) const {
    if (nodes_[key].hashable) return;
    uint32_t mutable_node = key;
    while (nodes_[mutable_node].kind == Kind::kTuple) {  // a tuple is unhashable through an item
      const Node& tuple = nodes_[mutable_node];
      const uint32_t* items = items_.data() + tuple.first;
      mutable_node = *std::find_if(items, items + tuple.count, [&](uint32_t item) { return !nodes_[item].hashable; });
    }
    bad(fmt::format("unhashable pickle dict key of type {}", kind_name(mutable_node)));
  }

  [[noreturn]] void too_deep() const {
    bad(fmt::format("pickle nests containers deeper than {} (or contains itself)", kMaxDepth));
  }

  // The id of a hashable node's canonical bytes: kind, then the text, the value's bits, or a
  // tuple's item ids.
  uint32_t key_id(uint32_t index, int depth) {
    if (nodes_[index].key_id != kNoIndex) return nodes_[index].key_id;
    const Node& node = nodes_[index];
    uint32_t id = kNoIndex;
    switch (node.kind) {
      case Kind::kNone: id = intern(node.kind, {}); break;
      case Kind::kBool:
      case Kind::kInt:
      case Kind::kFloat:
        id = intern(node.kind, std::string_view(reinterpret_cast<const char*>(&node.bits), sizeof node.bits));
        break;
      case Kind::kString:
      case Kind::kBytes:
      case Kind::kBigInt:
        id = intern(node.kind, text(node));
        break;
      case Kind::kTuple: {
        if (depth >= kMaxDepth) too_deep();
        std::string item_ids;
        item_ids.reserve(node.count * sizeof(uint32_t));
        for (uint32_t i = 0; i < node.count; ++i) {
          const uint32_t item = key_id(items_[node.first + i], depth + 1);
          item_ids.append(reinterpret_cast<const char*>(&item), sizeof item);
        }
        id = intern(Kind::kTuple, item_ids);
        break;
      }
      default: bad("unhashable pickle dict key");  // require_hashable ran first
    }
    nodes_[index].key_id = id;
    return id;
  }

  // Open addressing, linear probing, at most half full.
  uint32_t intern(Kind kind, std::string_view bytes) {
    const uint64_t hash = hash_bytes(static_cast<size_t>(kind), bytes);
    if (2 * (keys_.size() + 1) > key_table_.size()) grow_key_table();
    const size_t mask = key_table_.size() - 1;
    for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
      const uint32_t id = key_table_[slot];
      if (id == kNoIndex) {
        key_table_[slot] = static_cast<uint32_t>(keys_.size());
        keys_.push_back(Key{.hash = hash, .offset = key_text_.size(), .length = bytes.size(), .kind = kind});
        key_text_.append(bytes);
        return key_table_[slot];
      }
      const Key& key = keys_[id];
      if (key.hash == hash && key.kind == kind && std::string_view(key_text_).substr(key.offset, key.length) == bytes)
        return id;
    }
  }

  void grow_key_table() {
    key_table_.assign(std::max<size_t>(64, 2 * key_table_.size()), kNoIndex);
    const size_t mask = key_table_.size() - 1;
    for (uint32_t id = 0; id < keys_.size(); ++id) {
      size_t slot = keys_[id].hash & mask;
      while (key_table_[slot] != kNoIndex) slot = (slot + 1) & mask;
      key_table_[slot] = id;
    }
  }

  // --- the opcodes ---

  void step(uint8_t code) {
    Scalar scalar;
    if (read_scalar(code, scalar)) {
      push_scalar(scalar);
      return;
    }
    uint64_t key = 0;
    switch (read_memo(code, key)) {
      case MemoOp::kMemoize: memo_.put(memo_.size(), top()); return;
      case MemoOp::kPut: memo_.put(key, top()); return;
      case MemoOp::kGet: {
        const uint32_t* node = memo_.find(key);
        if (node == nullptr) bad(fmt::format("pickle memo key {} missing", key));
        stack_.push_back(*node);
        return;
      }
      case MemoOp::kNone: break;
    }
    if (step_container(code) || step_stack(code) || read_framing(code)) return;
    unsupported(code);
  }

  bool step_container(uint8_t code) {
    switch (static_cast<Op>(code)) {
      case Op::kEmptyList: stack_.push_back(add_container(Kind::kList)); return true;
      case Op::kEmptyTuple: push_tuple(stack_.size()); return true;
      case Op::kEmptyDict: stack_.push_back(add_container(Kind::kDict)); return true;
      case Op::kList: push_list(pop_mark()); return true;
      case Op::kTuple: push_tuple(pop_mark()); return true;
      case Op::kTuple1: push_small_tuple(1); return true;
      case Op::kTuple2: push_small_tuple(2); return true;
      case Op::kTuple3: push_small_tuple(3); return true;
      case Op::kDict: {
        const size_t mark = pop_mark();
        const uint32_t dict = add_container(Kind::kDict);
        set_items(dict, mark);
        stack_.push_back(dict);
        return true;
      }
      case Op::kAppend:
        if (stack_.size() < fence() + 2) underflow();
        append(stack_[stack_.size() - 2], stack_.size() - 1);
        return true;
      case Op::kAppends: {
        const size_t mark = pop_mark();
        append(container_below(mark), mark);
        return true;
      }
      case Op::kSetItem:
        if (stack_.size() < fence() + 3) underflow();
        set_items(stack_[stack_.size() - 3], stack_.size() - 2);
        return true;
      case Op::kSetItems: {
        const size_t mark = pop_mark();
        set_items(container_below(mark), mark);
        return true;
      }
      default: return false;
    }
  }

  bool step_stack(uint8_t code) {
    switch (static_cast<Op>(code)) {
      case Op::kMark: marks_.push_back(stack_.size()); return true;
      case Op::kPop:
        // Like Python: with nothing above the innermost MARK, POP discards the mark itself.
        if (stack_.size() > fence()) {
          stack_.pop_back();
        } else {
          pop_mark();
        }
        return true;
      case Op::kPopMark: stack_.resize(pop_mark()); return true;
      case Op::kDup: stack_.push_back(top()); return true;
      default: return false;
    }
  }

  // --- STOP: the graph becomes a Value ---

  Value finish() {
    if (!marks_.empty()) bad("pickle STOP inside an unclosed MARK");
    if (stack_.size() != 1) bad(fmt::format("pickle STOP with {} values on the stack (expected 1)", stack_.size()));
    key_seen_in_.assign(keys_.size(), 0);
    key_slot_.resize(keys_.size());
    skipped_key_.assign(keys_.size(), false);
    for (const std::string& skip : options_.skip_keys) {
      for (size_t id = 0; id < keys_.size(); ++id) {
        const Key& key = keys_[id];
        if (key.kind == Kind::kString && std::string_view(key_text_).substr(key.offset, key.length) == skip) {
          skipped_key_[id] = true;
        }
      }
    }
    return materialize(stack_.back(), 0);
  }

  void charge(const Node& node) {
    spent_bytes_ += sizeof(Value);
    if (has_text(node.kind)) spent_bytes_ += node.count;
    if (spent_bytes_ > budget_bytes_) {
      bad(fmt::format("pickle expands to more than {} MiB in memory (through shared references)", budget_bytes_ >> 20));
    }
  }

  // `depth` counts the containers around this node.
  Value materialize(uint32_t index, int depth) {
    const Node& node = nodes_[index];  // nodes_ no longer grows: the reference stays valid
    charge(node);
    switch (node.kind) {
      case Kind::kNone: return None{};
      case Kind::kBool: return node.bits != 0;
      case Kind::kInt: return static_cast<int64_t>(node.bits);
      case Kind::kFloat: return std::bit_cast<double>(node.bits);
      case Kind::kString: return std::string(text(node));
      case Kind::kBytes: return Bytes{std::string(text(node))};
      case Kind::kBigInt:
        return BigInt{std::string(text(node))};
      default: break;
    }
    if (depth >= kMaxDepth) too_deep();
    if (node.kind == Kind::kDict) return materialize_dict(node, depth);
    List items;
    items.reserve(node.count);
    if (node.kind == Kind::kTuple) {
      for (uint32_t i = 0; i < node.count; ++i) items.push_back(materialize(items_[node.first + i], depth + 1));
      return Tuple{std::move(items)};
    }
    for (uint32_t chunk = node.first; chunk != kNoIndex; chunk = chunks_[chunk].next) {
      const Chunk& c = chunks_[chunk];
      for (uint32_t i = 0; i < c.count; ++i) {
        items.push_back(materialize(items_[c.begin + i], depth + 1));
        if (options_.list_item) options_.list_item(items.back());
      }
    }
    return items;
  }

  // First the distinct keys in the order they came, each with its last value (pairs_ from `base`
  // on), then their copies. pairs_ is a stack shared with the dicts inside, hence the indices.
  Value materialize_dict(const Node& node, int depth) {
    const size_t base = pairs_.size();
    const uint64_t dict_number = ++dicts_copied_;
    for (uint32_t chunk = node.first; chunk != kNoIndex; chunk = chunks_[chunk].next) {
      const Chunk& c = chunks_[chunk];
      for (uint32_t i = 0; i < c.count; i += 2) {
        const uint32_t key = items_[c.begin + i];
        const uint32_t value = items_[c.begin + i + 1];
        const uint32_t id = nodes_[key].key_id;  // set_items gave every key one
        if (skipped_key_[id]) continue;
        if (key_seen_in_[id] == dict_number) {
          pairs_[base + key_slot_[id]].second = value;
        } else {
          key_seen_in_[id] = dict_number;
          key_slot_[id] = static_cast<uint32_t>(pairs_.size() - base);
          pairs_.emplace_back(key, value);
        }
      }
    }
    const size_t end = pairs_.size();
    Dict dict;
    dict.reserve(end - base);
    for (size_t i = base; i < end; ++i) {
      const auto [key, value] = pairs_[i];
      Value key_value = materialize(key, depth + 1);
      dict.emplace_back(std::move(key_value), materialize(value, depth + 1));
    }
    pairs_.resize(base);
    return dict;
  }

  const LoadOptions& options_;
  // The graph.
  std::vector<Node> nodes_;
  std::vector<Chunk> chunks_;
  std::vector<uint32_t> items_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;  // stack sizes at each open MARK
  Memo<uint32_t> memo_;
  // Dict keys: canonical bytes -> id.
  std::vector<Key> keys_;
  std::string key_text_;
  std::vector<uint32_t> key_table_;  // key ids (kNoIndex: empty slot); the size is a power of two
  // STOP.
  std::vector<uint64_t> key_seen_in_;  // key id -> the number of the dict copy that last saw it
  std::vector<uint32_t> key_slot_;     // key id -> its position in that copy
  std::vector<bool> skipped_key_;      // key id -> one of options_.skip_keys
  uint64_t dicts_copied_ = 0;
  std::vector<std::pair<uint32_t, uint32_t>> pairs_;
  const uint64_t budget_bytes_;
  uint64_t spent_bytes_ = 0;
};

// ---------------------------------------------------------------------------------------------
// DirectReader
//
// Builds the Value on a stack of Values as the opcodes come: what APPENDS or SETITEMS add goes
// straight into the list or dict below the MARK. The memo keeps where a string's text lies (or a
// scalar's bits), so a GET copies it from there, and a snapshot of each memoized list, dict or
// tuple as it was when memoized, which a GET copies. A copy is Python's sharing as long as neither
// the original nor the copy changes afterwards, which holds for what picklers write:
//   - Python's pickler memoizes a list or dict while it is still empty, fills it, and refers back
//     to one only when an object really is shared (tuples: whenever one is used twice);
//   - PyTorch's pickler refers back to any list or dict used twice (a dump's stack frames), and
//     memoizes it once it is complete.
// A container can only change while it is on the stack (one moved into another can be reached
// again only through a GET, which gives a copy): so changing one whose snapshot was fetched, or a
// fetched copy, gives up, and changing one whose snapshot was not fetched marks that stale.
// It gives up, and loads() hands the input to GraphReader, on:
//   - a GET of a stale snapshot, a change as above, or a DUP of a container (only GraphReader
//     gives Python's sharing in general);
//   - anything malformed (GraphReader words the error);
//   - a value nesting more than kMaxDepth containers, or a dict key that is not hashable;
//   - more memory than GraphReader's budget: every value built is charged, so this reader never
//     accepts what GraphReader would refuse;
//   - a dict filled by many SETITEM(S) (protocol 0 writes one per key): each one hashes the keys
//     already there again, which must not cost more than one value per input byte in all.
// ---------------------------------------------------------------------------------------------

struct GiveUp {};  // thrown and caught inside DirectReader

// The variant indices of Value::v.
constexpr size_t kStringIndex = 4;
constexpr size_t kBytesIndex = 5;
constexpr size_t kBigIntIndex = 6;
constexpr size_t kFirstContainerIndex = 7;  // List, Tuple, Dict
static_assert(std::is_same_v<std::variant_alternative_t<kStringIndex, decltype(Value::v)>, std::string>);
static_assert(std::is_same_v<std::variant_alternative_t<kBytesIndex, decltype(Value::v)>, Bytes>);
static_assert(std::is_same_v<std::variant_alternative_t<kBigIntIndex, decltype(Value::v)>, BigInt>);
static_assert(std::is_same_v<std::variant_alternative_t<kFirstContainerIndex, decltype(Value::v)>, List>);

class DirectReader : Input {
 public:
  DirectReader() : Input({}) {}

  // The value, or nullopt when GraphReader must read the input. The reader can be used again: it
  // keeps its arrays' memory (up to kMaxKeptBytes), as reading many dumps in a row would otherwise
  // map and fault in fresh pages for each (glibc hands large freed blocks back to the system).
  std::optional<Value> read(std::string_view bytes, const LoadOptions& options) {
    options_ = &options;
    clear(bytes);
    std::optional<Value> value;
    try {
      value = run();
    } catch (const GiveUp&) {
    } catch (const Error&) {
    }
    clear({});
    if (kept_bytes() > kMaxKeptBytes) *this = DirectReader();
    return value;
  }

 private:
  static constexpr size_t kMaxKeptBytes = size_t{64} << 20;

  Value run() {
    check_size();
    while (true) {
      const uint8_t code = next_opcode();
      if (static_cast<Op>(code) == Op::kStop) return finish();
      step(code);
    }
  }

  // Ready for `bytes` (also after an exception, such as bad_alloc, left values behind).
  void clear(std::string_view bytes) {
    reset(bytes);
    stack_.clear();
    marks_.clear();
    mark_skips_.clear();
    memo_.clear(dense_memo_keys());
    snapshots_.clear();
    reindexed_values_ = 0;
    budget_bytes_ = kMaxExpansion * bytes.size() + kExpansionAllowanceBytes;
    spent_bytes_ = 0;
  }

  size_t kept_bytes() const {
    return decoded_.capacity() + stack_.capacity() * sizeof(Slot) + marks_.capacity() * sizeof(size_t) +
           mark_skips_.capacity() + memo_.kept_bytes() + snapshots_.capacity() * sizeof(Snapshot) +
           key_table_.capacity() * sizeof(uint32_t) + key_hashes_.capacity() * sizeof(uint64_t);
  }

  // A value on the stack, with what the memo and dict keys need to know of it.
  struct Slot {
    Value value;
    uint32_t height = 0;       // containers nested in `value`, itself included
    uint32_t text_offset = 0;  // a string's or bytes' text, in the input or in decoded_
    uint32_t snapshot = kNoIndex;  // a container's latest snapshot in snapshots_, once memoized
    bool decoded = false;
    bool hashed = false;  // `hash` is known
    bool fetched = false;  // a copy of a snapshot: changing it would not change what it copies
    bool skipped = false;  // a placeholder (None) for a part of a skipped value, not built
    uint64_t hash = 0;    // as a dict key
  };

  // A memoized list, dict or tuple as it was when memoized.
  struct Snapshot {
    Value value;
    uint32_t height = 0;
    bool stale = false;    // the container changed since
    bool fetched = false;  // a GET copied it
  };

  // Remembered::type of a container inside a skipped value: it was never built.
  static constexpr uint8_t kSkippedType = std::numeric_limits<uint8_t>::max();

  // What the memo keeps of a value.
  struct Remembered {     // 16 bytes: a memo holds one per memoized object
    uint64_t bits = 0;    // a scalar's value, text's offset, or a container's index in snapshots_
    uint32_t length = 0;  // text's
    uint8_t type = 0;     // the index in Value::v, or kSkippedType
    bool decoded = false;
  };

  [[noreturn]] static void give_up() { throw GiveUp{}; }

  static size_t text_size(const Value& value) {
    if (const auto* text = std::get_if<std::string>(&value.v)) return text->size();
    if (const auto* bytes = std::get_if<Bytes>(&value.v)) return bytes->data.size();
    if (const auto* big = std::get_if<BigInt>(&value.v)) return big->bytes.size();
    return 0;
  }

  // What a copy of `value` is charged: sizeof(Value) and the text of each value in it.
  static uint64_t copy_bytes(const Value& value) {
    uint64_t bytes = sizeof(Value) + text_size(value);
    if (const auto* tuple = std::get_if<Tuple>(&value.v)) {
      for (const Value& item : tuple->items) bytes += copy_bytes(item);
    } else if (const auto* list = std::get_if<List>(&value.v)) {
      for (const Value& item : *list) bytes += copy_bytes(item);
    } else if (const auto* dict = std::get_if<Dict>(&value.v)) {
      for (const auto& [key, item] : *dict) bytes += copy_bytes(key) + copy_bytes(item);
    }
    return bytes;
  }

  void charge(uint64_t bytes) {
    spent_bytes_ += bytes;
    if (spent_bytes_ > budget_bytes_) give_up();
  }

  // --- stack ---

  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }

  Slot& top() {
    if (stack_.size() <= fence()) give_up();
    return stack_.back();
  }

  size_t pop_mark() {
    if (marks_.empty()) give_up();
    const size_t mark = marks_.back();
    marks_.pop_back();
    mark_skips_.pop_back();
    return mark;
  }

  // --- skipped values (LoadOptions::skip_keys) ---
  //
  // A dict value under a skipped key is read as placeholders: its containers, and everything a
  // GET fetches inside it, are one None slot marked `skipped`, and what APPEND(S) or SETITEM(S)
  // add to a placeholder is dropped. Scalars inside are read as usual (the memo may hand them out
  // again). Where a value starts, the key is on top of the stack:
  //
  //   SETITEMS:  [.. dict MARK key value key]  an odd count above the MARK, a dict below it
  //   SETITEM:   [.. dict key]
  //
  // and from there on, a container starting while a placeholder is on top (a list's single item
  // added by APPEND) or inside a MARK opened over one is part of the skipped value. A placeholder
  // may only end up as the value of a skipped key: anywhere else (a list item, a key, the
  // result) this reader gives up, and GraphReader, which skips when it copies dicts out, answers.

  bool is_skip_key(const Value& key) const {
    const auto* text = std::get_if<std::string>(&key.v);
    return text != nullptr &&
           std::find(options_->skip_keys.begin(), options_->skip_keys.end(), *text) != options_->skip_keys.end();
  }

  bool in_skipped_region() const { return !mark_skips_.empty() && mark_skips_.back() != 0; }

  // Whether a container (or a MARK) starting now is part of a skipped value.
  bool starts_skipped() const {
    if (in_skipped_region()) return true;
    if (stack_.size() <= fence()) return false;
    const Slot& top = stack_.back();
    if (top.skipped) return true;
    if (!is_skip_key(top.value)) return false;
    const size_t count = stack_.size() - fence();
    if (!marks_.empty() && fence() >= 1 && std::holds_alternative<Dict>(stack_[fence() - 1].value.v)) {
      return count % 2 == 1;
    }
    return count >= 2 && std::holds_alternative<Dict>(stack_[stack_.size() - 2].value.v);
  }

  void push_skipped() { stack_.push_back(Slot{.skipped = true}); }

  // APPEND(S), SETITEM(S) into a placeholder: the items at [from, end) are dropped.
  bool dropped_into_skipped(size_t container, size_t from) {
    if (container >= stack_.size() || !stack_[container].skipped) return false;
    stack_.resize(from);
    return true;
  }

  // The container just below a MARK, of variant type T.
  template <typename T>
  Slot& container_below(size_t mark) {
    if (mark == 0 || mark - 1 < fence() || !std::holds_alternative<T>(stack_[mark - 1].value.v)) give_up();
    return stack_[mark - 1];
  }

  void push_scalar(const Scalar& scalar) {
    Slot& slot = stack_.emplace_back();
    switch (scalar.kind) {
      case Kind::kNone: break;
      case Kind::kBool: slot.value.v = scalar.bits != 0; break;
      case Kind::kInt: slot.value.v = static_cast<int64_t>(scalar.bits); break;
      case Kind::kFloat: slot.value.v = std::bit_cast<double>(scalar.bits); break;
      case Kind::kString: slot.value.v.emplace<std::string>(scalar.text); break;
      case Kind::kBytes: slot.value.v.emplace<Bytes>(Bytes{std::string(scalar.text)}); break;
      case Kind::kBigInt:
        slot.value.v.emplace<BigInt>(BigInt{std::string(scalar.text)});
        break;
      default: give_up();
    }
    if (has_text(scalar.kind)) {
      slot.text_offset = text_offset(scalar);
      slot.decoded = scalar.decoded;
    }
    charge(sizeof(Value) + scalar.text.size());
  }

  void push_container(Value container) {
    stack_.push_back(Slot{.value = std::move(container), .height = 1});
    charge(sizeof(Value));
  }

  // The items stack_[from, end) moved into `items`, and removed; the height of their container.
  uint32_t take_items(List& items, size_t from) {
    for (size_t i = from; i < stack_.size(); ++i) {
      if (stack_[i].skipped) give_up();
    }
    uint32_t height = 1;
    if (items.capacity() < items.size() + (stack_.size() - from))
      items.reserve(std::max(items.size() + (stack_.size() - from), 2 * items.capacity()));
    for (size_t i = from; i < stack_.size(); ++i) {
      height = std::max(height, stack_[i].height + 1);
      items.push_back(std::move(stack_[i].value));
    }
    if (height > kMaxDepth) give_up();
    stack_.resize(from);
    return height;
  }

  void push_list(size_t from) {
    Slot list{.value = List{}};
    list.height = take_items(std::get<List>(list.value.v), from);
    hand_to_caller(std::get<List>(list.value.v), 0);
    stack_.push_back(std::move(list));
    charge(sizeof(Value));
  }

  // LoadOptions::list_item for the items from `first` on.
  void hand_to_caller(List& items, size_t first) {
    if (!options_->list_item) return;
    for (size_t i = first; i < items.size(); ++i) options_->list_item(items[i]);
  }

  void push_tuple(size_t from) {
    List items;
    const uint32_t height = take_items(items, from);
    stack_.push_back(Slot{.value = Tuple{std::move(items)}, .height = height});
    charge(sizeof(Value));
  }

  void push_small_tuple(size_t count) {
    if (stack_.size() < fence() + count) give_up();
    push_tuple(stack_.size() - count);
  }

  void append(Slot& list, size_t from) {
    before_change(list);
    List& items = std::get<List>(list.value.v);
    const size_t first = items.size();
    list.height = std::max(list.height, take_items(items, from));
    hand_to_caller(items, first);
  }

  // See the top: a change must not make a copy differ from what it copies.
  void before_change(Slot& container) {
    if (container.fetched) give_up();
    if (container.snapshot == kNoIndex) return;
    Snapshot& snapshot = snapshots_[container.snapshot];
    if (snapshot.fetched) give_up();
    snapshot.stale = true;
  }

  // --- dicts ---

  // As GraphReader's keys: equal when they pickle alike (floats by their bits).
  static bool same_key(const Value& a, const Value& b) {
    if (a.v.index() != b.v.index()) return false;
    if (const auto* x = std::get_if<double>(&a.v)) return std::bit_cast<uint64_t>(*x) == std::bit_cast<uint64_t>(std::get<double>(b.v));
    if (const auto* x = std::get_if<Tuple>(&a.v)) {
      const List& y = std::get<Tuple>(b.v).items;
      if (x->items.size() != y.size()) return false;
      for (size_t i = 0; i < y.size(); ++i) {
        if (!same_key(x->items[i], y[i])) return false;
      }
      return true;
    }
    return a == b;  // None, bool, int, str, bytes
  }

  // Gives up on a list or dict (unhashable), which GraphReader reports. `visited` counts the values
  // hashed.
  static uint64_t key_hash(const Value& key, uint64_t& visited) {
    ++visited;
    switch (key.v.index()) {
      case kStringIndex: return hash_bytes(kStringIndex, std::get<std::string>(key.v));
      case kBytesIndex: return hash_bytes(kBytesIndex, std::get<Bytes>(key.v).data);
      case kBigIntIndex:
        return hash_bytes(kBigIntIndex, std::get<BigInt>(key.v).bytes);
      default: break;
    }
    if (const auto* tuple = std::get_if<Tuple>(&key.v)) {
      std::string item_hashes;
      for (const Value& item : tuple->items) {
        const uint64_t hash = key_hash(item, visited);
        item_hashes.append(reinterpret_cast<const char*>(&hash), sizeof hash);
      }
      return hash_bytes(key.v.index(), item_hashes);
    }
    if (key.v.index() >= kFirstContainerIndex) give_up();
    const uint64_t bits = scalar_bits(key);
    return hash_bytes(key.v.index(), std::string_view(reinterpret_cast<const char*>(&bits), sizeof bits));
  }

  static uint64_t scalar_bits(const Value& value) {
    if (const auto* b = std::get_if<bool>(&value.v)) return *b ? 1 : 0;
    if (const auto* i = std::get_if<int64_t>(&value.v)) return static_cast<uint64_t>(*i);
    if (const auto* d = std::get_if<double>(&value.v)) return std::bit_cast<uint64_t>(*d);
    return 0;  // None
  }

  uint64_t slot_hash(Slot& key) {
    if (!key.hashed) {
      uint64_t visited = 0;  // at most what the key's building was charged for
      key.hash = key_hash(key.value, visited);
      key.hashed = true;
    }
    return key.hash;
  }

  // SETITEM, SETITEMS, DICT: stack_[from, end) hold keys and values, alternating. A later value
  // replaces the earlier one for an equal key, which keeps its place, as in Python. The keys are
  // found through key_table_ (open addressing, at most half full), rebuilt for each call.
  void set_items(Slot& target, size_t from) {
    if ((stack_.size() - from) % 2 != 0) give_up();
    before_change(target);
    Dict& dict = std::get<Dict>(target.value.v);
    const size_t existing = dict.size();
    size_t added = 0;  // the pairs kept
    for (size_t i = from; i < stack_.size(); i += 2) added += is_skip_key(stack_[i].value) ? 0 : 1;
    size_t table_size = 16;
    while (table_size < 2 * (existing + added)) table_size *= 2;
    const size_t mask = table_size - 1;
    key_table_.assign(table_size, kNoIndex);
    key_hashes_.clear();
    const auto insert = [&](uint64_t hash, const Value& key) -> std::pair<uint32_t, bool> {
      for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
        const uint32_t index = key_table_[slot];
        if (index == kNoIndex) {
          key_table_[slot] = static_cast<uint32_t>(key_hashes_.size());
          key_hashes_.push_back(hash);
          return {key_table_[slot], true};
        }
        if (key_hashes_[index] == hash && same_key(dict[index].first, key)) return {index, false};
      }
    };
    for (const auto& [key, unused] : dict) {
      insert(key_hash(key, reindexed_values_), key);
      if (reindexed_values_ > in_.size()) give_up();
    }
    if (dict.capacity() < existing + added) dict.reserve(std::max(existing + added, 2 * dict.capacity()));
    for (size_t i = from; i < stack_.size(); i += 2) {
      Slot& key = stack_[i];
      Slot& value = stack_[i + 1];
      if (key.skipped) give_up();
      if (is_skip_key(key.value)) continue;
      if (value.skipped) give_up();
      target.height = std::max({target.height, key.height + 1, value.height + 1});
      const auto [index, inserted] = insert(slot_hash(key), key.value);
      if (inserted) {
        dict.emplace_back(std::move(key.value), std::move(value.value));
      } else {
        dict[index].second = std::move(value.value);
      }
    }
    if (target.height > kMaxDepth) give_up();
    stack_.resize(from);
  }

  // --- memo ---

  Remembered remember(Slot& slot) {
    if (slot.skipped) return Remembered{.type = kSkippedType};
    Remembered remembered{.type = static_cast<uint8_t>(slot.value.v.index())};
    if (remembered.type >= kFirstContainerIndex) {
      // Memoized again: the earlier snapshot is as good only until the next change.
      if (slot.snapshot != kNoIndex) snapshots_[slot.snapshot].stale = true;
      charge(copy_bytes(slot.value));
      slot.snapshot = static_cast<uint32_t>(snapshots_.size());
      snapshots_.push_back(Snapshot{.value = slot.value, .height = slot.height});
      remembered.bits = slot.snapshot;
      return remembered;
    }
    if (const auto* text = std::get_if<std::string>(&slot.value.v)) {
      remembered.length = static_cast<uint32_t>(text->size());
    } else if (const auto* bytes = std::get_if<Bytes>(&slot.value.v)) {
      remembered.length = static_cast<uint32_t>(bytes->data.size());
    } else if (const auto* big = std::get_if<BigInt>(&slot.value.v)) {
      remembered.length = static_cast<uint32_t>(big->bytes.size());
    } else {
      remembered.bits = scalar_bits(slot.value);
      return remembered;
    }
    remembered.bits = slot.text_offset;
    remembered.decoded = slot.decoded;
    return remembered;
  }

  void push_remembered(const Remembered& remembered) {
    if (remembered.type >= kFirstContainerIndex) {
      Snapshot& snapshot = snapshots_[remembered.bits];
      if (snapshot.stale) give_up();
      snapshot.fetched = true;
      charge(copy_bytes(snapshot.value));
      stack_.push_back(Slot{.value = snapshot.value, .height = snapshot.height, .fetched = true});
      return;
    }
    Slot& slot = stack_.emplace_back();
    const uint64_t bits = remembered.bits;
    switch (remembered.type) {
      case 0: break;  // None
      case 1: slot.value.v = bits != 0; break;
      case 2: slot.value.v = static_cast<int64_t>(bits); break;
      case 3: slot.value.v = std::bit_cast<double>(bits); break;
      default: {
        const std::string_view text = text_at(remembered.decoded, static_cast<uint32_t>(bits), remembered.length);
        if (remembered.type == kStringIndex) {
          slot.value.v.emplace<std::string>(text);
        } else if (remembered.type == kBytesIndex) {
          slot.value.v.emplace<Bytes>(Bytes{std::string(text)});
        } else {
          slot.value.v.emplace<BigInt>(BigInt{std::string(text)});
        }
        slot.text_offset = static_cast<uint32_t>(bits);
        slot.decoded = remembered.decoded;
      }
    }
    charge(sizeof(Value) + remembered.length);
  }

  // --- the opcodes ---

  void step(uint8_t code) {
    Scalar scalar;
    if (read_scalar(code, scalar)) {
      push_scalar(scalar);
      return;
    }
    uint64_t key = 0;
    switch (read_memo(code, key)) {
      case MemoOp::kMemoize: memo_.put(memo_.size(), remember(top())); return;
      case MemoOp::kPut: memo_.put(key, remember(top())); return;
      case MemoOp::kGet: {
        const Remembered* remembered = memo_.find(key);
        if (remembered == nullptr) give_up();
        const bool container = remembered->type >= kFirstContainerIndex;  // kSkippedType too
        if (in_skipped_region() || (container && starts_skipped())) {
          push_skipped();
        } else if (remembered->type == kSkippedType) {
          give_up();
        } else {
          push_remembered(*remembered);
        }
        return;
      }
      case MemoOp::kNone: break;
    }
    if (step_container(code) || step_stack(code) || read_framing(code)) return;
    give_up();
  }

  bool step_container(uint8_t code) {
    switch (static_cast<Op>(code)) {
      case Op::kEmptyList:
      case Op::kEmptyTuple:
      case Op::kEmptyDict:
        if (starts_skipped()) {
          push_skipped();
        } else if (static_cast<Op>(code) == Op::kEmptyList) {
          push_container(List{});
        } else if (static_cast<Op>(code) == Op::kEmptyTuple) {
          push_container(Tuple{});
        } else {
          push_container(Dict{});
        }
        return true;
      case Op::kList:
      case Op::kTuple:
      case Op::kDict:
        if (in_skipped_region()) {
          stack_.resize(pop_mark());
          push_skipped();
          return true;
        }
        break;
      case Op::kTuple1:
      case Op::kTuple2:
      case Op::kTuple3: {
        const size_t count = code - static_cast<uint8_t>(Op::kTuple1) + 1;
        if (stack_.size() < fence() + count) give_up();
        if (in_skipped_region() || std::any_of(stack_.end() - static_cast<ptrdiff_t>(count), stack_.end(),
                                               [](const Slot& item) { return item.skipped; })) {
          stack_.resize(stack_.size() - count);
          push_skipped();
          return true;
        }
        break;
      }
      case Op::kAppend:
      case Op::kSetItem: {
        const size_t items = static_cast<Op>(code) == Op::kAppend ? 1 : 2;
        if (stack_.size() < fence() + items + 1) give_up();
        if (dropped_into_skipped(stack_.size() - items - 1, stack_.size() - items)) return true;
        break;
      }
      case Op::kAppends:
      case Op::kSetItems: {
        if (marks_.empty()) give_up();
        const size_t mark = marks_.back();
        if (mark >= 1 && (marks_.size() < 2 || mark - 1 >= marks_[marks_.size() - 2]) && stack_[mark - 1].skipped) {
          pop_mark();
          stack_.resize(mark);
          return true;
        }
        break;
      }
      default:
        break;
    }
    switch (static_cast<Op>(code)) {
      case Op::kList: push_list(pop_mark()); return true;
      case Op::kTuple: push_tuple(pop_mark()); return true;
      case Op::kTuple1: push_small_tuple(1); return true;
      case Op::kTuple2: push_small_tuple(2); return true;
      case Op::kTuple3: push_small_tuple(3); return true;
      case Op::kDict: {
        const size_t mark = pop_mark();
        Slot dict{.value = Dict{}, .height = 1};
        set_items(dict, mark);
        stack_.push_back(std::move(dict));
        charge(sizeof(Value));
        return true;
      }
      case Op::kAppend:
        if (stack_.size() < fence() + 2) give_up();
        append(container_below<List>(stack_.size() - 1), stack_.size() - 1);
        return true;
      case Op::kAppends: {
        const size_t mark = pop_mark();
        append(container_below<List>(mark), mark);
        return true;
      }
      case Op::kSetItem:
        if (stack_.size() < fence() + 3) give_up();
        set_items(container_below<Dict>(stack_.size() - 2), stack_.size() - 2);
        return true;
      case Op::kSetItems: {
        const size_t mark = pop_mark();
        set_items(container_below<Dict>(mark), mark);
        return true;
      }
      default: return false;
    }
  }

  bool step_stack(uint8_t code) {
    switch (static_cast<Op>(code)) {
      case Op::kMark:
        mark_skips_.push_back(starts_skipped() ? 1 : 0);
        marks_.push_back(stack_.size());
        return true;
      case Op::kPop:
        if (stack_.size() > fence()) {
          stack_.pop_back();
        } else {
          pop_mark();
        }
        return true;
      case Op::kPopMark: stack_.resize(pop_mark()); return true;
      case Op::kDup: {
        if (top().value.v.index() >= kFirstContainerIndex) give_up();
        Slot copy = stack_.back();
        charge(sizeof(Value) + text_size(copy.value));
        stack_.push_back(std::move(copy));
        return true;
      }
      default: return false;
    }
  }

  Value finish() {
    if (!marks_.empty() || stack_.size() != 1 || stack_.back().skipped) give_up();
    return std::move(stack_.back().value);
  }

  std::vector<Slot> stack_;
  std::vector<size_t> marks_;  // stack sizes at each open MARK
  std::vector<uint8_t> mark_skips_;  // per open MARK: 1 when it opened inside a skipped value
  Memo<Remembered> memo_;
  std::vector<Snapshot> snapshots_;
  std::vector<uint32_t> key_table_;  // set_items: dict positions (kNoIndex: empty slot)
  std::vector<uint64_t> key_hashes_;  // set_items: each dict position's key hash
  uint64_t reindexed_values_ = 0;  // key values hashed again by set_items
  uint64_t budget_bytes_ = 0;
  uint64_t spent_bytes_ = 0;
  const LoadOptions* options_ = nullptr;
};

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

std::string dumps(const Value& value) {
  std::string out;
  put_op(out, Op::kProto);
  out.push_back(2);
  write_value(out, value);
  put_op(out, Op::kStop);
  return out;
}

Value loads(std::string_view bytes) { return loads(bytes, LoadOptions{}); }

Value loads(std::string_view bytes, const LoadOptions& options) {
  thread_local DirectReader direct;  // reused: see DirectReader::read
  if (std::optional<Value> value = direct.read(bytes, options)) return std::move(*value);
  return GraphReader(bytes, options).run();
}

}  // namespace tandem::pickle
