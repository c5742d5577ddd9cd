// Each tensor-parallel layer against its unsplit version, on 2 or 4 ranks of
// one group (run under mpirun): forward output, weight gradient and input
// gradient of every rank's shard equal the matching slice of the single-rank
// computation within 1e-5, with and without sequence parallelism. Exits
// non-zero on any mismatch.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "src/backend/cpu/cpu_backend.h"
#include "src/core/philox.h"
#include "src/parallel/mpi_comm.h"
#include "src/parallel/tensor_parallel/layers.h"

namespace ladder {
namespace {

using Vec = std::vector<float>;
int failures = 0;

Vec Random(int64_t n, uint64_t stream) {
  Vec v(n);
  FillNormal(v.data(), 0, n, 7, stream, 0.0f, 1.0f);
  return v;
}

// Columns [c0, c0 + width) of a row-major [rows, cols] matrix.
Vec Columns(const Vec& m, int64_t rows, int64_t cols, int64_t c0, int64_t width) {
  Vec out(rows * width);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) out[r * width + c] = m[r * cols + c0 + c];
  }
  return out;
}
Vec Rows(const Vec& m, int64_t cols, int64_t r0, int64_t count) {
  return Vec(m.begin() + r0 * cols, m.begin() + (r0 + count) * cols);
}

// Each element within 1e-5 of its reference, relative to the element plus
// the reference's root mean square: sums formed in another order (a
// reduce-scatter's) differ by rounding that is relative to the terms, not
// to a result that happens to cancel to near zero.
void Expect(const std::string& what, const Vec& got, const Vec& want, int rank) {
  double rms = 0;
  for (float x : want) rms += double(x) * x;
  rms = std::sqrt(rms / std::max<size_t>(1, want.size()));
  double worst = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - want[i]) / (rms + std::fabs(want[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;  // a NaN fails
  }
  if (got.size() != want.size() || worst > 1e-5) {
    std::printf("FAIL rank %d: %s (worst relative error %g)\n", rank, what.c_str(), worst);
    ++failures;
  }
}

Tensor T2(Vec& v, int64_t a, int64_t b) { return Tensor::F32(v.data(), {a, b}, Device::kCpu); }
Tensor T1(Vec& v) { return Tensor::F32(v.data(), {static_cast<int64_t>(v.size())}, Device::kCpu); }

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::printf("FAIL: %s\n", std::string(s.message()).c_str());
    ++failures;
  }
}

void ColumnAndRowLinear(CpuBackend& be, Communicator& tp) {
  const int64_t N = 6, C = 8, OC = 12, P = tp.size(), r = tp.rank();
  Vec inp = Random(N * C, 1), w = Random(OC * C, 2), b = Random(OC, 3), dout = Random(N * OC, 4);
  // Unsplit reference.
  Vec out(N * OC), dinp(N * C), dw(OC * C, 0), db(OC, 0);
  Check(be.MatmulForward(T2(out, N, OC), T2(inp, N, C), T2(w, OC, C), T1(b)));
  Check(be.MatmulBackward(T2(dinp, N, C), T2(dw, OC, C), T1(db), T2(dout, N, OC), T2(inp, N, C),
                          T2(w, OC, C)));

  // Column-parallel: rows [r OC/P, (r+1) OC/P) of w.
  const int64_t oc = OC / P;
  Vec w_c = Rows(w, C, r * oc, oc), b_c = Rows(b, 1, r * oc, oc);
  Vec out_c(N * oc), dout_c = Columns(dout, N, OC, r * oc, oc), dinp_c(N * C), dw_c(oc * C, 0),
                     db_c(oc, 0);
  Check(tp::ColumnLinearForward(be, T2(out_c, N, oc), T2(inp, N, C), T2(w_c, oc, C), T1(b_c)));
  Check(tp::ColumnLinearBackward(be, &tp, T2(dinp_c, N, C), T2(dw_c, oc, C), T1(db_c),
                                 T2(dout_c, N, oc), T2(inp, N, C), T2(w_c, oc, C)));
  Expect("column-parallel output", out_c, Columns(out, N, OC, r * oc, oc), r);
  Expect("column-parallel input gradient", dinp_c, dinp, r);
  Expect("column-parallel weight gradient", dw_c, Rows(dw, C, r * oc, oc), r);
  Expect("column-parallel bias gradient", db_c, Rows(db, 1, r * oc, oc), r);

  // Row-parallel: columns [r C/P, (r+1) C/P) of w, the same slice of inp.
  const int64_t c = C / P;
  Vec w_r = Columns(w, OC, C, r * c, c), inp_r = Columns(inp, N, C, r * c, c);
  Vec out_r(N * OC), dinp_r(N * c), dw_r(OC * c, 0), db_r(OC, 0);
  Check(tp::RowLinearForward(be, &tp, T2(out_r, N, OC), T2(inp_r, N, c), T2(w_r, OC, c), T1(b)));
  Check(tp::RowLinearBackward(be, T2(dinp_r, N, c), T2(dw_r, OC, c), T1(db_r), T2(dout, N, OC),
                              T2(inp_r, N, c), T2(w_r, OC, c)));
  Expect("row-parallel output", out_r, out, r);
  Expect("row-parallel input gradient", dinp_r, Columns(dinp, N, C, r * c, c), r);
  Expect("row-parallel weight gradient", dw_r, Columns(dw, OC, C, r * c, c), r);
  Expect("row-parallel bias gradient", db_r, db, r);
}

