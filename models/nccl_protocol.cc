#include "models/nccl_protocol.h"

#include <array>

#include "core/error.h"

namespace tandem::models {
namespace {

constexpr std::array kProtocols = {NcclProtocol::kLL, NcclProtocol::kLL128, NcclProtocol::kSimple};
static_assert(kProtocols.size() == kNcclProtocolCount);

}  // namespace

std::span<const NcclProtocol> all_nccl_protocols() { return kProtocols; }

std::string_view name(NcclProtocol protocol) {
  switch (protocol) {
    case NcclProtocol::kLL:
      return "LL";
    case NcclProtocol::kLL128:
      return "LL128";
    case NcclProtocol::kSimple:
      return "Simple";
  }
  return "?";
}

NcclProtocol parse_nccl_protocol(std::string_view text) {
  for (NcclProtocol protocol : kProtocols) {
    if (name(protocol) == text) return protocol;
  }
  fail(ErrorCode::kInvalidArgument, "unknown protocol '{}' (expected LL, LL128 or Simple)", text);
}

}  // namespace tandem::models
