#include "sim/sim_algorithm.h"

#include <array>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/algorithms.h"
#include "core/error.h"
#include "core/text.h"

namespace tandem::sim {
namespace {

using Model = SimAlgorithm::Model;

// The simulator's models and the NCCL algorithm each is; their names are NCCL's
// (models::name(NcclAlgorithm)), but for p2p, which is no algorithm of NCCL's tuner.
struct ModelEntry {
  Model model;
  models::NcclAlgorithm nccl;
  std::string_view name() const { return model == Model::kP2p ? "p2p" : models::name(nccl); }
};
constexpr std::array<ModelEntry, 5> kModels{{
    {Model::kNvls, models::NcclAlgorithm::kNvls},
    {Model::kNvlsTree, models::NcclAlgorithm::kNvlsTree},
    {Model::kCollNetDirect, models::NcclAlgorithm::kCollNetDirect},
    {Model::kCollNetChain, models::NcclAlgorithm::kCollNetChain},
    {Model::kP2p, models::NcclAlgorithm::kRing},
}};

const ModelEntry* entry_of(Model model) {
  for (const ModelEntry& e : kModels) {
    if (e.model == model) return &e;
  }
  return nullptr;
}

std::vector<std::string> all_names() {
  std::vector<std::string> names;
  for (Algorithm a : all_algorithms()) names.emplace_back(name(a));
  for (const ModelEntry& e : kModels) names.emplace_back(e.name());
  return names;
}

}  // namespace

std::string_view name(SimAlgorithm algorithm) {
  if (!algorithm.is_model()) return name(algorithm.schedule);
  return entry_of(algorithm.model)->name();
}

std::optional<SimAlgorithm> find_sim_algorithm(std::string_view text) {
  for (Algorithm a : all_algorithms()) {
    if (name(a) == text) return SimAlgorithm(a);
  }
  for (const ModelEntry& e : kModels) {
    if (e.name() == text) return SimAlgorithm(e.model);
  }
  return std::nullopt;
}

SimAlgorithm parse_sim_algorithm(std::string_view text) {
  if (std::optional<SimAlgorithm> found = find_sim_algorithm(text)) return *found;
  const std::vector<std::string> names = all_names();
  fail(ErrorCode::kInvalidArgument, "unknown algorithm '{}'{} (expected: {})", text, did_you_mean(text, names),
       fmt::join(names, ", "));
}

std::optional<SimAlgorithm> parse_sim_algorithm_or_auto(std::string_view text) {
  if (text == "auto") return std::nullopt;
  return parse_sim_algorithm(text);
}

std::string_view name_or_auto(const std::optional<SimAlgorithm>& algorithm) {
  return algorithm ? name(*algorithm) : std::string_view("auto");
}

std::optional<models::NcclProtocol> parse_protocol_or_auto(std::string_view text) {
  if (text == "auto") return std::nullopt;
  return models::parse_nccl_protocol(text);
}

bool applies(SimAlgorithm algorithm, Collective collective) {
  switch (algorithm.model) {
    case Model::kSchedule:
      return implements(algorithm.schedule, collective);
    case Model::kP2p:
      return collective == Collective::kAllToAll || collective == Collective::kSendRecv;
    default:
      return collective == Collective::kAllReduce;
  }
}

models::NcclAlgorithm nccl_algorithm(SimAlgorithm algorithm) {
  if (algorithm.is_model()) return entry_of(algorithm.model)->nccl;
  if (algorithm.schedule == Algorithm::kTree) return models::NcclAlgorithm::kTree;
  if (algorithm.schedule == Algorithm::kPat) return models::NcclAlgorithm::kPat;
  return models::NcclAlgorithm::kRing;
}

bool nccl_has(SimAlgorithm algorithm) {
  if (algorithm.is_model()) return algorithm.model != Model::kP2p;
  return algorithm.schedule == Algorithm::kRing || algorithm.schedule == Algorithm::kTree;
}

SimAlgorithm sim_algorithm(models::NcclAlgorithm algorithm) {
  switch (algorithm) {
    case models::NcclAlgorithm::kTree:
      return Algorithm::kTree;
    case models::NcclAlgorithm::kPat:
      return Algorithm::kPat;
    case models::NcclAlgorithm::kRing:
      return Algorithm::kRing;
    default:
      break;
  }
  for (const ModelEntry& e : kModels) {
    if (e.nccl == algorithm && e.model != Model::kP2p) return e.model;
  }
  return Algorithm::kRing;
}

}  // namespace tandem::sim
