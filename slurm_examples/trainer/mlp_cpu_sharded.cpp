// --shard-optimizer: ZeRO-1 on the cpu engine. The four parameter tensors are laid end to end in
// one flat vector of N floats, padded to world * C (C = ceil(N / world)); rank r owns elements
// [r*C, min((r+1)*C, N)) and keeps AdamW's moments for them alone. A step reduce-scatters the
// gradients (rank r receives the average of its slice), runs AdamW on the slice and allgathers the
// parameters. Each element's update is the same arithmetic as the replicated engine's, in the
// same order, so runs are bitwise deterministic for a fixed world size.
#include <algorithm>
#include <cstring>

#include "mlp.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/kernels/cpu.hpp"
#include "trainrt/runtime/init.hpp"

namespace train_mlp {

using namespace trainrt;

namespace {

class ShardedCpuEngine final : public Engine {
 public:
  ShardedCpuEngine(Runtime& rt, const Shapes& shapes, std::uint64_t seed)
      : rt_(rt), s_(shapes), params_(initial_params(shapes, seed)), g_(shapes), scratch_(shapes),
        n_(shapes.parameter_count()), world_(rt.size), rank_(rt.rank), c_((n_ + world_ - 1) / world_),
        lo_(std::min(n_, rank_ * c_)), hi_(std::min(n_, lo_ + c_)), flat_(world_ * c_, 0.f), grads_(world_ * c_, 0.f),
        g_slice_(c_), p_slice_(c_), m_(c_, 0.f), v_(c_, 0.f) {
    flatten(params_, flat_);
  }

  std::string describe() const override { return "cpu (optimizer state sharded)"; }

  void register_state(checkpoint::Manager& ckpt) override {
    auto ts = params_.tensors();
    for (std::size_t i = 0; i < ts.size(); ++i)
      ckpt.register_buffer(std::string("param.") + kTensorNames[i], ts[i]->data(), ts[i]->size() * 4, DType::F32,
                           {static_cast<std::int64_t>(ts[i]->size())}, checkpoint::Sharding::Replicated);
    // This rank's slice of the moments of the flat parameter vector.
    const checkpoint::Shard slice{{static_cast<std::int64_t>(n_)}, {static_cast<std::int64_t>(lo_)}};
    const std::vector<std::int64_t> shape{static_cast<std::int64_t>(hi_ - lo_)};
    ckpt.register_buffer("adam_m.flat", m_.data(), (hi_ - lo_) * 4, DType::F32, shape, slice);
    ckpt.register_buffer("adam_v.flat", v_.data(), (hi_ - lo_) * 4, DType::F32, shape, slice);
  }

  void state_restored() override { flatten(params_, flat_); }

  float forward_backward(const Batch& b) override { return cpu_forward_backward(s_, params_, b, g_, scratch_); }

  void allreduce_gradients() override {
    flatten(g_, grads_);
    rt_.host->reduce_scatter(grads_.data(), g_slice_.data(), c_, DType::F32, ReduceOp::Avg);
  }

  void optimizer_step(float lr, std::uint64_t step) override {
    kernels::AdamWConfig cfg;
    cfg.lr = lr;
    cfg.step = static_cast<int>(step);
    const std::size_t owned = hi_ - lo_;
    if (owned > 0) {
      kernels::TensorRef p{flat_.data() + lo_, owned}, m{m_.data(), owned}, v{v_.data(), owned};
      kernels::ConstTensorRef g{g_slice_.data(), owned};
      kernels::cpu::adamw_f32(&p, &g, &m, &v, 1, cfg);
    }
    std::copy(flat_.begin() + static_cast<std::ptrdiff_t>(rank_ * c_), flat_.begin() + static_cast<std::ptrdiff_t>((rank_ + 1) * c_),
              p_slice_.begin());
    rt_.host->allgather(p_slice_.data(), flat_.data(), c_, DType::F32);
    unflatten(flat_, params_);
  }

  HostParams download_params() override { return params_; }

 private:
  static void flatten(HostParams& p, std::vector<float>& flat) {
    std::size_t at = 0;
    for (auto* t : p.tensors()) std::copy(t->begin(), t->end(), flat.begin() + static_cast<std::ptrdiff_t>(at)), at += t->size();
  }
  static void unflatten(const std::vector<float>& flat, HostParams& p) {
    std::size_t at = 0;
    for (auto* t : p.tensors()) {
      std::copy(flat.begin() + static_cast<std::ptrdiff_t>(at), flat.begin() + static_cast<std::ptrdiff_t>(at + t->size()), t->begin());
      at += t->size();
    }
  }

  Runtime& rt_;
  Shapes s_;
  HostParams params_, g_;
  Scratch scratch_;
  std::size_t n_, world_, rank_, c_, lo_, hi_;
  std::vector<float> flat_, grads_;     // world * C: the parameters and the gradients, flat and padded
  std::vector<float> g_slice_, p_slice_;  // C: this rank's averaged gradients; its parameters to send
  std::vector<float> m_, v_;            // C: the moments of this rank's slice (only [0, hi-lo) used)
};

}  // namespace

std::unique_ptr<Engine> make_sharded_cpu_engine(Runtime& rt, const Shapes& shapes, std::uint64_t seed) {
  return std::make_unique<ShardedCpuEngine>(rt, shapes, seed);
}

}  // namespace train_mlp
