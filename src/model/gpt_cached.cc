// Gpt::ForwardCached: the model's forward for serving. Where training runs
// [B, T] blocks of whole sequences, decoding runs N new tokens of different
// sequences at different positions, each attending to its own sequence's
// keys and values kept in the paged cache from earlier steps. Every op but
// attention is row-wise over the N tokens, so the layer is the training
// layer with PagedAttentionForward in place of AttentionForward (and a
// KvCacheWrite before it). Its scratch is reused from call to call. The
// same run can stop before the head and return the hidden states after
// ln_f instead (PrefillHidden, for embeddings), or keep the logits on the
// device and draw the next tokens there (ForwardSample, for decoding).
// With bf16 activations (UseBf16Activations) the same ops run on bf16 rows,
// the int8 matmuls as W8A16; the logits stay f32.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/core/bf16.h"
#include "src/core/status.h"
#include "src/model/gpt.h"

namespace ladder {

absl::Status Gpt::ForwardCached(const CachedTokens& batch, KvCache& cache,
                                std::vector<float>* logits) {
  ASSIGN_OR_RETURN(const Tensor rows, RunCached(batch, cache, CachedOutput::kLogits));
  return RowsToHost(rows, cfg_.vocab_size, logits);
}

absl::Status Gpt::ForwardSample(const CachedTokens& batch, KvCache& cache,
                                absl::Span<const TokenSampleSpec> specs,
                                std::vector<int32_t>* ids) {
  // The specs are checked before the forward writes the cache.
  RETURN_IF_ERROR(CheckTokenSampleSpecs(specs, static_cast<int64_t>(batch.tokens.size())));
  ASSIGN_OR_RETURN(const Tensor rows, RunCached(batch, cache, CachedOutput::kLogits));
  ids->assign(specs.size(), -1);
  return backend_->SampleTokens(rows, cfg_.vocab_size, specs, absl::MakeSpan(*ids));
}

absl::Status Gpt::RowsToHost(const Tensor& rows, int64_t width, std::vector<float>* out) const {
  const int64_t N = rows.dim(0), stride = rows.dim(1);
  // One copy back of every row, padding included (one wait per step, not
  // one per token); the padding is then squeezed out in place, each row
  // moving left to its place.
  out->resize(static_cast<size_t>(N * stride));
  if (rows.dtype == DType::kBF16) {
    std::vector<bf16> half(out->size());
    RETURN_IF_ERROR(backend_->CopyToHost(half.data(), rows));
    for (size_t i = 0; i < half.size(); ++i) (*out)[i] = Bf16ToFloat(half[i]);
  } else {
    RETURN_IF_ERROR(backend_->CopyToHost(out->data(), rows));
  }
  if (width == stride) return absl::OkStatus();
  for (int64_t i = 1; i < N; ++i) {
    std::memmove(out->data() + i * width, out->data() + i * stride, static_cast<size_t>(width) * 4);
  }
  out->resize(static_cast<size_t>(N * width));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Gpt::RunCached(const CachedTokens& batch, KvCache& cache,
                                      CachedOutput what) {
  const ShardLayout& layout = table_.layout();
  if (layout.tp_size != 1 || layout.pp_size != 1) {
    return absl::FailedPreconditionError("ForwardCached needs the whole model on one rank");
  }
  if (par_.storage != DType::kF32) {
    return absl::FailedPreconditionError(
        "ForwardCached needs fp32 activations (the serving ops compute in fp32)");
  }
  const int64_t N = static_cast<int64_t>(batch.tokens.size());
  const int64_t C = cfg_.n_embd, Vp = cfg_.padded_vocab(), V = cfg_.vocab_size;
  const int64_t mb = batch.max_blocks;
  if (N == 0 || batch.seq.size() != batch.tokens.size() ||
      batch.pos.size() != batch.tokens.size() || mb <= 0 || batch.block_tables.empty() ||
      batch.block_tables.size() % mb != 0) {
    return absl::InvalidArgumentError("malformed cached batch");
  }
  const int64_t num_seqs = static_cast<int64_t>(batch.block_tables.size()) / mb;
  // A decode step (one new token per sequence) runs as a graph under
  // UseGraphs. Its block tables are padded (with -1, never read) to the next
  // power of two, at most what the context or the tables need: the width
  // is part of the attention's launch, and a padded width serves the steps
  // of many lengths.
  const bool graphed = use_graphs_ && N == num_seqs;
  int64_t width = mb;
  if (graphed) {
    const int64_t most =
        std::max<int64_t>(mb, (cfg_.context + KvCache::kBlockTokens - 1) / KvCache::kBlockTokens);
    width = 1;
    while (width < mb) width *= 2;
    width = std::min(width, most);
  }
  // The step's ids, checked on the host and staged to the device in one
  // copy: [tokens | positions | sequences | cache slots | block tables].
  std::vector<int32_t> ids(static_cast<size_t>(4 * N + num_seqs * width), -1);
  int32_t* const slots = ids.data() + 3 * N;
  for (int64_t i = 0; i < N; ++i) {
    const int32_t t = batch.tokens[i], s = batch.seq[i], p = batch.pos[i];
    if (t < 0 || t >= V || s < 0 || s >= num_seqs || p < 0 || p >= cfg_.context ||
        p / KvCache::kBlockTokens >= mb) {
      return absl::InvalidArgumentError(absl::StrCat("cached token ", i, " (id ", t, ", sequence ",
                                                     s, ", position ", p, ") is out of range"));
    }
    const int32_t block = batch.block_tables[s * mb + p / KvCache::kBlockTokens];
    if (block < 0 || block >= cache.num_blocks()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cached token ", i, " maps to block ", block, " outside the cache"));
    }
    slots[i] = block * KvCache::kBlockTokens + p % KvCache::kBlockTokens;
  }
  std::copy(batch.tokens.begin(), batch.tokens.end(), ids.begin());
  std::copy(batch.pos.begin(), batch.pos.end(), ids.begin() + N);
  std::copy(batch.seq.begin(), batch.seq.end(), ids.begin() + 2 * N);
  for (int64_t s = 0; s < num_seqs; ++s) {
    std::copy_n(batch.block_tables.begin() + s * mb, mb, ids.begin() + 4 * N + s * width);
  }

  // Scratch for this call: [N, C] rows, [N, 3C], [N, 4C], the logits and
  // the ids; with bf16 activations (which use half of their slots) two
  // [N, C] f32 rows more for the embedding.
  Backend& be = *backend_;
  const bool b16 = cached_act_ == DType::kBF16;
  const int64_t floats =
      N * (5 * C + 3 * C + 8 * C + Vp + 2 + (b16 ? 2 * C : 0)) + static_cast<int64_t>(ids.size());
  // The scratch is kept between calls and only grows: a decode step is a
  // few milliseconds, and fresh pages every step (faulted in and zeroed by
  // the kernel) cost several percent of it.
  if (floats > cached_scratch_floats_) {
    // Recorded decode steps point into the old scratch.
    std::erase_if(graphs_, [](const auto& g) { return g.first.pass == GraphPass::kDecode; });
    cached_scratch_.reset();
    ASSIGN_OR_RETURN(cached_scratch_, be.Allocate(static_cast<size_t>(floats) * 4));
    cached_scratch_floats_ = floats;
  }
  const Tensor scratch =
      Tensor::F32(static_cast<float*>(cached_scratch_.get()), {cached_scratch_floats_}, device());
  int64_t used = 0;
  auto take = [&](std::initializer_list<int64_t> dims) {
    Tensor t = scratch.Slice(used, dims);
    used += t.numel();
    return t;
  };
  // An activation row block: f32, or bf16 in the first half of its slot.
  auto take_act = [&](std::initializer_list<int64_t> dims) {
    Tensor t = take(dims);
    if (b16) t.dtype = DType::kBF16;
    return t;
  };
  CachedStep st;
  st.x = take_act({N, C});
  st.ln = take_act({N, C});
  st.resid = take_act({N, C});
  st.branch = take_act({N, C});
  st.atty = take_act({N, C});
  st.qkv = take_act({N, 3 * C});
  st.fch = take_act({N, 4 * C});
  st.fch_gelu = take_act({N, 4 * C});
  st.out = take({N, Vp});
  st.mean = take({N});
  st.rstd = take({N});
  if (b16) {
    st.emb = take({N, C});
    st.emb_pos = take({N, C});
  }
  // The ids take float-sized slots after those.
  const Tensor staged(scratch.f32() + used, DType::kI32, {static_cast<int64_t>(ids.size())},
                      device());
  RETURN_IF_ERROR(be.CopyFromHost(staged, ids.data()));
  st.tokens = staged.Slice(0, {N});
  st.pos = staged.Slice(N, {N});
  st.seq = staged.Slice(2 * N, {N});
  st.slots = staged.Slice(3 * N, {N});
  st.tables = staged.Slice(4 * N, {num_seqs, width});
  const Tensor result = what == CachedOutput::kHidden ? st.ln : st.out;
  auto ops = [&] { return CachedOps(cache, what, st); };
  if (!graphed) {
    RETURN_IF_ERROR(ops());
    return result;
  }
  const PagedKv& first = cache.layer(0);
  RETURN_IF_ERROR(
      RunGraphed({GraphPass::kDecode, static_cast<int>(what), N, width, 0,
                  reinterpret_cast<uintptr_t>(first.k.data), cache.num_blocks(), first.int8()},
                 ops));
  return result;
}

absl::Status Gpt::CachedOps(const KvCache& cache, CachedOutput what, const CachedStep& st) {
  Backend& be = *backend_;
  const Tensor &x = st.x, &ln = st.ln, &resid = st.resid, &branch = st.branch, &atty = st.atty,
               &qkv = st.qkv, &fch = st.fch, &fch_gelu = st.fch_gelu, &mean = st.mean,
               &rstd = st.rstd;
  // Embedding: one call for all tokens, each at its own position. With bf16
  // activations it is summed in fp32 (st.emb) and then rounded once.
  const bool b16 = x.dtype == DType::kBF16;
  const Tensor& e = b16 ? st.emb : x;
  if (!IsInt8(weight_format_)) {
    RETURN_IF_ERROR(be.EmbeddingForward(e, st.tokens, st.pos, w_.wte, w_.wpe, 0));
  } else {
    // The int8 token table is read by DequantizeRows; the position rows
    // come from the embedding op without a token table and are added after.
    const Tensor& e_pos = b16 ? st.emb_pos : branch;
    RETURN_IF_ERROR(be.DequantizeRows(e, q_wte_.q, q_wte_.scales, st.tokens));
    RETURN_IF_ERROR(be.EmbeddingForward(e_pos, st.tokens, st.pos, Tensor(), w_.wpe, 0));
    RETURN_IF_ERROR(be.ResidualAdd(e, e, e_pos));
  }
  if (b16) RETURN_IF_ERROR(be.RoundToBf16(x, e, nullptr));
  const int heads = cfg_.n_head;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const LayerTensors& w = w_.layers[l];
    const bool q8 = IsInt8(weight_format_);
    const Int8Matrix none;
    // The LayerNorm weights in the activations' dtype.
    const Tensor &ln1_w = b16 ? ln16_[l][0] : w.ln1_w, &ln1_b = b16 ? ln16_[l][1] : w.ln1_b,
                 &ln2_w = b16 ? ln16_[l][2] : w.ln2_w, &ln2_b = b16 ? ln16_[l][3] : w.ln2_b;
    RETURN_IF_ERROR(
        be.ResidualLayerNormForward(Tensor(), ln, mean, rstd, x, Tensor(), ln1_w, ln1_b));
    RETURN_IF_ERROR(Linear(qkv, ln, w.qkv_w, q8 ? q_qkv_[l] : none, w.qkv_b));
    RETURN_IF_ERROR(be.KvCacheWrite(cache.layer(l), qkv, st.slots, heads));
    RETURN_IF_ERROR(
        be.PagedAttentionForward(atty, qkv, cache.layer(l), st.tables, st.seq, st.pos, heads));
    RETURN_IF_ERROR(Linear(branch, atty, w.proj_w, q8 ? q_proj_[l] : none, w.proj_b));
    RETURN_IF_ERROR(be.ResidualLayerNormForward(resid, ln, mean, rstd, x, branch, ln2_w, ln2_b));
    RETURN_IF_ERROR(Linear(fch, ln, w.fc_w, q8 ? q_fc_[l] : none, w.fc_b));
    RETURN_IF_ERROR(be.GeluForward(fch_gelu, fch));
    RETURN_IF_ERROR(Linear(branch, fch_gelu, w.fcproj_w, q8 ? q_fcproj_[l] : none, w.fcproj_b));
    RETURN_IF_ERROR(be.ResidualAdd(x, resid, branch));  // the next layer's input
  }
  RETURN_IF_ERROR(be.ResidualLayerNormForward(Tensor(), ln, mean, rstd, x, Tensor(),
                                              b16 ? lnf16_[0] : w_.lnf_w,
                                              b16 ? lnf16_[1] : w_.lnf_b));
  if (what == CachedOutput::kHidden) return absl::OkStatus();
  return Linear(st.out, ln, w_.wte, q_wte_, Tensor());
}

absl::Status Gpt::PrefillLogits(const std::vector<int32_t>& tokens, KvCache& cache,
                                std::vector<float>* logits) {
  return Prefill(tokens, cache, CachedOutput::kLogits, logits);
}

absl::Status Gpt::PrefillHidden(const std::vector<int32_t>& tokens, KvCache& cache,
                                std::vector<float>* hidden) {
  return Prefill(tokens, cache, CachedOutput::kHidden, hidden);
}

absl::Status Gpt::Prefill(const std::vector<int32_t>& tokens, KvCache& cache, CachedOutput what,
                          std::vector<float>* out_rows) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int blocks = static_cast<int>((n + KvCache::kBlockTokens - 1) / KvCache::kBlockTokens);
  if (n == 0 || n > cfg_.context || blocks > cache.num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot prefill ", n, " tokens (context ",
                                                   cfg_.context, ", cache of ", cache.num_blocks(),
                                                   " blocks)"));
  }
  CachedTokens batch;
  batch.tokens = tokens;
  batch.seq.assign(tokens.size(), 0);
  for (int32_t p = 0; p < n; ++p) batch.pos.push_back(p);
  for (int32_t b = 0; b < blocks; ++b) batch.block_tables.push_back(b);
  batch.max_blocks = blocks;
  ASSIGN_OR_RETURN(const Tensor rows, RunCached(batch, cache, what));
  return RowsToHost(rows, what == CachedOutput::kHidden ? cfg_.n_embd : cfg_.vocab_size, out_rows);
}

}  // namespace ladder
