// Shape validation shared by backends: one clear InvalidArgument per mismatch,
// naming the op and the tensor. Each check also requires the tensor to live on
// the backend's device; cpu/cpu_common.h and cuda/cuda_check.h bind that.
#pragma once

#include <climits>
#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "src/backend/backend.h"
#include "src/backend/token_sampling.h"
#include "src/core/status.h"
#include "src/core/tensor.h"

namespace ladder {

inline bool DimsValid(const Tensor& t) {
  if (t.rank < 1 || t.rank > Tensor::kMaxRank) return false;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) return false;
  }
  return true;
}

inline absl::Status CheckDevice(Device device, absl::string_view op, absl::string_view what,
                                const Tensor& t) {
  if (t.device == device) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", what, " is not a ", device == Device::kCpu ? "CPU" : "CUDA", " tensor"));
}

namespace internal {
inline std::string Describe(const Tensor& t, DType dtype) {
  return absl::StrCat(t.ShapeString(), t.empty() ? " (empty)" : "",
                      t.dtype != dtype ? " (wrong dtype)" : "");
}
}  // namespace internal

// OK iff `t` is non-empty, has `dtype` and exactly the given shape (any device).
inline absl::Status CheckShape(absl::string_view op, absl::string_view what, const Tensor& t,
                               DType dtype, std::initializer_list<int64_t> dims) {
  bool ok = !t.empty() && t.dtype == dtype && t.rank == static_cast<int>(dims.size());
  int i = 0;
  for (int64_t d : dims) {
    if (ok && t.shape[i] != d) ok = false;
    ++i;
  }
  if (ok) return absl::OkStatus();
  const Tensor want(nullptr, dtype, dims, t.device);  // only for its ShapeString
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has shape ",
                                                 internal::Describe(t, dtype), ", expected ",
                                                 want.ShapeString()));
}

// CheckShape plus the device.
inline absl::Status CheckExact(Device device, absl::string_view op, absl::string_view what,
                               const Tensor& t, DType dtype, std::initializer_list<int64_t> dims) {
  absl::Status s = CheckShape(op, what, t, dtype, dims);
  if (!s.ok()) return s;
  return CheckDevice(device, op, what, t);
}

// The row-wise view [numel / last_dim, last_dim] of the tensor that sets an
// op's sizes. The last dimension must be positive and both fit an int.
inline absl::Status RowView(Device device, absl::string_view op, absl::string_view what,
                            const Tensor& t, DType dtype, int64_t* rows, int64_t* cols) {
  if (t.empty() || t.dtype != dtype || !DimsValid(t) || t.dim(-1) <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has shape ",
                                                   internal::Describe(t, dtype),
                                                   ", expected [rows, cols] with cols > 0"));
  }
  *cols = t.dim(-1);
  *rows = t.numel() / *cols;
  if (*rows > INT_MAX || *cols > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " has shape ", t.ShapeString(), ": too many rows or cols"));
  }
  return CheckDevice(device, op, what, t);
}

// OK iff `t` is non-empty, of `dtype`, and viewed row-wise is [rows, cols]
// (any leading dimensions whose product is rows).
inline absl::Status CheckRows(Device device, absl::string_view op, absl::string_view what,
                              const Tensor& t, DType dtype, int64_t rows, int64_t cols) {
  if (t.empty() || t.dtype != dtype || !DimsValid(t) || t.dim(-1) != cols ||
      t.numel() != rows * cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " has shape ", internal::Describe(t, dtype), ", expected [",
                     rows, ",", cols, "] (leading dims may be split)"));
  }
  return CheckDevice(device, op, what, t);
}

// OK iff `t` is non-empty, of `dtype`, and holds exactly n elements (any
// shape: per-row statistics may be [N] or [B,T]), or at least n when
// `at_least` is set (scratch buffers).
inline absl::Status CheckNumel(Device device, absl::string_view op, absl::string_view what,
                               const Tensor& t, DType dtype, int64_t n, bool at_least = false) {
  const bool size_ok = at_least ? t.numel() >= n : t.numel() == n;
  if (t.empty() || t.dtype != dtype || !DimsValid(t) || !size_ok) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has shape ",
                                                   internal::Describe(t, dtype), ", expected ",
                                                   at_least ? "at least " : "", n, " elements"));
  }
  return CheckDevice(device, op, what, t);
}

// True iff the byte ranges of two views intersect (empty views never do).
inline bool Overlap(const Tensor& a, const Tensor& b) {
  if (a.empty() || b.empty() || !DimsValid(a) || !DimsValid(b)) return false;
  const char* pa = static_cast<const char*>(a.data);
  const char* pb = static_cast<const char*>(b.data);
  return a.bytes() > 0 && b.bytes() > 0 && pa < pb + b.bytes() && pb < pa + a.bytes();
}

