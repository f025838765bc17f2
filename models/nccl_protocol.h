// NCCL's three protocols, the one enum both predictors use: NcclCostModel indexes its tables by it
// and the simulator times its messages by it (sim/protocol.h: LL moves 8 bytes per 4 of payload,
// LL128 120 of every 128, Simple all of them; each has its own per-hop latency).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace tandem::models {

// In NCCL's id order (nccl_tuner.h: LL=0, LL128=1, Simple=2); the cost model's tables are indexed by it.
enum class NcclProtocol : uint8_t { kLL, kLL128, kSimple };
inline constexpr int kNcclProtocolCount = 3;

// Every protocol, in id order.
std::span<const NcclProtocol> all_nccl_protocols();

// "LL", "LL128", "Simple" (NCCL's spelling): the names tandem's reports and sweep files carry.
std::string_view name(NcclProtocol protocol);

// The inverse of name(); throws Error(kInvalidArgument) for any other text.
NcclProtocol parse_nccl_protocol(std::string_view text);

}  // namespace tandem::models
