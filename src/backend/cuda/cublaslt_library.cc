// cublaslt_library.h for CUDA builds: the cuBLASLt functions ladder calls,
// defined here with the toolkit header's signatures (so a mismatch does not
// compile), each forwarding to the same function of libcublasLt.so.<major>,
// which is opened on the first call. The library is looked up the way the
// dynamic loader looks up a linked one (LD_LIBRARY_PATH or ld.so
// --library-path, the executable's run path, the system's cache), then in
// the toolkit's directories found when ladder was built.
#include "src/backend/cuda/cublaslt_library.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ladder {
namespace cuda {
namespace {

struct Library {
  void* handle = nullptr;
  std::string error;  // why handle is null
};

const Library& TheLibrary() {
  static const Library* lib = [] {
    auto* l = new Library;
    const std::string soname = absl::StrCat("libcublasLt.so.", CUBLAS_VER_MAJOR);
    l->handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l->handle != nullptr) return l;
    l->error = dlerror();
    for (absl::string_view dir : absl::StrSplit(LADDER_CUBLASLT_DIRS, ':', absl::SkipEmpty())) {
      l->handle = dlopen(absl::StrCat(dir, "/", soname).c_str(), RTLD_NOW | RTLD_LOCAL);
      if (l->handle != nullptr) return l;
    }
    return l;
  }();
  return *lib;
}

// kSelf, one of the definitions below, gives the function's type and one
// cached symbol per function.
template <auto kSelf, typename... Args>
cublasStatus_t Forward(const char* name, Args... args) {
  using Fn = decltype(kSelf);
  static const Fn fn = [name] {
    const Library& lib = TheLibrary();
    return lib.handle == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(lib.handle, name));
  }();
  if (fn == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  return fn(args...);
}

}  // namespace

absl::Status LoadCublasLt() {
  const Library& lib = TheLibrary();
  if (lib.handle != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("cannot load cuBLASLt, the CUDA backend's matmul library: ", lib.error));
}

std::string CublasLtSummary() {
  const Library& lib = TheLibrary();
  if (lib.handle == nullptr) return absl::StrCat("cuBLASLt not loadable: ", lib.error);
  auto* version = reinterpret_cast<size_t (*)()>(dlsym(lib.handle, "cublasLtGetVersion"));
  if (version == nullptr) return "cuBLASLt (no version)";
  const size_t v = version();
  return absl::StrCat("cuBLASLt ", v / 10000, ".", v / 100 % 100, ".", v % 100);
}

}  // namespace cuda
}  // namespace ladder

// The definitions: C linkage from cublasLt.h's declarations.

cublasStatus_t cublasLtCreate(cublasLtHandle_t* light_handle) {
  return ladder::cuda::Forward<&cublasLtCreate>("cublasLtCreate", light_handle);
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t light_handle) {
  return ladder::cuda::Forward<&cublasLtDestroy>("cublasLtDestroy", light_handle);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t light_handle, cublasLtMatmulDesc_t compute_desc,
                              const void* alpha, const void* a, cublasLtMatrixLayout_t a_desc,
                              const void* b, cublasLtMatrixLayout_t b_desc, const void* beta,
                              const void* c, cublasLtMatrixLayout_t c_desc, void* d,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  return ladder::cuda::Forward<&cublasLtMatmul>("cublasLtMatmul", light_handle, compute_desc, alpha,
                                                a, a_desc, b, b_desc, beta, c, c_desc, d, d_desc,
                                                algo, workspace, workspace_bytes, stream);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t light_handle, cublasLtMatmulDesc_t operation_desc,
    cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc,
    cublasLtMatrixLayout_t d_desc, cublasLtMatmulPreference_t preference, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* returned) {
  return ladder::cuda::Forward<&cublasLtMatmulAlgoGetHeuristic>(
      "cublasLtMatmulAlgoGetHeuristic", light_handle, operation_desc, a_desc, b_desc, c_desc,
      d_desc, preference, requested, results, returned);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmul_desc,
                                        cublasComputeType_t compute_type,
                                        cudaDataType_t scale_type) {
  return ladder::cuda::Forward<&cublasLtMatmulDescCreate>("cublasLtMatmulDescCreate", matmul_desc,
                                                          compute_type, scale_type);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmul_desc) {
  return ladder::cuda::Forward<&cublasLtMatmulDescDestroy>("cublasLtMatmulDescDestroy",
                                                           matmul_desc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmul_desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t bytes) {
  return ladder::cuda::Forward<&cublasLtMatmulDescSetAttribute>("cublasLtMatmulDescSetAttribute",
                                                                matmul_desc, attr, buf, bytes);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return ladder::cuda::Forward<&cublasLtMatmulPreferenceCreate>("cublasLtMatmulPreferenceCreate",
                                                                pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return ladder::cuda::Forward<&cublasLtMatmulPreferenceDestroy>("cublasLtMatmulPreferenceDestroy",
                                                                 pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
  return ladder::cuda::Forward<&cublasLtMatmulPreferenceSetAttribute>(
      "cublasLtMatmulPreferenceSetAttribute", pref, attr, buf, bytes);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* mat_layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  return ladder::cuda::Forward<&cublasLtMatrixLayoutCreate>("cublasLtMatrixLayoutCreate",
                                                            mat_layout, type, rows, cols, ld);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t mat_layout) {
  return ladder::cuda::Forward<&cublasLtMatrixLayoutDestroy>("cublasLtMatrixLayoutDestroy",
                                                             mat_layout);
}
