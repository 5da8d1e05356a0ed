// The model's data, initial weights and the cpu engine. The cpu engine's arithmetic is the
// trainer's original one, operation for operation: runs on the CPU keep their bits.
#include <algorithm>
#include <cmath>

#include "mlp.hpp"
#include "trainrt/kernels/cpu.hpp"
#include "trainrt/runtime/bucketer.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/runtime/init.hpp"

namespace train_mlp {

using namespace trainrt;

float uniform(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  std::uint64_t h = seed * 0x9E3779B97F4A7C15ull ^ (a + 1) * 0xBF58476D1CE4E5B9ull ^ (b + 7) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<double>(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

void make_batch(const Shapes& s, std::uint64_t seed, std::uint64_t step, unsigned rank, Batch& batch) {
  batch.x.resize(s.rows * s.in);
  batch.y.resize(s.rows);
  for (std::size_t r = 0; r < s.rows; ++r) {
    const std::uint64_t row = step * 1000003ull + rank * s.rows + r;
    float target = 0;
    for (std::size_t j = 0; j < s.in; ++j) {
      batch.x[r * s.in + j] = uniform(seed + 99, row, j);
      target += std::sin(batch.x[r * s.in + j] * static_cast<float>(j + 1)) * 0.1f;
    }
    batch.y[r] = target;
  }
}

HostParams initial_params(const Shapes& s, std::uint64_t seed) {
  HostParams p(s);
  for (std::size_t i = 0; i < p.w1.size(); ++i) p.w1[i] = uniform(seed, 1, i) * 0.3f;
  for (std::size_t i = 0; i < p.w2.size(); ++i) p.w2[i] = uniform(seed, 2, i) * 0.3f;
  return p;  // biases start at zero
}

std::uint64_t params_digest(HostParams& params) {
  std::uint64_t digest = 0;
  for (auto* t : params.tensors()) digest = digest * 31 + kernels::cpu::checksum(t->data(), t->size() * 4);
  return digest;
}

float cpu_forward_backward(const Shapes& s, const HostParams& w, const Batch& b, HostParams& g, Scratch& scratch) {
  const std::size_t in = s.in, hidden = s.hidden, rows = s.rows;
  auto& h_ = scratch.h;
  auto& dy_ = scratch.dy;
  auto& dh_ = scratch.dh;
  for (auto* t : g.tensors()) std::fill(t->begin(), t->end(), 0.f);
  float local_loss = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    float out = w.b2[0];
    for (std::size_t k = 0; k < hidden; ++k) {
      float a = w.b1[k];
      for (std::size_t j = 0; j < in; ++j) a += b.x[r * in + j] * w.w1[j * hidden + k];
      h_[r * hidden + k] = a > 0 ? a : 0;
      out += h_[r * hidden + k] * w.w2[k];
    }
    const float err = out - b.y[r];
    local_loss += err * err;
    dy_[r] = 2.f * err / static_cast<float>(rows);
    g.b2[0] += dy_[r];
    for (std::size_t k = 0; k < hidden; ++k) {
      g.w2[k] += h_[r * hidden + k] * dy_[r];
      dh_[k] = h_[r * hidden + k] > 0 ? dy_[r] * w.w2[k] : 0.f;
      g.b1[k] += dh_[k];
      for (std::size_t j = 0; j < in; ++j) g.w1[j * hidden + k] += b.x[r * in + j] * dh_[k];
    }
  }
  return local_loss / static_cast<float>(rows);
}

namespace {

template <typename Ref>
std::vector<Ref> refs(HostParams& p) {
  std::vector<Ref> out;
  for (auto* t : p.tensors()) out.push_back({t->data(), t->size()});
  return out;
}

class CpuEngine final : public Engine {
 public:
  CpuEngine(Runtime& rt, const Shapes& shapes, std::uint64_t seed)
      : s_(shapes), params_(initial_params(shapes, seed)), m_(shapes), v_(shapes), g_(shapes),
        scratch_(shapes),
        bucketer_(*rt.host, refs<kernels::TensorRef>(g_), DType::F32, 8 << 10) {
    p_refs_ = refs<kernels::TensorRef>(params_);
    m_refs_ = refs<kernels::TensorRef>(m_);
    v_refs_ = refs<kernels::TensorRef>(v_);
    for (auto* t : g_.tensors()) g_refs_.push_back({t->data(), t->size()});
  }

  std::string describe() const override { return "cpu"; }

  void register_state(checkpoint::Manager& ckpt) override {
    auto reg = [&](const char* prefix, HostParams& p) {
      auto ts = p.tensors();
      for (std::size_t i = 0; i < ts.size(); ++i)
        ckpt.register_buffer(std::string(prefix) + "." + kTensorNames[i], ts[i]->data(), ts[i]->size() * 4, DType::F32,
                             {static_cast<std::int64_t>(ts[i]->size())}, checkpoint::Sharding::Replicated);
    };
    reg("param", params_);
    reg("adam_m", m_);
    reg("adam_v", v_);
  }

  float forward_backward(const Batch& b) override { return cpu_forward_backward(s_, params_, b, g_, scratch_); }

  void allreduce_gradients() override { bucketer_.allreduce(ReduceOp::Avg); }

  void optimizer_step(float lr, std::uint64_t step) override {
    kernels::AdamWConfig cfg;
    cfg.lr = lr;
    cfg.step = static_cast<int>(step);
    kernels::cpu::adamw_f32(p_refs_.data(), g_refs_.data(), m_refs_.data(), v_refs_.data(), p_refs_.size(), cfg);
  }

  HostParams download_params() override { return params_; }

 private:
  Shapes s_;
  HostParams params_, m_, v_, g_;
  Scratch scratch_;  // activations and their gradients, reused every step
  GradientBucketer bucketer_;
  std::vector<kernels::TensorRef> p_refs_, m_refs_, v_refs_;
  std::vector<kernels::ConstTensorRef> g_refs_;
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(Runtime& rt, const Shapes& shapes, std::uint64_t seed) {
  return std::make_unique<CpuEngine>(rt, shapes, seed);
}

}  // namespace train_mlp
