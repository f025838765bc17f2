// Reading `workload: {type: claims}` and its `expect` entries (docs/claims.md has every key).
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/scenario/scenario.h"
#include "app/scenario/scenario_yaml.h"
#include "core/error.h"
#include "models/caching_allocator.h"

namespace tandem::app {

std::string_view name(ClaimKind kind) {
  switch (kind) {
    case ClaimKind::kCollective:
      return "collective";
    case ClaimKind::kMemory:
      return "memory";
    case ClaimKind::kMtbf:
      return "mtbf";
    case ClaimKind::kStartup:
      return "startup";
  }
  return "collective";
}

std::string_view claim_unit(ClaimKind kind) {
  switch (kind) {
    case ClaimKind::kCollective:
      return "ms";
    case ClaimKind::kMemory:
      return "%";
    case ClaimKind::kMtbf:
      return "h";
    case ClaimKind::kStartup:
      return "s";
  }
  return "";
}

bool claim_higher_is_better(ClaimKind kind) { return kind == ClaimKind::kMtbf; }

std::string_view name(ClaimVerdict verdict) {
  switch (verdict) {
    case ClaimVerdict::kPlausible:
      return "plausible";
    case ClaimVerdict::kNeedsConditions:
      return "needs-conditions";
    case ClaimVerdict::kImpossible:
      return "impossible";
  }
  return "plausible";
}

ClaimVerdict parse_claim_verdict(std::string_view text) {
  for (const ClaimVerdict v : {ClaimVerdict::kPlausible, ClaimVerdict::kNeedsConditions, ClaimVerdict::kImpossible}) {
    if (text == name(v)) return v;
  }
  fail(ErrorCode::kInvalidArgument, "unknown verdict '{}' (expected: plausible, needs-conditions, impossible)", text);
}

const Claim* ClaimsWorkload::find(std::string_view claim_name) const {
  for (const Claim& claim : claims) {
    if (claim.name == claim_name) return &claim;
  }
  return nullptr;
}

namespace {

constexpr std::array<std::string_view, 2> kClaimsKeys{"type", "claims"};
// clang-format off
constexpr std::array<std::string_view, 13> kClaimKeys{
    "name", "says", "kind", "claimed", "tolerance", "collective", "size", "training", "rates", "layout", "before",
    "after", "gpus"};
// clang-format on
constexpr std::array<std::string_view, 3> kClaimedKeys{"before", "after", "after_or_better"};
constexpr std::array<std::string_view, 4> kClaimExpectKeys{"claim", "verdict", "tandem_before", "tandem_after"};

// The keys a setting accepts, per kind: its name and what the kind varies.
std::vector<std::string_view> setting_keys(ClaimKind kind) {
  switch (kind) {
    case ClaimKind::kCollective:
      return {"name", "variant", "algorithm"};
    case ClaimKind::kMemory:
      return {"name", "allocator"};
    case ClaimKind::kMtbf:
      return {"name", "recovery"};
    case ClaimKind::kStartup:
      return {"name",    "store",         "eager_init", "ranks_per_root", "runtime_connect",
              "oob_net", "init_barriers", "topo_cache"};
  }
  return {};
}

ClaimKind parse_claim_kind(std::string_view text) {
  for (const ClaimKind k : {ClaimKind::kCollective, ClaimKind::kMemory, ClaimKind::kMtbf, ClaimKind::kStartup}) {
    if (text == name(k)) return k;
  }
  fail(ErrorCode::kInvalidArgument, "unknown claim kind '{}' (expected: collective, memory, mtbf, startup)", text);
}

ClaimSetting read_setting(const Reader& reader, const YAML::Node& node, const std::string& path, const Claim& claim,
                          const std::vector<ClusterVariant>& variants, std::string default_name) {
  const std::vector<std::string_view> keys = setting_keys(claim.kind);
  Mapping m(reader, node, path, keys);
  ClaimSetting setting;
  setting.mark = source_mark(node.Mark());
  setting.name = std::move(default_name);
  if (const YAML::Node* v = m.find("name")) setting.name = reader.text(*v, m.path("name"));
  switch (claim.kind) {
    case ClaimKind::kCollective:
      if (const YAML::Node* v = m.find("variant")) {
        setting.variant = reader.text(*v, m.path("variant"));
        const bool known = std::any_of(variants.begin(), variants.end(),
                                       [&](const ClusterVariant& c) { return c.name == setting.variant; });
        if (!known) {
          std::vector<std::string_view> names;
          for (const ClusterVariant& c : variants) names.push_back(c.name);
          reader.fail_at(*v, "{}: no variant named '{}' (variants: {})", m.path("variant"), setting.variant,
                         fmt::join(names, ", "));
        }
      }
      if (const YAML::Node* v = m.find("algorithm")) {
        setting.algorithm = reader.text(*v, m.path("algorithm"));
        if (!algorithm_applies(setting.algorithm, claim.collective)) {
          reader.fail_at(*v, "{}: {}", m.path("algorithm"), not_applicable_reason(setting.algorithm, claim.collective));
        }
      }
      break;
    case ClaimKind::kMemory:
      if (const YAML::Node* v = m.find("allocator")) {
        setting.allocator = reader.scalar(*v, m.path("allocator"));
        reader.at(*v, m.path("allocator"), [&] { return models::parse_alloc_conf(setting.allocator); });
      }
      break;
    case ClaimKind::kMtbf:
      if (const YAML::Node* v = m.find("recovery")) {
        for (const YAML::Node& entry : v->IsSequence() ? reader.list(*v, m.path("recovery")) : std::vector{*v}) {
          const std::string text = reader.scalar(entry, m.path("recovery"));
          switch (reader.at(entry, m.path("recovery"), [&] { return models::parse_recovery_policy(text); })) {
            case models::RecoveryPolicy::kNone:
              break;
            case models::RecoveryPolicy::kRetry:
              setting.recovery.retry = true;
              break;
            case models::RecoveryPolicy::kReroute:
              setting.recovery.reroute = true;
              break;
            case models::RecoveryPolicy::kShrink:
              setting.recovery.shrink = true;
              break;
          }
        }
      }
      break;
    case ClaimKind::kStartup:
      read_startup_levers(reader, m, setting.levers);
      break;
  }
  return setting;
}

// `claimed`: the release note's before and after values.
ClaimedValues read_claimed(const Reader& reader, const Mapping& m, ClaimKind kind) {
  const YAML::Node& claimed = m.require("claimed");
  Mapping c(reader, claimed, m.path("claimed"), kClaimedKeys);
  ClaimedValues values;
  values.before = reader.number(c.require("before"), c.path("before"), 0, 1e12, true);
  values.after = reader.number(c.require("after"), c.path("after"), 0, 1e12, true);
  if (const YAML::Node* v = c.find("after_or_better")) {
    values.after_or_better = reader.boolean(*v, c.path("after_or_better"));
  }
  if (kind == ClaimKind::kMemory && std::max(values.before, values.after) >= 100) {
    reader.fail_at(claimed, "{}: fragmentation is a percentage under 100", m.path("claimed"));
  }
  return values;
}

// What the claim is about, by its kind: the collective and size, the training, the rates or the layout.
void read_claim_subject(const Reader& reader, const Mapping& m, const std::string& path,
                        const std::vector<ClusterVariant>& variants, Claim& claim) {
  const YAML::Node& node = m.node();
  // The keys of the other kinds are errors, not silently ignored.
  auto only_for = [&](std::string_view key, ClaimKind owner) {
    const YAML::Node* v = m.find(key);
    if (v != nullptr && claim.kind != owner) {
      reader.fail_at(*v, "{}: only a {} claim has '{}' (this one is {})", m.path(key), name(owner), key,
                     name(claim.kind));
    }
    return v;
  };
  const YAML::Node* collective = only_for("collective", ClaimKind::kCollective);
  const YAML::Node* size = only_for("size", ClaimKind::kCollective);
  const YAML::Node* training = only_for("training", ClaimKind::kMemory);
  const YAML::Node* rates = only_for("rates", ClaimKind::kMtbf);
  const YAML::Node* layout = only_for("layout", ClaimKind::kStartup);
  switch (claim.kind) {
    case ClaimKind::kCollective: {
      if (collective == nullptr) reader.fail_at(node, "{}: a collective claim needs 'collective'", path);
      if (size == nullptr) reader.fail_at(node, "{}: a collective claim needs 'size' (bytes, nccl-tests' size)", path);
      const std::string text = reader.scalar(*collective, m.path("collective"));
      claim.collective = reader.at(*collective, m.path("collective"), [&] { return parse_collective(text); });
      if (claim.collective == Collective::kAllToAll || claim.collective == Collective::kSendRecv) {
        reader.fail_at(*collective, "{}: a claim's collective is one NCCL's collectives (not {})", m.path("collective"),
                       text);
      }
      claim.size_bytes = reader.size(*size, m.path("size"));
      if (claim.size_bytes <= 0) reader.fail_at(*size, "{} must be positive", m.path("size"));
      break;
    }
    case ClaimKind::kMemory: {
      if (training == nullptr) reader.fail_at(node, "{}: a memory claim needs 'training' (a training workload)", path);
      claim.training = read_training_workload(reader, *training, m.path("training"));
      {
        // Its first layout must split the scenario's cluster (the claim is weighed on it).
        const models::ClusterSpec& cluster = variants.front().cluster;
        const int gpus = cluster.nodes * cluster.gpus_per_node;
        reader.at(*training, m.path("training"),
                  [&] { models::derive(claim.training->config_for(0, gpus), gpus, cluster.gpus_per_node); });
      }
      break;
    }
    case ClaimKind::kMtbf:
      if (rates != nullptr) {
        claim.rates = reader.text(*rates, m.path("rates"));
        reader.at(*rates, m.path("rates"), [&] { return models::failure_rates(claim.rates); });
      }
      break;
    case ClaimKind::kStartup:
      // A claim runs on the scenario's cluster: its first variant.
      if (layout != nullptr) claim.layout = read_startup_layout(reader, *layout, m.path("layout"), {variants.front()}, 0);
      break;
  }
  if (const YAML::Node* v = m.find("gpus"); v != nullptr) {
    reader.fail_at(*v, "{}: a claim runs on the scenario's cluster (its nodes x gpus_per_node)", m.path("gpus"));
  }
}

// The settings it compares: `before` (named "before" when absent) and the `after` candidates, every name unique.
void read_claim_settings(const Reader& reader, const Mapping& m, const std::vector<ClusterVariant>& variants,
                         Claim& claim) {
  if (const YAML::Node* v = m.find("before")) {
    claim.before = read_setting(reader, *v, m.path("before"), claim, variants, "before");
  } else {
    claim.before.name = "before";
  }
  const YAML::Node& after = m.require("after");
  const std::vector<YAML::Node> entries = reader.list(after, m.path("after"));
  if (entries.size() > kMaxClaimCandidates) {
    reader.fail_at(after, "{} has {} candidates, above the limit of {}", m.path("after"), entries.size(),
                   kMaxClaimCandidates);
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", m.path("after"), i);
    ClaimSetting setting = read_setting(reader, entries[i], at, claim, variants, fmt::format("after-{}", i + 1));
    const bool taken =
        setting.name == claim.before.name || std::any_of(claim.after.begin(), claim.after.end(),
                                                         [&](const ClaimSetting& s) { return s.name == setting.name; });
    if (taken) reader.fail_at(entries[i], "{}: a second setting named '{}'", at, setting.name);
    claim.after.push_back(std::move(setting));
  }
}

Claim read_claim(const Reader& reader, const YAML::Node& node, const std::string& path,
                 const std::vector<ClusterVariant>& variants) {
  Mapping m(reader, node, path, kClaimKeys);
  Claim claim;
  claim.mark = source_mark(node.Mark());
  claim.name = reader.text(m.require("name"), m.path("name"));
  if (const YAML::Node* v = m.find("says")) claim.says = reader.scalar(*v, m.path("says"));
  const YAML::Node& kind = m.require("kind");
  const std::string kind_text = reader.scalar(kind, m.path("kind"));
  claim.kind = reader.at(kind, m.path("kind"), [&] { return parse_claim_kind(kind_text); });
  claim.claimed = read_claimed(reader, m, claim.kind);
  if (const YAML::Node* v = m.find("tolerance")) claim.tolerance = reader.number(*v, m.path("tolerance"), 0, 10, true);
  read_claim_subject(reader, m, path, variants, claim);
  read_claim_settings(reader, m, variants, claim);
  return claim;
}

}  // namespace

Workload read_claims(const Reader& reader, const YAML::Node& node, const std::vector<ClusterVariant>& variants) {
  Mapping workload(reader, node, "workload", kClaimsKeys);
  const YAML::Node& list = workload.require("claims");
  const std::vector<YAML::Node> entries = reader.list(list, workload.path("claims"));
  if (entries.size() > kMaxClaims) {
    reader.fail_at(list, "{} has {} entries, above the limit of {}", workload.path("claims"), entries.size(),
                   kMaxClaims);
  }
  ClaimsWorkload claims;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", workload.path("claims"), i);
    Claim claim = read_claim(reader, entries[i], at, variants);
    if (claims.find(claim.name) != nullptr) reader.fail_at(entries[i], "{}: a second claim named '{}'", at, claim.name);
    claims.claims.push_back(std::move(claim));
  }
  return claims;
}

