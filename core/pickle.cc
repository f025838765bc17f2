#include "core/pickle.h"

#include <bit>
#include <cctype>
#include <charconv>
#include <clocale>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
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
// Reader
//
// Python objects have reference semantics: MEMOIZE/PUT remember an object (often an empty list
// that APPENDS fills later), GET and DUP push the same object again. So the reader builds a graph
// of nodes in an arena, referenced by index (no ownership cycles, no deep destructors), and turns
// it into a Value tree only at STOP, copying shared nodes, with a depth limit (which also catches
// self-references) and a memory budget.
// ---------------------------------------------------------------------------------------------

enum class NodeKind : uint8_t { kScalar, kList, kTuple, kDict };

struct DictNode {
  std::vector<std::pair<size_t, size_t>> entries;  // (key node, value node), insertion order
  std::unordered_map<std::string, size_t> index;   // the key's pickle -> position in entries
};

// One per opcode at most, so kept small: dict data lives behind a pointer.
struct Node {
  NodeKind kind = NodeKind::kScalar;
  Value scalar;                    // kScalar
  std::vector<size_t> items;       // kList, kTuple: item nodes
  std::unique_ptr<DictNode> dict;  // kDict
};

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

class Reader {
 public:
  explicit Reader(std::string_view bytes)
      : in_(bytes), budget_bytes_(kMaxExpansion * bytes.size() + kExpansionAllowanceBytes) {}

  Value run() {
    while (true) {
      op_offset_ = pos_;
      if (pos_ >= in_.size()) bad("truncated pickle (no STOP)");
      const uint8_t code = take_uint(1);
      if (static_cast<Op>(code) == Op::kStop) return finish();
      step(code);
    }
  }

 private:
  [[noreturn]] void bad(const std::string& what) const { fail(ErrorCode::kFormat, "{} at byte {}", what, op_offset_); }

  // --- input ---

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

  uint8_t opcode() const { return static_cast<uint8_t>(in_[op_offset_]); }

  // --- stack ---

