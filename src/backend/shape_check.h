// Shape validation shared by backends: one clear InvalidArgument per mismatch.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/core/tensor.h"

namespace ladder {

// OK iff `t` is non-empty, has `dtype` and exactly the given shape.
inline absl::Status CheckShape(absl::string_view op, absl::string_view what, const Tensor& t,
                               DType dtype, std::initializer_list<int64_t> dims) {
  bool ok = !t.empty() && t.dtype == dtype && t.rank == static_cast<int>(dims.size());
  int i = 0;
  for (int64_t d : dims) {
    if (ok && t.shape[i] != d) ok = false;
    ++i;
  }
  if (ok) return absl::OkStatus();
  Tensor want(nullptr, dtype, dims);
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " has shape ", t.ShapeString(),
                                                 t.empty() ? " (empty)" : "", ", expected ",
                                                 want.ShapeString()));
}

}  // namespace ladder
