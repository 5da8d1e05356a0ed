#pragma once
// A bootstrap view of a subset of a session's ranks (the ranks of one node, the node leaders), so
// communicators built for "a whole world" can be built for a part of it. allgather and barrier go
// to the parent: every parent rank must make the same calls, members or not. broadcast is the
// members' affair alone: the root publishes, the others look it up, so building one node's group
// costs no fence of the whole world and no lookup leaves the node. Every parent rank constructs
// the same SubSessions in the same order (their keys are numbered by construction).
#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/error.hpp"

namespace trainrt {

class SubSession final : public bootstrap::Session {
 public:
  SubSession(bootstrap::Session& parent, std::vector<unsigned> members)
      : parent_(parent), members_(std::move(members)), instance_(next_instance()++) {
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
  std::vector<std::vector<unsigned>> ranks_by_node() override {
    std::vector<std::vector<unsigned>> out;
    for (const auto& node : parent_.ranks_by_node()) {
      std::vector<unsigned> mine;
      for (unsigned r : node) {
        auto it = std::find(members_.begin(), members_.end(), r);
        if (it != members_.end()) mine.push_back(static_cast<unsigned>(it - members_.begin()));
      }
      std::sort(mine.begin(), mine.end());
      if (!mine.empty()) out.push_back(std::move(mine));
    }
    return out;
  }
  std::string job_id() const override { return parent_.job_id(); }
  bool is_single_process() const override { return false; }

  // One fence of the parent where only members put data and read the members' blobs (|members|
  // reads each, not the world's N). Non-members join the fence, read nothing and get empty blobs.
  std::vector<bootstrap::Blob> allgather(std::span<const std::uint8_t> mine) override {
    std::vector<unsigned> everyone(members_.size());
    std::iota(everyone.begin(), everyone.end(), 0u);
    return allgather_some(mine, everyone);
  }
  // As allgather, but a member reads only the members `reads` (indices in this group, ascending).
  std::vector<bootstrap::Blob> allgather_some(std::span<const std::uint8_t> mine, const std::vector<unsigned>& reads) override {
    std::vector<unsigned> ascending = members_;
    std::sort(ascending.begin(), ascending.end());
    if (!is_member()) {
      parent_.join_gather_from(ascending);
      return std::vector<bootstrap::Blob>(members_.size());
    }
    std::vector<unsigned> parent_reads;
    for (unsigned i : reads) {
      if (i >= members_.size())
        throw UsageError(fmt::format("allgather_some: member {} outside a group of {}", i, members_.size()), "bootstrap");
      parent_reads.push_back(members_[i]);
    }
    std::sort(parent_reads.begin(), parent_reads.end());
    auto blobs = parent_.gather_some(mine, ascending, parent_reads);
    std::vector<bootstrap::Blob> out(members_.size());
    for (unsigned i : reads)
      out[i] = std::move(blobs[std::lower_bound(parent_reads.begin(), parent_reads.end(), members_[i]) - parent_reads.begin()]);
    return out;
  }
  bootstrap::Blob broadcast(std::span<const std::uint8_t> data, unsigned root) override {
    if (root >= members_.size())
      throw UsageError(fmt::format("broadcast root {} outside a group of {}", root, members_.size()), "bootstrap");
    if (!is_member()) return {};
    const std::string key = fmt::format("sub{}.bcast{}", instance_, broadcasts_++);
    if (index_ == static_cast<int>(root)) {
      parent_.publish(key, data);
      return bootstrap::Blob(data.begin(), data.end());
    }
    return parent_.lookup(members_[root], key);
  }
  void barrier() override { parent_.barrier(); }
  void publish(const std::string& key, std::span<const std::uint8_t> data) override { parent_.publish(key, data); }
  bootstrap::Blob lookup(unsigned owner, const std::string& key) override {
    return parent_.lookup(members_.at(owner), key);
  }

 private:
  static unsigned& next_instance() {
    static unsigned n = 0;
    return n;
  }

  bootstrap::Session& parent_;
  std::vector<unsigned> members_;
  unsigned instance_;
  unsigned broadcasts_ = 0;
  int index_ = -1;
};

}  // namespace trainrt
