#include "src/model/layer_stream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/core/trace.h"

namespace ladder {

absl::Status LinkTraffic::ToDevice(Backend& device, Tensor dst, const void* src) {
  const int64_t begin = NowNanos();
  RETURN_IF_ERROR(device.CopyFromHost(dst, src));
  seconds += static_cast<double>(NowNanos() - begin) * 1e-9;
  to_device += static_cast<int64_t>(dst.bytes());
  return absl::OkStatus();
}

absl::Status LinkTraffic::ToHost(Backend& device, void* dst, Tensor src) {
  const int64_t begin = NowNanos();
  RETURN_IF_ERROR(device.CopyToHost(dst, src));
  seconds += static_cast<double>(NowNanos() - begin) * 1e-9;
  to_host += static_cast<int64_t>(src.bytes());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LayerStream>> LayerStream::Create(Backend* device,
                                                                 const ParameterTable* table,
                                                                 const GptConfig& cfg,
                                                                 Tensor source, Tensor grads) {
  std::unique_ptr<LayerStream> s(new LayerStream);
  s->device_ = device;
  s->table_ = table;
  s->cfg_ = cfg;
  s->source_ = source;
  s->grads_ = grads;
  s->elem_ = static_cast<int64_t>(DTypeSize(source.dtype));
  const ShardLayout& layout = table->layout();
  const LayerRange range = StageLayers(cfg.n_layer, layout.pp_size, layout.pp_rank);
  s->first_layer_ = range.first;
  s->layers_ = range.last - range.first;
  // Each layer's tensors back to back, the layers one after another.
  std::vector<int64_t> begin(s->layers_, -1), end(s->layers_, -1);
  for (int i = 0; i < table->size(); ++i) {
    const int l = table->spec(i).layer - range.first;
    if (table->spec(i).layer < 0) continue;
    if (begin[l] < 0) begin[l] = table->offset(i);
    if (table->offset(i) != std::max(begin[l], end[l])) {
      return absl::InternalError(
          absl::StrCat("layer ", l + range.first, "'s tensors are not contiguous in the table"));
    }
    end[l] = table->offset(i) + table->numel(i);
  }
  s->layer_floats_ = end[0] - begin[0];
  for (int l = 1; l < s->layers_; ++l) {
    if (begin[l] != end[l - 1] || end[l] - begin[l] != s->layer_floats_) {
      return absl::InternalError("the layers do not follow one another in the table");
    }
  }
  s->layers_begin_ = begin[0];
  s->layers_end_ = end[s->layers_ - 1];
  s->resident_floats_ = table->total_floats() - (s->layers_end_ - s->layers_begin_);
  const size_t layer_bytes = static_cast<size_t>(s->layer_floats_);
  for (int k = 0; k < 2; ++k) {
    ASSIGN_OR_RETURN(s->slot_w_[k], device->Allocate(layer_bytes * s->elem_));
    ASSIGN_OR_RETURN(s->slot_g_[k], device->Allocate(layer_bytes * 4));
  }
  if (s->resident_floats_ > 0) {
    const size_t n = static_cast<size_t>(s->resident_floats_);
    ASSIGN_OR_RETURN(s->resident_w_buf_, device->Allocate(n * s->elem_));
    ASSIGN_OR_RETURN(s->resident_g_buf_, device->Allocate(n * 4));
    const Tensor w(s->resident_w_buf_.get(), source.dtype, {s->resident_floats_}, device->device());
    const Tensor g(s->resident_g_buf_.get(), DType::kF32, {s->resident_floats_}, device->device());
    LayerStream* self = s.get();
    auto resident = [self](const Tensor& buffer) {
      return [self, buffer](int i) {
        return self->table_->spec(i).layer >= 0
                   ? Tensor()
                   : self->table_->ViewAt(buffer, i, self->ResidentAt(self->table_->offset(i)));
      };
    };
    s->resident_w_ = BindGptTensors(*table, cfg, resident(w));
    s->resident_g_ = BindGptTensors(*table, cfg, resident(g));
  } else {
    s->resident_w_ = BindGptTensors(*table, cfg, [](int) { return Tensor(); });
    s->resident_g_ = s->resident_w_;
  }
  s->grads_zero_.assign(s->layers_, true);
  return s;
}

Tensor LayerStream::SlotWeights(int s) const {
  return Tensor(slot_w_[s].get(), source_.dtype, {layer_floats_}, device_->device());
}

Tensor LayerStream::SlotGrads(int s) const {
  return Tensor(slot_g_[s].get(), DType::kF32, {layer_floats_}, device_->device());
}

LayerTensors LayerStream::Bind(int l, const Tensor& slot) const {
  const int global = first_layer_ + l;
  const int64_t base = layers_begin_ + l * layer_floats_;
  const GptTensors t = BindGptTensors(*table_, cfg_, [&](int i) {
    return table_->spec(i).layer == global ? table_->ViewAt(slot, i, table_->offset(i) - base)
                                           : Tensor();
  });
  return t.layers[l];
}

absl::StatusOr<LayerTensors> LayerStream::Weights(int l, int next) {
  if (l < 0 || l >= layers_ || next >= layers_) {
    return absl::InvalidArgumentError(absl::StrCat("LayerStream: no layer ", l, " or ", next));
  }
  auto fetch = [&](int layer) -> absl::Status {
    const int slot = layer % 2;
    if (slot_layer_[slot] == layer) return absl::OkStatus();
    slot_layer_[slot] = layer;
    const Tensor from = source_.Slice(layers_begin_ + layer * layer_floats_, {layer_floats_});
    link_.to_device += static_cast<int64_t>(from.bytes());
    return device_->CopyFromHostAsync(SlotWeights(slot), from.data);
  };
  {
    TraceSpan span(TraceTrack::kCompute, "offload", "layer weights to device");
    RETURN_IF_ERROR(fetch(l));
    RETURN_IF_ERROR(device_->WaitCopies());
  }
  if (next >= 0 && next != l) RETURN_IF_ERROR(fetch(next));
  return Bind(l, SlotWeights(l % 2));
}

absl::StatusOr<LayerTensors> LayerStream::BeginGrads(int l) {
  TraceSpan span(TraceTrack::kCompute, "offload", "layer gradients to device");
  const Tensor slot = SlotGrads(l % 2);
  if (grads_zero_[l]) {
    RETURN_IF_ERROR(device_->Fill(slot, 0.0f));
  } else {
    RETURN_IF_ERROR(link_.ToDevice(
        *device_, slot, grads_.Slice(layers_begin_ + l * layer_floats_, {layer_floats_}).data));
  }
  return Bind(l, slot);
}

absl::Status LayerStream::EndGrads(int l) {
  TraceSpan span(TraceTrack::kCompute, "offload", "layer gradients to host");
  grads_zero_[l] = false;
  return link_.ToHost(*device_,
                      grads_.Slice(layers_begin_ + l * layer_floats_, {layer_floats_}).data,
                      SlotGrads(l % 2));
}

absl::Status LayerStream::ZeroGrads() {
  grads_zero_.assign(layers_, true);
  if (resident_floats_ == 0) return absl::OkStatus();
  return device_->Fill(
      Tensor(resident_g_buf_.get(), DType::kF32, {resident_floats_}, device_->device()), 0.0f);
}

// The resident tensors are the table's elements [0, layers_begin_) and
// [layers_end_, total), packed in that order on the device.
absl::Status LayerStream::FlushResidentGrads() {
  if (resident_floats_ == 0) return absl::OkStatus();
  const Tensor dev(resident_g_buf_.get(), DType::kF32, {resident_floats_}, device_->device());
  const int64_t tail = table_->total_floats() - layers_end_;
  if (layers_begin_ > 0) {
    RETURN_IF_ERROR(link_.ToHost(*device_, grads_.data, dev.Slice(0, {layers_begin_})));
  }
  if (tail > 0) {
    RETURN_IF_ERROR(link_.ToHost(*device_, grads_.Slice(layers_end_, {tail}).data,
                                 dev.Slice(layers_begin_, {tail})));
  }
  return absl::OkStatus();
}

absl::Status LayerStream::RefreshResident() {
  StartPass();
  if (resident_floats_ == 0) return absl::OkStatus();
  const Tensor dev(resident_w_buf_.get(), source_.dtype, {resident_floats_}, device_->device());
  const int64_t tail = table_->total_floats() - layers_end_;
  if (layers_begin_ > 0)
    RETURN_IF_ERROR(link_.ToDevice(*device_, dev.Slice(0, {layers_begin_}), source_.data));
  if (tail > 0) {
    RETURN_IF_ERROR(link_.ToDevice(*device_, dev.Slice(layers_begin_, {tail}),
                                   source_.Slice(layers_end_, {tail}).data));
  }
  return absl::OkStatus();
}

}  // namespace ladder
