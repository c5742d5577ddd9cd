// Status helpers. Every fallible function across a module boundary returns
// absl::Status or absl::StatusOr<T>; no exceptions cross modules. The CLI maps
// InvalidArgument / NotFound / OutOfRange / FailedPrecondition / DataLoss
// (a corrupt input file) to exit code 2
// (bad input) and every other error to exit code 1 (runtime failure).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define LADDER_CONCAT_INNER(a, b) a##b
#define LADDER_CONCAT(a, b) LADDER_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status _ladder_status = (expr);          \
    if (!_ladder_status.ok()) return _ladder_status; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, F());` declares x from a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  LADDER_ASSIGN_OR_RETURN_IMPL(LADDER_CONCAT(_ladder_statusor_, __LINE__), lhs, rexpr)
#define LADDER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                 \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

namespace ladder {

// Process exit code for a failed status: 2 for bad input, 1 otherwise.
inline int ExitCodeFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:  // a corrupt input file
      return 2;
    default:
      return 1;
  }
}

}  // namespace ladder
