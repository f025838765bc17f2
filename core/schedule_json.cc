#include "core/schedule_json.h"

#include <initializer_list>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/host_memory.h"

namespace tandem {
namespace {

using nlohmann::json;

json range_json(const SlotRange& range) { return json::array({std::string(name(range.buffer)), range.first, range.count}); }

// Strict reading with the JSON path in every message.
class Reader {
 public:
  [[noreturn]] static void bad(const std::string& path, const std::string& what) {
    fail(ErrorCode::kFormat, "schedule JSON: {}: {}", path.empty() ? "(top level)" : path, what);
  }

  static const json& object(const json& value, const std::string& path, std::initializer_list<const char*> keys) {
    if (!value.is_object()) bad(path, "expected an object");
    for (const char* key : keys) {
      if (!value.contains(key)) bad(path, fmt::format("missing field '{}'", key));
    }
    for (const auto& [key, unused] : value.items()) {
      bool known = false;
      for (const char* k : keys) known |= key == k;
      if (!known) bad(path, fmt::format("unknown field '{}'", key));
    }
    return value;
  }

  static int64_t integer(const json& value, const std::string& path, int64_t min, int64_t max) {
    if (!value.is_number_integer()) bad(path, "expected an integer");
    const auto v = value.get<int64_t>();
    if (v < min || v > max) bad(path, fmt::format("{} out of range [{}, {}]", v, min, max));
    return v;
  }

  static std::string text(const json& value, const std::string& path) {
    if (!value.is_string()) bad(path, "expected a string");
    return value.get<std::string>();
  }

  static const json& array(const json& value, const std::string& path) {
    if (!value.is_array()) bad(path, "expected an array");
    return value;
  }

  template <typename Parse>
  static auto named(const json& value, const std::string& path, Parse parse) {
    const std::string t = text(value, path);
    try {
      return parse(t);
    } catch (const Error& e) {
      bad(path, e.what());
    }
  }
};

constexpr int64_t kMaxU32 = 0xffffffffll;
constexpr int64_t kMaxRanks = 1 << 20;  // checked at load: more ranks than any cluster tandem models

// Sizes checked at load. validate and symbolic_check keep state per chunk slot and per chunk in
// flight, so a few numbers in a small file (chunks_per_block: 4e9) would otherwise ask for tens
// of GB, or wrap a rank's slot count past 2^32. A 4,096-rank ring all_reduce (2^25 slots, as many
// chunks sent, a 4 GB file) is within them; larger rings are stored in symmetric form.
constexpr int64_t kMaxSlotsPerRank = int64_t{1} << 24;  // input + output + scratch chunks of one rank
constexpr int64_t kMaxSlots = int64_t{1} << 25;         // slots of all rank programs; chunks of all sends
// A symmetric schedule is checked with one bit per (template slot, ring position).
constexpr int64_t kMaxSymmetricSlotPositions = int64_t{1} << 33;

BufferKind parse_buffer(const std::string& text, const std::string& path) {
  for (BufferKind b : {BufferKind::kInput, BufferKind::kOutput, BufferKind::kScratch}) {
    if (name(b) == text) return b;
  }
  Reader::bad(path, fmt::format("unknown buffer '{}' (expected In, Out or Scratch)", text));
}

OpKind parse_op_kind(const std::string& text, const std::string& path) {
  for (OpKind k : {OpKind::kSend, OpKind::kRecv, OpKind::kRecvReduce, OpKind::kCopy, OpKind::kReduce}) {
    if (name(k) == text) return k;
  }
  Reader::bad(path, fmt::format("unknown op '{}' (expected send, recv, recv_reduce, copy or reduce)", text));
}

SlotRange parse_range(const json& value, const std::string& path) {
  const json& a = Reader::array(value, path);
  if (a.size() != 3) Reader::bad(path, "expected [buffer, first, count]");
  return {parse_buffer(Reader::text(a[0], path + "[0]"), path + "[0]"),
          static_cast<uint32_t>(Reader::integer(a[1], path + "[1]", 0, kMaxU32)),
          static_cast<uint32_t>(Reader::integer(a[2], path + "[2]", 0, kMaxU32))};
}

// The limits above, once the whole schedule is read (a slot count needs the collective, nranks,
// chunks_per_block and each rank's scratch).
void check_sizes(const Schedule& s) {
  const BufferGeometry g = s.geometry();
  const int64_t buffer_slots = (int64_t{g.input_blocks} + int64_t{g.output_blocks}) * int64_t{s.chunks_per_block};
  int64_t all_slots = 0, all_sent = 0;
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const int64_t slots = buffer_slots + int64_t{s.ranks[r].scratch_chunks};
    if (slots > kMaxSlotsPerRank) {
      Reader::bad(fmt::format("ranks[{}]", r),
                  fmt::format("{} chunk slots (input, output and scratch at {} chunks per block), above the "
                              "limit of {} per rank",
                              slots, s.chunks_per_block, kMaxSlotsPerRank));
    }
    all_slots += slots;
    for (const Lane& lane : s.ranks[r].lanes) {
      for (const Op& op : lane.ops) all_sent += op.kind == OpKind::kSend ? op.src.count : 0;
    }
  }
  if (all_slots > kMaxSlots) {
    Reader::bad("ranks", fmt::format("{} chunk slots in all, above the limit of {}", all_slots, kMaxSlots));
  }
  if (all_sent > kMaxSlots) {
    Reader::bad("ranks", fmt::format("sends move {} chunks in all, above the limit of {}", all_sent, kMaxSlots));
  }
  if (s.symmetric() && all_slots * s.nranks > kMaxSymmetricSlotPositions) {
    Reader::bad("ranks", fmt::format("{} template slots x {} positions, above the limit of {}", all_slots, s.nranks,
                                     kMaxSymmetricSlotPositions));
  }
}

}  // namespace

