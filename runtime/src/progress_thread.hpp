#pragma once
// One thread per communicator that runs Async collectives in issue order. Blocking collectives run
// on the caller's thread once the queue has drained (so small blocking collectives pay no handoff)
// and throw from there: their error never waits in a future nobody reads.
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
  ~ProgressThread() { stop(); }
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  Work run(std::function<void()> fn, Mode mode) {
    if (mode == Mode::Blocking) {
      drain();
      fn();  // throws to the caller
      return Work{};
    }
    std::packaged_task<void()> task(std::move(fn));
    Work work(task.get_future().share());
    {
      std::lock_guard lock(mutex_);
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
      queue_.push_back(std::move(task));
      ++pending_;
    }
    cv_.notify_all();
    return work;
  }

  // Runs what is queued, then joins. Owners call it before the state the tasks use goes away.
  void stop() noexcept {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
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
      task();  // a packaged_task: the error lands in its future
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
