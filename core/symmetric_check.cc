// Checks of rank-symmetric schedules without expanding them. By symmetry every ring position
// does what position 0 does, relabelled, so replaying position 0 is enough: a message position 0
// receives from the position e ahead is what position 0 itself sent from the same template op,
// shifted by e (its chunk rotated by e, its contributor positions moved by e). Values hold exact
// contributor bitsets over positions (n bits), so the replay costs O(template ops * n / 64).
#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/schedule_internal.h"

namespace tandem::detail {
namespace {

// Sets of ring positions as n-bit rows of one flat word array (no allocation per op: at 16,384
// ranks a row is 2 KiB and the template has 65,532 ops).
class PositionSets {
 public:
  static constexpr size_t kSpareRows = 64;  // message rows in flight beyond the slots'

  PositionSets(uint32_t n, size_t rows) : n_(n), width_((n + 63) / 64), words_(rows * width_, 0) {}

  size_t rows() const { return words_.size() / width_; }
  // Empties every row and makes `rows` of them (memory is kept between calls).
  void reset(size_t rows) {
    words_.reserve((rows + kSpareRows) * width_);  // message rows come and go without reallocating
    words_.assign(rows * width_, 0);
  }
  // A new empty row; invalidates row pointers.
  size_t add_row() {
    words_.resize(words_.size() + width_, 0);
    return rows() - 1;
  }

  uint64_t* row(size_t r) { return words_.data() + r * width_; }
  const uint64_t* row(size_t r) const { return words_.data() + r * width_; }
  size_t width() const { return width_; }

  void set(size_t r, uint32_t q) { row(r)[q / 64] |= uint64_t{1} << (q % 64); }
  void copy(size_t to, const uint64_t* from) { std::copy(from, from + width_, row(to)); }
  bool intersects(const uint64_t* a, const uint64_t* b) const {
    for (size_t w = 0; w < width_; ++w) {
      if (a[w] & b[w]) return true;
    }
    return false;
  }
  void merge(uint64_t* into, const uint64_t* other) const {
    for (size_t w = 0; w < width_; ++w) into[w] |= other[w];
  }
  uint32_t count(const uint64_t* a) const {
    uint32_t total = 0;
    for (size_t w = 0; w < width_; ++w) total += static_cast<uint32_t>(__builtin_popcountll(a[w]));
    return total;
  }
  // out = `in` with position q moved to (q + shift) mod n; out must not alias in.
  void rotate(const uint64_t* in, uint32_t shift, uint64_t* out) const {
    std::fill(out, out + width_, 0);
    shift %= n_;
    // Bits [0, n - shift) move up by `shift`; bits [n - shift, n) wrap down to [0, shift).
    for (uint32_t from = 0; from < n_ - shift; from += 64) {
      or_bits_at(out, from + shift, bits(in, from, n_ - shift), std::min<uint32_t>(64, n_ - shift - from));
    }
    for (uint32_t from = n_ - shift; from < n_; from += 64) {
      or_bits_at(out, from - (n_ - shift), bits(in, from, n_), std::min<uint32_t>(64, n_ - from));
    }
  }

 private:
  // Up to 64 bits of `in` starting at bit `from`, none at or past `end`.
  uint64_t bits(const uint64_t* in, uint32_t from, uint32_t end) const {
    const uint32_t w = from / 64, b = from % 64;
    uint64_t value = in[w] >> b;
    if (b != 0 && w + 1 < width_) value |= in[w + 1] << (64 - b);
    const uint32_t len = std::min<uint32_t>(64, end - from);
    return len == 64 ? value : value & ((uint64_t{1} << len) - 1);
  }
  void or_bits_at(uint64_t* out, uint32_t to, uint64_t value, uint32_t len) const {
    const uint32_t w = to / 64, b = to % 64;
    out[w] |= value << b;
    if (b != 0 && b + len > 64) out[w + 1] |= value >> (64 - b);
  }

