#include <vector>

#include "core/error.h"
#include "core/schedule_internal.h"
#include "core/validate.h"

namespace tandem {
namespace {

// A symbolic chunk value: how many contributions it sums, and the wrapping sum of their keys.
// The key of (origin rank q, input chunk c) is rank_key(q) * chunk_key(c) (both odd, random):
// separable, so the expected sum over all ranks of a chunk is chunk_key(c) * sum_q rank_key(q),
// computed once. A missing, foreign or doubled contribution changes the sum except with
// probability about 2^-62.
struct Sym {
  uint64_t fingerprint = 0;
  uint32_t terms = 0;  // 0: never written

  bool written() const { return terms != 0; }
  Sym& operator+=(const Sym& other) {
    fingerprint += other.fingerprint;
    terms += other.terms;
    return *this;
  }
};

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t rank_key(int q) { return mix(0x52414e4b00000000ull + static_cast<uint64_t>(q)) | 1; }
uint64_t chunk_key(uint32_t c) { return mix(0x4348554e4b000000ull + c) | 1; }

std::string describe(const Sym& v) {
  return v.written() ? fmt::format("{} contribution(s)", v.terms) : std::string("nothing (never written)");
}

// Every rank's slots after running the schedule on symbolic values.
struct SymbolicState {
  std::vector<detail::SlotStorage> storage;  // per rank
  std::vector<std::vector<Sym>> slots;       // per rank, per storage slot

