// Built without CUDA: the device kernels say so; device_available() is false.
#include "trainrt/error.hpp"
#include "trainrt/kernels/cuda.hpp"

namespace trainrt::kernels::cuda {
namespace {
[[noreturn]] void unavailable() { throw Error("this build has no CUDA kernels (configure with TRAINRT_WITH_CUDA=ON)", "kernels"); }
}  // namespace

bool device_available() { return false; }
void pack(const ConstTensorRef*, std::size_t, DType, void*, Stream) { unavailable(); }
void unpack(const void*, const TensorRef*, std::size_t, DType, Stream) { unavailable(); }
void cast_to_half(const float*, std::uint16_t*, std::size_t, float, HalfKind, int*, Stream) { unavailable(); }
void cast_from_half(const std::uint16_t*, float*, std::size_t, float, HalfKind, int*, Stream) { unavailable(); }
void l2_norm(const ConstTensorRef*, std::size_t, DType, double*, Stream) { unavailable(); }
void adamw_f32(const TensorRef*, const ConstTensorRef*, const TensorRef*, const TensorRef*, std::size_t,
               const AdamWConfig&, const int*, Stream) { unavailable(); }
void adamw_bf16_master(const TensorRef*, const ConstTensorRef*, const TensorRef*, const TensorRef*, const TensorRef*,
                       std::size_t, const AdamWConfig&, const int*, Stream) { unavailable(); }
void set_launch_events(void*, void*) { unavailable(); }
void block_digests(const void*, std::size_t, std::uint64_t*, Stream) { unavailable(); }

}  // namespace trainrt::kernels::cuda
