// The int8 KV cache's two inner loops, compiled once per SIMD level by
// paged_attention.cc (foreach_simd_level.h; V is the level). No include
// guard: it is meant to be included once per level.
//
// Dot: sum_d q[d] * k[d].  Axpy: o[d] += a * v[d].  (n = HS values.)
// Each widens V::kF int8 values at a time to floats and multiply-adds them;
// the remainder of n runs as scalars. The row's scale is applied by the
// caller, once per position.

inline float Dot(const float* q, const int8_t* k, int64_t n) {
  typename V::F acc = V::Zero();
  int64_t d = 0;
  for (; d + V::kF <= n; d += V::kF) acc = V::MulAdd(V::Load(q + d), V::Load(k + d), acc);
  float dot = V::Sum(acc);
  for (; d < n; ++d) dot += q[d] * static_cast<float>(k[d]);
  return dot;
}

inline void Axpy(float a, const int8_t* v, float* o, int64_t n) {
  const typename V::F av = V::Set(a);
  int64_t d = 0;
  for (; d + V::kF <= n; d += V::kF) V::Store(o + d, V::MulAdd(av, V::Load(v + d), V::Load(o + d)));
  for (; d < n; ++d) o[d] += a * static_cast<float>(v[d]);
}
