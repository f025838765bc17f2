#include "core/fault_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>

namespace tandem {

namespace {

std::string where(const OpPosition& at) {
  if (at.tile) return fmt::format("tile {} lane {} op {}", *at.tile, at.lane, at.op);
  return fmt::format("lane {} op {}", at.lane, at.op);
}

std::string ranks_never_arrived(const std::vector<int>& absent) {
  if (absent.size() == 1) return fmt::format("rank {} never arrived", absent.front());
  return fmt::format("ranks {} never arrived", fmt::join(absent, ", "));
}

}  // namespace

std::string OpPosition::describe() const {
  if (peer < 0) return fmt::format("{}, {} (on a dependency)", where(*this), name(kind));
  return fmt::format("{}, {} {} {}", where(*this), name(kind), kind == OpKind::kSend ? "to" : "from", peer);
}

ErrorCode FaultReport::code() const {
  switch (kind) {
    case Kind::kSendFailed: return ErrorCode::kFault;
    case Kind::kCorrupt: return ErrorCode::kCorrupt;
    case Kind::kDesync: return ErrorCode::kDesync;
    case Kind::kLost:
    case Kind::kAbsent:
    case Kind::kStalled: return ErrorCode::kTimeout;
  }
  return ErrorCode::kBackend;
}

int FaultReport::culprit() const {
  if (kind == Kind::kLost) return peer;
  if (kind == Kind::kAbsent) return absent.empty() ? -1 : absent.front();
  return rank;
}

std::string FaultReport::text() const {
  if (kind == Kind::kDesync || (rank < 0 && kind != Kind::kLost && kind != Kind::kAbsent)) return note;
  const std::string injected = fault >= 0 ? fmt::format(" (injected fault #{})", fault) : "";
  std::string text;
  if (kind == Kind::kSendFailed || kind == Kind::kCorrupt) {
    text = at ? fmt::format("{} rank {} {}: ", backend, rank, where(*at)) : fmt::format("{} rank {}: ", backend, rank);
    if (kind == Kind::kCorrupt) {
      text += fmt::format("the message from {} failed its checksum", peer);
    } else {
      text += peer >= 0 ? fmt::format("send to {} failed{}", peer, injected) : fmt::format("a send failed{}", injected);
    }
  } else {
    if (timeout_ms > 0) {
      text = fmt::format("{} {} ({}, {} ranks) timed out after {} ms: ", backend, name(collective), name(algorithm),
                         nranks, timeout_ms);
    }
    std::string waiter;
    if (rank >= 0) {
      waiter = at ? fmt::format("rank {} waits on {}", rank, at->describe()) : fmt::format("rank {} waits", rank);
    }
    if (kind == Kind::kLost) {
      text += waiter.empty() ? fmt::format("a message from rank {} was lost{}", peer, injected)
                             : fmt::format("{}; its message from rank {} was lost{}", waiter, peer, injected);
    } else if (kind == Kind::kAbsent) {
      text += ranks_never_arrived(absent);
      if (!waiter.empty()) text += fmt::format(" ({})", waiter);
    } else {
      text += waiter;
    }
  }
  if (!note.empty()) text = text.empty() ? note : fmt::format("{}; {}", text, note);
  return text;
}

Error fault_error(FaultReport report) {
  const ErrorCode code = report.code();
  std::string message = report.text();
  return Error(code, message, std::make_shared<const FaultReport>(std::move(report)));
}

void fail(FaultReport report) { throw fault_error(std::move(report)); }

}  // namespace tandem
