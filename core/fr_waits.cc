// Who waits on whom, followed to the end (see WaitGraph in fr_analysis_internal.h).
//
// A hang leaves most ranks waiting on a rank that is itself waiting elsewhere: in a TP8 x DP2 job
// whose rank 13 stopped, its TP peers wait on it inside their TP all_reduce, and their DP partners
// then miss the DP all_reduce, so the DP group's finding names a victim:
//
//    rank 5 --DP #40--> rank 13?   no: rank 5 is missing from DP #40 because it waits in TP #81
//    rank 5 --TP #81--> rank 13        rank 13 waits on nobody: the root
//
// The roots are the sink components of the graph (strongly connected, so a cycle of ranks that
// wait on each other is reported as a whole, not as an arbitrary member of it).
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "core/fr_analysis_internal.h"

namespace tandem::fr_detail {

size_t WaitGraph::index(int rank) const {
  auto it = std::lower_bound(nodes_.begin(), nodes_.end(), rank);
  return it != nodes_.end() && *it == rank ? static_cast<size_t>(it - nodes_.begin()) : nodes_.size();
}

WaitGraph::WaitGraph(const std::vector<WaitEdge>& edges) {
  std::set<std::pair<int, int>> seen;
  for (const WaitEdge& e : edges) {
    if (e.waiter == e.waited_on || !seen.emplace(e.waiter, e.waited_on).second) continue;
    edges_.push_back(e);
    nodes_.push_back(e.waiter);
    nodes_.push_back(e.waited_on);
  }
  std::sort(nodes_.begin(), nodes_.end());
  nodes_.erase(std::unique(nodes_.begin(), nodes_.end()), nodes_.end());
  const size_t n = nodes_.size();
  out_.assign(n, {});
  std::vector<std::vector<size_t>> in(n);
  for (size_t i = 0; i < edges_.size(); ++i) {
    out_[index(edges_[i].waiter)].push_back(i);
    in[index(edges_[i].waited_on)].push_back(index(edges_[i].waiter));
  }
  // Kosaraju, without recursion (a 16,384-rank job makes deep chains): finishing order on the
  // graph, then components on the reversed graph in reverse finishing order.
  std::vector<size_t> order;
  std::vector<bool> visited(n, false);
  for (size_t start = 0; start < n; ++start) {
    if (visited[start]) continue;
    std::vector<std::pair<size_t, size_t>> stack{{start, 0}};
    visited[start] = true;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < out_[node].size()) {
        const size_t to = index(edges_[out_[node][next++]].waited_on);
        if (!visited[to]) {
          visited[to] = true;
          stack.emplace_back(to, 0);
        }
      } else {
        order.push_back(node);
        stack.pop_back();
      }
    }
  }
  component_.assign(n, -1);
  int components = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (component_[*it] >= 0) continue;
    std::vector<size_t> stack{*it};
    component_[*it] = components;
    while (!stack.empty()) {
      const size_t node = stack.back();
      stack.pop_back();
      for (size_t from : in[node]) {
        if (component_[from] < 0) {
          component_[from] = components;
          stack.push_back(from);
        }
      }
    }
    ++components;
  }
  sink_.assign(static_cast<size_t>(components), true);
  for (const WaitEdge& e : edges_) {
    const int from = component_[index(e.waiter)], to = component_[index(e.waited_on)];
    if (from != to) sink_[static_cast<size_t>(from)] = false;
  }
  for (size_t i = 0; i < n; ++i) {
    if (sink_[static_cast<size_t>(component_[i])]) roots_.push_back(nodes_[i]);
  }
}

std::vector<int> WaitGraph::roots_from(const std::vector<int>& ranks) const {
  std::set<int> found;
  std::vector<bool> visited(nodes_.size(), false);
  for (int rank : ranks) {
    const size_t start = index(rank);
    if (start == nodes_.size()) {
      found.insert(rank);  // waits on nobody
      continue;
    }
    std::vector<size_t> stack{start};
    visited[start] = true;
    while (!stack.empty()) {
      const size_t node = stack.back();
      stack.pop_back();
      if (sink_[static_cast<size_t>(component_[node])]) found.insert(nodes_[node]);
      for (size_t e : out_[node]) {
        const size_t to = index(edges_[e].waited_on);
        if (!visited[to]) {
          visited[to] = true;
          stack.push_back(to);
        }
      }
    }
  }
  return {found.begin(), found.end()};
}

std::string WaitGraph::chain(int rank) const {
  std::string text;
  std::vector<bool> visited(nodes_.size(), false);
  for (size_t node = index(rank); node < nodes_.size() && !visited[node];) {
    visited[node] = true;
    if (sink_[static_cast<size_t>(component_[node])] || out_[node].empty()) break;
    const WaitEdge& e = edges_[out_[node].front()];
    if (!text.empty()) text += "; ";
    text += fmt::format("rank {} waits on rank {} in {}", e.waiter, e.waited_on, e.where);
    node = index(e.waited_on);
  }
  return text;
}

}  // namespace tandem::fr_detail
