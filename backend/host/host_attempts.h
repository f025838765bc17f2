// The host backend's attempts for a run session (core/session.h): every rank on a thread of its
// own, as a job's processes are, so that rank faults happen as they do on a cluster: a hung or
// crashed rank never enters the collective (its peers time out), a desynced rank really issues the
// other collective (the host backend's signature check catches it). Real data, checked against
// the reference when the policy verifies; wall time.
#pragma once

#include <vector>

#include "core/session.h"

namespace tandem {

class HostAttempts : public AttemptRunner {
 public:
  explicit HostAttempts(const Session& session) : session_(session) {}
  AttemptResult attempt(const AttemptPlan& plan, const std::vector<int>& active) override;
  double fault_free_seconds(const std::vector<int>& ranks) override;

 private:
  AttemptResult run(const std::vector<int>& ranks, const std::vector<int>& active, int attempt, bool clean);

  const Session& session_;
  FaultFreeTimes fault_free_;
};

}  // namespace tandem