  uint32_t n_;
  size_t width_;
  std::vector<uint64_t> words_;
};

// What a slot or a message holds besides its contributor positions.
struct Meta {
  bool written = false;
  uint32_t chunk = 0;  // the chunk of the collective this value is (as seen at position 0)
};

// Position 0's template run over contributor sets: slots and message snapshots as rows of
// `sets`, each with its Meta. Rows: one per storage slot, one scratch row, then message
// snapshots, each from its send until the matching receive consumes it (rows are recycled: a
// ring has one or two in flight).
class TemplateReplay {
 public:
  TemplateReplay(const Schedule& s, const Dag& dag, bool in_place, PositionSets& sets)
      : s_(s), dag_(dag), storage_(s, 0, in_place), sets_(sets), temp_(storage_.size()),
        mode_(in_place ? "in place" : "out of place") {
    sets_.reset(storage_.size() + 1);
    meta_.resize(sets_.rows());
    send_row_.assign(dag.index.total, 0);
    const uint32_t input_chunks = s.geometry().input_blocks * s.chunks_per_block;
    for (uint32_t c = 0; c < input_chunks; ++c) {
      const uint32_t id = storage_.id(BufferKind::kInput, c);
      meta_[id] = {true, c};
      sets_.set(id, 0);
    }
  }

  void run() {
    const auto& lanes = s_.ranks[0].lanes;
    for (const uint32_t g : dag_.order) {
      const OpLoc& at = dag_.loc[g];
      apply(g, at, lanes[at.lane].ops[at.index]);
    }
    check_outputs();
  }

 private:
  void apply(uint32_t g, const OpLoc& at, const Op& op) {
    at_ = &at;
    op_ = &op;
    switch (op.kind) {
      case OpKind::kSend: send(g, read(op.src)); break;
      case OpKind::kRecv:
      case OpKind::kRecvReduce: receive(g, op); break;
      case OpKind::kCopy: {
        const uint32_t src = read(op.src);
        const uint32_t dst = storage_.id(op.dst.buffer, op.dst.first);
        sets_.copy(dst, sets_.row(src));
        meta_[dst] = meta_[src];
        break;
      }
      case OpKind::kReduce: {
        const uint32_t src = read(op.src);
        const uint32_t dst = read(op.dst);
        combine(meta_[dst], sets_.row(dst), meta_[src], sets_.row(src), dst);
        break;
      }
    }
  }

  // Snapshots slot `src` into a message row until its receive.
  void send(uint32_t g, uint32_t src) {
    if (free_rows_.empty()) {
      free_rows_.push_back(static_cast<uint32_t>(sets_.add_row()));
      meta_.emplace_back();
    }
    send_row_[g] = free_rows_.back();
    free_rows_.pop_back();
    sets_.copy(send_row_[g], sets_.row(src));
    meta_[send_row_[g]] = meta_[src];
  }

  // Sent by the position `peer` ahead: position 0's own snapshot, shifted by that offset.
  void receive(uint32_t g, const Op& op) {
    const uint32_t message = send_row_[dag_.matched_send[g]];
    const auto shift = static_cast<uint32_t>(op.peer);
    sets_.rotate(sets_.row(message), shift, sets_.row(temp_));
    const Meta received{true, s_.symmetry.rotate(meta_[message].chunk, shift)};
    free_rows_.push_back(message);
    const uint32_t dst = storage_.id(op.dst.buffer, op.dst.first);
    if (op.kind == OpKind::kRecv) {
      sets_.copy(dst, sets_.row(temp_));
      meta_[dst] = received;
    } else {
      const uint32_t local = read(op.src);
      combine(meta_[local], sets_.row(local), received, sets_.row(temp_), dst);
    }
  }

  [[noreturn]] void bad(const std::string& what) const {
    fail(ErrorCode::kCheckFailed, "ring position 0 template, {} ({}): {}",
         op_location(0, at_->lane, at_->index, *op_), mode_, what);
  }

