// The fixture the simulator's own tests share: a clean simulated device per
// test (a sticky error from the previous one is gone) and typed helpers to
// allocate device memory and copy to and from it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "gtest/gtest.h"

namespace ladder {

class SimDeviceTest : public testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cudaDeviceReset(), cudaSuccess); }
  void TearDown() override { cudaDeviceReset(); }

  template <typename T>
  T* Alloc(size_t n) {
    T* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    return p;
  }
  template <typename T>
  std::vector<T> Get(const T* p, size_t n) {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  template <typename T>
  void Put(T* p, const std::vector<T>& h) {
    EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
};

}  // namespace ladder
