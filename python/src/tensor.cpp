#include "tensor.hpp"

#include <fmt/format.h>
#include <nanobind/stl/string.h>

#include "trainrt/error.hpp"

namespace trainrt::py {

std::string dtype_name(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  std::string kind;
  switch (static_cast<C>(t.code)) {
    case C::Int: kind = "int"; break;
    case C::UInt: kind = "uint"; break;
    case C::Float: kind = "float"; break;
    case C::Bfloat: kind = "bfloat"; break;
    case C::Complex: kind = "complex"; break;
    case C::Bool: return "bool";
    default: return fmt::format("dlpack-code{}-{}bit", t.code, t.bits);
  }
  std::string name = kind + std::to_string(t.bits);
  if (t.lanes != 1) name += fmt::format("x{}", t.lanes);
  return name;
}

namespace {

std::optional<DType> to_dtype(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes != 1) return std::nullopt;
  switch (static_cast<C>(t.code)) {
    case C::Float:
      if (t.bits == 32) return DType::F32;
      if (t.bits == 64) return DType::F64;
      if (t.bits == 16) return DType::F16;
      break;
    case C::Bfloat:
      if (t.bits == 16) return DType::BF16;
      break;
    case C::Int:
      if (t.bits == 32) return DType::I32;
      if (t.bits == 64) return DType::I64;
      break;
    default: break;
  }
  return std::nullopt;
}

std::string type_of(nb::handle obj) {
  return nb::cast<std::string>(nb::type_name(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr())))));
}

std::string shape_text(const Array& a, bool strides) {
  std::string s = "[";
  for (std::size_t i = 0; i < a.ndim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(strides ? a.stride(i) : static_cast<std::int64_t>(a.shape(i)));
  }
  return s + "]";
}

}  // namespace

View view(nb::handle obj, const std::string& what) {
  View v;
  if (!nb::try_cast<Array>(obj, v.array, /*convert=*/false)) {
    nb::ndarray<nb::ro> ro;
    if (nb::try_cast<nb::ndarray<nb::ro>>(obj, ro, false))
      throw UsageError(fmt::format("{} is a read-only {}: the runtime writes into it (restore, in-place collectives)", what,
                                   type_of(obj)));
    if (nb::hasattr(obj, "__dlpack__")) {
      // Its own exporter says why (a dtype DLPack lacks, a tensor that requires grad, ...).
      std::string why = "its __dlpack__ export was refused";
      try {
        obj.attr("__dlpack__")();
      } catch (const nb::python_error& e) {
        why = fmt::format("{}: {}", type_of(e.value()), nb::cast<std::string>(nb::str(e.value())));
      }
      throw UsageError(fmt::format("{} (a {}) cannot be used through DLPack: {}", what, type_of(obj), why));
    }
    throw UsageError(fmt::format("{} is a {}, not a tensor or array (torch.Tensor, numpy.ndarray or any __dlpack__ object)",
                                 what, type_of(obj)));
  }
  const Array& a = v.array;
  const int dev = a.device_type();
  if (dev == nb::device::cuda::value) {
    v.on_cuda = true;
  } else if (dev != nb::device::cpu::value && dev != nb::device::cuda_host::value) {
    throw UsageError(fmt::format("{} lives on DLPack device type {} (id {}): only CPU and CUDA memory are supported", what,
                                 dev, a.device_id()));
  }
  v.device_id = a.device_id();
  // C-contiguous: the stride of every dimension longer than 1 is the product of the later extents.
  // Strided views would need a gather (a copy) and in-place results would miss the caller's tensor.
  std::int64_t expected = 1;
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected)
      throw UsageError(fmt::format("{} is not contiguous (shape {}, strides {} in elements): pass a contiguous tensor, "
                                   "e.g. t.contiguous(), and keep using that one",
                                   what, shape_text(a, false), shape_text(a, true)));
    expected *= static_cast<std::int64_t>(a.shape(i));
  }
  const auto t = a.dtype();
  if (t.bits % 8 != 0 || t.lanes != 1)
    throw UsageError(fmt::format("{} has element type {}, which is not whole bytes per element", what, dtype_name(t)));
  v.data = a.data();
  v.count = a.size();
  v.bytes = a.nbytes();
  v.dtype = to_dtype(t);
  v.dtype_name = dtype_name(t);
  for (std::size_t i = 0; i < a.ndim(); ++i) v.shape.push_back(static_cast<std::int64_t>(a.shape(i)));
  return v;
}

}  // namespace trainrt::py
