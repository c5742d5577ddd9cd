// Tensor: a non-owning, contiguous, row-major view of typed memory on a device.
// Ownership lives in arenas (model parameters, activations); ops receive views.
//
// Every view names the device its memory is on, and nothing picks one for
// the caller: code above the backend tags the views it builds with
// Backend::device() (the backend's memory, from Backend::Allocate), and
// Device::kCpu only for memory that really is the host's (a host array handed
// to a communicator, the CPU backend's own tests). A view cut from a view
// with Slice keeps its dtype and device.
#pragma once

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace ladder {

enum class DType : uint8_t { kF32, kBF16, kI32, kI8 };
enum class Device : uint8_t { kCpu, kCuda };

inline size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI8:
      return 1;
  }
  return 0;
}

// "f32", "bf16", "i32" or "i8": how errors name a dtype.
inline const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI8:
      return "i8";
  }
  return "?";
}

struct Tensor {
  static constexpr int kMaxRank = 4;

  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};

  Tensor() = default;
  Tensor(void* p, DType t, std::initializer_list<int64_t> dims, Device d)
      : data(p), dtype(t), device(d), rank(static_cast<int>(dims.size())) {
    assert(rank <= kMaxRank);
    int i = 0;
    for (int64_t v : dims) shape[i++] = v;
  }
  static Tensor F32(float* p, std::initializer_list<int64_t> dims, Device d) {
    return Tensor(p, DType::kF32, dims, d);
  }
  static Tensor I32(int32_t* p, std::initializer_list<int64_t> dims, Device d) {
    return Tensor(p, DType::kI32, dims, d);
  }
  static Tensor I8(int8_t* p, std::initializer_list<int64_t> dims, Device d) {
    return Tensor(p, DType::kI8, dims, d);
  }
  static Tensor BF16(uint16_t* p, std::initializer_list<int64_t> dims, Device d) {
    return Tensor(p, DType::kBF16, dims, d);
  }
  // The elements [first, first + prod(dims)) of this tensor, in its order,
  // as a view of shape dims on the same device with the same dtype. The
  // range must lie inside this tensor (checked by assert only: a view is
  // plain arithmetic, the ops check shapes).
  Tensor Slice(int64_t first, std::initializer_list<int64_t> dims) const {
    Tensor t(static_cast<char*>(data) + first * static_cast<int64_t>(DTypeSize(dtype)), dtype, dims,
             device);
    assert(first >= 0 && first + t.numel() <= numel());
    return t;
  }

  bool empty() const { return data == nullptr; }
  // Size of dimension i; negative i counts from the back.
  int64_t dim(int i) const { return shape[i < 0 ? rank + i : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  float* f32() const { return static_cast<float*>(data); }
  int32_t* i32() const { return static_cast<int32_t*>(data); }
  int8_t* i8() const { return static_cast<int8_t*>(data); }
  uint16_t* bf16() const { return static_cast<uint16_t*>(data); }  // raw bits (src/core/bf16.h)
  std::string ShapeString() const;
};

}  // namespace ladder
