// models::Graph: the Boost.Graph adjacency list a Topology is built from. Only the code that builds
// a graph (cluster.cc, hand-made graphs in tests) or indexes one (topology.cc) includes this header:
// Boost.Graph costs about two seconds of every file that parses it, and the rest of tandem reads a
// topology through Topology::vertex / link / route.
#pragma once

#include <type_traits>

#include <boost/graph/adjacency_list.hpp>

#include "models/topology.h"

namespace tandem::models {

class Graph : public boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, Vertex, Link> {
 public:
  using adjacency_list::adjacency_list;
};

static_assert(std::is_same_v<Graph::vertex_descriptor, VertexId>, "VertexId must be Graph's vertex descriptor");

}  // namespace tandem::models
