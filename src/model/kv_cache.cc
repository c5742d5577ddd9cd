#include "src/model/kv_cache.h"

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
  c.num_blocks_ = num_blocks;
  c.format_ = format;
  const int64_t rows = int64_t{num_blocks} * kBlockTokens;
  c.bytes_ = rows * BytesPerToken(cfg, format);
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

}  // namespace ladder
