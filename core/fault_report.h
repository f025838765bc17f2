// A fault as a backend saw it, as fields: what happened, which rank saw it and the other end,
// where in the schedule, which of the plan's faults did it, in which collective. Every executor
// throws one inside its Error (fault_error()), the run session's attempt outcome carries it
// (AttemptResult::fault, core/session.h), and tests compare its fields, never its words: text()
// is the one place a fault is written out, for the report and the command line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/schedule.h"
#include "core/types.h"

namespace tandem {

// A position in a rank's program: op `op` of lane `lane` (in tile `tile` when the run pipelines
// tiles), and what that op is, with its peer.
struct OpPosition {
  std::optional<uint32_t> tile;  // set when the run has more than one tile
  uint32_t lane = 0;
  uint32_t op = 0;
  OpKind kind = OpKind::kRecv;
  int peer = -1;           // -1: the op waits on a dependency of another lane, not on a message
  std::string describe() const;  // "lane 0 op 12, Recv from 5"
};

struct FaultReport {
  enum class Kind : uint8_t {
    kSendFailed,  // `rank`'s send to `peer` failed (Error kFault)
    kCorrupt,     // `rank`'s message from `peer` failed its checksum (kCorrupt)
    kLost,        // `rank` waits on a message from `peer` that was lost (kTimeout)
    kAbsent,      // ranks `absent` never arrived; `rank` (if known) waits on one of them (kTimeout)
    kStalled,     // no progress, no fault to name: `rank` waits at `at` (kTimeout)
    kDesync,      // ranks disagree on the collective (kDesync)
  };

  Kind kind = Kind::kStalled;
  std::string backend;        // "host", "sim", "cuda", "nccl"
  int rank = -1;              // the rank that saw it: a failed send's sender, a receiver otherwise
  int peer = -1;              // the other end: a failed send's receiver, a lost or corrupt message's sender
  std::vector<int> absent;    // kAbsent
  std::optional<OpPosition> at;  // where `rank` stood
  int fault = -1;             // the plan's fault that did it (TransferEffect::fault_index); -1: not known

  // The collective, for a timeout's first words ("sim all_reduce (ring, 8 ranks) timed out after
  // 5000 ms: "); a report without `timeout_ms` has none.
  Collective collective = Collective::kAllReduce;
  Algorithm algorithm = Algorithm::kRing;
  int nranks = 0;
  int64_t timeout_ms = 0;
  std::string note;  // what the backend adds (the awaited peer's state); a report without a rank is its note

  // Filled by the run session (core/session.cc): the attempt's collective number and bytes, and the
  // backend's clock spent in it.
  int64_t sequence = -1;
  int64_t bytes = 0;
  double seconds = 0;

  ErrorCode code() const;
  // The rank to blame: the rank whose message was lost, the first absent one, else the one that saw it.
  int culprit() const;
  std::string text() const;
};

// The Error a backend throws for `report`: its code, text() as its message, the report attached.
Error fault_error(FaultReport report);
[[noreturn]] void fail(FaultReport report);

}  // namespace tandem
