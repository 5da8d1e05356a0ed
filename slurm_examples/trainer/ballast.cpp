#include "ballast.hpp"

#include <algorithm>

#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"

namespace train_mlp {

namespace {
constexpr std::uint64_t kWindow = 16384;  // elements one step changes (64 KiB)
}

Ballast::Ballast(std::uint64_t total_mib, unsigned rank, unsigned world) {
  if (total_mib > (std::uint64_t{1} << 20)) throw trainrt::Error("at most 1048576 MiB", "--ballast-mib");
  global_ = (total_mib << 20) / sizeof(float);
  // Even shares, the remainder to the first ranks: any world size tiles the same global tensor.
  const std::uint64_t base = global_ / world, extra = global_ % world;
  offset_ = rank * base + std::min<std::uint64_t>(rank, extra);
  data_.resize(base + (rank < extra ? 1 : 0));
}

void Ballast::register_state(trainrt::checkpoint::Manager& ckpt) {
  if (empty()) return;
  ckpt.register_buffer("ballast", data_.data(), data_.size() * sizeof(float), trainrt::DType::F32,
                       {static_cast<std::int64_t>(data_.size())},
                       trainrt::checkpoint::Shard{{static_cast<std::int64_t>(global_)}, {static_cast<std::int64_t>(offset_)}});
}

void Ballast::fill(std::uint64_t seed) {
  for (std::size_t i = 0; i < data_.size(); ++i)
    data_[i] = static_cast<float>((offset_ + i) % 1000003) * 1e-3f + static_cast<float>(seed % 7);
}

void Ballast::step(std::uint64_t step) {
  if (empty()) return;
  const std::uint64_t lo = (step * kWindow) % global_, hi = std::min(lo + kWindow, global_);
  const std::uint64_t from = std::max(lo, offset_), to = std::min(hi, offset_ + data_.size());
  for (std::uint64_t g = from; g < to; ++g) data_[g - offset_] = data_[g - offset_] * 0.5f + static_cast<float>(step % 13);
}

}  // namespace train_mlp
