#include "src/core/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ladder {

std::string Tensor::ShapeString() const {
  return absl::StrCat("[", absl::StrJoin(shape.begin(), shape.begin() + rank, ","), "]");
}

}  // namespace ladder
