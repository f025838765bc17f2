// A first-in first-out queue that costs nothing while empty: a vector read from its head and reset
// when drained. std::deque allocates a 512-byte node even when empty, which adds up where there is
// a queue per pair of ranks (the host backend's mailboxes, the simulator's connections).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace tandem {

template <typename T>
class Fifo {
 public:
  bool empty() const { return head_ == items_.size(); }
  void push_back(T value) { items_.push_back(std::move(value)); }
  // Requires !empty().
  T pop_front() {
    T value = std::move(items_[head_++]);
    if (empty()) {  // drained: reuse the room from the front
      items_.clear();
      head_ = 0;
    }
    return value;
  }

 private:
  std::vector<T> items_;
  size_t head_ = 0;
};

}  // namespace tandem