// OK iff dst and src are non-empty views of one dtype and the same number of
// elements (their shapes may differ), both on `device`, whose byte ranges do
// not overlap: Backend::Copy's arguments.
inline absl::Status CheckCopy(Device device, absl::string_view op, const Tensor& dst,
                              const Tensor& src) {
  if (dst.empty() || src.empty() || !DimsValid(dst) || !DimsValid(src) || dst.dtype != src.dtype ||
      dst.numel() != src.numel()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dst ", internal::Describe(dst, dst.dtype),
                                                   " and src ", internal::Describe(src, dst.dtype),
                                                   " must be non-empty with one dtype and numel"));
  }
  RETURN_IF_ERROR(CheckDevice(device, op, "dst", dst));
  RETURN_IF_ERROR(CheckDevice(device, op, "src", src));
  if (Overlap(dst, src)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dst and src overlap"));
  }
  return absl::OkStatus();
}

// OK iff tensor k of an AdamW update is well formed (Backend::AdamWUpdate):
// param, grad, m and v f32 of one row-wise shape, and param16 empty or a
// bf16 tensor of the same shape, all on `device`. Sets *n to the element count.
inline absl::Status CheckAdamWTensor(Device device, absl::string_view op, size_t k,
                                     const AdamWTensor& t, int64_t* n) {
  int64_t rows = 0, cols = 0;
  RETURN_IF_ERROR(
      RowView(device, op, absl::StrCat("param[", k, "]"), t.param, DType::kF32, &rows, &cols));
  RETURN_IF_ERROR(
      CheckRows(device, op, absl::StrCat("grad[", k, "]"), t.grad, DType::kF32, rows, cols));
  RETURN_IF_ERROR(CheckRows(device, op, absl::StrCat("m[", k, "]"), t.m, DType::kF32, rows, cols));
  RETURN_IF_ERROR(CheckRows(device, op, absl::StrCat("v[", k, "]"), t.v, DType::kF32, rows, cols));
  if (!t.param16.empty()) {
    RETURN_IF_ERROR(CheckRows(device, op, absl::StrCat("param16[", k, "]"), t.param16, DType::kBF16,
                              rows, cols));
  }
  *n = rows * cols;
  return absl::OkStatus();
}

// OK iff dst (bf16) and src (f32) have the same element count on `device`
// and do not overlap: Backend::RoundToBf16's arguments.
inline absl::Status CheckRoundToBf16(Device device, absl::string_view op, const Tensor& dst,
                                     const Tensor& src) {
  RETURN_IF_ERROR(CheckNumel(device, op, "src", src, DType::kF32, src.numel()));
  RETURN_IF_ERROR(CheckNumel(device, op, "dst", dst, DType::kBF16, src.numel()));
  const char* d = static_cast<const char*>(dst.data);
  const char* s = static_cast<const char*>(src.data);
  if (d < s + src.bytes() && s < d + dst.bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dst and src overlap"));
  }
  return absl::OkStatus();
}

// The dimensions of causal self-attention over qkv [B,T,3C] with NH heads of
// HS = C / NH channels (Backend::AttentionForward's layout).
struct AttentionDims {
  int64_t B, T, C, NH, HS;
};

// OK iff qkv is [B,T,3C] of `dtype` (the storage the caller accepts) on
// `device` and num_heads is positive and divides C; fills *d. Errors name
// the tensor `what`.
inline absl::Status CheckAttentionQkv(Device device, absl::string_view op, const Tensor& qkv,
                                      DType dtype, int num_heads, AttentionDims* d,
                                      absl::string_view what = "qkv") {
  if (qkv.empty() || qkv.dtype != dtype || qkv.rank != 3 || !DimsValid(qkv) ||
      qkv.dim(2) % 3 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has shape ",
                                                   internal::Describe(qkv, dtype), ", expected ",
                                                   DTypeName(dtype), " [B,T,3C]"));
  }
  d->B = qkv.dim(0);
  d->T = qkv.dim(1);
  d->C = qkv.dim(2) / 3;
  if (num_heads <= 0 || d->C % num_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": num_heads=", num_heads, " must be positive and divide C=", d->C));
  }
  d->NH = num_heads;
  d->HS = d->C / num_heads;
  return CheckDevice(device, op, what, qkv);
}