  uint32_t read(const SlotRange& range) const {
    const uint32_t id = storage_.id(range.buffer, range.first);
    if (!meta_[id].written) {
      bad(fmt::format("reads {} before anything was written to it", slot_name(range.buffer, range.first)));
    }
    return id;
  }

  // Writes the sum of row `a` (meta ma) and row `b` into slot `dst`.
  void combine(const Meta& ma, const uint64_t* a, const Meta& mb, const uint64_t* b, uint32_t dst) {
    if (ma.chunk != mb.chunk) bad(fmt::format("reduces chunk {} with chunk {}", ma.chunk, mb.chunk));
    if (sets_.intersects(a, b)) bad("counts a contribution twice");
    if (sets_.row(dst) != a) sets_.copy(dst, a);
    sets_.merge(sets_.row(dst), b);
    meta_[dst] = ma;
  }

  // Symmetric schedules are all_reduce only: every output chunk sums every position.
  void check_outputs() {
    const auto n = static_cast<uint32_t>(s_.nranks);
    const uint32_t output_chunks = s_.geometry().output_blocks * s_.chunks_per_block;
    for (uint32_t c = 0; c < output_chunks; ++c) {
      const uint32_t id = storage_.id(BufferKind::kOutput, c);
      const uint32_t contributors = sets_.count(sets_.row(id));
      if (!meta_[id].written || meta_[id].chunk != c || contributors != n) {
        fail(ErrorCode::kCheckFailed,
             "{} {} of {} ranks ({}): ring position 0 Out[{}] holds {}, expected chunk {} from all {} positions",
             name(s_.collective), name(s_.algorithm), n, mode_, c,
             meta_[id].written ? fmt::format("chunk {} from {} position(s)", meta_[id].chunk, contributors)
                               : std::string("nothing (never written)"),
             c, n);
      }
    }
  }

