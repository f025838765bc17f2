// sim::SimExecutor: the simulator behind the executor contract (core/executor.h), so that the code
// that runs a schedule on the host threads or on GPUs runs it on a simulated cluster unchanged.
//
// What it does with run()'s arguments:
//   - No data moves: `buffers` are not read or written (they may be empty or hold null pointers).
//     RunResult::seconds is the simulated duration of the collective (SimGrid's clock).
//   - Rank r runs on GPU placement()[r]: by default rank r on GPU r, node-major (ranks 0..7 on
//     node 0 of an 8-GPU node, ...); set_placement() chooses others.
//   - Without a fault hook (RunContext::on_send empty) the schedule goes to Simulator::run as it
//     is: a rank-symmetric ring takes the compressed rounds, a tree its analytic replay.
//   - With a hook, the schedule is run in its explicit form and the hook is asked once per send of
//     every rank, with exactly the host backend's numbering (op index over all tiles, lanes in
//     order: tile * ops_per_tile + first op of the lane + op in the lane). The effects are realised
//     as the host backend realises them (backend/host/host_executor.cc, core/faults.h):
//       fail       Error(kFault), FaultReport kSendFailed "sim rank R lane L op I: send to P failed
//                  (injected fault #F)";
//       stall      the message is lost, and with it every later message of that (src, dst, lane)
//                  connection (FIFO); the receiver waits for ever, so the run ends in
//                  Error(kTimeout) after RunContext::timeout, FaultReport kLost naming the waiting
//                  rank and "its message from rank S was lost (injected fault #F)";
//       corrupt    with RunContext::checksums, Error(kCorrupt), FaultReport kCorrupt at the receiver
//                  "sim rank R lane L op I: the message from S failed its checksum"; without checksums nothing (there
//                  is no data to be wrong);
//       bandwidth_factor b, delay_factor d
//                  the transfer takes f = d / b times as long: its connection is held (f - 1) x
//                  its simulated transfer time longer, counting at least kMinSlowedTransfer_s
//                  (SimRequest::send_slowdown).
//     Which of several errors wins: the outcome is decided by a logical replay of the schedule
//     (no SimGrid), in waves in which every lane issues what it can and messages sent in one wave
//     arrive in the next; the first wave with an error decides, lowest rank first. A lost message
//     gives a timeout only when no error comes first, as on the host, where an error stops the
//     run at once and a timeout takes RunContext::timeout.
//
// Why per-transfer slowdowns and not Simulator::set_link_factor / set_gpu_slowdown: the hook
// reports what happens to each transfer, not which link or GPU caused it, and the contract is the
// transfer's effect ("this send takes f times as long"), which every backend realises the same
// way. Mapping it back to a link or GPU would need the fault plan and the topology's routes here
// and would still differ (a degraded link slows only the flows it bottlenecks; a slowed GPU also
// slows its local copies and reduces, which the host does not). Callers that want the physical
// model (a link at a fraction of its bandwidth, shared by the flows crossing it) use the
// Simulator's fault controls directly, as `tandem run`'s simulated loop does.
//
// SimGrid allows one platform per process: a process holds at most one SimExecutor (a second
// throws Error(kBackend)); sim::run_isolated (sim/isolated.h) runs work on other clusters in child
// processes.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/executor.h"
#include "models/cluster.h"
#include "models/topology.h"
#include "sim/simulator.h"

namespace tandem::sim {

struct SimExecutorOptions {
  NetworkModel network;                // the fluid model with its default efficiencies
  models::NcclProtocol protocol = models::NcclProtocol::kSimple;  // NCCL's protocol every message pays
};

class SimExecutor : public Executor {
 public:
  // Builds the platform of `cluster` (throws Error(kBackend) when this process already has one).
  explicit SimExecutor(const models::ClusterSpec& cluster, SimExecutorOptions options = {});
  ~SimExecutor() override;

  bool moves_data() const override { return false; }
  bool wall_clock() const override { return false; }
  std::string name() const override { return "sim"; }

  // Rank r runs on GPU gpu_of_rank[r] (distinct GPUs of the cluster; a run needs at least as many
  // entries as ranks). Empty: rank r on GPU r. Throws Error(kInvalidArgument) for a GPU out of
  // range or used twice.
  void set_placement(std::vector<int> gpu_of_rank);
  // `nranks` ranks, `ranks_per_node` on each node in rank order (rank r on node r / ranks_per_node,
  // its local GPU r % ranks_per_node): what RankLayout::nodes(nodes, ranks_per_node) assumes.
  static std::vector<int> node_major_placement(const models::Topology& topology, int nranks, int ranks_per_node);

  const models::Topology& topology() const { return topology_; }
  Simulator& simulator() { return *simulator_; }

  // Simulates `schedule` (validated) for `spec`; `buffers` are ignored. Throws Error(kFault),
  // Error(kTimeout) or Error(kCorrupt) for injected faults as described above, and
  // Error(kInvalidArgument) when the schedule and spec disagree or there are more ranks than GPUs.
  RunResult run(const Schedule& schedule, const CollectiveSpec& spec, std::span<const RankBuffers> buffers,
                const RunContext& context) override;

 private:
  std::vector<int> gpus_for(int nranks) const;

  models::Topology topology_;
  SimExecutorOptions options_;
  std::unique_ptr<Simulator> simulator_;
  std::vector<int> placement_;
};

}  // namespace tandem::sim
