// A pool of threads that run the ranks of one collective at a time. Creating and destroying a
// thread per rank per collective costs more than a small collective itself (thread stacks are
// mapped and unmapped each time), so HostExecutor keeps its rank threads between runs.
// Internal to backend/host.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::host {

class RankThreads {
 public:
  RankThreads() = default;
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  // Calls body(0) .. body(count - 1) concurrently (body(0) on the calling thread) and returns
  // when all have returned. `body` must not throw. Calls from several threads run one at a time.
  void run_all(int count, const std::function<void(int)>& body);

 private:
  void work();

  std::mutex run_mutex_;  // one run_all at a time
  std::mutex mutex_;      // guards everything below
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(int)>* body_ = nullptr;
  int next_index_ = 0;
  int end_index_ = 0;
  int running_ = 0;  // indexes handed out or pending, not yet returned
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tandem::host
