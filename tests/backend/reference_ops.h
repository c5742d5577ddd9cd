// Double-precision reference forwards of the backend ops, written for
// clarity, not speed. Tests compare the CPU (fp32) ops against these and take
// central differences of them to check every analytical backward.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <numbers>
#include <vector>

namespace ladder::ref {

using Vec = std::vector<double>;

inline Vec ToDouble(const std::vector<float>& x) { return Vec(x.begin(), x.end()); }

inline double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// A vocabulary shard's embedding: wte [rows, C] holds the logical rows
// [vocab_start, vocab_start + rows);  out [B*T, C] with
// out[b,t,:] = (token in the shard ? wte[token - vocab_start,:] : 0) + (wpe empty ? 0 : wpe[t,:]).
// out[n,:] = (tokens[n] in the shard ? wte[tokens[n] - vocab_start,:] : 0)
//          + (wpe empty ? 0 : wpe[positions[n],:]).
inline Vec Embedding(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                     int C, const Vec& wte, const Vec& wpe, int64_t vocab_start = 0) {
  const int64_t rows = static_cast<int64_t>(wte.size()) / C;
  Vec out(tokens.size() * C, 0.0);
  for (size_t n = 0; n < tokens.size(); ++n) {
    const int64_t r = tokens[n] - vocab_start;
    for (int c = 0; c < C; ++c) {
      if (r >= 0 && r < rows) out[n * C + c] += wte[r * C + c];
      if (!wpe.empty()) out[n * C + c] += wpe[positions[n] * C + c];
    }
  }
  return out;
}

// Positions 0..T-1 in each of B sequences: the training batch's layout.
inline std::vector<int32_t> SequencePositions(int B, int T) {
  std::vector<int32_t> p(static_cast<size_t>(B) * T);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(i % T);
  return p;
}

struct LayerNormOut {
  Vec residual_out;  // empty when there was no branch
  Vec y, mean, rstd;
};

// residual_out = in + branch (if branch); y = LayerNorm(residual_out or in).
inline LayerNormOut ResidualLayerNorm(const Vec& in, const Vec* branch, const Vec& gamma,
                                      const Vec& beta, int N, int C) {
  LayerNormOut o;
  Vec x = in;
  if (branch != nullptr) {
    for (size_t i = 0; i < x.size(); ++i) x[i] += (*branch)[i];
    o.residual_out = x;
  }
  o.y.resize(x.size());
  o.mean.resize(N);
  o.rstd.resize(N);
  for (int n = 0; n < N; ++n) {
    const double* r = &x[n * C];
    double m = 0;
    for (int c = 0; c < C; ++c) m += r[c];
    m /= C;
    double v = 0;
    for (int c = 0; c < C; ++c) v += (r[c] - m) * (r[c] - m);
    v /= C;
    const double s = 1.0 / std::sqrt(v + 1e-5);
    for (int c = 0; c < C; ++c) o.y[n * C + c] = (r[c] - m) * s * gamma[c] + beta[c];
    o.mean[n] = m;
    o.rstd[n] = s;
  }
  return o;
}

// out [N,OC] = inp [N,C] @ w[OC,C]^T + bias (bias may be null).
inline Vec Matmul(const Vec& inp, const Vec& w, const Vec* bias, int N, int C, int OC) {
  Vec out(static_cast<size_t>(N) * OC);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double s = bias != nullptr ? (*bias)[o] : 0.0;
      for (int c = 0; c < C; ++c) s += inp[n * C + c] * w[o * C + c];
      out[n * OC + o] = s;
    }
  }
  return out;
}

