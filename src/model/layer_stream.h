// Parameter offload (`--offload params`): the weights the ops read and the
// gradients live in host memory, and each transformer layer's block of them
// comes to the device just before the layer runs and leaves after it, as
// ZeRO-Infinity does. The device keeps:
//  - the resident tensors, those outside the layers (wte and wpe on the
//    first stage, ln_f and the tied head on the last), weights and
//    gradients, for the whole step;
//  - two slots, each one layer's weights (in the storage dtype) and fp32
//    gradients: layer l always uses slot l % 2, so while a layer computes,
//    the next one in the pass (l + 1 forward, l - 1 backward) is copied into
//    the other slot on the backend's copy stream (Backend::CopyFromHostAsync),
//    after the ops that last read that slot.
// So a stage's device memory for parameters is its resident tensors and
// two layers, whatever its depth. Per step and microbatch the link carries
// every layer's weights twice (forward and backward pass; a pass never
// reuses what the one before left in a slot, so the count is exact and
// `ladder plan` predicts it), and in the backward each layer's accumulated
// gradient to the device (except on the step's first pass, where it is 0:
// the slot is filled on the device) and back. The arithmetic is the
// device's as without offload (the same ops on the same values, the
// gradient summed in the same order), so the weights come out bitwise equal.
//
// Thread safety: one host thread, the model's.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/gpt_config.h"
#include "src/model/parameters.h"

namespace ladder {

// The host-device link: bytes copied each way and the seconds the waiting
// copies took (those that block the host: to the host, and filling a slot).
struct LinkTraffic {
  int64_t to_host = 0, to_device = 0;
  double seconds = 0;
  // The backend's copies, timed and counted here.
  absl::Status ToDevice(Backend& device, Tensor dst, const void* src);
  absl::Status ToHost(Backend& device, void* dst, Tensor src);
  LinkTraffic& operator+=(const LinkTraffic& o) {
    to_host += o.to_host;
    to_device += o.to_device;
    seconds += o.seconds;
    return *this;
  }
};

class LayerStream {
 public:
  // `table`: the rank's parameters (not owned; outlives the stream).
  // `source`: the weights the ops read for the whole buffer (host memory,
  // laid out by the table: a bf16 copy or the fp32 masters); `grads`: the
  // host fp32 gradient buffer. Both stay owned by the caller. Allocates the
  // resident tensors and the slots on `device`. Internal if a layer's
  // tensors are not contiguous in the table.
  static absl::StatusOr<std::unique_ptr<LayerStream>> Create(Backend* device,
                                                             const ParameterTable* table,
                                                             const GptConfig& cfg, Tensor source,
                                                             Tensor grads);

  // Views of the resident tensors on the device (their layers are empty).
  const GptTensors& resident_weights() const { return resident_w_; }
  const GptTensors& resident_grads() const { return resident_g_; }
  // A new forward or backward pass over the layers: the slots count as empty.
  void StartPass() { slot_layer_[0] = slot_layer_[1] = -1; }
  // Local layer l's weights on the device, once its copy is done; starts
  // copying layer `next` (-1: none) into the other slot.
  absl::StatusOr<LayerTensors> Weights(int l, int next);
  // Layer l's gradient slot holding what the host has accumulated (zeros on
  // the step's first pass), for the backward to add to; EndGrads brings it
  // back to the host.
  absl::StatusOr<LayerTensors> BeginGrads(int l);
  absl::Status EndGrads(int l);
  // A new step: the resident gradients are zeroed on the device, and every
  // layer's host gradient counts as zero (the caller zeroes the host buffer).
  absl::Status ZeroGrads();
  // The resident gradients to the host buffer (once per step, after the
  // last backward).
  absl::Status FlushResidentGrads();
  // The resident weights from the source (after an update or a load); the
  // slots count as empty.
  absl::Status RefreshResident();
  // Device bytes of the weights (resident and slots) and of the gradients.
  int64_t weight_bytes() const { return (resident_floats_ + 2 * layer_floats_) * elem_; }
  int64_t grad_bytes() const { return (resident_floats_ + 2 * layer_floats_) * 4; }
  // The link since the last call, and resets it.
  LinkTraffic TakeLink() { return std::exchange(link_, {}); }

 private:
  LayerStream() = default;
  // The element of a resident tensor at table offset `offset`.
  int64_t ResidentAt(int64_t offset) const {
    return offset < layers_begin_ ? offset : offset - (layers_end_ - layers_begin_);
  }
  // Layer l's tensors inside `slot` (a slot buffer's view).
  LayerTensors Bind(int l, const Tensor& slot) const;
  Tensor SlotWeights(int s) const;
  Tensor SlotGrads(int s) const;

  Backend* device_ = nullptr;
  const ParameterTable* table_ = nullptr;
  GptConfig cfg_;
  Tensor source_, grads_;
  int first_layer_ = 0, layers_ = 0;
  int64_t elem_ = 4;  // bytes per weight the ops read
  int64_t layer_floats_ = 0, layers_begin_ = 0, layers_end_ = 0, resident_floats_ = 0;
  DeviceBuffer resident_w_buf_, resident_g_buf_, slot_w_[2], slot_g_[2];
  GptTensors resident_w_, resident_g_;
  int slot_layer_[2] = {-1, -1};
  std::vector<bool> grads_zero_;  // per local layer: its host gradient is 0
  LinkTraffic link_;
};

}  // namespace ladder
