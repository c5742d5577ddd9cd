// main() of the GPU tests: GoogleTest as usual, but when no CUDA device is
// present and nothing failed, exit 77, which `meson test` reports as SKIP
// (gtest itself would exit 0, and the suite would read as passed).
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "src/backend/cuda/cuda_device.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  std::string why;
  if (rc == 0 && ladder::CudaDeviceCount(&why) == 0) {
    std::printf("SKIP: no CUDA device: %s\n", why.c_str());
    return 77;
  }
  return rc;
}
