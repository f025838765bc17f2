// DirectReader, the reader every dump takes: one pass, no graph. It gives up where it could not
// answer as Python would (listed below), and pickle.cc's loads() then runs GraphReader.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"
#include "core/pickle_input.h"

namespace tandem::pickle::detail {
namespace {

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

  // A container opcode inside a skipped value, or one that adds to a placeholder: what it makes is
  // a placeholder and what it adds is dropped. False when the opcode builds as usual.
  bool step_skipped_container(uint8_t code) {
    switch (static_cast<Op>(code)) {
      case Op::kEmptyList:
      case Op::kEmptyTuple:
      case Op::kEmptyDict:
        if (!starts_skipped()) return false;
        push_skipped();
        return true;
      case Op::kList:
      case Op::kTuple:
      case Op::kDict:
        if (!in_skipped_region()) return false;
        stack_.resize(pop_mark());
        push_skipped();
        return true;
      case Op::kTuple1:
      case Op::kTuple2:
      case Op::kTuple3: {
        const size_t count = code - static_cast<uint8_t>(Op::kTuple1) + 1;
        if (stack_.size() < fence() + count) give_up();
        if (!in_skipped_region() && std::none_of(stack_.end() - static_cast<ptrdiff_t>(count), stack_.end(),
                                                 [](const Slot& item) { return item.skipped; })) {
          return false;
        }
        stack_.resize(stack_.size() - count);
        push_skipped();
        return true;
      }
      case Op::kAppend:
      case Op::kSetItem: {
        const size_t items = static_cast<Op>(code) == Op::kAppend ? 1 : 2;
        if (stack_.size() < fence() + items + 1) give_up();
        return dropped_into_skipped(stack_.size() - items - 1, stack_.size() - items);
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
        return false;
      }
      default: return false;
    }
  }

  bool step_container(uint8_t code) {
    if (step_skipped_container(code)) return true;
    switch (static_cast<Op>(code)) {
      case Op::kEmptyList: push_container(List{}); return true;
      case Op::kEmptyTuple: push_container(Tuple{}); return true;
      case Op::kEmptyDict: push_container(Dict{}); return true;
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

}  // namespace

std::optional<Value> read_direct(std::string_view bytes, const LoadOptions& options) {
  thread_local DirectReader direct;  // reused: see DirectReader::read
  return direct.read(bytes, options);
}

}  // namespace tandem::pickle::detail
