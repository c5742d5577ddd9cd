#include "src/backend/cuda/matmul.h"

#include <cublasLt.h>

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "src/backend/cuda/bias_grad.h"
#include "src/backend/cuda/cublaslt_library.h"
#include "src/backend/cuda/cuda_check.h"

LADDER_CUDA_BEGIN
namespace {

constexpr char kFwd[] = "MatmulForward";
constexpr char kGeluFwd[] = "MatmulGeluForward";
constexpr char kBwd[] = "MatmulBackward";
constexpr char kGeluBwd[] = "MatmulGeluBackward";

absl::Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("cuBLASLt ", what, " failed with status ", static_cast<int>(s)));
}

// A cuBLASLt descriptor destroyed with its scope.
template <typename T, cublasStatus_t (*kDestroy)(T)>
struct Owned {
  T p = nullptr;
  ~Owned() {
    if (p != nullptr) kDestroy(p);
  }
};

}  // namespace

struct Matmuls::Impl {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  // The heuristic's first choice per problem (trans_a, trans_b, m, n, k, lda,
  // ldb, bias, A/B type, D type): asked once, reused every step.
  std::map<std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, bool, int, int>,
           cublasLtMatmulAlgo_t>
      algos;
};

Matmuls::Matmuls(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Matmuls::~Matmuls() {
  if (impl_->workspace != nullptr) cudaFree(impl_->workspace);
  if (impl_->handle != nullptr) cublasLtDestroy(impl_->handle);
}

absl::StatusOr<std::unique_ptr<Matmuls>> Matmuls::Create(cudaStream_t stream) {
  auto impl = std::make_unique<Impl>();
  impl->stream = stream;
  RETURN_IF_ERROR(LoadCublasLt());
  RETURN_IF_ERROR(LtStatus(cublasLtCreate(&impl->handle), "create"));
  std::unique_ptr<Matmuls> m(new Matmuls(std::move(impl)));
  RETURN_IF_ERROR(
      CudaStatus(cudaMalloc(&m->impl_->workspace, kWorkspaceBytes), "cuBLASLt workspace"));
  return m;
}

absl::Status Matmuls::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int ab,
                           const void* a, int64_t lda, const void* b, int64_t ldb, float beta,
                           int dt, void* d, const void* bias, void* gelu_aux, GeluEpilogue gelu) {
  const auto ab_type = static_cast<cudaDataType_t>(ab), d_type = static_cast<cudaDataType_t>(dt);
  Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> desc;
  RETURN_IF_ERROR(
      LtStatus(cublasLtMatmulDescCreate(&desc.p, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc"));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
      "transa"));
  RETURN_IF_ERROR(LtStatus(
      cublasLtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
      "transb"));
  if (gelu_aux != nullptr) {
    const cublasLtEpilogue_t epilogue =
        gelu == GeluEpilogue::kDGelu
            ? CUBLASLT_EPILOGUE_DGELU
            : (bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX);
    const int64_t aux_ld = m;
    RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                            &epilogue, sizeof(epilogue)),
                             "epilogue"));
    RETURN_IF_ERROR(
        LtStatus(cublasLtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                &gelu_aux, sizeof(gelu_aux)),
                 "aux pointer"));
    RETURN_IF_ERROR(
        LtStatus(cublasLtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                &aux_ld, sizeof(aux_ld)),
                 "aux ld"));
    if (bias != nullptr) {
      RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescSetAttribute(
                                   desc.p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                               "bias"));
    }
  } else if (bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                            &epilogue, sizeof(epilogue)),
                             "epilogue"));
    RETURN_IF_ERROR(LtStatus(cublasLtMatmulDescSetAttribute(
                                 desc.p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                             "bias"));
  }
  // Layouts as stored: A is (trans_a ? k x m : m x k), B is (trans_b ? n x k : k x n).
  Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> la, lb, ld;
  RETURN_IF_ERROR(
      LtStatus(cublasLtMatrixLayoutCreate(&la.p, ab_type, trans_a ? k : m, trans_a ? m : k, lda),
               "layout A"));
  RETURN_IF_ERROR(
      LtStatus(cublasLtMatrixLayoutCreate(&lb.p, ab_type, trans_b ? n : k, trans_b ? k : n, ldb),
               "layout B"));
  RETURN_IF_ERROR(LtStatus(cublasLtMatrixLayoutCreate(&ld.p, d_type, m, n, m), "layout D"));

  const auto key = std::make_tuple(trans_a, trans_b, m, n, k, lda, ldb,
                                   (bias != nullptr ? 1 : 0) + (gelu_aux != nullptr ? 2 : 0) +
                                       (gelu == GeluEpilogue::kDGelu ? 4 : 0),
                                   ab, dt);
  auto it = impl_->algos.find(key);
  if (it == impl_->algos.end()) {
    Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> pref;
    RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceCreate(&pref.p), "preference"));
    const uint64_t ws = kWorkspaceBytes;
    RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceSetAttribute(
                                 pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                             "workspace preference"));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t heuristic = cublasLtMatmulAlgoGetHeuristic(
        impl_->handle, desc.p, la.p, lb.p, ld.p, ld.p, pref.p, 1, &result, &found);
    if (gelu_aux != nullptr && (heuristic != CUBLAS_STATUS_SUCCESS || found == 0)) {
      return absl::UnimplementedError("cuBLASLt has no GELU-epilogue algorithm for the shape");
    }
    RETURN_IF_ERROR(LtStatus(heuristic, "heuristic"));
    if (found == 0) {
      return absl::InternalError(absl::StrCat("cuBLASLt has no algorithm for a ",
                                              ab_type == CUDA_R_16BF ? "bf16" : "fp32",
                                              " matmul of ", m, " x ", n, " x ", k));
    }
    it = impl_->algos.emplace(key, result.algo).first;
  }
  const float alpha = 1.0f;
  return LtStatus(
      cublasLtMatmul(impl_->handle, desc.p, &alpha, a, la.p, b, lb.p, &beta, d, ld.p, d, ld.p,
                     &it->second, impl_->workspace, kWorkspaceBytes, impl_->stream),
      "matmul");
}