// GPT-2's tanh-approximated GELU.
inline double Gelu(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
inline Vec Gelu(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = Gelu(x[i]);
  return y;
}

// lse[n] = logsumexp(logits[n,:V]); logits [N,Vp], columns >= V ignored.
inline Vec LogSumExp(const Vec& logits, int N, int Vp, int V) {
  Vec lse(N);
  for (int n = 0; n < N; ++n) {
    const double* x = &logits[static_cast<size_t>(n) * Vp];
    double m = x[0];
    for (int i = 1; i < V; ++i) m = std::max(m, x[i]);
    double s = 0;
    for (int i = 0; i < V; ++i) s += std::exp(x[i] - m);
    lse[n] = m + std::log(s);
  }
  return lse;
}

// losses[n] = logsumexp(logits[n,:V]) - logits[n,targets[n]]; logits [N,Vp].
inline Vec CrossEntropy(const Vec& logits, const std::vector<int32_t>& targets, int N, int Vp,
                        int V) {
  Vec loss = LogSumExp(logits, N, Vp, V);
  for (int n = 0; n < N; ++n) loss[n] -= logits[static_cast<size_t>(n) * Vp + targets[n]];
  return loss;
}

// Attention by positions (Backend::AttentionPartForward with merge false):
// the queries of q_qkv [B,Tq,3C] over the keys and values of kv_qkv
// [B,Tk,3C] (q, k, v of all heads per token), where query i sees key j iff
// k_pos[j] <= q_pos[i] (Tq = q_pos.size(), Tk = k_pos.size()). out [B,Tq,C],
// lse [B,NH,Tq] (log-sum-exp of each row's allowed scaled scores); a query
// that sees no key gets out 0 and lse -inf.
inline void AttentionByPositions(const Vec& q_qkv, const Vec& kv_qkv,
                                 const std::vector<int32_t>& q_pos,
                                 const std::vector<int32_t>& k_pos, int B, int NH, int HS, Vec* out,
                                 Vec* lse) {
  const int64_t Tq = std::ssize(q_pos), Tk = std::ssize(k_pos), C = int64_t{NH} * HS, C3 = 3 * C;
  out->assign(B * Tq * C, 0.0);
  lse->assign(B * NH * Tq, -std::numeric_limits<double>::infinity());
  Vec w(Tk);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t i = 0; i < Tq; ++i) {
        const double* q = &q_qkv[(b * Tq + i) * C3 + h * HS];
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Tk; ++j) {
          if (k_pos[j] > q_pos[i]) continue;
          const double* k = &kv_qkv[(b * Tk + j) * C3 + C + h * HS];
          double dot = 0;
          for (int64_t c = 0; c < HS; ++c) dot += q[c] * k[c];
          w[j] = dot * scale;
          mx = std::max(mx, w[j]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // no key: 0 and -inf
        double sum = 0;
        for (int64_t j = 0; j < Tk; ++j) {
          if (k_pos[j] <= q_pos[i]) sum += (w[j] = std::exp(w[j] - mx));
        }
        (*lse)[(b * NH + h) * Tq + i] = mx + std::log(sum);
        double* o = &(*out)[(b * Tq + i) * C + h * HS];
        for (int64_t j = 0; j < Tk; ++j) {
          if (k_pos[j] > q_pos[i]) continue;
          const double* v = &kv_qkv[(b * Tk + j) * C3 + 2 * C + h * HS];
          for (int64_t c = 0; c < HS; ++c) o[c] += w[j] / sum * v[c];
        }
      }
    }
  }
}

// Its backward (Backend::AttentionPartBackward) from dout [B,Tq,C] and the
// out and lse it is given: with P = exp(scale q k^T - lse) on the allowed
// pairs and D_i = dout_i . out_i, the q part of dq_qkv [B,Tq,3C] gets
// scale * (P * (dout v^T - D)) k and the k, v parts of dkv_qkv [B,Tk,3C]
// get its transposed products; every other element is 0.
inline void AttentionByPositionsBackward(const Vec& q_qkv, const Vec& kv_qkv,
                                         const std::vector<int32_t>& q_pos,
                                         const std::vector<int32_t>& k_pos, const Vec& out,
                                         const Vec& lse, const Vec& dout, int B, int NH, int HS,
                                         Vec* dq_qkv, Vec* dkv_qkv) {
  const int64_t Tq = std::ssize(q_pos), Tk = std::ssize(k_pos), C = int64_t{NH} * HS, C3 = 3 * C;
  dq_qkv->assign(B * Tq * C3, 0.0);
  dkv_qkv->assign(B * Tk * C3, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t i = 0; i < Tq; ++i) {
        const double* q = &q_qkv[(b * Tq + i) * C3 + h * HS];
        const double* go = &dout[(b * Tq + i) * C + h * HS];
        const double* o = &out[(b * Tq + i) * C + h * HS];
        double* dq = &(*dq_qkv)[(b * Tq + i) * C3 + h * HS];
        double D = 0;
        for (int64_t c = 0; c < HS; ++c) D += go[c] * o[c];
        for (int64_t j = 0; j < Tk; ++j) {
          if (k_pos[j] > q_pos[i]) continue;
          const double* k = &kv_qkv[(b * Tk + j) * C3 + C + h * HS];
          const double* v = k + C;
          double* dk = &(*dkv_qkv)[(b * Tk + j) * C3 + C + h * HS];
          double* dv = dk + C;
          double s = 0, dp = 0;
          for (int64_t c = 0; c < HS; ++c) s += q[c] * k[c], dp += go[c] * v[c];
          const double p = std::exp(s * scale - lse[(b * NH + h) * Tq + i]);
          const double ds = p * (dp - D) * scale;
          for (int64_t c = 0; c < HS; ++c) {
            dq[c] += ds * k[c];
            dk[c] += ds * q[c];
            dv[c] += p * go[c];
          }
        }
      }
    }
  }
}

// Causal multi-head attention: attention by positions 0..T-1 of qkv over
// itself. qkv [B,T,3C], out [B,T,C], lse [B,NH,T].
inline void CausalAttention(const Vec& qkv, int B, int T, int NH, int HS, Vec* out, Vec* lse) {
  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = t;
  AttentionByPositions(qkv, qkv, pos, pos, B, NH, HS, out, lse);
}

inline double SumOfSquares(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return s;
}

// One AdamW step on one element, all in double.
struct AdamWElem {
  double param, m, v;
};
inline AdamWElem AdamW(AdamWElem e, double grad, double lr, double beta1, double beta2, double eps,
                       double wd, double grad_scale, int step) {
  const double g = grad * grad_scale;
  e.m = beta1 * e.m + (1 - beta1) * g;
  e.v = beta2 * e.v + (1 - beta2) * g * g;
  const double mhat = e.m / (1 - std::pow(beta1, step));
  const double vhat = e.v / (1 - std::pow(beta2, step));
  e.param -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * e.param);
  return e;
}

}  // namespace ladder::ref
