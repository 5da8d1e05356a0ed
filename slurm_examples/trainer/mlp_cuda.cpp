// The cuda engine: parameters, gradients, AdamW state and activations in device memory; the three
// products of forward/backward through cuBLAS, the rest in mlp_kernels.cu; gradients averaged by the
// bucketer through NCCL; the fused AdamW kernel; checkpoints straight from device buffers.
//
// Determinism (a resumed run ends bitwise where an uninterrupted one does):
//  - cuBLAS: pedantic math (no TF32 or other reduced-precision shortcuts), atomics not allowed, and
//    a workspace of our own set on the handle, so the algorithm choice cannot depend on what a
//    shared workspace pool happens to hold; cuBLAS then gives the same bits on every run on the
//    same GPU model with the same number of SMs (cuBLAS documentation, "Results reproducibility").
//  - Our kernels sum in one fixed order (mlp_kernels.hpp); AdamW is the runtime's fused kernel
//    (bitwise equal to its CPU twin); NCCL's allreduce of a given world and topology is fixed-order.
//  - Everything runs on one stream in one order: the same work in the same order each step.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "mlp.hpp"
#include "mlp_kernels.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/error.hpp"
#include "trainrt/kernels/cuda.hpp"
#include "trainrt/runtime/bucketer.hpp"
#include "trainrt/runtime/init.hpp"

