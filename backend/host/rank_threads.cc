#include "backend/host/rank_threads.h"

namespace tandem::host {

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void RankThreads::run_all(int count, const std::function<void(int)>& body) {
  if (count <= 0) return;
  std::lock_guard run_lock(run_mutex_);
  // Every index must get its own thread at once: ranks wait on each other.
  while (static_cast<int>(threads_.size()) < count - 1) threads_.emplace_back([this] { work(); });
  {
    std::lock_guard lock(mutex_);
    body_ = &body;
    next_index_ = 1;
    end_index_ = count;
    running_ = count - 1;
  }
  work_ready_.notify_all();
  body(0);
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [&] { return running_ == 0; });
  body_ = nullptr;
}

void RankThreads::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [&] { return stop_ || next_index_ < end_index_; });
    if (stop_) return;
    const int index = next_index_++;
    const std::function<void(int)>* body = body_;
    lock.unlock();
    (*body)(index);
    lock.lock();
    if (--running_ == 0) work_done_.notify_all();
  }
}

}  // namespace tandem::host
