// Gpt::QuantizeWeights: packed weights for serving (weight_format.h).
//
// Each weight matrix (the four of every layer and the tied token embedding,
// which is also the head) is packed on the host, in the format's layout,
// and moved to one device buffer: bf16 rounds each value to nearest
// (src/core/bf16.h) and keeps the row-major [OC, C] shape, and the matrix
// stays in w_ with dtype bf16; int8 quantizes with quantize.h's QuantizeRows
// and packs into the backend's panel layout (PackInt8Panels), values then
// f32 scales, kept in the Int8Matrix beside the emptied fp32 tensor. The
// fp32 tensors left (LayerNorms, biases, positions) move to a small buffer
// of their own and the full fp32 buffer is freed. The packed model then
// runs only ForwardCached, whose linear layers go to the backend's
// MatmulForward (bf16) or MatmulInt8Forward (int8), and whose embedding
// lookup reads the bf16 table or dequantizes int8 rows.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/backend/quantize.h"
#include "src/core/bf16.h"
#include "src/core/status.h"
#include "src/model/gpt.h"

namespace ladder {

absl::Status Gpt::CheckNotQuantized(const char* what) const {
  if (weight_format_ == WeightFormat::kF32) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(what, " needs fp32 weights; this model holds ",
                                                    WeightFormatName(weight_format_), " weights"));
}

absl::Status Gpt::Linear(Tensor out, Tensor inp, Tensor weight, const Int8Matrix& q, Tensor bias) {
  if (!weight.empty()) return backend_->MatmulForward(out, inp, weight, bias);
  return backend_->MatmulInt8Forward(out, inp, q.q, q.scales, bias);
}

int64_t Gpt::weight_bytes() const {
  if (weight_format_ == WeightFormat::kF32) return table_.total_floats() * 4;
  return packed_bytes_ + fp32_floats_ * 4;
}

absl::Status Gpt::QuantizeWeights(WeightFormat format) {
  if (format == WeightFormat::kF32) return absl::OkStatus();
  RETURN_IF_ERROR(CheckNotQuantized("QuantizeWeights"));
  const ShardLayout& layout = table_.layout();
  if (training_ || layout.tp_size != 1 || layout.pp_size != 1 || par_.storage != DType::kF32) {
    return absl::FailedPreconditionError(
        absl::StrCat(WeightFormatName(format),
                     " weights need an fp32 inference model holding the whole model on one rank"));
  }
  if (format == WeightFormat::kBF16 && device() != Device::kCpu) {
    return absl::InvalidArgumentError(
        "bf16 weights are a CPU serving format; on cuda and cuda-sim use int8 weights (with "
        "--activations bf16 for bf16 activations) or fp32");
  }
  const bool int8 = IsInt8(format);
  if (int8 && cfg_.n_embd % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("int8 weights need a width divisible by 32; n_embd is ", cfg_.n_embd));
  }
  graphs_.clear();  // recorded with the fp32 weights
  std::vector<float> host(table_.total_floats());
  RETURN_IF_ERROR(GetWeights(host.data()));
  const float* base = static_cast<const float*>(weights_.get());
  auto on_host = [&](const Tensor& t) { return host.data() + (t.f32() - base); };

  // The matrices, in one list, with where an int8 form goes.
  struct Job {
    Tensor* fp32;
    Int8Matrix* dst;
  };
  const int L = static_cast<int>(w_.layers.size());
  if (int8) {
    q_qkv_.resize(L), q_proj_.resize(L), q_fc_.resize(L), q_fcproj_.resize(L);
  }
  std::vector<Job> jobs{{&w_.wte, int8 ? &q_wte_ : nullptr}};
  for (int l = 0; l < L; ++l) {
    LayerTensors& w = w_.layers[l];
    jobs.push_back({&w.qkv_w, int8 ? &q_qkv_[l] : nullptr});
    jobs.push_back({&w.proj_w, int8 ? &q_proj_[l] : nullptr});
    jobs.push_back({&w.fc_w, int8 ? &q_fc_[l] : nullptr});
    jobs.push_back({&w.fcproj_w, int8 ? &q_fcproj_[l] : nullptr});
  }
  // Layout in the packed buffer: each matrix's values, then (int8) its
  // scales, 64-byte aligned each.
  auto align = [](int64_t b) { return (b + 63) / 64 * 64; };
  int64_t bytes = 0;
  for (const Job& j : jobs) {
    const int64_t rows = j.fp32->dim(0), cols = j.fp32->dim(1);
    bytes += int8 ? align(rows * cols) + align(rows * (cols / WeightGroup(format, cols)) * 4)
                  : align(rows * cols * 2);
  }
  ASSIGN_OR_RETURN(DeviceBuffer qbuf, backend_->Allocate(static_cast<size_t>(bytes)));
  char* at = static_cast<char*>(qbuf.get());
  std::vector<int8_t> q, q_panels;
  std::vector<float> scales, scale_panels;
  std::vector<bf16> half;
  for (const Job& j : jobs) {
    const int64_t rows = j.fp32->dim(0), cols = j.fp32->dim(1);
    if (!int8) {
      const float* src = on_host(*j.fp32);
      half.resize(rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) half[i] = FloatToBf16(src[i]);
      *j.fp32 = Tensor::BF16(reinterpret_cast<bf16*>(at), {rows, cols}, device());
      at += align(rows * cols * 2);
      RETURN_IF_ERROR(backend_->CopyFromHost(*j.fp32, half.data()));
      continue;
    }
    const int64_t group = WeightGroup(format, cols);
    q.resize(rows * cols), q_panels.resize(rows * cols);
    scales.resize(rows * (cols / group)), scale_panels.resize(rows * (cols / group));
    QuantizeRows(on_host(*j.fp32), rows, cols, group, q.data(), scales.data());
    PackInt8Panels(q.data(), scales.data(), rows, cols, group, q_panels.data(),
                   scale_panels.data());
    j.dst->q = Tensor::I8(reinterpret_cast<int8_t*>(at), {rows, cols}, device());
    at += align(rows * cols);
    j.dst->scales = Tensor::F32(reinterpret_cast<float*>(at), {rows, cols / group}, device());
    at += align(rows * (cols / group) * 4);
    RETURN_IF_ERROR(backend_->CopyFromHost(j.dst->q, q_panels.data()));
    RETURN_IF_ERROR(backend_->CopyFromHost(j.dst->scales, scale_panels.data()));
    *j.fp32 = Tensor();
  }

  // The fp32 tensors left move to a buffer of their own.
  std::vector<Tensor*> rest{&w_.wpe, &w_.lnf_w, &w_.lnf_b};
  for (LayerTensors& w : w_.layers) {
    for (Tensor* t :
         {&w.ln1_w, &w.ln1_b, &w.qkv_b, &w.proj_b, &w.ln2_w, &w.ln2_b, &w.fc_b, &w.fcproj_b}) {
      rest.push_back(t);
    }
  }
  int64_t floats = 0;
  for (const Tensor* t : rest) floats += t->numel();
  ASSIGN_OR_RETURN(DeviceBuffer fbuf, backend_->Allocate(static_cast<size_t>(floats) * 4));
  float* f = static_cast<float*>(fbuf.get());
  for (Tensor* t : rest) {
    Tensor moved = *t;
    moved.data = f;
    RETURN_IF_ERROR(backend_->CopyFromHost(moved, on_host(*t)));
    *t = moved;
    f += t->numel();
  }
  weights_ = std::move(fbuf);
  packed_buffer_ = std::move(qbuf);
  packed_bytes_ = bytes;
  fp32_floats_ = floats;
  weight_format_ = format;
  return absl::OkStatus();
}

