// NCCL's protocols as timing terms for the simulator: a payload efficiency (bytes on the wire per
// byte of data) and a latency per hop and per collective, from NCCL 2.28's tuning tables
// (the tables are models/cost_model.h's; docs/simulator.md explains the model).
#pragma once

#include "core/types.h"
#include "models/nccl_protocol.h"

namespace tandem::sim {

// Wire bytes per payload byte: LL 2 (4 B of data per 8 B line), LL128 128/120, Simple 1.
double protocol_wire_factor(models::NcclProtocol protocol);

// NCCL's hwLat for one hop of `algorithm` (ring-like unless tree or PAT) over NVLink or the network, s.
double protocol_hop_latency_s(models::NcclProtocol protocol, Algorithm algorithm, bool network_hop);

// NCCL's baseLat: the fixed cost of launching one collective, s.
double protocol_base_latency_s(models::NcclProtocol protocol, Algorithm algorithm);

// NVLS all_reduce's latency (NCCL models it as one NVLink hop of 25 us, no base latency), s.
double nvls_latency_s();

// CollNet all_reduce's latency on `per_node` GPUs a node (NCCL's model, tuning.cc): Direct
// 2 (min(1, ppn - 1) intraLat + (ppn - 1) x 0.4 us) + interLat, Chain 2 (ppn - 1) intraLat +
// interLat, with CollNet's NVLink and NET hwLat (times the scales, 1 = NCCL's); no base latency. s.
double collnet_latency_s(bool chain, int per_node, double nvlink_scale = 1.0, double net_scale = 1.0);

// NVLS Tree's latency per tree level over the network (NCCL's NET hwLat for NVLS_TREE), s.
double nvls_tree_network_hop_latency_s();

}  // namespace tandem::sim
