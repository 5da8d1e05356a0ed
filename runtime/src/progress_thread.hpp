#pragma once
// One thread per communicator that runs Async collectives in issue order. Blocking collectives run
// on the caller's thread once the queue has drained, so small blocking collectives pay no handoff.
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

class ProgressThread {
 public:
  ProgressThread() = default;
  ~ProgressThread() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  Work run(std::function<void()> fn, Mode mode) {
    std::packaged_task<void()> task(std::move(fn));
    Work work(task.get_future().share());
    if (mode == Mode::Blocking) {
      drain();
      task();
      return work;
    }
    {
      std::lock_guard lock(mutex_);
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
      queue_.push_back(std::move(task));
      ++pending_;
    }
    cv_.notify_all();
    return work;
  }

 private:
  void drain() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return pending_ == 0; });
  }

  void loop() {
    std::unique_lock lock(mutex_);
    while (true) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      task();
      lock.lock();
      if (--pending_ == 0) idle_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_, idle_;
  std::deque<std::packaged_task<void()>> queue_;
  std::size_t pending_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace trainrt