ClaimExpectation read_claim_expectation(const Reader& reader, const YAML::Node& node, const std::string& path,
                                        const ClaimsWorkload& claims) {
  Mapping m(reader, node, path, kClaimExpectKeys);
  ClaimExpectation e;
  e.mark = source_mark(node.Mark());
  const YAML::Node& claim = m.require("claim");
  e.claim = reader.text(claim, m.path("claim"));
  if (claims.find(e.claim) == nullptr) {
    std::vector<std::string_view> names;
    for (const Claim& c : claims.claims) names.push_back(c.name);
    reader.fail_at(claim, "{}: no claim named '{}' (claims: {})", m.path("claim"), e.claim, fmt::join(names, ", "));
  }
  if (const YAML::Node* v = m.find("verdict")) {
    const std::string text = reader.scalar(*v, m.path("verdict"));
    e.verdict = reader.at(*v, m.path("verdict"), [&] { return parse_claim_verdict(text); });
  }
  if (const YAML::Node* v = m.find("tandem_before")) e.tandem_before = read_bound(reader, *v, m.path("tandem_before"));
  if (const YAML::Node* v = m.find("tandem_after")) e.tandem_after = read_bound(reader, *v, m.path("tandem_after"));
  if (!e.verdict && !e.tandem_before.set() && !e.tandem_after.set()) {
    reader.fail_at(node, "{} checks nothing (expected verdict, tandem_before or tandem_after)", path);
  }
  return e;
}

}  // namespace tandem::app
