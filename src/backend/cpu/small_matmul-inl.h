// small_matmul.cc's SIMD tiles, compiled once per level (foreach_simd_level.h;
// V is the level, simd.h). No include guard: it is meant to be included once
// per level. Uses Operands, kLanes, Finish, TouchChunk, PrefetchAhead,
// TileFn and Kernel from small_matmul.cc.
//
// The 64 lanes of the definition (matmul_kernels.h) are kRegs registers of
// V::kF lanes: register i holds lanes V::kF i .. V::kF (i + 1) - 1.
constexpr int kRegs = kLanes / V::kF;

// Step 2 of the definition: lanes l + 32, + 16, ... down to one register
// (register i + kRegs / 2, then + kRegs / 4, ...), then V::Sum's tree.
inline float Fold(typename V::F* acc) {
  for (int width = kRegs / 2; width > 0; width /= 2) {
    for (int i = 0; i < width; ++i) acc[i] = V::Add(acc[i], acc[i + width]);
  }
  return V::Sum(acc[0]);
}

// One token (decoding): rows [o0, o1) one after another, each row's 64
// lanes in kRegs accumulators, kRegs independent fma chains.
template <class W>
void Stream(const Operands<W>& m, int64_t o0, int64_t o1) {
  const float* x = m.x;
  for (int64_t o = o0; o < o1; ++o) {
    const W* w = m.w + o * m.C;
    typename V::F acc[kRegs];
#pragma GCC unroll 8
    for (int i = 0; i < kRegs; ++i) acc[i] = V::Zero();
    for (int64_t c = 0; c + kLanes <= m.C; c += kLanes) {
      PrefetchAhead(w + c);
#pragma GCC unroll 8
      for (int i = 0; i < kRegs; ++i) {
        acc[i] = V::MulAdd(V::Load(w + c + V::kF * i), V::Load(x + c + V::kF * i), acc[i]);
      }
    }
    m.y[o] = Finish(m, Fold(acc), o, 0);
  }
}

// Several tokens: R rows x T tokens share their loads (each weight used T
// times, each activation R times), which 64 lanes per pair would not leave
// registers for. So the lanes go a stripe of 16 at a time (lanes
// [g, g + 16) take the channels 64 k + g .. 64 k + g + 15), kStripe
// registers per pair, and each stripe's sums are stored until the fold.
// Each lane still sums its own channels in order: the same sequence.
// The unroll pragmas keep the accumulators in registers: without them GCC
// left AVX-512's bf16 tile storing them to the stack on every pass, and 16
// tokens took 1.7 times as long.
constexpr int kStripe = 16 / V::kF;

template <class W, int R, int T>
void Striped(const Operands<W>& m, int64_t o, int64_t n) {
  const W* w = m.w + o * m.C;
  const float* x = m.x + n * m.C;
  const int64_t end = m.C / kLanes * kLanes;
  float lanes[R][T][kLanes];
  for (int64_t g = 0; g < kLanes; g += 16) {
    typename V::F acc[R][T][kStripe];
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) {
        for (int h = 0; h < kStripe; ++h) acc[r][t][h] = V::Zero();
      }
    }
    for (int64_t c = g; c < end; c += kLanes) {
      if (g == 0) TouchChunk(w, R, m.C, c);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        typename V::F wv[kStripe];
        for (int h = 0; h < kStripe; ++h) wv[h] = V::Load(w + r * m.C + c + V::kF * h);
#pragma GCC unroll 16
        for (int t = 0; t < T; ++t) {
#pragma GCC unroll 16
          for (int h = 0; h < kStripe; ++h) {
            acc[r][t][h] = V::MulAdd(wv[h], V::Load(x + t * m.C + c + V::kF * h), acc[r][t][h]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int t = 0; t < T; ++t) {
        for (int h = 0; h < kStripe; ++h) V::Store(&lanes[r][t][g + V::kF * h], acc[r][t][h]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      typename V::F acc[kRegs];
      for (int i = 0; i < kRegs; ++i) acc[i] = V::Load(&lanes[r][t][V::kF * i]);
      m.y[(n + t) * m.OC + o + r] = Finish(m, Fold(acc), o + r, n + t);
    }
  }
}

// The level's kernels with tiles of R rows x up to T tokens (Kernel in
// small_matmul.cc).
template <class W, int R, size_t... I>
constexpr std::array<TileFn<W>, sizeof...(I)> Tiles(std::index_sequence<I...>) {
  return {&Striped<W, R, static_cast<int>(I) + 1>...};
}

template <class W, int R, int T>
Kernel<W> Kernels() {
  static constexpr auto kFull = Tiles<W, R>(std::make_index_sequence<T>());
  static constexpr auto kOne = Tiles<W, 1>(std::make_index_sequence<T>());
  return {&Stream<W>, R, T, kFull.data(), kOne.data()};
}