absl::Status Gpt::UseBf16Activations() {
  if (!IsInt8(weight_format_)) {
    return absl::FailedPreconditionError(
        absl::StrCat("bf16 activations need int8 weights (the W8A16 matmul); this model holds ",
                     WeightFormatName(weight_format_), " weights"));
  }
  if (device() == Device::kCpu) {
    return absl::FailedPreconditionError(
        "bf16 activations need a device backend (cuda or cuda-sim): the CPU backend stores fp32 "
        "activations only");
  }
  if (cached_act_ == DType::kBF16) return absl::OkStatus();
  // The LayerNorm weights, rounded to nearest into one bf16 buffer.
  std::vector<std::pair<Tensor, Tensor*>> jobs;
  ln16_.assign(w_.layers.size(), {});
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const LayerTensors& w = w_.layers[l];
    const Tensor* src[4] = {&w.ln1_w, &w.ln1_b, &w.ln2_w, &w.ln2_b};
    for (int i = 0; i < 4; ++i) jobs.push_back({*src[i], &ln16_[l][i]});
  }
  jobs.push_back({w_.lnf_w, &lnf16_[0]});
  jobs.push_back({w_.lnf_b, &lnf16_[1]});
  int64_t elems = 0;
  for (const auto& j : jobs) elems += j.first.numel();
  ASSIGN_OR_RETURN(DeviceBuffer buf, backend_->Allocate(static_cast<size_t>(elems) * 2));
  bf16* at = static_cast<bf16*>(buf.get());
  for (auto& [src, dst] : jobs) {
    *dst = Tensor::BF16(at, {src.numel()}, device());
    RETURN_IF_ERROR(backend_->RoundToBf16(*dst, src, nullptr));
    at += src.numel();
  }
  ln16_buffer_ = std::move(buf);
  packed_bytes_ += elems * 2;
  graphs_.clear();  // recorded with fp32 activations
  cached_act_ = DType::kBF16;
  return absl::OkStatus();
}

}  // namespace ladder
