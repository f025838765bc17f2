// GraphReader: reads any pickle of the plain types, with Python's sharing, and words every error
// that loads() reports (pickle.cc runs it when DirectReader gives up).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/pickle_input.h"

namespace tandem::pickle::detail {
namespace {

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


}  // namespace

Value read_graph(std::string_view bytes, const LoadOptions& options) { return GraphReader(bytes, options).run(); }

}  // namespace tandem::pickle::detail