namespace {

json symmetry_json(const Symmetry& symmetry) {
  if (symmetry.order.empty()) return nullptr;
  json out{{"order", symmetry.order}, {"rotation_group", symmetry.rotation_group}};
  if (!symmetry.lane_orders.empty()) out["lane_orders"] = symmetry.lane_orders;
  return out;
}

}  // namespace

std::string schedule_to_json(const Schedule& s, int indent) {
  size_t stored_ops = 0;  // a symmetric schedule stores its template only
  for (const RankProgram& rank : s.ranks) {
    for (const Lane& lane : rank.lanes) stored_ops += lane.ops.size();
  }
  require_host_memory(static_cast<double>(stored_ops) * kScheduleJsonBytesPerOp,
                      fmt::format("the JSON of the {} {} schedule for {} ranks ({} ops)", name(s.algorithm),
                                  name(s.collective), s.nranks, stored_ops),
                      s.symmetric() ? "" : "; print it as text, or write the rank-symmetric form where there is one (--symmetric)");
  json ranks = json::array();
  for (const RankProgram& rank : s.ranks) {
    json lanes = json::array();
    for (const Lane& lane : rank.lanes) {
      json ops = json::array();
      for (size_t i = 0; i < lane.ops.size(); ++i) {
        const Op& op = lane.ops[i];
        json deps = json::array();
        for (size_t d = lane.dep_begin[i]; d < lane.dep_begin[i + 1]; ++d) {
          deps.push_back(json::array({lane.deps[d].lane, lane.deps[d].index}));
        }
        json o = {{"op", name(op.kind)}, {"deps", deps}};
        if (op.kind == OpKind::kSend || op.is_recv()) o["peer"] = op.peer;
        if (op.reads_src()) o["src"] = range_json(op.src);
        if (op.writes_dst()) o["dst"] = range_json(op.dst);
        ops.push_back(std::move(o));
      }
      lanes.push_back({{"ops", std::move(ops)}});
    }
    ranks.push_back({{"scratch_chunks", rank.scratch_chunks}, {"lanes", std::move(lanes)}});
  }
  json doc = {{"schema_version", Schedule::kSchemaVersion},
              {"collective", name(s.collective)},
              {"algorithm", name(s.algorithm)},
              {"nranks", s.nranks},
              {"root", s.root},
              {"chunks_per_block", s.chunks_per_block},
              {"params",
               {{"channels", s.params.channels},
                {"pipeline_chunks", s.params.pipeline_chunks},
                {"inter_node", name(s.params.inter_node)}}},
              {"symmetry", symmetry_json(s.symmetry)},
              {"ranks", std::move(ranks)}};
  return doc.dump(indent);
}