namespace train_mlp {

using namespace trainrt;

bool cuda_engine_built() { return true; }

namespace {

void ck(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(fmt::format("{}: {} ({})", what, cudaGetErrorName(rc), cudaGetErrorString(rc)), "train-mlp");
}

void ck(cublasStatus_t rc, const char* what) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw Error(fmt::format("{}: {} ({})", what, cublasGetStatusName(rc), cublasGetStatusString(rc)), "train-mlp");
}

class DeviceMemory {
 public:
  // Zeroed on `stream` (padding and AdamW's m and v start as zeros, never as whatever the
  // allocator held); the engine's first synchronisation of that stream covers it.
  DeviceMemory(std::size_t bytes, cudaStream_t stream) : bytes_(bytes) {
    ck(cudaMalloc(&p_, bytes), "cudaMalloc");
    if (const cudaError_t rc = cudaMemsetAsync(p_, 0, bytes, stream); rc != cudaSuccess) {
      (void)cudaFree(p_);  // the destructor does not run for a constructor that throws
      ck(rc, "cudaMemsetAsync");
    }
  }
  ~DeviceMemory() { (void)cudaFree(p_); }  // cannot throw here; the next checked call reports errors
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  float* f(std::size_t offset_floats = 0) const { return static_cast<float*>(p_) + offset_floats; }
  void* get() const { return p_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

class Stream {
 public:
  Stream() { ck(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { (void)cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_{};
};

class Cublas {
 public:
  Cublas() { ck(cublasCreate(&h_), "cublasCreate"); }
  ~Cublas() { (void)cublasDestroy(h_); }
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_{};
};

// The four tensors (w1, b1, w2, b2) in one allocation, each starting on a 16-byte boundary so the
// fused AdamW runs vectorised; padding is never read as a parameter.
struct Layout {
  std::size_t offset[4] = {}, count[4] = {}, total = 0;
  explicit Layout(const Shapes& s) {
    const std::size_t counts[4] = {s.in * s.hidden, s.hidden, s.hidden, 1};
    for (int i = 0; i < 4; ++i) {
      offset[i] = total;
      count[i] = counts[i];
      total += (counts[i] + 3) / 4 * 4;
    }
  }
};

int choose_device(const Runtime& rt) {
  if (!rt.device)
    throw Error(fmt::format("--device cuda needs the NCCL device communicator, which is off: {}",
                            rt.device_note.empty() ? "unknown reason" : rt.device_note),
                "train-mlp");
  if (rt.cuda_device < 0) throw Error("--device cuda: this rank has no GPU", "train-mlp");
  return rt.cuda_device;
}

constexpr std::size_t kCublasWorkspace = std::size_t{4} << 20;

class CudaEngine final : public Engine {
 public:
  CudaEngine(Runtime& rt, const Shapes& s, std::uint64_t seed)
      : s_(s), device_(choose_device(rt)), set_device_(device_), layout_(s), params_(layout_.total * 4, stream_.get()),
        m_(layout_.total * 4, stream_.get()), v_(layout_.total * 4, stream_.get()), g_(layout_.total * 4, stream_.get()),
        x_(s.rows * s.in * 4, stream_.get()), y_(s.rows * 4, stream_.get()), h_(s.rows * s.hidden * 4, stream_.get()),
        dh_(s.rows * s.hidden * 4, stream_.get()), out_(s.rows * 4, stream_.get()), dy_(s.rows * 4, stream_.get()),
        loss_(4, stream_.get()), workspace_(kCublasWorkspace, stream_.get()),
        bucketer_(*rt.device, tensor_refs(g_), DType::F32, std::size_t{4} << 20, Memory::Device, stream_.get()) {
    if (s.rows == 0 || s.rows > 1024) throw Error(fmt::format("{} rows per rank: 1..1024 supported", s.rows), "train-mlp");
    ck(cublasSetStream(blas_.get(), stream_.get()), "cublasSetStream");
    ck(cublasSetWorkspace(blas_.get(), workspace_.get(), workspace_.bytes()), "cublasSetWorkspace");
    ck(cublasSetMathMode(blas_.get(), CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    ck(cublasSetAtomicsMode(blas_.get(), CUBLAS_ATOMICS_NOT_ALLOWED), "cublasSetAtomicsMode");
    ck(cublasSetPointerMode(blas_.get(), CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
    HostParams init = initial_params(s, seed);
    auto ts = init.tensors();
    for (int i = 0; i < 4; ++i)
      ck(cudaMemcpyAsync(params_.f(layout_.offset[i]), ts[i]->data(), ts[i]->size() * 4, cudaMemcpyHostToDevice,
                         stream_.get()),
         "upload of the initial weights");
    ck(cudaStreamSynchronize(stream_.get()), "upload of the initial weights");
    p_refs_ = tensor_refs(params_);
    m_refs_ = tensor_refs(m_);
    v_refs_ = tensor_refs(v_);
    for (auto& r : tensor_refs(g_)) g_refs_.push_back({r.data, r.count});
    cudaDeviceProp prop{};
    ck(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
    name_ = prop.name;
  }

  std::string describe() const override { return fmt::format("cuda on GPU {} ({})", device_, name_); }

  void register_state(checkpoint::Manager& ckpt) override {
    auto reg = [&](const char* prefix, const DeviceMemory& mem) {
      for (int i = 0; i < 4; ++i)
        ckpt.register_buffer(fmt::format("{}.{}", prefix, kTensorNames[i]), mem.f(layout_.offset[i]), layout_.count[i] * 4,
                             DType::F32, {static_cast<std::int64_t>(layout_.count[i])}, checkpoint::Sharding::Replicated,
                             checkpoint::Location::Device);
    };
    reg("param", params_);
    reg("adam_m", m_);
    reg("adam_v", v_);
  }

  float forward_backward(const Batch& b) override {
    const int in = static_cast<int>(s_.in), hidden = static_cast<int>(s_.hidden), rows = static_cast<int>(s_.rows);
    cudaStream_t st = stream_.get();
    cublasHandle_t blas = blas_.get();
    const float one = 1.f, zero = 0.f;
    // The batch comes from pageable host memory: cudaMemcpyAsync returns once it is staged, so `b`
    // may change afterwards.
    ck(cudaMemcpyAsync(x_.f(), b.x.data(), b.x.size() * 4, cudaMemcpyHostToDevice, st), "upload of the batch");
    ck(cudaMemcpyAsync(y_.f(), b.y.data(), b.y.size() * 4, cudaMemcpyHostToDevice, st), "upload of the batch");
    const float* w1 = params_.f(layout_.offset[0]);
    const float* b1 = params_.f(layout_.offset[1]);
    const float* w2 = params_.f(layout_.offset[2]);
    const float* b2 = params_.f(layout_.offset[3]);
    float* gw1 = g_.f(layout_.offset[0]);
    float* gb1 = g_.f(layout_.offset[1]);
    float* gw2 = g_.f(layout_.offset[2]);
    float* gb2 = g_.f(layout_.offset[3]);
    // cuBLAS is column-major: a row-major R x C matrix is its column-major C x R transpose, so
    // row-major h = x . w1 is column-major h^T = w1^T . x^T, i.e. gemm(N, N) on the buffers as they are.
    ck(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, hidden, rows, in, &one, w1, hidden, x_.f(), in, &zero, h_.f(), hidden),
       "cublasSgemm(h = x w1)");
    gpu::bias_relu(h_.f(), b1, s_.rows, s_.hidden, st);
    // out[r] = sum_k h[r][k] w2[k]: column-major h^T (hidden x rows), transposed.
    ck(cublasSgemv(blas, CUBLAS_OP_T, hidden, rows, &one, h_.f(), hidden, w2, 1, &zero, out_.f(), 1), "cublasSgemv(out = h w2)");
    gpu::loss_and_output_grad(out_.f(), y_.f(), b2, dy_.f(), loss_.f(), gb2, s_.rows, st);
    // gw2[k] = sum_r h[r][k] dy[r].
    ck(cublasSgemv(blas, CUBLAS_OP_N, hidden, rows, &one, h_.f(), hidden, dy_.f(), 1, &zero, gw2, 1), "cublasSgemv(gw2 = h^T dy)");
    gpu::relu_backward(h_.f(), dy_.f(), w2, dh_.f(), s_.rows, s_.hidden, st);
    gpu::column_sums(dh_.f(), gb1, s_.rows, s_.hidden, st);
    // Row-major gw1 (in x hidden) = x^T dh is column-major gw1^T = dh^T . x: gemm(N, T).
    ck(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, hidden, in, rows, &one, dh_.f(), hidden, x_.f(), in, &zero, gw1, hidden),
       "cublasSgemm(gw1 = x^T dh)");
    float loss = 0;
    ck(cudaMemcpyAsync(&loss, loss_.f(), 4, cudaMemcpyDeviceToHost, st), "download of the loss");
    ck(cudaStreamSynchronize(st), "forward/backward");
    return loss;
  }

  // The bucketer packs, allreduces (NCCL, ordered after the backward on our stream) and unpacks.
  void allreduce_gradients() override { bucketer_.allreduce(ReduceOp::Avg); }

  void optimizer_step(float lr, std::uint64_t step) override {
    kernels::AdamWConfig cfg;
    cfg.lr = lr;
    cfg.step = static_cast<int>(step);
    kernels::cuda::adamw_f32(p_refs_.data(), g_refs_.data(), m_refs_.data(), v_refs_.data(), p_refs_.size(), cfg, nullptr,
                             stream_.get());
    // Checkpoint copies order after the whole device; waiting here also surfaces a failed update
    // at the step that caused it.
    ck(cudaStreamSynchronize(stream_.get()), "AdamW");
  }

  HostParams download_params() override {
    HostParams p(s_);
    auto ts = p.tensors();
    for (int i = 0; i < 4; ++i)
      ck(cudaMemcpyAsync(ts[i]->data(), params_.f(layout_.offset[i]), ts[i]->size() * 4, cudaMemcpyDeviceToHost,
                         stream_.get()),
         "download of the parameters");
    ck(cudaStreamSynchronize(stream_.get()), "download of the parameters");
    return p;
  }

 private:
  struct SetDevice {
    explicit SetDevice(int d) { ck(cudaSetDevice(d), "cudaSetDevice"); }
  };

  std::vector<kernels::TensorRef> tensor_refs(const DeviceMemory& mem) const {
    std::vector<kernels::TensorRef> out;
    for (int i = 0; i < 4; ++i) out.push_back({mem.f(layout_.offset[i]), layout_.count[i]});
    return out;
  }

  Shapes s_;
  int device_;
  SetDevice set_device_;  // before any CUDA object below
  Stream stream_;         // all of this engine's work, in one order
  Layout layout_;
  DeviceMemory params_, m_, v_, g_;
  DeviceMemory x_, y_, h_, dh_, out_, dy_, loss_;
  DeviceMemory workspace_;
  Cublas blas_;
  GradientBucketer bucketer_;
  std::vector<kernels::TensorRef> p_refs_, m_refs_, v_refs_;
  std::vector<kernels::ConstTensorRef> g_refs_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(Runtime& rt, const Shapes& shapes, std::uint64_t seed) {
  return std::make_unique<CudaEngine>(rt, shapes, seed);
}

}  // namespace train_mlp