  // Values below the innermost MARK belong to an enclosing opcode; only mark opcodes reach them.
  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }

  size_t pop() {
    if (stack_.size() <= fence()) bad(fmt::format("pickle stack underflow in {}", opcode_name(opcode())));
    const size_t node = stack_.back();
    stack_.pop_back();
    return node;
  }

  size_t top() {
    if (stack_.size() <= fence()) bad(fmt::format("pickle stack underflow in {}", opcode_name(opcode())));
    return stack_.back();
  }

  // Pops the innermost MARK and returns the stack position it marked.
  size_t pop_mark() {
    if (marks_.empty()) bad(fmt::format("pickle {} without a MARK", opcode_name(opcode())));
    const size_t mark = marks_.back();
    marks_.pop_back();
    return mark;
  }

  // The items above the innermost MARK, removed from the stack with the mark.
  std::vector<size_t> pop_to_mark() {
    const size_t mark = pop_mark();
    std::vector<size_t> items(stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  // The container just below a MARK (APPENDS, SETITEMS) must sit above the enclosing fence.
  size_t container_below(size_t mark) {
    if (mark == 0 || mark - 1 < fence()) bad(fmt::format("pickle stack underflow in {}", opcode_name(opcode())));
    return stack_[mark - 1];
  }

  size_t add_node(NodeKind kind) {
    Node& node = nodes_.emplace_back();
    node.kind = kind;
    if (kind == NodeKind::kDict) node.dict = std::make_unique<DictNode>();
    return nodes_.size() - 1;
  }

  void push_scalar(Value value) {
    const size_t node = add_node(NodeKind::kScalar);
    nodes_[node].scalar = std::move(value);
    stack_.push_back(node);
  }

  void push_sequence(NodeKind kind, std::vector<size_t> items) {
    const size_t node = add_node(kind);
    nodes_[node].items = std::move(items);
    stack_.push_back(node);
  }

  // --- containers ---

  void append(size_t list, const std::vector<size_t>& items) {
    if (nodes_[list].kind != NodeKind::kList)
      bad(fmt::format("pickle {} to a {}", opcode_name(opcode()), kind_name(list)));
    auto& target = nodes_[list].items;
    target.insert(target.end(), items.begin(), items.end());
  }

  // Later values replace earlier ones for an equal key, as in Python; the key keeps its place.
  void set_items(size_t dict, const std::vector<size_t>& key_values) {
    if (nodes_[dict].kind != NodeKind::kDict)
      bad(fmt::format("pickle {} on a {}", opcode_name(opcode()), kind_name(dict)));
    if (key_values.size() % 2 != 0) bad(fmt::format("pickle {} with an odd number of items", opcode_name(opcode())));
    for (size_t i = 0; i < key_values.size(); i += 2) {
      std::string key = hash_key(key_values[i]);
      DictNode& target = *nodes_[dict].dict;
      const auto [it, inserted] = target.index.try_emplace(std::move(key), target.entries.size());
      if (inserted) {
        target.entries.emplace_back(key_values[i], key_values[i + 1]);
      } else {
        target.entries[it->second].second = key_values[i + 1];
      }
    }
  }

  // Keys must be hashable (immutable all the way down); two keys are equal when they pickle alike.
  std::string hash_key(size_t key) {
    const Value value = materialize(key, 0);
    require_hashable(value);
    std::string canonical;
    write_value(canonical, value);
    return canonical;
  }

  void require_hashable(const Value& value) const {
    if (value.is_list() || value.is_dict())
      bad(fmt::format("unhashable pickle dict key of type {}", value.type_name()));
    if (value.is_tuple()) {
      for (const Value& item : value.as_list()) require_hashable(item);
    }
  }

  const char* kind_name(size_t node) const {
    switch (nodes_[node].kind) {
      case NodeKind::kList: return "list";
      case NodeKind::kTuple: return "tuple";
      case NodeKind::kDict: return "dict";
      case NodeKind::kScalar: break;
    }
    return "scalar";
  }

  // --- memo ---

  void memo_put(uint64_t key) { memo_[key] = top(); }

  void memo_get(uint64_t key) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) bad(fmt::format("pickle memo key {} missing", key));
    stack_.push_back(it->second);
  }

  // --- text arguments (protocol 0) ---

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
  // \UXXXXXXXX after an odd number of backslashes are escapes.
  std::string decode_raw_unicode_escape(std::string_view text) {
    std::string out;
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
    return out;
  }

  // LONG1 / LONG4 payload: little-endian two's complement of any length; it must fit in int64.
  int64_t decode_long(std::string_view data) {
    if (data.empty()) return 0;
    const size_t low = std::min<size_t>(data.size(), 8);
    uint64_t bits = 0;
    for (size_t i = low; i-- > 0;) bits = (bits << 8) | static_cast<uint8_t>(data[i]);
    const bool negative = (static_cast<uint8_t>(data[low - 1]) & 0x80) != 0;
    if (low < 8 && negative) bits |= ~uint64_t{0} << (8 * low);  // sign-extend
    const char extension = negative ? '\xff' : '\0';
    for (size_t i = low; i < data.size(); ++i) {
      if (data[i] != extension) bad("pickle integer does not fit in 64 bits");
    }
    return static_cast<int64_t>(bits);
  }

  // --- the opcodes ---

  void step(uint8_t code) {
    if (step_scalar(code) || step_container(code) || step_stack(code)) return;
    bad(fmt::format("unsupported pickle opcode 0x{:02x} ({})", code, opcode_name(code)));
  }

  bool step_scalar(uint8_t code) {
    switch (static_cast<Op>(code)) {
      case Op::kNone: push_scalar(None{}); return true;
      case Op::kNewTrue: push_scalar(true); return true;
      case Op::kNewFalse: push_scalar(false); return true;
      case Op::kBinInt1: push_scalar(static_cast<int64_t>(take_uint(1))); return true;
      case Op::kBinInt2: push_scalar(static_cast<int64_t>(take_uint(2))); return true;
      case Op::kBinInt: push_scalar(int64_t{static_cast<int32_t>(take_uint(4))}); return true;
      case Op::kLong1: push_scalar(decode_long(take(take_uint(1)))); return true;
      case Op::kLong4: {
        const auto length = static_cast<int32_t>(take_uint(4));
        if (length < 0) bad("pickle LONG4 with a negative length");
        push_scalar(decode_long(take(static_cast<uint64_t>(length))));
        return true;
      }
      case Op::kInt: {
        // Protocol 0 writes bools as INT "01" / "00".
        const std::string_view text = take_line();
        if (text == "00" || text == "01") {
          push_scalar(text == "01");
        } else {
          push_scalar(parse_decimal(text));
        }
        return true;
      }
      case Op::kLong: {
        std::string_view text = take_line();
        if (text.ends_with('L')) text.remove_suffix(1);
        push_scalar(parse_decimal(text));
        return true;
      }
      case Op::kFloat: push_scalar(parse_float(take_line())); return true;
      case Op::kBinFloat: push_scalar(std::bit_cast<double>(take_uint_big_endian(8))); return true;
      default: return step_text(code);
    }
  }

  bool step_text(uint8_t code) {
    switch (static_cast<Op>(code)) {
      case Op::kShortBinUnicode: push_scalar(std::string(take(take_uint(1)))); return true;
      case Op::kBinUnicode: push_scalar(std::string(take(take_uint(4)))); return true;
      case Op::kBinUnicode8: push_scalar(std::string(take(take_uint(8)))); return true;
      case Op::kUnicode: push_scalar(decode_raw_unicode_escape(take_line())); return true;
      case Op::kShortBinBytes: push_scalar(Bytes{std::string(take(take_uint(1)))}); return true;
      case Op::kBinBytes: push_scalar(Bytes{std::string(take(take_uint(4)))}); return true;
      case Op::kBinBytes8: push_scalar(Bytes{std::string(take(take_uint(8)))}); return true;
      default: return false;
    }
  }

  bool step_container(uint8_t code) {
    switch (static_cast<Op>(code)) {
      case Op::kEmptyList: push_sequence(NodeKind::kList, {}); return true;
      case Op::kEmptyTuple: push_sequence(NodeKind::kTuple, {}); return true;
      case Op::kEmptyDict: stack_.push_back(add_node(NodeKind::kDict)); return true;
      case Op::kList: push_sequence(NodeKind::kList, pop_to_mark()); return true;
      case Op::kTuple: push_sequence(NodeKind::kTuple, pop_to_mark()); return true;
      case Op::kTuple1: push_small_tuple(1); return true;
      case Op::kTuple2: push_small_tuple(2); return true;
      case Op::kTuple3: push_small_tuple(3); return true;
      case Op::kDict: {
        const std::vector<size_t> key_values = pop_to_mark();
        const size_t dict = add_node(NodeKind::kDict);
        set_items(dict, key_values);
        stack_.push_back(dict);
        return true;
      }
      case Op::kAppend: {
        const size_t item = pop();
        append(top(), {item});
        return true;
      }
      case Op::kAppends: {
        const size_t mark = pop_mark();
        const size_t list = container_below(mark);
        append(list, std::vector<size_t>(stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end()));
        stack_.resize(mark);
        return true;
      }
      case Op::kSetItem: {
        const size_t item = pop();
        const size_t key = pop();
        set_items(top(), {key, item});
        return true;
      }
      case Op::kSetItems: {
        const size_t mark = pop_mark();
        const size_t dict = container_below(mark);
        set_items(dict, std::vector<size_t>(stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end()));
        stack_.resize(mark);
        return true;
      }
      default: return false;
    }
  }

  void push_small_tuple(size_t count) {
    std::vector<size_t> items(count);
    for (size_t i = count; i-- > 0;) items[i] = pop();
    push_sequence(NodeKind::kTuple, std::move(items));
  }

  bool step_stack(uint8_t code) {
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
      case Op::kMemoize: memo_put(memo_.size()); return true;
      case Op::kBinPut: memo_put(take_uint(1)); return true;
      case Op::kLongBinPut: memo_put(take_uint(4)); return true;
      case Op::kPut: memo_put(static_cast<uint64_t>(parse_memo_key(take_line()))); return true;
      case Op::kBinGet: memo_get(take_uint(1)); return true;
      case Op::kLongBinGet: memo_get(take_uint(4)); return true;
      case Op::kGet: memo_get(static_cast<uint64_t>(parse_memo_key(take_line()))); return true;
      default: return false;
    }
  }

  int64_t parse_memo_key(std::string_view text) {
    const int64_t key = parse_decimal(text);
    if (key < 0) bad(fmt::format("negative pickle memo key {}", key));
    return key;
  }

  // --- STOP: the graph becomes a Value ---

  Value finish() {
    if (!marks_.empty()) bad("pickle STOP inside an unclosed MARK");
    if (stack_.size() != 1) bad(fmt::format("pickle STOP with {} values on the stack (expected 1)", stack_.size()));
    return materialize(stack_.back(), 0);
  }

  void charge(const Node& node) {
    spent_bytes_ += sizeof(Value);
    if (const auto* s = std::get_if<std::string>(&node.scalar.v)) spent_bytes_ += s->size();
    if (const auto* b = std::get_if<Bytes>(&node.scalar.v)) spent_bytes_ += b->data.size();
    if (spent_bytes_ > budget_bytes_) {
      bad(fmt::format("pickle expands to more than {} MiB in memory (through shared references)", budget_bytes_ >> 20));
    }
  }

  // `depth` counts the containers around this node.
  Value materialize(size_t index, int depth) {
    const Node& node = nodes_[index];
    charge(node);
    if (node.kind == NodeKind::kScalar) return node.scalar;
    if (depth >= kMaxDepth) bad(fmt::format("pickle nests containers deeper than {} (or contains itself)", kMaxDepth));
    if (node.kind == NodeKind::kDict) {
      Dict dict;
      dict.reserve(node.dict->entries.size());
      for (const auto& [key, item] : node.dict->entries) {
        dict.emplace_back(materialize(key, depth + 1), materialize(item, depth + 1));
      }
      return dict;
    }
    List items;
    items.reserve(node.items.size());
    for (size_t item : node.items) items.push_back(materialize(item, depth + 1));
    if (node.kind == NodeKind::kTuple) return Tuple{std::move(items)};
    return items;
  }

  const std::string_view in_;
  size_t pos_ = 0;
  size_t op_offset_ = 0;  // where the opcode being run starts: every message names it
  std::vector<Node> nodes_;
  std::vector<size_t> stack_;  // node indices
  std::vector<size_t> marks_;  // stack sizes at each open MARK
  std::unordered_map<uint64_t, size_t> memo_;
  const uint64_t budget_bytes_;
  uint64_t spent_bytes_ = 0;
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
  if (!is_int()) wrong_type("int", *this);
  return std::get<int64_t>(v);
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
  static constexpr const char* kNames[] = {"None", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict"};
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

Value loads(std::string_view bytes) { return Reader(bytes).run(); }

}  // namespace tandem::pickle
