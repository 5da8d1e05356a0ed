#pragma once
// --ballast-mib N: state for recovery benchmarks (docs/recovery.md). The MLP's own state grows
// with its compute (a larger --hidden makes every step longer), so a measurement of restoring
// gigabytes would wait minutes per step. The ballast is N MiB of float state in total, split
// over the ranks as chunks of one global tensor (so it restores at any world size), checkpointed
// with everything else, and changed by every step in a small window that depends only on the step
// (the same bytes whatever the world size): restoring the wrong step or a damaged copy changes
// what the next steps leave in it.
#include <cstdint>
#include <vector>

namespace trainrt::checkpoint {
class Manager;
}

namespace train_mlp {

class Ballast {
 public:
  Ballast(std::uint64_t total_mib, unsigned rank, unsigned world);
  bool empty() const { return global_ == 0; }
  void register_state(trainrt::checkpoint::Manager& ckpt);
  void fill(std::uint64_t seed);      // a fresh start's content
  void step(std::uint64_t step);      // one step's change: a 64 KiB window of the global tensor
  std::uint64_t local_bytes() const { return data_.size() * sizeof(float); }

 private:
  std::uint64_t global_ = 0, offset_ = 0;  // elements: the whole tensor, where this rank's chunk starts
  std::vector<float> data_;
};

}  // namespace train_mlp