  const Sym& output(int r, uint32_t c) const {
    return slots[static_cast<size_t>(r)][storage[static_cast<size_t>(r)].id(BufferKind::kOutput, c)];
  }
};

SymbolicState seed_inputs(const Schedule& s, bool in_place) {
  SymbolicState state;
  state.slots.resize(static_cast<size_t>(s.nranks));
  const uint32_t input_chunks = s.geometry().input_blocks * s.chunks_per_block;
  for (int r = 0; r < s.nranks; ++r) {
    state.storage.emplace_back(s, r, in_place);
    auto& slots = state.slots[static_cast<size_t>(r)];
    slots.assign(state.storage.back().size(), Sym{});
    for (uint32_t c = 0; c < input_chunks; ++c) slots[c] = {rank_key(r) * chunk_key(c), 1};
  }
  return state;
}

const Op& op_at(const Schedule& s, const detail::OpLoc& at) {
  return s.ranks[static_cast<size_t>(at.rank)].lanes[at.lane].ops[at.index];
}

// Runs every op in dependency order on symbolic values; fails on a read of an unwritten slot.
void run_ops(const Schedule& s, const detail::Dag& dag, const char* mode, SymbolicState& state) {
  // Messages in flight, one arena slice per send (gid order).
  std::vector<uint64_t> message_begin(dag.index.total + 1, 0);
  for (uint32_t g = 0; g < dag.index.total; ++g) {
    const Op& op = op_at(s, dag.loc[g]);
    message_begin[g + 1] = message_begin[g] + (op.kind == OpKind::kSend ? op.src.count : 0);
  }
  std::vector<Sym> messages(message_begin.back());

  for (const uint32_t g : dag.order) {
    const detail::OpLoc& at = dag.loc[g];
    const Op& op = op_at(s, at);
    auto& slots = state.slots[static_cast<size_t>(at.rank)];
    const detail::SlotStorage& where = state.storage[static_cast<size_t>(at.rank)];
    auto read = [&](BufferKind buffer, uint32_t chunk) -> const Sym& {
      const Sym& v = slots[where.id(buffer, chunk)];
      if (!v.written()) {
        fail(ErrorCode::kCheckFailed, "{} ({}): reads {} before anything was written to it",
             detail::op_location(at.rank, at.lane, at.index, op), mode, detail::slot_name(buffer, chunk));
      }
      return v;
    };
    auto write = [&](uint32_t j, const Sym& value) { slots[where.id(op.dst.buffer, op.dst.first + j)] = value; };
    switch (op.kind) {
      case OpKind::kSend:
        for (uint32_t j = 0; j < op.src.count; ++j) messages[message_begin[g] + j] = read(op.src.buffer, op.src.first + j);
        break;
      case OpKind::kRecv:
      case OpKind::kRecvReduce: {
        const uint64_t m = message_begin[dag.matched_send[g]];
        for (uint32_t j = 0; j < op.dst.count; ++j) {
          Sym value = messages[m + j];
          if (op.kind == OpKind::kRecvReduce) value += read(op.src.buffer, op.src.first + j);
          write(j, value);
        }
        break;
      }
      case OpKind::kCopy:
        for (uint32_t j = 0; j < op.dst.count; ++j) write(j, read(op.src.buffer, op.src.first + j));
        break;
      case OpKind::kReduce:
        for (uint32_t j = 0; j < op.dst.count; ++j) {
          const Sym value = read(op.src.buffer, op.src.first + j);
          Sym sum = read(op.dst.buffer, op.dst.first + j);
          sum += value;
          write(j, sum);
        }
        break;
    }
  }
}

// What rank r's output chunk c = block b, sub-chunk i must hold; `all_ranks` is the sum of every
// rank's key.
Sym expected_output(const Schedule& s, int r, uint32_t c, uint64_t all_ranks) {
  const int n = s.nranks;
  const uint32_t k = s.chunks_per_block;
  const uint32_t b = c / k;
  const uint32_t i = c % k;
  switch (s.collective) {
    case Collective::kAllReduce:
    case Collective::kReduce: return {all_ranks * chunk_key(c), static_cast<uint32_t>(n)};
    case Collective::kReduceScatter:
      return {all_ranks * chunk_key(static_cast<uint32_t>(r) * k + i), static_cast<uint32_t>(n)};
    case Collective::kAllGather: return {rank_key(static_cast<int>(b)) * chunk_key(i), 1};
    case Collective::kBroadcast: return {rank_key(s.root) * chunk_key(c), 1};
    case Collective::kAllToAll: return {rank_key(static_cast<int>(b)) * chunk_key(static_cast<uint32_t>(r) * k + i), 1};
    case Collective::kSendRecv: return {rank_key((r + n - 1) % n) * chunk_key(c), 1};
  }
  return {};
}

void check_outputs(const Schedule& s, const char* mode, const SymbolicState& state) {
  const int n = s.nranks;
  uint64_t all_ranks = 0;
  for (int q = 0; q < n; ++q) all_ranks += rank_key(q);
  const uint32_t output_chunks = s.geometry().output_blocks * s.chunks_per_block;
  for (int r = 0; r < n; ++r) {
    if (s.collective == Collective::kReduce && r != s.root) continue;
    for (uint32_t c = 0; c < output_chunks; ++c) {
      const Sym expected = expected_output(s, r, c, all_ranks);
      const Sym& got = state.output(r, c);
      if (got.fingerprint != expected.fingerprint || got.terms != expected.terms) {
        const char* why = !got.written()                ? "it is never written"
                          : got.terms < expected.terms ? "contributions are missing"
                          : got.terms > expected.terms ? "a contribution is counted twice"
                                                       : "it holds the wrong data (a foreign chunk or rank)";
        fail(ErrorCode::kCheckFailed, "{} {} of {} ranks ({}): rank {} {} holds {}, expected {}: {}", name(s.collective),
             name(s.algorithm), n, mode, r, detail::slot_name(BufferKind::kOutput, c), describe(got),
             describe(expected), why);
      }
    }
  }
}

void check_once(const Schedule& s, const detail::Dag& dag, bool in_place) {
  const char* mode = in_place ? "in place" : "out of place";
  SymbolicState state = seed_inputs(s, in_place);
  run_ops(s, dag, mode, state);
  check_outputs(s, mode, state);
}

}  // namespace

void symbolic_check(const Schedule& schedule) {
  if (schedule.symmetric()) {
    detail::symbolic_check_symmetric(schedule);
    return;
  }
  const detail::Dag dag = detail::build_dag(schedule);
  check_once(schedule, dag, false);
  if (schedule.geometry().in_place_supported) check_once(schedule, dag, true);
}

}  // namespace tandem
