#include "tensor.hpp"

#include <fmt/format.h>
#include <nanobind/stl/string.h>

#include <cstddef>
#include <cstdint>

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

// At most as many dimensions as a checkpoint entry may have (checkpoint/src/shard_format.hpp).
constexpr std::int32_t kMaxDims = 32;

std::string dims_text(const std::int64_t* v, std::int32_t n) {
  std::string s = "[";
  for (std::int32_t i = 0; v && i < n && i < kMaxDims; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// What a producer's DLTensor says is checked before any of it is used: the runtime will read and
// write `bytes` bytes at `data` (a collective, a checkpoint save or restore), so a shape whose
// element count wraps past 2^64 (a silent zero-byte no-op), a negative extent, a NULL or wrapping
// address, or an element type of zero bits is a UsageError naming the object. Called on the
// capsule a __dlpack__ producer returned before nanobind imports it (nanobind allocates by ndim and
// multiplies extents without a check), and on every array nanobind made, buffer protocol included.
void check_layout(const nb::dlpack::dltensor& t, const std::string& what, View* v) {
  if (t.ndim < 0 || t.ndim > kMaxDims)
    throw UsageError(fmt::format("{} has {} dimensions: between 0 and {} are supported", what, t.ndim, kMaxDims));
  if (t.ndim > 0 && !t.shape) throw UsageError(fmt::format("{} has {} dimensions but no shape", what, t.ndim));
  const unsigned bits = t.dtype.bits;
  if (bits == 0 || bits % 8 != 0 || t.dtype.lanes != 1)
    throw UsageError(fmt::format("{} has element type {}, which is not whole bytes per element", what, dtype_name(t.dtype)));
  const std::string shape = dims_text(t.shape, t.ndim);
  bool empty = false;
  for (std::int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) throw UsageError(fmt::format("{} has shape {}: extent {} in dimension {}", what, shape, t.shape[i], i));
    empty = empty || t.shape[i] == 0;
  }
  std::uint64_t count = 1;
  for (std::int32_t i = 0; i < t.ndim && !empty; ++i)
    if (__builtin_mul_overflow(count, static_cast<std::uint64_t>(t.shape[i]), &count))
      throw UsageError(fmt::format("{} has shape {}: its element count does not fit in 64 bits", what, shape));
  if (empty) count = 0;
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, std::uint64_t{bits / 8}, &bytes) || bytes > static_cast<std::uint64_t>(PTRDIFF_MAX))
    throw UsageError(fmt::format("{} has shape {} of {}: more bytes than any memory holds", what, shape, dtype_name(t.dtype)));
  const auto base = reinterpret_cast<std::uintptr_t>(t.data);
  std::uintptr_t first = 0, end = 0;
  if (__builtin_add_overflow(base, t.byte_offset, &first) || __builtin_add_overflow(first, bytes, &end))
    throw UsageError(fmt::format("{}: address {:#x} + byte offset {} + {} bytes wraps around", what, base, t.byte_offset, bytes));
  if (bytes > 0 && base == 0) throw UsageError(fmt::format("{} has {} bytes at a NULL data pointer", what, bytes));
  // C-contiguous: the stride of every dimension longer than 1 is the product of the later extents.
  // Strided views would need a gather (a copy) and in-place results would miss the caller's tensor.
  // An empty or one-element tensor touches no other element: its strides do not matter.
  if (count > 1 && t.strides) {
    std::int64_t expected = 1;  // never more than the element count, which fits (checked above)
    for (std::int32_t i = t.ndim; i-- > 0;) {
      if (t.shape[i] != 1 && t.strides[i] != expected)
        throw UsageError(fmt::format("{} is not contiguous (shape {}, strides {} in elements): pass a contiguous tensor, "
                                     "e.g. t.contiguous(), and keep using that one",
                                     what, shape, dims_text(t.strides, t.ndim)));
      expected *= t.shape[i];
    }
  }
  if (v) {
    v->data = reinterpret_cast<void*>(first);
    v->count = static_cast<std::size_t>(count);
    v->bytes = static_cast<std::size_t>(bytes);
  }
}

// The capsule `obj.__dlpack__()` returns, checked, or None when the producer refused or is not one
// (then nanobind's own import, or the buffer protocol, decides, and the error paths below say why).
nb::object checked_capsule(nb::handle obj, const std::string& what) {
  if (!nb::hasattr(obj, "__dlpack__")) return nb::none();
  nb::object cap;
  try {
    cap = obj.attr("__dlpack__")();
  } catch (const nb::python_error&) {
    return nb::none();
  }
  if (!PyCapsule_CheckExact(cap.ptr())) return nb::none();
  // DLManagedTensor starts with its DLTensor, whose layout nanobind's dltensor mirrors.
  auto* t = static_cast<nb::dlpack::dltensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  if (!t) {
    PyErr_Clear();
    return nb::none();
  }
  check_layout(*t, what, nullptr);
  return cap;
}

}  // namespace

View view(nb::handle obj, const std::string& what) {
  View v;
  // A __dlpack__ producer's capsule is checked first and then imported: nanobind itself trusts it.
  const nb::object capsule = checked_capsule(obj, what);
  if (!nb::try_cast<Array>(capsule.is_none() ? obj : nb::handle(capsule), v.array, /*convert=*/false)) {
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
  // nanobind's own tensor (its import may have filled in strides, or built it from a buffer):
  // a DLTensor it holds, valid while `a` holds its reference.
  const nb::dlpack::dltensor* t = nb::detail::ndarray_inc_ref(a.handle());
  nb::detail::ndarray_dec_ref(a.handle());
  if (!t) throw UsageError(fmt::format("{} has no DLPack tensor", what));
  check_layout(*t, what, &v);
  v.dtype = to_dtype(a.dtype());
  v.dtype_name = dtype_name(a.dtype());
  for (std::size_t i = 0; i < a.ndim(); ++i) v.shape.push_back(a.shape_ptr()[i]);
  return v;
}

}  // namespace trainrt::py
