#pragma once
// The example trainer's model: a one-hidden-layer MLP (in -> hidden, ReLU -> 1) learning a fixed
// teacher function from deterministic synthetic data, with two engines that hold its state:
//  - cpu:  parameters, gradients and AdamW state in host vectors, forward/backward by hand, the
//          gradients averaged through the host communicator, the CPU twin of the fused AdamW;
//  - cuda: all of it in device memory, GEMMs through cuBLAS, element-wise work in small kernels,
//          the gradients averaged through NCCL by the bucketer, the fused AdamW kernel.
// Each engine is deterministic on its own (a killed run resumes bitwise where an uninterrupted one
// ends), but the two engines do not give the same bits: the GPU sums in another order.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainrt/kernels/tensor_list.hpp"

namespace trainrt {
struct Runtime;
struct InitOptions;
namespace checkpoint {
class Manager;
}
}  // namespace trainrt

namespace train_mlp {

struct Shapes {
  std::size_t in = 32;      // input features
  std::size_t hidden = 64;  // --hidden
  std::size_t rows = 64;    // rows of the global batch each rank takes, every step
  // f32 elements of the parameters (w1, b1, w2, b2), also of the gradients and of m and v.
  std::size_t parameter_count() const { return in * hidden + 2 * hidden + 1; }
};

// Uniform in [-1, 1) from a counter: the data and the initial weights.
float uniform(std::uint64_t seed, std::uint64_t a, std::uint64_t b);

// One rank's slice of step `step`'s global batch: rows [rank*rows, rank*rows+rows), a pure function
// of (seed, step, rank), so a resumed run sees exactly the data the uninterrupted one saw.
struct Batch {
  std::vector<float> x;  // rows x in, row-major
  std::vector<float> y;  // rows
};
void make_batch(const Shapes& shapes, std::uint64_t seed, std::uint64_t step, unsigned rank, Batch& batch);

// Host copies of the four parameter tensors, in checkpoint order; also the initial weights.
struct HostParams {
  std::vector<float> w1, b1, w2, b2;
  explicit HostParams(const Shapes& s) : w1(s.in * s.hidden), b1(s.hidden), w2(s.hidden), b2(1) {}
  std::vector<std::vector<float>*> tensors() { return {&w1, &b1, &w2, &b2}; }
};
HostParams initial_params(const Shapes& shapes, std::uint64_t seed);
inline constexpr const char* kTensorNames[] = {"w1", "b1", "w2", "b2"};

// The state of one training run and the steps that change it. Every method is called by every
// rank in the same order (the collectives inside need it).
class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string describe() const = 0;  // "cpu", "cuda on GPU 0 (NVIDIA H100 ...)"
  // Registers param.*, adam_m.*, adam_v.* (Replicated) with the checkpoint manager, so a restore
  // fills them in place, on the device for the cuda engine.
  virtual void register_state(trainrt::checkpoint::Manager& ckpt) = 0;
  // Forward and backward of this rank's batch: the gradients are overwritten; returns this rank's
  // mean squared error (host float; the cuda engine waits for its stream to read it).
  virtual float forward_backward(const Batch& batch) = 0;
  // Averages the gradients over all ranks (the bucketed allreduce); throws the collective's error.
  virtual void allreduce_gradients() = 0;
  // One fused AdamW update of every parameter with the averaged gradients.
  virtual void optimizer_step(float lr, std::uint64_t step) = 0;
  // The parameters as host vectors (the cuda engine copies them back and waits).
  virtual HostParams download_params() = 0;
  // After a restore filled the registered buffers: engines that keep another copy refresh it.
  virtual void state_restored() {}
};

// The cpu engine's forward and backward pass over one batch: gradients into `g` (overwritten),
// activations into the scratch vectors; returns the batch's mean squared error.
struct Scratch {
  std::vector<float> h, dy, dh;
  explicit Scratch(const Shapes& s) : h(s.rows * s.hidden), dy(s.rows), dh(s.hidden) {}
};
float cpu_forward_backward(const Shapes& s, const HostParams& w, const Batch& b, HostParams& g, Scratch& scratch);

std::unique_ptr<Engine> make_cpu_engine(trainrt::Runtime& rt, const Shapes& shapes, std::uint64_t seed);
// ZeRO-1 on the cpu engine (--shard-optimizer, mlp_cpu_sharded.cpp): each rank keeps AdamW's
// moments for its slice of the flattened parameters only; gradients are reduce-scattered, each rank
// updates its slice and the parameters are allgathered. The moments are checkpointed as chunks of
// two global tensors, so a run restores them at another world size. Bitwise deterministic for a
// fixed world size.
std::unique_ptr<Engine> make_sharded_cpu_engine(trainrt::Runtime& rt, const Shapes& shapes, std::uint64_t seed);
// Needs a CUDA build with cuBLAS and NCCL and the runtime's device communicator (rt.device);
// throws trainrt::Error otherwise.
std::unique_ptr<Engine> make_cuda_engine(trainrt::Runtime& rt, const Shapes& shapes, std::uint64_t seed);
// True when this build has the cuda engine.
bool cuda_engine_built();

struct Options;
// engine_choice.cpp: the runtime's options for --device (NCCL off, required or automatic; the
// collective timeout from --watchdog), the engine for it, and --check-device (77: no GPU path).
trainrt::InitOptions init_options(const Options& o);
std::unique_ptr<Engine> make_engine(trainrt::Runtime& rt, const Options& o, const Shapes& shapes);
int check_device();

// The digest printed on the FINAL line: one 64-bit number over every parameter's bytes.
std::uint64_t params_digest(HostParams& params);

}  // namespace train_mlp