// Sequence parallelism: each rank holds rows [r N/P, (r+1) N/P) of the
// block's input; the column layer runs on the gathered input and its input
// gradient comes back reduce-scattered, the row layer's output likewise.
void SequenceParallel(CpuBackend& be, Communicator& tp) {
  const int64_t P = tp.size(), r = tp.rank(), N = 4 * P, n = N / P, C = 8, OC = 12;
  Vec inp = Random(N * C, 11), w = Random(OC * C, 12), b = Random(OC, 13),
      dout = Random(N * OC, 14);
  Vec out(N * OC), dinp(N * C), dw(OC * C, 0), db(OC, 0);
  Check(be.MatmulForward(T2(out, N, OC), T2(inp, N, C), T2(w, OC, C), T1(b)));
  Check(be.MatmulBackward(T2(dinp, N, C), T2(dw, OC, C), T1(db), T2(dout, N, OC), T2(inp, N, C),
                          T2(w, OC, C)));
  Vec whole(N * C + 5, NAN), partial(N * OC + 5, NAN);  // larger than needed, poisoned
  tp::Group g(&tp);
  g.sequence_parallel = true;

  // Column-parallel: the gathered input is every rank's shard in rank order.
  const int64_t oc = OC / P;
  Vec inp_s = Rows(inp, C, r * n, n), w_c = Rows(w, C, r * oc, oc), b_c = Rows(b, 1, r * oc, oc);
  g.whole = T1(whole);
  g.partial = Tensor::F32(partial.data(), {N * C}, Device::kCpu);
  absl::StatusOr<Tensor> gathered = tp::EnterColumn(g, T2(inp_s, n, C));
  Check(gathered.status());
  if (!gathered.ok()) return;
  Expect("gathered input", Vec(whole.begin(), whole.begin() + N * C), inp, r);
  Vec out_c(N * oc), dout_c = Columns(dout, N, OC, r * oc, oc), dinp_s(n * C, NAN), dw_c(oc * C, 0),
                     db_c(oc, 0);
  Check(tp::ColumnLinearForward(be, T2(out_c, N, oc), *gathered, T2(w_c, oc, C), T1(b_c)));
  Check(tp::ColumnLinearBackward(be, g, T2(dinp_s, n, C), T2(dw_c, oc, C), T1(db_c),
                                 T2(dout_c, N, oc), *gathered, T2(w_c, oc, C)));
  Expect("sequence-parallel column output", out_c, Columns(out, N, OC, r * oc, oc), r);
  Expect("sequence-parallel column input gradient (scattered)", dinp_s, Rows(dinp, C, r * n, n), r);
  Expect("sequence-parallel column weight gradient", dw_c, Rows(dw, C, r * oc, oc), r);

  // Row-parallel: the output is reduce-scattered to this rank's rows.
  const int64_t c = C / P;
  Vec w_r = Columns(w, OC, C, r * c, c), inp_r = Columns(inp, N, C, r * c, c), out_s(n * OC, NAN);
  g.partial = T1(partial);
  Check(tp::RowLinearForward(be, g, T2(out_s, n, OC), T2(inp_r, N, c), T2(w_r, OC, c), T1(b)));
  Expect("sequence-parallel row output (scattered)", out_s, Rows(out, OC, r * n, n), r);

  // A partial buffer too small for the whole block is refused by name.
  g.partial = Tensor::F32(partial.data(), {N * OC - 1}, Device::kCpu);
  const absl::Status small =
      tp::RowLinearForward(be, g, T2(out_s, n, OC), T2(inp_r, N, c), T2(w_r, OC, c), T1(b));
  if (small.ok() || std::string(small.message()).find("partial buffer") == std::string::npos) {
    std::printf("FAIL rank %d: a short partial buffer was not refused: %s\n", static_cast<int>(r),
                std::string(small.message()).c_str());
    ++failures;
  }
}