namespace {

// symmetry: the rank order, per-lane orders when lanes ring over orders of their own, the rotation group.
Symmetry read_symmetry(const json& value, int nranks) {
  // lane_orders is optional: written only when lanes ring over orders of their own.
  const json& sym = value.is_object() && value.contains("lane_orders")
                        ? Reader::object(value, "symmetry", {"order", "lane_orders", "rotation_group"})
                        : Reader::object(value, "symmetry", {"order", "rotation_group"});
  auto read_order = [&](const json& order_value, const std::string& path) {
    const json& order = Reader::array(order_value, path);
    std::vector<int> out;
    for (size_t p = 0; p < order.size(); ++p) {
      out.push_back(static_cast<int>(Reader::integer(order[p], fmt::format("{}[{}]", path, p), 0, nranks - 1)));
    }
    return out;
  };
  Symmetry symmetry;
  symmetry.order = read_order(sym["order"], "symmetry.order");
  if (sym.contains("lane_orders")) {
    const json& lanes = Reader::array(sym["lane_orders"], "symmetry.lane_orders");
    for (size_t l = 0; l < lanes.size(); ++l) {
      symmetry.lane_orders.push_back(read_order(lanes[l], fmt::format("symmetry.lane_orders[{}]", l)));
    }
  }
  symmetry.rotation_group =
      static_cast<uint32_t>(Reader::integer(sym["rotation_group"], "symmetry.rotation_group", 1, kMaxU32));
  return symmetry;
}

// One op at `opath`: its kind's fields, no more and no fewer; its dependencies appended to `lane`.
Op read_op(const json& o, const std::string& opath, Lane& lane) {
  if (!o.is_object() || !o.contains("op")) Reader::bad(opath, "expected an object with field 'op'");
  Op op;
  op.kind = parse_op_kind(Reader::text(o["op"], opath + ".op"), opath + ".op");
  const bool comm = op.kind == OpKind::kSend || op.is_recv();
  std::vector<const char*> keys = {"op", "deps"};
  if (comm) keys.push_back("peer");
  if (op.reads_src()) keys.push_back("src");
  if (op.writes_dst()) keys.push_back("dst");
  for (const char* key : keys) {
    if (!o.contains(key)) Reader::bad(opath, fmt::format("missing field '{}' for a {}", key, name(op.kind)));
  }
  for (const auto& [key, unused] : o.items()) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      Reader::bad(opath, fmt::format("unknown field '{}' for a {}", key, name(op.kind)));
    }
  }
  if (comm) op.peer = static_cast<int32_t>(Reader::integer(o["peer"], opath + ".peer", -1, kMaxRanks));
  if (op.reads_src()) op.src = parse_range(o["src"], opath + ".src");
  if (op.writes_dst()) op.dst = parse_range(o["dst"], opath + ".dst");
  const json& deps = Reader::array(o["deps"], opath + ".deps");
  for (size_t d = 0; d < deps.size(); ++d) {
    const std::string dpath = fmt::format("{}.deps[{}]", opath, d);
    const json& pair = Reader::array(deps[d], dpath);
    if (pair.size() != 2) Reader::bad(dpath, "expected [lane, op]");
    lane.deps.push_back({static_cast<uint32_t>(Reader::integer(pair[0], dpath + "[0]", 0, kMaxU32)),
                         static_cast<uint32_t>(Reader::integer(pair[1], dpath + "[1]", 0, kMaxU32))});
  }
  return op;
}

