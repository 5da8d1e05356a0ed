#pragma once
// A bootstrap view of a subset of a session's ranks (the ranks of one node, the node leaders), so
// communicators built for "a whole world" can be built for a part of it. Collective calls go to
// the parent: every parent rank must make the same calls, members or not.
#include <algorithm>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"

namespace trainrt {

class SubSession final : public bootstrap::Session {
 public:
  SubSession(bootstrap::Session& parent, std::vector<unsigned> members)
      : parent_(parent), members_(std::move(members)) {
    auto it = std::find(members_.begin(), members_.end(), parent.rank());
    index_ = it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
  }
  bool is_member() const { return index_ >= 0; }

  unsigned rank() const override { return static_cast<unsigned>(index_); }
  unsigned size() const override { return static_cast<unsigned>(members_.size()); }
  unsigned local_rank() const override { return rank(); }
  unsigned local_size() const override { return size(); }  // used for single-node groups only
  unsigned node_id() const override { return parent_.node_id(); }
  std::vector<unsigned> local_peers() const override {
    std::vector<unsigned> all(members_.size());
    for (unsigned i = 0; i < all.size(); ++i) all[i] = i;
    return all;
  }
  std::string job_id() const override { return parent_.job_id(); }
  bool is_single_process() const override { return false; }

  std::vector<bootstrap::Blob> allgather(std::span<const std::uint8_t> mine) override {
    auto all = parent_.allgather(mine);
    std::vector<bootstrap::Blob> out;
    for (unsigned m : members_) out.push_back(std::move(all[m]));
    return out;
  }
  bootstrap::Blob broadcast(std::span<const std::uint8_t> data, unsigned root) override {
    if (root >= members_.size()) throw UsageError("broadcast root outside the group", "bootstrap");
    const bool i_am_root = index_ == static_cast<int>(root);
    auto all = parent_.allgather(i_am_root ? data : std::span<const std::uint8_t>{});
    return std::move(all[members_[root]]);
  }
  void barrier() override { parent_.barrier(); }
  void publish(const std::string& key, std::span<const std::uint8_t> data) override { parent_.publish(key, data); }
  bootstrap::Blob lookup(unsigned owner, const std::string& key) override {
    return parent_.lookup(members_.at(owner), key);
  }

 private:
  bootstrap::Session& parent_;
  std::vector<unsigned> members_;
  int index_ = -1;
};

}  // namespace trainrt
