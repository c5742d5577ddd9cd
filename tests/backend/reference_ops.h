// Double-precision reference forwards of the backend ops, written for
// clarity, not speed. Tests compare the CPU (fp32) ops against these and take
// central differences of them to check every analytical backward.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
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

// Causal multi-head attention. qkv [B,T,3C] (q, k, v of all heads per
// token), out [B,T,C], lse [B,NH,T] (log-sum-exp of each row's scaled scores).
inline void CausalAttention(const Vec& qkv, int B, int T, int NH, int HS, Vec* out, Vec* lse) {
  const int64_t C = int64_t{NH} * HS, C3 = 3 * C;
  out->assign(int64_t{B} * T * C, 0.0);
  lse->assign(int64_t{B} * NH * T, 0.0);
  Vec w(T);
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        const double* q = &qkv[(b * T + i) * C3 + h * HS];
        double mx = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          const double* k = &qkv[(b * T + j) * C3 + C + h * HS];
          double dot = 0;
          for (int64_t c = 0; c < HS; ++c) dot += q[c] * k[c];
          w[j] = dot * scale;
          mx = std::max(mx, w[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (w[j] = std::exp(w[j] - mx));
        (*lse)[(b * NH + h) * T + i] = mx + std::log(sum);
        double* o = &(*out)[(b * T + i) * C + h * HS];
        for (int64_t j = 0; j <= i; ++j) {
          const double* v = &qkv[(b * T + j) * C3 + 2 * C + h * HS];
          for (int64_t c = 0; c < HS; ++c) o[c] += w[j] / sum * v[c];
        }
      }
    }
  }
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