  const Schedule& s_;
  const Dag& dag_;
  const SlotStorage storage_;
  PositionSets& sets_;
  const size_t temp_;  // the scratch row a received message is rotated into
  const char* mode_;
  std::vector<Meta> meta_;
  std::vector<uint32_t> send_row_;
  std::vector<uint32_t> free_rows_;
  const OpLoc* at_ = nullptr;  // the op being applied, for error texts
  const Op* op_ = nullptr;
};

void replay(const Schedule& s, const Dag& dag, bool in_place, PositionSets& sets) {
  TemplateReplay(s, dag, in_place, sets).run();
}

}  // namespace

namespace {

void check_permutation(const std::vector<int>& order, int nranks, std::string_view what) {
  if (order.size() != static_cast<size_t>(nranks)) {
    fail(ErrorCode::kInvalidSchedule, "{} has {} ranks, expected {}", what, order.size(), nranks);
  }
  std::vector<bool> seen(static_cast<size_t>(nranks), false);
  for (int r : order) {
    if (r < 0 || r >= nranks || seen[static_cast<size_t>(r)]) {
      fail(ErrorCode::kInvalidSchedule, "{} is not a permutation of 0..{} (rank {})", what, nranks - 1, r);
    }
    seen[static_cast<size_t>(r)] = true;
  }
}

// Lanes with orders of their own are rings of their own: each keeps to its own chunk windows
// (rotation groups) in every buffer and waits on no other lane, so position p of lane l and
// position p of lane l' may be different ranks without any value passing between them.
void check_lane_orders(const Schedule& s) {
  const Symmetry& sym = s.symmetry;
  const auto& lanes = s.ranks[0].lanes;
  if (sym.lane_orders.size() != lanes.size()) {
    fail(ErrorCode::kInvalidSchedule, "symmetry has {} lane orders for {} lanes", sym.lane_orders.size(), lanes.size());
  }
  if (sym.lane_orders[0] != sym.order) fail(ErrorCode::kInvalidSchedule, "symmetry order must be lane 0's order");
  for (size_t l = 0; l < lanes.size(); ++l) {
    check_permutation(sym.lane_orders[l], s.nranks, fmt::format("symmetry order of lane {}", l));
  }
  const uint32_t g = sym.rotation_group;
  std::map<std::pair<BufferKind, uint32_t>, uint32_t> owner;  // (buffer, window) -> lane
  auto claim = [&](const SlotRange& range, uint32_t lane, uint32_t index) {
    if (range.count == 0) return;
    // In place, Output aliases Input: one window of either is the same memory.
    const BufferKind buffer = range.buffer == BufferKind::kScratch ? BufferKind::kScratch : BufferKind::kInput;
    const auto [it, fresh] = owner.emplace(std::make_pair(buffer, range.first / g), lane);
    if (!fresh && it->second != lane) {
      fail(ErrorCode::kInvalidSchedule,
           "lane {} op {} touches chunk window {} of lane {}: lanes with their own ring orders must keep to their "
           "own chunks",
           lane, index, range.first / g, it->second);
    }
  };
  for (uint32_t l = 0; l < lanes.size(); ++l) {
    for (uint32_t i = 0; i < lanes[l].ops.size(); ++i) {
      const Op& op = lanes[l].ops[i];
      if (op.reads_src()) claim(op.src, l, i);
      if (op.writes_dst()) claim(op.dst, l, i);
      for (size_t d = 0; d < lanes[l].dep_count(i); ++d) {
        if (lanes[l].deps_of(i)[d].lane != l) {
          fail(ErrorCode::kInvalidSchedule,
               "lane {} op {} depends on lane {}: lanes with their own ring orders must not wait on each other", l, i,
               lanes[l].deps_of(i)[d].lane);
        }
      }
    }
  }
}

}  // namespace

void check_symmetry(const Schedule& s) {
  const Symmetry& sym = s.symmetry;
  if (s.ranks.size() != 1) {
    fail(ErrorCode::kInvalidSchedule, "symmetric schedule must hold exactly 1 program, has {}", s.ranks.size());
  }
  check_permutation(sym.order, s.nranks, "symmetry order");
  if (s.collective != Collective::kAllReduce) {
    fail(ErrorCode::kInvalidSchedule, "symmetric schedules are defined for all_reduce only, not {}", name(s.collective));
  }
  const uint32_t g = sym.rotation_group;
  if (g == 0 || s.chunks_per_block % g != 0 || s.ranks[0].scratch_chunks % g != 0) {
    fail(ErrorCode::kInvalidSchedule,
         "symmetry rotation group {} must divide chunks_per_block ({}) and scratch_chunks ({})", g, s.chunks_per_block,
         s.ranks[0].scratch_chunks);
  }
  if (!sym.lane_orders.empty()) check_lane_orders(s);
}

void symbolic_check_symmetric(const Schedule& s) {
  // The rows (a slot each, n bits) are the check's memory: slots x n / 8 bytes, quadratic in the
  // ranks for a ring (a 32,768-rank 16-channel ring all_reduce: about 2 GiB). Checked before
  // anything is allocated, so that a run too large for the machine stops with one line.
  // Rows of less than kRowsUnchecked are not worth reading the budget (/proc/meminfo) for: the
  // check runs for every schedule built, most of them small.
  constexpr double kRowsUnchecked = 64.0 * (1 << 20);
  const double slots = static_cast<double>(SlotStorage(s, 0, /*in_place=*/false).size() + PositionSets::kSpareRows + 1);
  const double rows_bytes = slots * 8.0 * std::ceil(s.nranks / 64.0);
  if (rows_bytes > kRowsUnchecked) {
    require_host_memory(rows_bytes,
                        fmt::format("the symbolic check of the {}-rank {} {} schedule", s.nranks, name(s.algorithm),
                                    name(s.collective)),
                        "; use fewer ranks (the check's rows are ranks x slots bits)");
  }
  const Dag dag = build_dag(s);
  PositionSets sets(static_cast<uint32_t>(s.nranks), 0);
  replay(s, dag, false, sets);
  replay(s, dag, true, sets);
}

}  // namespace tandem::detail
