// NCCL's double binary tree all_reduce.
//
// Two binary trees span the same ranks so that every rank is a leaf in (at least) one of them:
// each tree reduces half of the data up to its root and broadcasts the result back down, and the
// two halves together use every rank's send and receive bandwidth. Inside a tree, the reduce (up)
// and the broadcast (down) run on separate lanes, so chunk c can come down while chunk c+1 is
// still going up (NCCL's split tree).
#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/algorithms/internal.h"
#include "core/error.h"

namespace tandem::algorithms {
namespace {

// Channels: NCCL runs tree 0 on the first half of its channels and tree 1 (the mirror) on the
// second half (graph/connect.cc connectTrees). Channel c has an up lane (2c) and a down lane (2c+1).
constexpr int kTreeCount = 2;
int up_lane(int channel) { return 2 * channel; }
int down_lane(int channel) { return 2 * channel + 1; }
// The channels a tree schedule runs: params.channels rounded up to a whole pair (one per tree).
int tree_channels(const AlgoParams& params) { return std::max(kTreeCount, (params.channels + 1) / 2 * 2); }

// One member's links in one tree; -1 means "none".
struct TreeLinks {
  int parent = -1;
  std::vector<int> children;
};

// ncclGetBtree (NCCL src/graph/trees.cc). With `bit` the lowest set bit of r, r's parent clears
// that bit and sets the next one up; its children sit bit/2 below and above it. Rank 0 is the
// root and has a single child, the largest power of two below n. For 8 members:
//
//              0            rank:    0  1  2  3  4  5  6  7
//              |            parent:  -  2  4  2  0  6  4  6
//              4
//           /     \          r = 6: bit = 2, parent = (6 ^ 2) | 4 = 4,
//          2       6         children 6 - 1 = 5 and 6 + 1 = 7
//         / \     / \        (leaves: the odd ranks)
//        1   3   5   7
//
// When n is not a power of two, a parent beyond n falls back to r ^ bit (drop the bit) and the
// upper child shrinks (r + bit/4, r + bit/8, ...) until it is in range.
TreeLinks binary_tree(int n, int r) {
  TreeLinks links;
  if (r == 0) {
    int bit = 1;
    while (bit < n) bit <<= 1;
    if (n > 1) links.children.push_back(bit >> 1);
    return links;
  }
  const int bit = r & -r;
  links.parent = (r ^ bit) | (bit << 1);
  if (links.parent >= n) links.parent = r ^ bit;
  int low_bit = bit >> 1;
  if (low_bit > 0) links.children.push_back(r - low_bit);
  while (low_bit > 0 && r + low_bit >= n) low_bit >>= 1;
  if (low_bit > 0) links.children.push_back(r + low_bit);
  return links;
}

// ncclGetDtree: the second tree. For even n it mirrors the first (r' = n-1-r), for odd n it
// shifts it by one (r' = r-1 mod n), so that the leaves of one tree are the inner nodes of the
// other. For 8 members (mirror):
//
//              7            rank:    0  1  2  3  4  5  6  7
//              |            parent:  1  3  1  7  5  3  5  -
//              3
//           /     \          rank r sits where rank 7 - r sits in the first tree
//          5       1
//         / \     / \        (leaves: the even ranks)
//        6   4   2   0
TreeLinks second_tree(int n, int r) {
  const bool mirror = n % 2 == 0;
  const auto to_tree = [&](int x) { return mirror ? n - 1 - x : (x - 1 + n) % n; };
  const auto from_tree = [&](int x) { return x < 0 ? -1 : mirror ? n - 1 - x : (x + 1) % n; };
  TreeLinks links = binary_tree(n, to_tree(r));
  links.parent = from_tree(links.parent);
  for (int& child : links.children) child = from_tree(child);
  return links;
}

// The links of every rank in tree `tree` on channel `channel`. The trees above run over nodes;
// each node joins them through its head, and the node's other ranks hang below the head as a
// chain, as NCCL's intra-node chains do (graph/search.cc NCCL_TOPO_PATTERN_TREE: "all NIC traffic
// going to/from the same GPU"). Channel c's head is local rank h = c mod (channels per tree) mod
// ranks_per_node and its chain runs h, h+1, ..., h-1 (mod ranks_per_node), so that the channels of
// a tree spread their network traffic over the node's GPUs and NICs. Tree 0, channel 1, over 3
// nodes of 4 ranks (node tree: 0 -> 2 -> 1):
//
//    node 0:   1 - 2 - 3 - 0
//              |
//    node 2:   9 - 10 - 11 - 8
//              |
//    node 1:   5 - 6 - 7 - 4
//
// With one rank per node this is the plain tree over ranks; with one node it is a single chain.
// A head reduces its node-tree children first, then its chain child: at most 3 children, as
// NCCL_MAX_TREE_ARITY allows.
std::vector<TreeLinks> rank_tree(int nranks, int ranks_per_node, int tree, int head_local) {
  const int node_count = (nranks + ranks_per_node - 1) / ranks_per_node;
  std::vector<TreeLinks> ranks(static_cast<size_t>(nranks));
  for (int node = 0; node < node_count; ++node) {
    const int base = node * ranks_per_node;
    const int size = std::min(ranks_per_node, nranks - base);
    // The node's chain, head first; a short last node keeps the head inside it.
    std::vector<int> chain;
    for (int i = 0; i < size; ++i) chain.push_back(base + (head_local % size + i) % size);
    const auto head_of = [&](int v) {
      const int b = v * ranks_per_node;
      const int n = std::min(ranks_per_node, nranks - b);
      return b + head_local % n;
    };
    const TreeLinks node_links = tree == 0 ? binary_tree(node_count, node) : second_tree(node_count, node);
    TreeLinks& head_links = ranks[static_cast<size_t>(chain[0])];
    head_links.parent = node_links.parent < 0 ? -1 : head_of(node_links.parent);
    for (int child : node_links.children) head_links.children.push_back(head_of(child));
    for (size_t i = 0; i < chain.size(); ++i) {
      if (i > 0) ranks[static_cast<size_t>(chain[i])].parent = chain[i - 1];
      if (i + 1 < chain.size()) ranks[static_cast<size_t>(chain[i])].children.push_back(chain[i + 1]);
    }
  }
  return ranks;
}

}  // namespace

// Chunks of the block, P = params.pipeline_chunks, C = tree_channels(params), channel c owning
// chunks [c*P, (c+1)*P):
//
//    | ch 0: tree 0 | ... | ch C/2-1: tree 0 | ch C/2: tree 1 | ... | ch C-1: tree 1 |
//
// Chunk x of channel c, on each rank:
//    up   (lane 2c):   Output[x] = Input[x] (+) child 0 (+) child 1 (+) ...; send Output[x] to parent
//                      (a leaf sends Input[x]; the root keeps the full sum)
//    down (lane 2c+1): receive Output[x] from parent (not the root); send Output[x] to each child
// The down receive overwrites the partial sum the up phase left in Output[x]; the builder orders
// it after the up send of that chunk (and, in place, after a leaf's send of Input[x]).
Schedule build_tree(const CollectiveSpec& spec, const RankLayout& layout, const AlgoParams& params) {
  const int nranks = spec.nranks;
  const int channels = tree_channels(params);
  const int per_tree = channels / kTreeCount;
  const uint32_t P = static_cast<uint32_t>(params.pipeline_chunks);
  const uint32_t chunks = static_cast<uint32_t>(channels) * P;
  ScheduleBuilder builder(spec.collective, Algorithm::kTree, nranks, spec.root, chunks, params);
  if (nranks == 1) {
    builder.copy(0, 0, slots(BufferKind::kInput, 0, chunks), slots(BufferKind::kOutput, 0, chunks));
    return std::move(builder).finish();
  }

  std::vector<std::vector<TreeLinks>> trees;  // per channel
  for (int c = 0; c < channels; ++c) {
    const int tree = c / per_tree;
    const int head = c % per_tree % layout.ranks_per_node;
    // Channels of one tree with the same head share one tree: build it once.
    if (c % per_tree >= layout.ranks_per_node) {
      trees.push_back(trees[static_cast<size_t>(c - layout.ranks_per_node)]);
    } else {
      trees.push_back(rank_tree(nranks, layout.ranks_per_node, tree, head));
    }
  }

  // Each rank's ops in the order it runs them: chunk by chunk, up before down.
  for (int r = 0; r < nranks; ++r) {
    for (uint32_t i = 0; i < P; ++i) {
      for (int c = 0; c < channels; ++c) {
        const TreeLinks& links = trees[static_cast<size_t>(c)][static_cast<size_t>(r)];
        const uint32_t x = static_cast<uint32_t>(c) * P + i;
        const SlotRange input = slots(BufferKind::kInput, x);
        const SlotRange output = slots(BufferKind::kOutput, x);
        SlotRange partial = input;
        for (int child : links.children) {
          builder.recv_reduce(r, up_lane(c), child, partial, output);
          partial = output;
        }
        if (links.parent >= 0) builder.send(r, up_lane(c), links.parent, partial);
      }
      for (int c = 0; c < channels; ++c) {
        const TreeLinks& links = trees[static_cast<size_t>(c)][static_cast<size_t>(r)];
        const SlotRange output = slots(BufferKind::kOutput, static_cast<uint32_t>(c) * P + i);
        if (links.parent >= 0) builder.recv(r, down_lane(c), links.parent, output);
        for (int child : links.children) builder.send(r, down_lane(c), child, output);
      }
    }
  }
  return std::move(builder).finish();
}

}  // namespace tandem::algorithms

namespace tandem {

int nccl_tree_parent(int n, int r, int tree) {
  if (n < 1 || r < 0 || r >= n) fail(ErrorCode::kInvalidArgument, "nccl_tree_parent: member {} of {}", r, n);
  return (tree == 0 ? algorithms::binary_tree(n, r) : algorithms::second_tree(n, r)).parent;
}

}  // namespace tandem
