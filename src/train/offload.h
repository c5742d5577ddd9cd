// Optimizer offload (`--offload optimizer`, ZeRO-Offload's split): the AdamW
// moments and the fp32 master weights live in host memory and the update
// runs on the host, while the device keeps only what the forward and
// backward need: the weights the ops read (a copy in the storage dtype:
// bf16 under mixed precision, else fp32) and the gradients.
//
// One step, after the gradients are reduced on the device:
//   1. the gradient norm, on the device (the same kernel as without offload,
//      so the clip scale has the same bits);
//   2. the gradients of the range this rank updates (all of them, or its
//      ZeRO-1 shard) go to the host: range x 4 bytes;
//   3. the host runs AdamW on the range (the CPU backend's loop, whose
//      element is the kernel's, kernels/adamw_element.h), writing a bf16
//      model's copy into a host staging buffer with the same random words;
//   4. with ZeRO-1 the data group all-gathers the masters (and the bf16
//      staging) in host memory, the same bytes as the device all-gathers
//      without offload;
//   5. the copy the ops read goes to the device: buffer x 2 (bf16) or x 4.
// So the weights are bit for bit those of a run without offload, and the
// device saves the moments (8 bytes per updated parameter) and, under mixed
// precision, the fp32 masters (4 per parameter) for the link's traffic.
//
// Thread safety: one host thread, the trainer's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "src/backend/backend.h"
#include "src/model/layer_stream.h"

namespace ladder {

// kParams: the optimizer's offload plus the parameters'
// (src/model/layer_stream.h): the weights the ops read and the gradients
// stay on the host too, and each layer comes to the device when it runs.
enum class Offload { kNone, kOptimizer, kParams };

// "none", "optimizer" or "params"; InvalidArgument naming the accepted values.
absl::StatusOr<Offload> ParseOffload(const std::string& name);
const char* OffloadName(Offload o);

// The host side of an offloaded step: the staging buffers and the link's
// counters. The masters and moments live in the host backend's memory
// (Gpt's GptParallel::master_host, AdamW's state backend).
class OptimizerOffload {
 public:
  // The CPU backend that holds the masters and moments and runs the update,
  // for a run on `device`. InvalidArgument on the CPU backend, whose device
  // memory is host memory already.
  static absl::StatusOr<std::unique_ptr<Backend>> MakeHostBackend(const Backend& device);
  // `device`: the training backend, `host`: MakeHostBackend's (neither
  // owned). `range_floats`: the floats this rank updates; `buffer_floats`:
  // the model's padded flat buffer; `storage`: the dtype of the copy the ops
  // read.
  static absl::StatusOr<std::unique_ptr<OptimizerOffload>> Create(Backend* device, Backend* host,
                                                                  int64_t range_floats,
                                                                  int64_t buffer_floats,
                                                                  DType storage);

  // Step 2: `grads` (the range, on the device) into the host staging, which
  // it returns (range-sized, host).
  absl::StatusOr<Tensor> GradsToHost(Tensor grads);
  // Where a bf16 model's update writes the copy (buffer-sized host bf16);
  // empty for an fp32 copy.
  Tensor copy_staging() const;
  // Step 5: the whole copy to the device: `device_copy` (weight_copy())
  // from copy_staging(), or from `masters` (the host fp32 buffer).
  absl::Status CopyToDevice(Tensor device_copy, Tensor masters);
  // The link since the last call, and resets it.
  LinkTraffic TakeLink() { return std::exchange(link_, {}); }

 private:
  OptimizerOffload() = default;
  Backend* device_ = nullptr;
  Backend* host_ = nullptr;
  DeviceBuffer grads_, copy_;
  int64_t range_floats_ = 0, buffer_floats_ = 0;
  LinkTraffic link_;
};

}  // namespace ladder
