// Misaligned pointers are rejected on the host, as trainrt::UsageError naming the function and the
// argument. The CUDA entry points check before any CUDA call, so a CUDA build proves that here
// without a GPU: were a check missing, the call would reach CUDA and fail with a plain Error (no
// device) instead, or fault the device on a machine with one. The addresses are never dereferenced.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "trainrt/error.hpp"
#include "trainrt/kernels/alignment.hpp"
#include "trainrt/kernels/cuda.hpp"

using namespace trainrt;
using namespace trainrt::kernels;

namespace {

template <typename T = void>
T* at(std::uintptr_t a) { return reinterpret_cast<T*>(a); }

// Runs fn and returns the UsageError's message; fails the test for anything else, or for no throw.
template <typename Fn>
std::string usage_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("not a UsageError: " << e.what());
  }
  FAIL("no exception");
  return {};
}

}  // namespace

TEST_CASE("require_aligned passes aligned and null pointers, names the misaligned argument", "[alignment]") {
  CHECK_NOTHROW(require_aligned(at(0x1000), 16, "f", "x"));
  CHECK_NOTHROW(require_aligned(at(0x1004), 4, "f", "x"));
  CHECK_NOTHROW(require_aligned(nullptr, 8, "f", "x"));
  const std::string m = usage_error_of([] { require_aligned(at(0x1002), 4, "cuda::cast_to_half", "in"); });
  CHECK(m.find("cuda::cast_to_half: in (0x1002) is not 4-byte aligned") == 0);
}

TEST_CASE("require_aligned over a tensor list names the tensor and skips empty ones", "[alignment]") {
  const ConstTensorRef ok[] = {{at(0x1000), 3}, {at(0x1001), 0}, {at(0x2004), 1}};
  CHECK_NOTHROW(require_aligned(ok, 3, 4, "f", "tensors"));
  const TensorRef bad[] = {{at(0x1000), 3}, {at(0x1001), 0}, {at(0x2006), 1}};
  const std::string m = usage_error_of([&] { require_aligned(bad, 3, 4, "cuda::adamw_f32", "m"); });
  CHECK(m.find("cuda::adamw_f32: m[2].data (0x2006) is not 4-byte aligned") == 0);
}

#ifdef TRAINRT_HAVE_CUDA_KERNELS
TEST_CASE("the CUDA entry points reject misaligned pointers before touching CUDA", "[alignment][cuda]") {
  int* flag = at<int>(0x3000);
  auto starts = [](const std::string& m, const std::string& prefix) {
    INFO(m);
    CHECK(m.find(prefix) == 0);
  };
  starts(usage_error_of([&] { cuda::cast_to_half(at<float>(0x1002), at<std::uint16_t>(0x2000), 8, 1.f, HalfKind::BF16, flag, nullptr); }),
         "cuda::cast_to_half: in (0x1002)");
  starts(usage_error_of([&] { cuda::cast_to_half(at<float>(0x1000), at<std::uint16_t>(0x2001), 8, 1.f, HalfKind::F16, flag, nullptr); }),
         "cuda::cast_to_half: out (0x2001)");
  starts(usage_error_of([&] { cuda::cast_to_half(at<float>(0x1000), at<std::uint16_t>(0x2000), 8, 1.f, HalfKind::F16, at<int>(0x3002), nullptr); }),
         "cuda::cast_to_half: flag (0x3002)");
  starts(usage_error_of([&] { cuda::cast_from_half(at<std::uint16_t>(0x2001), at<float>(0x1000), 8, 1.f, HalfKind::BF16, flag, nullptr); }),
         "cuda::cast_from_half: in (0x2001)");
  starts(usage_error_of([&] { cuda::cast_from_half(at<std::uint16_t>(0x2000), at<float>(0x1006), 8, 1.f, HalfKind::BF16, flag, nullptr); }),
         "cuda::cast_from_half: out (0x1006)");

  const ConstTensorRef f32_bad[] = {{at(0x1000), 4}, {at(0x1402), 4}};
  starts(usage_error_of([&] { cuda::l2_norm(f32_bad, 2, DType::F32, at<double>(0x4000), nullptr); }),
         "cuda::l2_norm: tensors[1].data (0x1402) is not 4-byte aligned");
  const ConstTensorRef bf16_bad[] = {{at(0x1001), 4}};
  starts(usage_error_of([&] { cuda::l2_norm(bf16_bad, 1, DType::BF16, at<double>(0x4000), nullptr); }),
         "cuda::l2_norm: tensors[0].data (0x1001) is not 2-byte aligned");
  const ConstTensorRef f32_ok[] = {{at(0x1000), 4}};
  starts(usage_error_of([&] { cuda::l2_norm(f32_ok, 1, DType::F32, at<double>(0x4004), nullptr); }),
         "cuda::l2_norm: result (0x4004)");

  const TensorRef p[] = {{at(0x1000), 4}}, m[] = {{at(0x2000), 4}}, v[] = {{at(0x3000), 4}}, v_bad[] = {{at(0x3001), 4}};
  const ConstTensorRef g[] = {{at(0x4000), 4}}, g_bad[] = {{at(0x4002), 4}};
  const AdamWConfig cfg;
  starts(usage_error_of([&] { cuda::adamw_f32(p, g_bad, m, v, 1, cfg, nullptr, nullptr); }),
         "cuda::adamw_f32: grads[0].data (0x4002)");
  starts(usage_error_of([&] { cuda::adamw_f32(p, g, m, v_bad, 1, cfg, nullptr, nullptr); }),
         "cuda::adamw_f32: v[0].data (0x3001)");
  starts(usage_error_of([&] { cuda::adamw_f32(p, g, m, v, 1, cfg, at<int>(0x5001), nullptr); }),
         "cuda::adamw_f32: found_inf (0x5001)");
  const TensorRef p16_bad[] = {{at(0x1001), 4}}, w_bad[] = {{at(0x6002), 4}}, w[] = {{at(0x6000), 4}};
  starts(usage_error_of([&] { cuda::adamw_bf16_master(p16_bad, g, w, m, v, 1, cfg, nullptr, nullptr); }),
         "cuda::adamw_bf16_master: params_bf16[0].data (0x1001) is not 2-byte aligned");
  starts(usage_error_of([&] { cuda::adamw_bf16_master(p, g, w_bad, m, v, 1, cfg, nullptr, nullptr); }),
         "cuda::adamw_bf16_master: master[0].data (0x6002) is not 4-byte aligned");

  starts(usage_error_of([&] { cuda::block_digests(at(0x1001), 100, at<std::uint64_t>(0x2004), nullptr); }),
         "cuda::block_digests: digests (0x2004)");
}
#endif
