// AdamW's arithmetic on one element, the single definition that every place
// an update runs compiles: the CPU backend's loop
// (src/backend/cpu/optimizer.cc), the multi-tensor kernel on a GPU and in the
// simulator (kernels/optimizer.cu), and so the host-side update of optimizer
// offload (src/train/offload.h), which runs the CPU backend's loop on host
// memory. Plain C++ that nvcc also compiles for the device.
//
// Same bits in every place: each multiply and add is rounded on its own. On
// the device that takes __fmul_rn / __fadd_rn, which nvcc never fuses into an
// FMA (it fuses a plain a * b + c by default); on the host the project builds
// as ISO C++ (cpp_std=c++20), where g++ does not contract either. Division and
// sqrtf are IEEE-rounded in both (nvcc's defaults, no fast math). So an update
// offloaded to the host writes exactly the weights the device would have.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LADDER_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LADDER_HOST_DEVICE inline
#endif

namespace ladder {

// The step's scalars, shared by all elements: AdamWParams (backend.h) with
// the bias corrections 1 / (1 - beta^step) computed once in double (beta2^step
// is close to 1 for small steps, so 1 - beta2^step would lose digits in float).
struct AdamWScalars {
  float lr, beta1, beta2, eps, grad_scale;
  float inv_bc1, inv_bc2;
};

inline AdamWScalars MakeAdamWScalars(float lr, float beta1, float beta2, float eps,
                                     float grad_scale, int step) {
  return {lr,
          beta1,
          beta2,
          eps,
          grad_scale,
          static_cast<float>(1.0 / (1.0 - std::pow(double{beta1}, step))),
          static_cast<float>(1.0 / (1.0 - std::pow(double{beta2}, step)))};
}

LADDER_HOST_DEVICE float AdamWMul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
LADDER_HOST_DEVICE float AdamWAdd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// One element, decoupled weight decay (Loshchilov & Hutter):
//   g = grad * grad_scale
//   m = beta1 m + (1 - beta1) g          v = beta2 v + ((1 - beta2) g) g
//   param -= lr * ((m * inv_bc1) / (sqrt(v * inv_bc2) + eps) + weight_decay * param)
LADDER_HOST_DEVICE void AdamWElement(float& w, float g, float& m, float& v, float wd,
                                     const AdamWScalars& s) {
  const float gi = AdamWMul(g, s.grad_scale);
  const float mi = AdamWAdd(AdamWMul(s.beta1, m), AdamWMul(1.0f - s.beta1, gi));
  const float vi = AdamWAdd(AdamWMul(s.beta2, v), AdamWMul(AdamWMul(1.0f - s.beta2, gi), gi));
  m = mi;
  v = vi;
  const float mhat = AdamWMul(mi, s.inv_bc1), vhat = AdamWMul(vi, s.inv_bc2);
  const float step = AdamWAdd(mhat / (sqrtf(vhat) + s.eps), AdamWMul(wd, w));
  w = AdamWAdd(w, -AdamWMul(s.lr, step));
}

}  // namespace ladder

#undef LADDER_HOST_DEVICE
