// The simulator's cuBLASLt (include/cublasLt.h): descriptors that remember
// their attributes, and a host GEMM with cuBLASLt's column-major semantics,
// over fp32 or bf16 operands (products summed in double, the result rounded
// once to D's type, as a GPU's fp32-accumulating epilogue rounds once).
#include <cublasLt.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "src/backend/cuda_sim/errors.h"
#include "src/backend/cuda_sim/memory.h"
#include "src/backend/cuda_sim/runtime.h"
#include "src/core/bf16.h"

namespace ladder {
namespace cuda_sim {

struct SimLtHandle {};
struct SimLtMatmulDesc {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // of D's type (cuBLASLt's default bias type)
  void* aux = nullptr;         // GELU_AUX and DGELU epilogues: the GELU's input, D's type
  int64_t aux_ld = 0;
};
struct SimLtLayout {
  cudaDataType type;  // CUDA_R_32F or CUDA_R_16BF
  uint64_t rows, cols;
  int64_t ld;
};
struct SimLtPreference {
  uint64_t max_workspace = 0;
};

namespace {

template <typename T>
cublasStatus_t SetFrom(T* field, const void* buf, size_t bytes) {
  if (buf == nullptr || bytes != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

size_t ElementBytes(cudaDataType type) { return type == CUDA_R_16BF ? 2 : 4; }

// Element i of an array of `type`, widened to float (exact).
float Load(const void* p, cudaDataType type, uint64_t i) {
  return type == CUDA_R_16BF ? Bf16ToFloat(static_cast<const bf16*>(p)[i])
                             : static_cast<const float*>(p)[i];
}

// Element i of an array of `type` = v, rounded to nearest even for bf16.
void Store(void* p, cudaDataType type, uint64_t i, float v) {
  if (type == CUDA_R_16BF) {
    static_cast<bf16*>(p)[i] = FloatToBf16(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

// Element (r, c) of a column-major matrix, or of its transpose.
float At(const void* m, const SimLtLayout& l, cublasOperation_t op, uint64_t r, uint64_t c) {
  return op == CUBLAS_OP_N ? Load(m, l.type, r + c * static_cast<uint64_t>(l.ld))
                           : Load(m, l.type, c + r * static_cast<uint64_t>(l.ld));
}

// The bytes a column-major layout spans.
size_t Span(const SimLtLayout& l) {
  return l.cols == 0 ? 0
                     : ((l.cols - 1) * static_cast<uint64_t>(l.ld) + l.rows) * ElementBytes(l.type);
}

// The type combinations of cuBLASLt's table for CUBLAS_COMPUTE_32F that
// ladder uses: A and B of one type; C and D of one type; fp32 inputs give an
// fp32 output, bf16 inputs a bf16 or an fp32 one (weight gradients).
bool SupportedTypes(const SimLtLayout& a, const SimLtLayout& b, const SimLtLayout& c,
                    const SimLtLayout& d) {
  if (a.type != b.type || c.type != d.type) return false;
  return a.type == CUDA_R_16BF || d.type == CUDA_R_32F;
}

bool ValidLayout(const SimLtLayout* l) {
  return l != nullptr && l->ld >= static_cast<int64_t>(l->rows) && l->ld >= 1;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new SimLtHandle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new SimLtMatmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t bytes) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return SetFrom(&desc->trans_a, buf, bytes);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return SetFrom(&desc->trans_b, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      const cublasStatus_t s = SetFrom(&desc->epilogue, buf, bytes);
      if (s == CUBLAS_STATUS_SUCCESS && desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
          desc->epilogue != CUBLASLT_EPILOGUE_BIAS &&
          desc->epilogue != CUBLASLT_EPILOGUE_GELU_AUX &&
          desc->epilogue != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
          desc->epilogue != CUBLASLT_EPILOGUE_DGELU) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
      }
      return s;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return SetFrom(&desc->bias, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return SetFrom(&desc->aux, buf, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return SetFrom(&desc->aux_ld, buf, bytes);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (type != CUDA_R_32F && type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
  *layout = new SimLtLayout{type, rows, cols, ld};
  return ValidLayout(*layout) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new SimLtPreference;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_INVALID_VALUE;
  return SetFrom(&pref->max_workspace, buf, bytes);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  if (handle == nullptr || desc == nullptr || pref == nullptr || requested < 1 || !ValidLayout(a) ||
      !ValidLayout(b) || !ValidLayout(c) || !ValidLayout(d)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!SupportedTypes(*a, *b, *c, *d)) return CUBLAS_STATUS_NOT_SUPPORTED;
  results[0] = {};  // the one "algorithm": the host GEMM, no workspace
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {

// The reference dot product, in double: kLanes running sums (element p
// goes to sum p % kLanes), added in lane order at the end. A fixed order,
// so every call gives the same bits, and independent sums, so the compiler
// can keep them in vector registers (a single running sum would make every
// step wait for the previous one's addition).
double Dot(const float* x, const float* y, uint64_t k) {
  constexpr uint64_t kLanes = 8;
  double lane[kLanes] = {};
  uint64_t p = 0;
  for (; p + kLanes <= k; p += kLanes) {
    for (uint64_t l = 0; l < kLanes; ++l) {
      lane[l] += static_cast<double>(x[p + l]) * static_cast<double>(y[p + l]);
    }
  }
  for (uint64_t l = 0; p < k; ++p, ++l) {
    lane[l] += static_cast<double>(x[p]) * static_cast<double>(y[p]);
  }
  double sum = 0.0;
  for (const double v : lane) sum += v;
  return sum;
}

}  // namespace

// D = alpha op(A) op(B) + beta C, then the epilogue (cublasLtMatmul's
// work, arguments checked): fails, stickily, where an operand is not device
// memory, as a GPU would fault.
cudaError_t RunMatmul(const SimLtMatmulDesc& desc, float alpha, const void* a,
                      const SimLtLayout& al, const void* b, const SimLtLayout& bl, float beta,
                      const void* c, const SimLtLayout& cl, void* d, const SimLtLayout& dl,
                      uint64_t m, uint64_t n, uint64_t k) {
  const bool bias =
      desc.epilogue == CUBLASLT_EPILOGUE_BIAS || desc.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool gelu = desc.epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
                    desc.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool dgelu = desc.epilogue == CUBLASLT_EPILOGUE_DGELU;
  const SimLtLayout aux_layout{dl.type, m, n, desc.aux_ld};
  // Every operand must be device memory (a GPU would fault on a host pointer).
  if (!internal::IsDeviceRange(a, Span(al)) || !internal::IsDeviceRange(b, Span(bl)) ||
      !internal::IsDeviceRange(d, Span(dl)) ||
      (beta != 0.0f && !internal::IsDeviceRange(c, Span(cl))) ||
      (bias && !internal::IsDeviceRange(desc.bias, m * ElementBytes(dl.type))) ||
      ((gelu || dgelu) && !internal::IsDeviceRange(desc.aux, Span(aux_layout)))) {
    return internal::Fail(cudaErrorIllegalAddress,
                          "cublasLtMatmul: an operand is not inside device memory",
                          /*sticky=*/true);
  }
  // op(A) copied row by row (m x k, row-major) so the inner loop is contiguous.
  std::vector<float> a_rows(m * k);
  for (uint64_t i = 0; i < m; ++i) {
    for (uint64_t p = 0; p < k; ++p) a_rows[i * k + p] = At(a, al, desc.trans_a, i, p);
  }
  std::vector<float> b_col(k);
  for (uint64_t j = 0; j < n; ++j) {
    for (uint64_t p = 0; p < k; ++p) b_col[p] = At(b, bl, desc.trans_b, p, j);
    for (uint64_t i = 0; i < m; ++i) {
      const double acc = Dot(&a_rows[i * k], b_col.data(), k);
      const uint64_t at = i + j * static_cast<uint64_t>(dl.ld);
      float v = alpha * static_cast<float>(acc);
      if (beta != 0.0f) v += beta * Load(c, cl.type, i + j * static_cast<uint64_t>(cl.ld));
      if (bias) v += Load(desc.bias, dl.type, i);
      if (gelu) {
        // The GELU's input goes to the auxiliary matrix; D gets GPT-2's
        // tanh-approximated GELU of it (each rounded once to D's type).
        Store(desc.aux, dl.type, i + j * static_cast<uint64_t>(desc.aux_ld), v);
        const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        v = 0.5f * v * (1.0f + std::tanh(u));
      }
      if (dgelu) {
        // D = the product times the GELU's derivative at the auxiliary
        // matrix's value x (GPT-2's tanh form, differentiated):
        // gelu'(x) = (1 + t) / 2 + x (1 - t^2) / 2 * sqrt(2/pi) (1 + 3 c x^2).
        const float x = Load(desc.aux, dl.type, i + j * static_cast<uint64_t>(desc.aux_ld));
        const float t = std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x));
        const float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
        v *= 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
      }
      Store(d, dl.type, at, v);  // one rounding, as the GPU's epilogue
    }
  }
  return cudaSuccess;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void* alpha_p, const void* a_p, cublasLtMatrixLayout_t al,
                              const void* b_p, cublasLtMatrixLayout_t bl, const void* beta_p,
                              const void* c_p, cublasLtMatrixLayout_t cl, void* d_p,
                              cublasLtMatrixLayout_t dl, const cublasLtMatmulAlgo_t* /*algo*/,
                              void* /*workspace*/, size_t /*workspace_bytes*/,
                              cudaStream_t stream) {
  if (internal::StickyError() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (handle == nullptr || desc == nullptr || !ValidLayout(al) || !ValidLayout(bl) ||
      !ValidLayout(cl) || !ValidLayout(dl)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // op(A) is m x k, op(B) is k x n, C and D are m x n.
  const bool ta = desc->trans_a == CUBLAS_OP_T, tb = desc->trans_b == CUBLAS_OP_T;
  const uint64_t m = ta ? al->cols : al->rows, k = ta ? al->rows : al->cols;
  const uint64_t kb = tb ? bl->cols : bl->rows, n = tb ? bl->rows : bl->cols;
  if (kb != k || cl->rows != m || cl->cols != n || dl->rows != m || dl->cols != n ||
      cl->ld != dl->ld) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!SupportedTypes(*al, *bl, *cl, *dl)) return CUBLAS_STATUS_NOT_SUPPORTED;
  // cuBLASLt's rules for the auxiliary matrix: a leading dimension divisible
  // by 8 and at least D's rows.
  const bool aux = desc->epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
                   desc->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
                   desc->epilogue == CUBLASLT_EPILOGUE_DGELU;
  if (aux && (desc->aux_ld % 8 != 0 || desc->aux_ld < static_cast<int64_t>(m))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float alpha = *static_cast<const float*>(alpha_p);
  const float beta = *static_cast<const float*>(beta_p);
  // The descriptors and scalars are read now (a caller may destroy them
  // once the call returns); the product runs on the stream: now, or on
  // each replay of a graph that captured it.
  const cudaError_t err = internal::Enqueue(
      stream, [=, d_desc = *desc, a_l = *al, b_l = *bl, c_l = *cl, d_l = *dl](cudaStream_t) {
        return RunMatmul(d_desc, alpha, a_p, a_l, b_p, b_l, beta, c_p, c_l, d_p, d_l, m, n, k);
      });
  return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace cuda_sim
}  // namespace ladder