namespace {

// The cuBLASLt type of a storage dtype (WithStorage's T).
template <typename T>
constexpr int LtType() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// The forward's arguments (MatmulForward's shapes, one storage dtype): sets
// N, C and OC.
absl::Status CheckForward(const char* op, const Tensor& out, const Tensor& inp,
                          const Tensor& weight, const Tensor& bias, int64_t* N, int64_t* C,
                          int64_t* OC) {
  const DType dt = inp.dtype;
  RETURN_IF_ERROR(RowView(op, "inp", inp, dt, N, C));
  RETURN_IF_ERROR(CheckOnGpu(op, "weight", weight));
  if (weight.rank != 2 || weight.dim(1) != *C) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": weight is ", weight.ShapeString(), ", expected [OC, ", *C, "]"));
  }
  *OC = weight.dim(0);
  RETURN_IF_ERROR(CheckExact(op, "weight", weight, dt, {*OC, *C}));
  RETURN_IF_ERROR(CheckRows(op, "out", out, dt, *N, *OC));
  if (!bias.empty()) RETURN_IF_ERROR(CheckExact(op, "bias", bias, dt, {*OC}));
  return absl::OkStatus();
}

// The backward's arguments (MatmulBackward's shapes, one storage dtype;
// dinp checked unless empty): sets N, C and OC.
absl::Status CheckBackward(const char* op, const char* dinp_name, const Tensor& dinp,
                           const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                           const Tensor& inp, const Tensor& weight, int64_t* N, int64_t* C,
                           int64_t* OC) {
  const DType dt = inp.dtype;
  RETURN_IF_ERROR(RowView(op, "inp", inp, dt, N, C));
  RETURN_IF_ERROR(RowView(op, "dout", dout, dt, N, OC));
  RETURN_IF_ERROR(CheckRows(op, "inp", inp, dt, *N, *C));
  RETURN_IF_ERROR(CheckExact(op, "weight", weight, dt, {*OC, *C}));
  RETURN_IF_ERROR(CheckExact(op, "dweight", dweight, DType::kF32, {*OC, *C}));
  if (!dinp.empty()) RETURN_IF_ERROR(CheckRows(op, dinp_name, dinp, dt, *N, *C));
  if (!dbias.empty()) RETURN_IF_ERROR(CheckExact(op, "dbias", dbias, DType::kF32, {*OC}));
  return absl::OkStatus();
}

}  // namespace

absl::Status Matmuls::Forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  int64_t N = 0, C = 0, OC = 0;
  RETURN_IF_ERROR(CheckForward(kFwd, out, inp, weight, bias, &N, &C, &OC));
  return WithStorage(kFwd, "inp", inp.dtype, [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    if (N == 0 || OC == 0) return absl::OkStatus();
    // out^T (OC x N) = op_T(W stored C x OC) * inp^T (C x N).
    return Gemm(true, false, OC, N, C, LtType<T>(), weight.data, C, inp.data, C, 0.0f, LtType<T>(),
                out.data, bias.empty() ? nullptr : bias.data);
  });
}

