#include "src/model/kv_cache.h"

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {

absl::StatusOr<KvCache> KvCache::Create(const GptConfig& cfg, Backend* backend, int num_blocks) {
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the KV cache needs at least one block, got ", num_blocks));
  }
  KvCache c;
  c.num_blocks_ = num_blocks;
  const int64_t rows = int64_t{num_blocks} * kBlockTokens, per = rows * cfg.n_embd;
  c.bytes_ = 2 * cfg.n_layer * per * int64_t{sizeof(float)};
  ASSIGN_OR_RETURN(c.buffer_, backend->Allocate(static_cast<size_t>(c.bytes_)));
  float* base = static_cast<float*>(c.buffer_.get());
  for (int l = 0; l < cfg.n_layer; ++l) {
    c.k_.push_back(Tensor::F32(base + (2 * l) * per, {rows, cfg.n_embd}));
    c.v_.push_back(Tensor::F32(base + (2 * l + 1) * per, {rows, cfg.n_embd}));
  }
  return c;
}

}  // namespace ladder
