#pragma once
// A world of N ranks inside one process, one thread per rank: the bootstrap collectives over a
// mutex and a condition variable. Lets single-process tests save a real multi-rank checkpoint.
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "trainrt/bootstrap/session.hpp"

namespace trainrt::testing {

class ThreadWorld {
 public:
  explicit ThreadWorld(unsigned n) : n_(n), slots_(n) {}
  unsigned size() const { return n_; }
  // Every rank's blob, once all have arrived.
  std::vector<bootstrap::Blob> exchange(unsigned rank, bootstrap::Blob mine) {
    std::unique_lock lock(m_);
    const std::uint64_t gen = gen_;
    slots_[rank] = std::move(mine);
    if (++arrived_ == n_) {
      result_ = slots_;
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
      return result_;
    }
    cv_.wait(lock, [&] { return gen_ != gen; });
    return result_;  // kept until every rank has entered the next exchange
  }

 private:
  unsigned n_;
  std::mutex m_;
  std::condition_variable cv_;
  unsigned arrived_ = 0;
  std::uint64_t gen_ = 0;
  std::vector<bootstrap::Blob> slots_, result_;
};

class ThreadSession final : public bootstrap::Session {
 public:
  ThreadSession(ThreadWorld& world, unsigned rank) : world_(world), rank_(rank) {}
  unsigned rank() const override { return rank_; }
  unsigned size() const override { return world_.size(); }
  unsigned local_rank() const override { return rank_; }
  unsigned local_size() const override { return world_.size(); }
  unsigned node_id() const override { return 0; }
  std::vector<unsigned> local_peers() const override {
    std::vector<unsigned> all;
    for (unsigned r = 0; r < world_.size(); ++r) all.push_back(r);
    return all;
  }
  std::vector<std::vector<unsigned>> ranks_by_node() override { return {local_peers()}; }
  std::string job_id() const override { return "threads"; }
  bool is_single_process() const override { return world_.size() == 1; }
  std::vector<bootstrap::Blob> allgather(std::span<const std::uint8_t> mine) override {
    return world_.exchange(rank_, bootstrap::Blob(mine.begin(), mine.end()));
  }
  bootstrap::Blob broadcast(std::span<const std::uint8_t> data, unsigned root) override {
    return world_.exchange(rank_, rank_ == root ? bootstrap::Blob(data.begin(), data.end()) : bootstrap::Blob{})[root];
  }
  void barrier() override { world_.exchange(rank_, {}); }
  void publish(const std::string&, std::span<const std::uint8_t>) override { throw std::logic_error("not in tests"); }
  bootstrap::Blob lookup(unsigned, const std::string&) override { throw std::logic_error("not in tests"); }

 private:
  ThreadWorld& world_;
  unsigned rank_;
};

}  // namespace trainrt::testing
