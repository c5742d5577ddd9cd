// Helpers for the CUDA host code (CUDA builds only): CUDA errors as Status, and
// the shape checks of row-wise ops for tensors that must live on the GPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/namespace.h"
#include "src/backend/shape_check.h"
#include "src/core/status.h"
#include "src/core/tensor.h"

LADDER_CUDA_BEGIN

// cudaSuccess -> OK; otherwise Internal "<op>: <cudaErrorName>: <description>".
inline absl::Status CudaStatus(cudaError_t err, absl::string_view op) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(op, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

// The shared shape checks (src/backend/shape_check.h), bound to the GPU.
inline absl::Status CheckOnGpu(absl::string_view op, absl::string_view what, const Tensor& t) {
  return CheckDevice(Device::kCuda, op, what, t);
}
inline absl::Status CheckExact(absl::string_view op, absl::string_view what, const Tensor& t,
                               DType dtype, std::initializer_list<int64_t> dims) {
  return ladder::CheckExact(Device::kCuda, op, what, t, dtype, dims);
}
inline absl::Status RowView(absl::string_view op, absl::string_view what, const Tensor& t,
                            DType dtype, int64_t* rows, int64_t* cols) {
  return ladder::RowView(Device::kCuda, op, what, t, dtype, rows, cols);
}
inline absl::Status CheckRows(absl::string_view op, absl::string_view what, const Tensor& t,
                              DType dtype, int64_t rows, int64_t cols) {
  return ladder::CheckRows(Device::kCuda, op, what, t, dtype, rows, cols);
}
inline absl::Status CheckNumel(absl::string_view op, absl::string_view what, const Tensor& t,
                               DType dtype, int64_t n, bool at_least = false) {
  return ladder::CheckNumel(Device::kCuda, op, what, t, dtype, n, at_least);
}

// A tensor of a call whose activations share one storage dtype (backend.h
// "Precision"): that of the tensor named `ref`. `t` must have it (else the
// error names both dtypes) and exactly the shape dims.
inline absl::Status CheckStorage(absl::string_view op, absl::string_view what, const Tensor& t,
                                 absl::string_view ref, DType storage,
                                 std::initializer_list<int64_t> dims) {
  if (!t.empty() && t.dtype != storage) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is ", DTypeName(t.dtype),
                                                   " but ", ref, " is ", DTypeName(storage),
                                                   " (one storage dtype per call)"));
  }
  return CheckExact(op, what, t, storage, dims);
}

// The kernels' element type of a storage dtype (backend.h "Precision"):
// float for kF32, __nv_bfloat16 for kBF16. WithStorage calls
// f(std::type_identity<T>{}) with that T and returns its Status, so one
// lambda picks a launcher's instantiation:
//   return WithStorage(op, "inp", inp.dtype, [&](auto tag) {
//     using T = typename decltype(tag)::type;
//     return CudaStatus(kernels::LaunchFoo<T>(Data<T>(out), Data<T>(inp), ...), op);
//   });
// Any other dtype is InvalidArgument "<op>: <what> must be f32 or bf16".
template <typename F>
absl::Status WithStorage(absl::string_view op, absl::string_view what, DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      return f(std::type_identity<float>{});
    case DType::kBF16:
      return f(std::type_identity<__nv_bfloat16>{});
    default:
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be f32 or bf16"));
  }
}

// A tensor's data as the kernels' element type T (the caller has checked
// the dtype).
template <typename T>
T* Data(const Tensor& t) {
  return static_cast<T*>(t.data);
}

LADDER_CUDA_END