// The dimensions of one block of attention by positions
// (Backend::AttentionPartForward): Tq queries of q_qkv [B,Tq,3C] against the
// Tk keys of kv_qkv [B,Tk,3C], NH heads of HS = C / NH channels.
struct AttentionPartDims {
  int64_t B, Tq, Tk, C, NH, HS;
};

// OK iff q_qkv [B,Tq,3C] and kv_qkv [B,Tk,3C] are of `dtype` (one B and C),
// num_heads is positive and divides C, and q_pos [Tq] and k_pos [Tk] are
// i32, all on `device`; fills *d.
inline absl::Status CheckAttentionPart(Device device, absl::string_view op, const Tensor& q_qkv,
                                       const Tensor& kv_qkv, const Tensor& q_pos,
                                       const Tensor& k_pos, DType dtype, int num_heads,
                                       AttentionPartDims* d) {
  AttentionDims q, kv;
  RETURN_IF_ERROR(CheckAttentionQkv(device, op, q_qkv, dtype, num_heads, &q, "q_qkv"));
  RETURN_IF_ERROR(CheckAttentionQkv(device, op, kv_qkv, dtype, num_heads, &kv, "kv_qkv"));
  if (kv.B != q.B || kv.C != q.C) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": kv_qkv has shape ", kv_qkv.ShapeString(),
                                                   ", expected [", q.B, ",Tk,", 3 * q.C,
                                                   "] (q_qkv's B and 3C)"));
  }
  RETURN_IF_ERROR(CheckExact(device, op, "q_pos", q_pos, DType::kI32, {q.T}));
  RETURN_IF_ERROR(CheckExact(device, op, "k_pos", k_pos, DType::kI32, {kv.T}));
  *d = {q.B, q.T, kv.T, q.C, q.NH, q.HS};
  return absl::OkStatus();
}

// The aliasing rules of AttentionPartForward/Backward: out (forward) overlaps
// neither q_qkv nor kv_qkv; dq_qkv and dkv_qkv (backward; pass empty tensors
// for the forward) are one view or do not overlap.
inline absl::Status CheckAttentionPartAliasing(absl::string_view op, const Tensor& out,
                                               const Tensor& q_qkv, const Tensor& kv_qkv,
                                               const Tensor& dq_qkv, const Tensor& dkv_qkv) {
  if (Overlap(out, q_qkv) || Overlap(out, kv_qkv)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": out overlaps q_qkv or kv_qkv"));
  }
  const bool same = dq_qkv.data == dkv_qkv.data && dq_qkv.dtype == dkv_qkv.dtype &&
                    dq_qkv.rank == dkv_qkv.rank && dq_qkv.shape == dkv_qkv.shape;
  if (!same && Overlap(dq_qkv, dkv_qkv)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": dq_qkv and dkv_qkv overlap without being the same tensor"));
  }
  return absl::OkStatus();
}

// OK iff logits, viewed row-wise, is a [N, Vshard] shard of `dtype` on `device` of
// a vocabulary of vocab_size >= 1 real columns starting at vocab_start >= 0
// (the vocabulary-parallel cross-entropy's arguments); fills *N and *Vs.
inline absl::Status CheckVocabShard(Device device, absl::string_view op, const Tensor& logits,
                                    DType dtype, int64_t vocab_start, int vocab_size, int64_t* N,
                                    int64_t* Vs) {
  RETURN_IF_ERROR(RowView(device, op, "logits", logits, dtype, N, Vs));
  if (vocab_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": vocab_size ", vocab_size, " is not positive"));
  }
  if (vocab_start < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": vocab_start ", vocab_start, " is negative"));
  }
  return absl::OkStatus();
}

// SampleTokens' arguments (backend.h): logits an f32 [N, Vp] matrix on
// `device` with 1 <= vocab_size <= Vp, as many ids as specs, every spec in
// range (CheckTokenSampleSpec); fills *N and *Vp.
inline absl::Status CheckSampleTokens(Device device, const Tensor& logits, int vocab_size,
                                      absl::Span<const TokenSampleSpec> specs,
                                      absl::Span<int32_t> ids, int64_t* N, int64_t* Vp) {
  constexpr char kOp[] = "SampleTokens";
  RETURN_IF_ERROR(RowView(device, kOp, "logits", logits, DType::kF32, N, Vp));
  if (vocab_size < 1 || vocab_size > *Vp) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": vocab_size ", vocab_size,
                                                   " is outside [1, ", *Vp, "] (the row length)"));
  }
  if (ids.size() != specs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": ", ids.size(), " ids for ", specs.size(), " specs"));
  }
  return CheckTokenSampleSpecs(specs, *N);
}

}  // namespace ladder
