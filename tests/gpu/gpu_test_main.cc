// main() of the GPU tests: GoogleTest as usual, but when no CUDA device is
// present and nothing failed, exit 77, which `meson test` reports as SKIP
// (gtest itself would exit 0, and the suite would read as passed).
//
// Built with LADDER_GPU_TEST_FILTER defined (tests/meson.build,
// cuda_instances_main), it runs only the tests that filter selects unless
// the command line names its own --gtest_filter: the op tests over every
// backend run their cuda instances ("*/cuda") in the gpu suite, their cpu
// and cuda-sim ones having run in the unit suite.
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "src/backend/cuda/cuda_device.h"

int main(int argc, char** argv) {
#ifdef LADDER_GPU_TEST_FILTER
  GTEST_FLAG_SET(filter, LADDER_GPU_TEST_FILTER);
#endif
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  std::string why;
  if (rc == 0 && ladder::CudaDeviceCount(&why) == 0) {
    std::printf("SKIP: no CUDA device: %s\n", why.c_str());
    return 77;
  }
  return rc;
}
