// What the simulator runs, one identity from the parser to the simulator: one of core's schedule
// algorithms (core/types.h: ring, tree, pat, ...) or one of the simulator's own models of NCCL's
// paths that are not schedules (NVLS, NVLS Tree, CollNet Direct and Chain, point-to-point). The
// tuner decides on these values; names appear only at the edges: parse_sim_algorithm for flags and
// files, name() for reports and results. A new core algorithm needs nothing here.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/types.h"
#include "models/cost_model.h"
#include "models/nccl_protocol.h"

namespace tandem::sim {

struct SimAlgorithm {
  // The simulator's models; kSchedule: core's schedule of `schedule`.
  enum class Model : uint8_t { kSchedule, kNvls, kNvlsTree, kCollNetDirect, kCollNetChain, kP2p };

  Model model = Model::kSchedule;
  Algorithm schedule = Algorithm::kRing;  // kRing for every model, so that == compares the model

  constexpr SimAlgorithm() = default;
  constexpr SimAlgorithm(Algorithm algorithm) : schedule(algorithm) {}  // NOLINT: every core algorithm is one
  constexpr SimAlgorithm(Model m) : model(m) {}                          // NOLINT

  // One of the simulator's models rather than a core schedule.
  constexpr bool is_model() const { return model != Model::kSchedule; }
  auto operator<=>(const SimAlgorithm&) const = default;
};

// "ring", "tree", ... (core's names), "nvls", "nvls_tree", "collnet_direct", "collnet_chain", "p2p".
std::string_view name(SimAlgorithm algorithm);
// The algorithm called `text`; nullopt when there is none ("auto" included).
std::optional<SimAlgorithm> find_sim_algorithm(std::string_view text);
// The same, throwing Error(kInvalidArgument) that lists the names.
SimAlgorithm parse_sim_algorithm(std::string_view text);
// "auto" (nullopt: NCCL's tuner picks) or an algorithm's name.
std::optional<SimAlgorithm> parse_sim_algorithm_or_auto(std::string_view text);
// The name of a choice that may be "auto".
std::string_view name_or_auto(const std::optional<SimAlgorithm>& algorithm);

// "auto" (nullopt: NCCL's pick for the algorithm) or a protocol's name (LL, LL128, Simple).
std::optional<models::NcclProtocol> parse_protocol_or_auto(std::string_view text);

// Whether `algorithm` times `collective` at all: core's implements() for schedules; p2p for
// all_to_all and send_recv; the in-switch models (NVLS, NVLS Tree, CollNet) for all_reduce.
bool applies(SimAlgorithm algorithm, Collective collective);

// The NCCL algorithm whose protocol and channels `algorithm` takes: NCCL's own where it has it;
// the ring's for tandem's other algorithms (their steps are point-to-point like a ring's).
models::NcclAlgorithm nccl_algorithm(SimAlgorithm algorithm);
// Whether NCCL itself has `algorithm` (ring, tree, NVLS, NVLS Tree, CollNet; PAT has its own rule).
bool nccl_has(SimAlgorithm algorithm);
// NCCL's algorithm as the simulator runs it.
SimAlgorithm sim_algorithm(models::NcclAlgorithm algorithm);

}  // namespace tandem::sim