absl::Status Matmuls::GeluForward(Tensor out, Tensor pre, Tensor inp, Tensor weight, Tensor bias) {
  int64_t N = 0, C = 0, OC = 0;
  RETURN_IF_ERROR(CheckForward(kGeluFwd, out, inp, weight, bias, &N, &C, &OC));
  RETURN_IF_ERROR(CheckRows(kGeluFwd, "pre", pre, inp.dtype, N, OC));
  const char* o = static_cast<const char*>(out.data);
  const char* p = static_cast<const char*>(pre.data);
  if (o < p + pre.bytes() && p < o + out.bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(kGeluFwd, ": out and pre overlap"));
  }
  if (OC % 8 != 0) return absl::UnimplementedError("the GELU epilogue needs OC % 8 == 0");
  return WithStorage(kGeluFwd, "inp", inp.dtype, [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    if (N == 0 || OC == 0) return absl::OkStatus();
    // As Forward, with D = gelu(out) and the auxiliary matrix = pre.
    return Gemm(true, false, OC, N, C, LtType<T>(), weight.data, C, inp.data, C, 0.0f, LtType<T>(),
                out.data, bias.empty() ? nullptr : bias.data, pre.data);
  });
}

absl::Status Matmuls::Backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                               Tensor weight, Tensor scratch) {
  int64_t N = 0, C = 0, OC = 0;
  const DType dt = inp.dtype;
  RETURN_IF_ERROR(
      CheckBackward(kBwd, "dinp", dinp, dweight, dbias, dout, inp, weight, &N, &C, &OC));
  return WithStorage(kBwd, "inp", dt, [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    if (N == 0) return absl::OkStatus();
    if (!dinp.empty()) {
      // dinp^T (C x N) = W stored (C x OC) * dout^T (OC x N).
      RETURN_IF_ERROR(Gemm(false, false, C, N, OC, LtType<T>(), weight.data, C, dout.data, OC, 0.0f,
                           LtType<T>(), dinp.data, nullptr));
    }
    return WeightGrads(dweight, dbias, dout, inp, scratch, LtType<T>());
  });
}

absl::Status Matmuls::WeightGrads(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                  Tensor scratch, int ab) {
  const int64_t N = dout.numel() / dweight.dim(0), OC = dweight.dim(0), C = dweight.dim(1);
  // dweight^T (C x OC) += inp^T (C x N) * op_T(dout^T stored OC x N), in fp32.
  RETURN_IF_ERROR(Gemm(false, true, C, OC, N, ab, inp.data, C, dout.data, OC, 1.0f, CUDA_R_32F,
                       dweight.data, nullptr));
  if (!dbias.empty()) RETURN_IF_ERROR(BiasGrad(dbias, dout, scratch, impl_->stream));
  return absl::OkStatus();
}

absl::Status Matmuls::GeluBackward(Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout,
                                   Tensor inp, Tensor weight, Tensor pre, Tensor scratch) {
  int64_t N = 0, C = 0, OC = 0;
  const DType dt = inp.dtype;
  RETURN_IF_ERROR(
      CheckBackward(kGeluBwd, "dpre", dpre, dweight, dbias, dout, inp, weight, &N, &C, &OC));
  RETURN_IF_ERROR(CheckRows(kGeluBwd, "dpre", dpre, dt, N, C));  // required here
  RETURN_IF_ERROR(CheckRows(kGeluBwd, "pre", pre, dt, N, C));
  const char* a = static_cast<const char*>(dpre.data);
  const char* b = static_cast<const char*>(pre.data);
  if (a < b + pre.bytes() && b < a + dpre.bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(kGeluBwd, ": dpre and pre overlap"));
  }
  if (C % 8 != 0) return absl::UnimplementedError("the DGELU epilogue needs C % 8 == 0");
  return WithStorage(kGeluBwd, "inp", dt, [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    if (N == 0) return absl::OkStatus();
    // As Backward's dinp, with D = the product * gelu'(pre) (auxiliary matrix).
    RETURN_IF_ERROR(Gemm(false, false, C, N, OC, LtType<T>(), weight.data, C, dout.data, OC, 0.0f,
                         LtType<T>(), dpre.data, nullptr, pre.data, GeluEpilogue::kDGelu));
    return WeightGrads(dweight, dbias, dout, inp, scratch, LtType<T>());
  });
}

LADDER_CUDA_END
