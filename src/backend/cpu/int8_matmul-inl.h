// int8_matmul.cc's panel tiles, compiled once per level (foreach_simd_level.h;
// V is the level, simd.h). No include guard: it is meant to be included once
// per level. Uses Int8Gemm, TileFn, Kernel, kPanel and kBlock from
// int8_matmul.cc.
//
// A tile computes P panels (16 output rows each) for T tokens. A panel's
// rows are kParts registers of V::kF 32-bit lanes, one row per lane (one
// zmm on AVX-512, two ymm halves on AVX2). Per 4 input channels the tile
// loads each panel's 64 weight bytes once (4 per row, the panel order of
// quantize.h) and, per token, broadcasts the token's 4 activation bytes to
// every lane and adds the 4 products into that token's lane sums
// (V::DotBytes). At the end of each block of 32 channels the integer sums
// become floats and join the accumulators with one fma, step 2 of the
// definition in int8_matmul.cc.
constexpr int kParts = kPanel / V::kF;

// With Prefetch, a one-token tile asks for the weights
// kStreamPrefetchBytes ahead of the 64 bytes per panel it loads (whether a
// level gains is measured, in int8_matmul.cc). A tile of several tokens
// computes long enough per byte that it does not need to.
template <int P, int T, bool Prefetch>
void Tile(const Int8Gemm& m, int64_t p, int64_t n) {
  const int64_t panel_bytes = kPanel * m.C, panel_scales = kPanel * m.groups;
  const int8_t* panel = m.q + p * panel_bytes;
  const float* scales = m.s + p * panel_scales;
  typename V::F acc[P][T][kParts];
  for (int i = 0; i < P; ++i) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < kParts; ++h) acc[i][t][h] = V::Zero();
    }
  }
  for (int64_t g = 0; g < m.groups; ++g) {
    typename V::F sw[P][kParts];  // the rows' scales for group g
    for (int i = 0; i < P; ++i) {
      for (int h = 0; h < kParts; ++h) {
        sw[i][h] = V::Load(scales + i * panel_scales + g * kPanel + V::kF * h);
      }
    }
    for (int64_t b = g * m.blocks_per_group; b < (g + 1) * m.blocks_per_group; ++b) {
      typename V::I dot[P][T][kParts];
      for (int i = 0; i < P; ++i) {
        for (int t = 0; t < T; ++t) {
          for (int h = 0; h < kParts; ++h) dot[i][t][h] = V::ZeroInt();
        }
      }
#pragma GCC unroll 8
      for (int64_t k = 0; k < kBlock / 4; ++k) {
        const int64_t at = (b * kBlock / 4 + k) * (kPanel * 4);
        typename V::I w[P][kParts];
        for (int i = 0; i < P; ++i) {
          const int8_t* wi = panel + i * panel_bytes + at;
          if constexpr (Prefetch && T == 1) __builtin_prefetch(wi + cpu::kStreamPrefetchBytes);
          for (int h = 0; h < kParts; ++h) w[i][h] = V::LoadWeights(wi + 4 * V::kF * h);
        }
        for (int t = 0; t < T; ++t) {
          const auto xv = V::Broadcast(cpu::FourBytes(m.xq + (n + t) * m.C + b * kBlock + 4 * k));
          for (int i = 0; i < P; ++i) {
            for (int h = 0; h < kParts; ++h) dot[i][t][h] = V::DotBytes(dot[i][t][h], w[i][h], xv);
          }
        }
      }
      for (int t = 0; t < T; ++t) {
        const typename V::F xs = V::Set(m.xs[(n + t) * m.blocks + b]);
        const int32_t xc = m.xc[(n + t) * m.blocks + b];
        for (int i = 0; i < P; ++i) {
          for (int h = 0; h < kParts; ++h) {
            acc[i][t][h] =
                V::MulAdd(V::BlockDot(dot[i][t][h], xc), V::Mul(sw[i][h], xs), acc[i][t][h]);
          }
        }
      }
    }
  }
  for (int i = 0; i < P; ++i) {
    for (int h = 0; h < kParts; ++h) {
      const int64_t o = (p + i) * kPanel + V::kF * h;
      const typename V::F bias = m.b ? V::Load(m.b + o) : V::Zero();
      for (int t = 0; t < T; ++t) V::Store(m.y + (n + t) * m.OC + o, V::Add(acc[i][t][h], bias));
    }
  }
}

// The level's kernel with tiles of P panels x up to T tokens (Kernel in
// int8_matmul.cc).
template <int P, bool Prefetch, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> Tiles(std::index_sequence<I...>) {
  return {&Tile<P, static_cast<int>(I) + 1, Prefetch>...};
}

template <int P, int T, bool Prefetch>
Kernel Kernels() {
  static constexpr auto kFull = Tiles<P, Prefetch>(std::make_index_sequence<T>());
  static constexpr auto kOne = Tiles<1, Prefetch>(std::make_index_sequence<T>());
  return {P, T, kFull.data(), kOne.data()};
}
