// Faults: what can go wrong in a collective, when, and how each backend sees it. One FaultPlan
// (from a scenario's `faults:` section or the API) drives every backend; a FaultInjector answers
// the backend's questions ("does rank r enter collective k?", "what happens to this send?")
// deterministically for a given seed.
//
// How the backends map faults (docs/faults.md):
//   - sim: link_down / link_degrade / nic_down act on the simulated links (no bandwidth, or a
//     fraction of it) of the transfers whose route crosses them; straggler slows a rank's ops;
//     hang / crash stop a rank; transient fails one transfer; time is SimGrid's.
//   - host: the same faults act on the transfers whose route (from models) crosses the link:
//     fail (transient, link down), stall (hang), delay (degrade, straggler); corrupt flips a bit
//     in a received chunk; a crashed or hung rank's thread stops taking part.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/schedule.h"
#include "core/types.h"

namespace tandem {

enum class FaultKind : uint8_t {
  kLinkDown,     // a link carries nothing; with recover_after_s it comes back (a flap)
  kLinkDegrade,  // a link runs at `factor` of its bandwidth
  kNicDown,      // every link of a NIC is down
  kRankCrash,    // the rank dies: it stops taking part and never dumps
  kRankHang,     // the rank never enters the triggering collective (it is alive and can dump)
  kStraggler,    // the rank's ops take `factor` times as long
  kTransient,    // one op fails once; the retry succeeds
  kDesync,       // the rank issues a different collective, count or dtype
  kCorrupt,      // one bit flips in a chunk the rank receives
};
std::string_view name(FaultKind kind);              // "link_down", "link_degrade", ...
FaultKind parse_fault_kind(std::string_view text);  // Error(kInvalidArgument) listing the kinds

// When a fault hits. Every set condition must hold; none set = from the first collective on.
struct FaultTrigger {
  std::optional<double> at_s;         // the backend's clock, seconds since the run began
  std::optional<int64_t> collective;  // the collective's sequence number (0-based, per run)
  std::optional<int64_t> op;          // the op index in the rank's program (lanes in order)
  std::optional<double> probability;  // per candidate collective, drawn from the plan's seed
};

struct Fault {
  FaultKind kind = FaultKind::kTransient;
  FaultTrigger trigger;
  int rank = -1;                          // rank faults: the rank (required)
  // Training steps: the communicator kind whose collectives trigger.collective counts on the rank
  // ("tp", "pp", "fsdp", "dp", "ep", "cp", ...); empty in a collective loop (its one communicator).
  std::string group;
  std::string link;                       // link faults: the topology link's name (tandem topo)
  int node = -1;                          // nic_down: the node ...
  int nic = -1;                           // ... and its NIC (= rail)
  double factor = 1.0;                    // link_degrade: bandwidth share (0, 1); straggler: slowdown > 1
  std::optional<double> recover_after_s;  // link_down / nic_down: back up after this long (a flap)
  // desync: what the rank issues instead (at least one set).
  std::optional<Collective> desync_collective;
  std::optional<int64_t> desync_count;
  std::optional<DataType> desync_dtype;

  bool is_link_fault() const {
    return kind == FaultKind::kLinkDown || kind == FaultKind::kLinkDegrade || kind == FaultKind::kNicDown;
  }
  std::string describe() const;  // "link_down n0-nic3<->leaf3 at collective 2, back after 5 ms"
};

struct FaultPlan {
  std::vector<Fault> faults;
  uint64_t seed = 1;
  bool empty() const { return faults.empty(); }
};

// What a rank does when it reaches a collective.
enum class RankAction : uint8_t { kEnter, kHang, kCrash };

// What happens to one transfer.
struct TransferEffect {
  bool fail = false;              // the transfer fails (transient, or a dead link without reroute)
  bool stall = false;             // the transfer never completes (dead link and nobody notices)
  double bandwidth_factor = 1.0;  // < 1: degraded link on its route
  double delay_factor = 1.0;      // > 1: straggler on either end
  bool corrupt = false;           // flip a bit in what the receiver gets
  int fault_index = -1;           // the plan's fault responsible (the first one), for reports
};

// How every backend realises a transfer's effect, so that the same fault does the same thing on
// each: a corrupt transfer has bit kCorruptBitMask of the middle byte of the received message
// flipped; a slowed one (delay_factor / bandwidth_factor = f > 1) takes (f - 1) times longer than
// it did, counting at least kMinSlowedTransfer_s, so that the slowdown shows on small messages too.
inline constexpr uint8_t kCorruptBitMask = 0x10;
inline constexpr double kMinSlowedTransfer_s = 20e-6;

// Which transfers a link fault touches: does the route between two ranks cross `fault`'s link or
// NIC? Supplied by whoever knows the topology (app, sim); core has no topology.
using RouteCrossesFn = std::function<bool(const Fault& fault, int src_rank, int dst_rank)>;

// Answers the backends' questions for one collective attempt. Deterministic: the same plan,
// seed, collective and attempt give the same answers, whatever the thread order.
class FaultInjector {
 public:
  FaultInjector(FaultPlan plan, RouteCrossesFn crosses);

  const FaultPlan& plan() const { return plan_; }

  // The faults (indices into plan().faults) active in collective `sequence`, attempt `attempt`
  // (0 = first try), which starts at `now_s`; the collective's first attempt began at `began_s`.
  // One-shot faults (transient, corrupt, desync) hit their collective's first attempt only;
  // persistent ones stay from their collective (or time) on; a flap until recover_after_s after
  // it went down. `rerouted` drops link and NIC faults (the schedule now avoids them). Call it in
  // time order (it remembers when a flap went down).
  std::vector<int> active(int64_t sequence, int attempt, double now_s, double began_s, bool rerouted) const;

  // The rank's action at collective `sequence` given the active faults.
  RankAction rank_action(const std::vector<int>& active, int rank) const;
  // The collective a desynced rank issues instead (nullopt: as everyone else).
  std::optional<CollectiveSpec> desync(const std::vector<int>& active, int rank, const CollectiveSpec& spec) const;
  // The slowdown of the rank's ops (1 = none).
  double straggle(const std::vector<int>& active, int rank) const;
  // The effect on the transfer of `bytes` from src to dst, the op_index-th op of src's program.
  TransferEffect transfer(const std::vector<int>& active, int src, int dst, int64_t op_index) const;

 private:
  bool triggered(const Fault& fault, int64_t sequence, double now_s) const;

  FaultPlan plan_;
  RouteCrossesFn crosses_;
  // When each flap went down (the first active() that found it triggered). active() is called by
  // one driver thread, collective after collective; the backends' threads only call the const
  // queries below it.
  mutable std::vector<std::optional<double>> down_since_;
};

}  // namespace tandem