void VocabParallel(CpuBackend& be, Communicator& tp) {
  const int64_t B = 2, T = 5, N = B * T, C = 8, Vp = 256, V = 250, P = tp.size(), r = tp.rank();
  const int64_t vs = Vp / P;
  std::vector<int32_t> tokens(N), targets(N);
  PhiloxStream rng(3, 0);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>(rng.NextU32() % V);
    targets[i] = static_cast<int32_t>(rng.NextU32() % V);
  }
  std::vector<int32_t> positions(N);
  for (int64_t i = 0; i < N; ++i) positions[i] = static_cast<int32_t>(i % T);
  Tensor tok = Tensor::I32(tokens.data(), {B, T}, Device::kCpu),
         tgt = Tensor::I32(targets.data(), {N}, Device::kCpu),
         pos = Tensor::I32(positions.data(), {B, T}, Device::kCpu);
  Vec wte = Random(Vp * C, 5), wpe = Random(T * C, 6);
  Vec emb(N * C), emb_p(N * C), wte_p = Rows(wte, C, r * vs, vs);
  Check(be.EmbeddingForward(Tensor::F32(emb.data(), {B, T, C}, Device::kCpu), tok, pos,
                            T2(wte, Vp, C), T2(wpe, T, C), 0));
  Check(tp::VocabEmbeddingForward(be, &tp, Tensor::F32(emb_p.data(), {B, T, C}, Device::kCpu), tok,
                                  pos, T2(wte_p, vs, C), T2(wpe, T, C), r * vs));
  Expect("vocabulary-parallel embedding", emb_p, emb, r);

  Vec logits = Random(N * Vp, 7), losses(N), mx(N), se(N), tl(N), lse(N);
  Check(tp::VocabCrossEntropyForward(be, nullptr, T1(losses), {T1(mx), T1(se), T1(tl), T1(lse)},
                                     T2(logits, N, Vp), tgt, 0, V));
  Vec dlogits(N * Vp);
  Check(be.CrossEntropyBackward(T2(dlogits, N, Vp), T2(logits, N, Vp), tgt, T1(lse), 0, V, 0.1f));
  Vec logits_p = Columns(logits, N, Vp, r * vs, vs), losses_p(N), mx_p(N), se_p(N), tl_p(N),
      lse_p(N), dlogits_p(N * vs);
  Check(tp::VocabCrossEntropyForward(be, &tp, T1(losses_p),
                                     {T1(mx_p), T1(se_p), T1(tl_p), T1(lse_p)}, T2(logits_p, N, vs),
                                     tgt, r * vs, V));
  Check(be.CrossEntropyBackward(T2(dlogits_p, N, vs), T2(logits_p, N, vs), tgt, T1(lse_p), r * vs,
                                V, 0.1f));
  Expect("vocabulary-parallel cross-entropy loss", losses_p, losses, r);
  Expect("vocabulary-parallel logit gradient", dlogits_p, Columns(dlogits, N, Vp, r * vs, vs), r);
}

}  // namespace
}  // namespace ladder

int main(int argc, char** argv) {
  using namespace ladder;
  if (!MpiRuntime::Init(&argc, &argv).ok()) return 1;
  {
    std::vector<int> all(MpiRuntime::world_size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    auto tp = CreateMpiCommunicator(Axis::kTensor, all, 60);
    if (!tp.ok()) {
      std::printf("FAIL: %s\n", std::string(tp.status().message()).c_str());
      return 1;
    }
    CpuBackend be;
    ColumnAndRowLinear(be, **tp);
    SequenceParallel(be, **tp);
    VocabParallel(be, **tp);
  }
  const int rank = MpiRuntime::world_rank();
  MpiRuntime::Finalize();
  if (rank == 0 && failures == 0)
    std::printf("tensor-parallel layers equal their unsplit versions\n");
  return failures == 0 ? 0 : 1;
}
