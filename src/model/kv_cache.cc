#include "src/model/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder {

absl::StatusOr<KvFormat> ParseKvFormat(absl::string_view name) {
  if (name == "fp32") return KvFormat::kF32;
  if (name == "int8") return KvFormat::kInt8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown KV cache format '", name, "' (expected fp32 or int8)"));
}

const char* KvFormatName(KvFormat format) { return format == KvFormat::kInt8 ? "int8" : "fp32"; }

int64_t KvCache::BytesPerToken(const GptConfig& cfg, KvFormat format) {
  const int64_t per_layer = format == KvFormat::kInt8
                                ? 2 * (int64_t{cfg.n_embd} + 4 * int64_t{cfg.n_head})
                                : 2 * 4 * int64_t{cfg.n_embd};
  return cfg.n_layer * per_layer;
}

absl::StatusOr<KvCache> KvCache::Create(const GptConfig& cfg, Backend* backend, int num_blocks,
                                        KvFormat format) {
  if (num_blocks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the KV cache needs at least one block, got ", num_blocks));
  }
  KvCache c;
  c.backend_ = backend;
  c.num_blocks_ = num_blocks;
  c.format_ = format;
  const int64_t rows = int64_t{num_blocks} * kBlockTokens;
  c.bytes_per_token_ = BytesPerToken(cfg, format);
  c.bytes_ = rows * c.bytes_per_token_;
  ASSIGN_OR_RETURN(c.buffer_, backend->Allocate(static_cast<size_t>(c.bytes_)));
  char* at = static_cast<char*>(c.buffer_.get());
  const int64_t C = cfg.n_embd, NH = cfg.n_head;
  const Device dev = backend->device();
  for (int l = 0; l < cfg.n_layer; ++l) {
    PagedKv kv;
    if (format == KvFormat::kInt8) {
      kv.k = Tensor::I8(reinterpret_cast<int8_t*>(at), {rows, C}, dev);
      kv.v = Tensor::I8(reinterpret_cast<int8_t*>(at + rows * C), {rows, C}, dev);
      at += 2 * rows * C;
      kv.k_scale = Tensor::F32(reinterpret_cast<float*>(at), {rows, NH}, dev);
      kv.v_scale = Tensor::F32(reinterpret_cast<float*>(at) + rows * NH, {rows, NH}, dev);
      at += 2 * rows * NH * 4;
    } else {
      kv.k = Tensor::F32(reinterpret_cast<float*>(at), {rows, C}, dev);
      kv.v = Tensor::F32(reinterpret_cast<float*>(at) + rows * C, {rows, C}, dev);
      at += 2 * rows * C * 4;
    }
    c.layers_.push_back(kv);
  }
  return c;
}

template <typename CopyFn>
absl::Status KvCache::ForEachRowRun(absl::Span<const int32_t> table, int64_t tokens,
                                    CopyFn copy) const {
  const int64_t blocks = (tokens + kBlockTokens - 1) / kBlockTokens;
  if (tokens < 0 || blocks > static_cast<int64_t>(table.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("a block table of ", table.size(), " blocks cannot hold ", tokens, " tokens"));
  }
  for (int64_t b = 0; b < blocks; ++b) {
    if (table[b] < 0 || table[b] >= num_blocks_) {
      return absl::InvalidArgumentError(
          absl::StrCat("block ", table[b], " is outside the cache of ", num_blocks_, " blocks"));
    }
  }
  int64_t offset = 0;
  for (const PagedKv& kv : layers_) {
    std::vector<Tensor> parts = {kv.k, kv.v};
    if (kv.int8()) {
      parts.push_back(kv.k_scale);
      parts.push_back(kv.v_scale);
    }
    for (const Tensor& t : parts) {
      const int64_t width = t.dim(1);
      // A block's 16 rows are contiguous; a sequence's blocks need not be.
      for (int64_t p = 0; p < tokens; p += kBlockTokens) {
        const int64_t rows = std::min<int64_t>(kBlockTokens, tokens - p);
        const Tensor run =
            t.Slice(int64_t{table[p / kBlockTokens]} * kBlockTokens * width, {rows, width});
        RETURN_IF_ERROR(copy(run, offset, p / kBlockTokens));
        offset += static_cast<int64_t>(run.bytes());
      }
    }
  }
  return absl::OkStatus();
}

absl::Status KvCache::ReadRows(absl::Span<const int32_t> table, int64_t tokens,
                               std::string* out) const {
  out->assign(static_cast<size_t>(std::max<int64_t>(tokens, 0) * bytes_per_token_), '\0');
  return ForEachRowRun(table, tokens, [&](const Tensor& run, int64_t offset, int64_t) {
    return backend_->CopyToHost(out->data() + offset, run);
  });
}

absl::Status KvCache::WriteRows(absl::Span<const int32_t> table, int64_t tokens,
                                absl::string_view rows, int64_t keep_blocks) {
  const int64_t want = tokens * bytes_per_token_;
  if (static_cast<int64_t>(rows.size()) != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("the rows of ", tokens, " tokens take ", want, " bytes, got ", rows.size()));
  }
  return ForEachRowRun(table, tokens, [&](const Tensor& run, int64_t offset, int64_t block) {
    if (block < keep_blocks) return absl::OkStatus();
    return backend_->CopyFromHost(run, rows.data() + offset);
  });
}

}  // namespace ladder
