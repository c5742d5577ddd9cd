#include "src/train/offload.h"

#include "absl/strings/str_cat.h"
#include "src/backend/backend_factory.h"
#include "src/core/status.h"
#include "src/core/trace.h"

namespace ladder {

absl::StatusOr<Offload> ParseOffload(const std::string& name) {
  if (name == "none") return Offload::kNone;
  if (name == "optimizer") return Offload::kOptimizer;
  if (name == "params") return Offload::kParams;
  return absl::InvalidArgumentError(
      absl::StrCat("--offload must be none, optimizer or params, got '", name, "'"));
}

const char* OffloadName(Offload o) {
  return o == Offload::kParams ? "params" : o == Offload::kOptimizer ? "optimizer" : "none";
}

absl::StatusOr<std::unique_ptr<Backend>> OptimizerOffload::MakeHostBackend(const Backend& device) {
  if (device.device() == Device::kCpu) {
    return absl::InvalidArgumentError(
        "--offload needs --device cuda or cuda-sim: on the CPU backend the device memory is host "
        "memory already");
  }
  return MakeBackend("cpu");
}

absl::StatusOr<std::unique_ptr<OptimizerOffload>> OptimizerOffload::Create(
    Backend* device, Backend* host, int64_t range_floats, int64_t buffer_floats, DType storage) {
  std::unique_ptr<OptimizerOffload> o(new OptimizerOffload);
  o->device_ = device;
  o->host_ = host;
  o->range_floats_ = range_floats;
  o->buffer_floats_ = buffer_floats;
  ASSIGN_OR_RETURN(o->grads_, o->host_->Allocate(static_cast<size_t>(range_floats) * 4));
  if (storage == DType::kBF16) {
    ASSIGN_OR_RETURN(o->copy_, o->host_->Allocate(static_cast<size_t>(buffer_floats) * 2));
  }
  return o;
}

absl::StatusOr<Tensor> OptimizerOffload::GradsToHost(Tensor grads) {
  TraceSpan span(TraceTrack::kCompute, "optimizer", "offload: gradients to host");
  const Tensor staged =
      Tensor::F32(static_cast<float*>(grads_.get()), {range_floats_}, Device::kCpu);
  RETURN_IF_ERROR(link_.ToHost(*device_, staged.data, grads));
  return staged;
}

Tensor OptimizerOffload::copy_staging() const {
  if (copy_ == nullptr) return Tensor();
  return Tensor::BF16(static_cast<uint16_t*>(copy_.get()), {buffer_floats_}, Device::kCpu);
}

absl::Status OptimizerOffload::CopyToDevice(Tensor device_copy, Tensor masters) {
  TraceSpan span(TraceTrack::kCompute, "optimizer", "offload: weights to device");
  const Tensor from = copy_ == nullptr ? masters : copy_staging();
  return link_.ToDevice(*device_, device_copy, from.data);
}

}  // namespace ladder