// One rank's program at `rpath`: its scratch and its lanes of ops.
RankProgram read_rank(const json& value, const std::string& rpath) {
  const json& rank_doc = Reader::object(value, rpath, {"scratch_chunks", "lanes"});
  RankProgram rank;
  rank.scratch_chunks =
      static_cast<uint32_t>(Reader::integer(rank_doc["scratch_chunks"], rpath + ".scratch_chunks", 0, kMaxU32));
  const json& lanes = Reader::array(rank_doc["lanes"], rpath + ".lanes");
  for (size_t l = 0; l < lanes.size(); ++l) {
    const std::string lpath = fmt::format("{}.lanes[{}]", rpath, l);
    const json& ops = Reader::array(Reader::object(lanes[l], lpath, {"ops"})["ops"], lpath + ".ops");
    Lane lane;
    for (size_t i = 0; i < ops.size(); ++i) {
      lane.ops.push_back(read_op(ops[i], fmt::format("{}.ops[{}]", lpath, i), lane));
      lane.dep_begin.push_back(static_cast<uint32_t>(lane.deps.size()));
    }
    rank.lanes.push_back(std::move(lane));
  }
  return rank;
}

}  // namespace

Schedule schedule_from_json(const std::string& text) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    fail(ErrorCode::kFormat, "schedule JSON: not valid JSON: {}", e.what());
  }
  const json& top = Reader::object(doc, "", {"schema_version", "collective", "algorithm", "nranks", "root",
                                             "chunks_per_block", "params", "symmetry", "ranks"});
  const int64_t version = Reader::integer(top["schema_version"], "schema_version", 0, kMaxU32);
  if (version != Schedule::kSchemaVersion) {
    Reader::bad("schema_version", fmt::format("version {} is not supported (this tandem reads version {})", version,
                                              Schedule::kSchemaVersion));
  }
  Schedule s;
  s.collective = Reader::named(top["collective"], "collective", parse_collective);
  s.algorithm = Reader::named(top["algorithm"], "algorithm", parse_algorithm);
  s.nranks = static_cast<int>(Reader::integer(top["nranks"], "nranks", 1, kMaxRanks));
  s.root = static_cast<int>(Reader::integer(top["root"], "root", 0, s.nranks - 1));
  s.chunks_per_block = static_cast<uint32_t>(Reader::integer(top["chunks_per_block"], "chunks_per_block", 1, kMaxU32));
  const json& params = Reader::object(top["params"], "params", {"channels", "pipeline_chunks", "inter_node"});
  s.params.channels = static_cast<int>(Reader::integer(params["channels"], "params.channels", 1, 1024));
  s.params.pipeline_chunks =
      static_cast<int>(Reader::integer(params["pipeline_chunks"], "params.pipeline_chunks", 1, 1 << 20));
  s.params.inter_node = Reader::named(params["inter_node"], "params.inter_node", parse_algorithm);
  if (!top["symmetry"].is_null()) s.symmetry = read_symmetry(top["symmetry"], s.nranks);
  const json& ranks = Reader::array(top["ranks"], "ranks");
  const size_t programs = s.symmetric() ? 1 : static_cast<size_t>(s.nranks);
  if (ranks.size() != programs) {
    Reader::bad("ranks", fmt::format("{} rank programs, expected {}", ranks.size(), programs));
  }
  for (size_t r = 0; r < ranks.size(); ++r) s.ranks.push_back(read_rank(ranks[r], fmt::format("ranks[{}]", r)));
  check_sizes(s);
  return s;
}

}  // namespace tandem
