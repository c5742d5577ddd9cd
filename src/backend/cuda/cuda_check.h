// Helpers for the CUDA host code (CUDA builds only): CUDA errors as Status, and
// the shape checks of row-wise ops for tensors that must live on the GPU.
#pragma once

#include <climits>
#include <cstdint>
#include <initializer_list>

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "src/backend/shape_check.h"
#include "src/core/status.h"
#include "src/core/tensor.h"

namespace ladder {
namespace cuda {

// cudaSuccess -> OK; otherwise Internal "<op>: <cudaErrorName>: <description>".
inline absl::Status CudaStatus(cudaError_t err, absl::string_view op) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(op, ": ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

inline absl::Status CheckOnGpu(absl::string_view op, absl::string_view what, const Tensor& t) {
  if (t.device == Device::kCuda) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is not a CUDA tensor"));
}

inline bool DimsValid(const Tensor& t) {
  if (t.rank < 1 || t.rank > Tensor::kMaxRank) return false;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) return false;
  }
  return true;
}

// The row-wise view [numel / last_dim, last_dim] of the tensor that sets an
// op's sizes; both must fit the kernels' int indices.
inline absl::Status RowView(absl::string_view op, absl::string_view what, const Tensor& t,
                            DType dtype, int64_t* rows, int64_t* cols) {
  if (t.empty() || t.dtype != dtype || !DimsValid(t) || t.dim(-1) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", what, " has shape ", t.ShapeString(), t.empty() ? " (empty)" : "",
        t.dtype != dtype ? " (wrong dtype)" : "", ", expected [rows, cols] with cols > 0"));
  }
  *cols = t.dim(-1);
  *rows = t.numel() / *cols;
  if (*rows > INT_MAX || *cols > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has shape ",
                                                   t.ShapeString(), ": too many rows or cols"));
  }
  return CheckOnGpu(op, what, t);
}

// OK iff t is non-empty, of dtype, and viewed row-wise is [rows, cols].
inline absl::Status CheckRows(absl::string_view op, absl::string_view what, const Tensor& t,
                              DType dtype, int64_t rows, int64_t cols) {
  if (t.empty() || t.dtype != dtype || !DimsValid(t) || t.dim(-1) != cols ||
      t.numel() != rows * cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", what, " has shape ", t.ShapeString(), t.empty() ? " (empty)" : "",
        t.dtype != dtype ? " (wrong dtype)" : "", ", expected [", rows, ",", cols,
        "] (leading dims may be split)"));
  }
  return CheckOnGpu(op, what, t);
}

// OK iff t is non-empty, of dtype, with exactly n elements (any shape), or at
// least n when at_least is set (scratch buffers).
inline absl::Status CheckNumel(absl::string_view op, absl::string_view what, const Tensor& t,
                               DType dtype, int64_t n, bool at_least = false) {
  const bool size_ok = at_least ? t.numel() >= n : t.numel() == n;
  if (t.empty() || t.dtype != dtype || !DimsValid(t) || !size_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", what, " has shape ", t.ShapeString(), t.empty() ? " (empty)" : "",
        t.dtype != dtype ? " (wrong dtype)" : "", ", expected ", at_least ? "at least " : "", n,
        " elements"));
  }
  return CheckOnGpu(op, what, t);
}

// CheckShape (exact shape) plus the device.
inline absl::Status CheckExact(absl::string_view op, absl::string_view what, const Tensor& t,
                               DType dtype, std::initializer_list<int64_t> dims) {
  RETURN_IF_ERROR(CheckShape(op, what, t, dtype, dims));
  return CheckOnGpu(op, what, t);
}

}  // namespace cuda
}  // namespace ladder
