// ladder bench matmul: the linear layers of a config's model in every weight
// format, from decoding (1 token) to prefill chunks (hundreds), each against
// the ceiling that bounds it, measured in the same run:
//   - up to kSmallBatch tokens a matmul reads each weight once for 2N FLOPs:
//     memory-bound. Ceiling: the read bandwidth (ReadBandwidthProbe over a
//     buffer as large as the weights); the rate is the weight bytes read per
//     second. The weights of every layer are used in turn, as in a decode
//     step, so no layer's weights are still in cache when it comes again.
//   - beyond, compute-bound. Ceiling: cblas_sgemm on the same shapes (fp32
//     weights); the rate is GFLOP/s. One layer's weights suffice.
// The four matrices of a transformer block are timed together (QKV, the
// attention projection, MLP up and down; the head is left out): what a
// block's linear layers cost per call, by format. Weights are random; the
// speed does not depend on them.
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/backend/backend_factory.h"
#include "src/backend/cpu/blas_kernels.h"
#include "src/backend/cpu/cpu_isa.h"
#include "src/backend/cpu/matmul_kernels.h"
#include "src/backend/quantize.h"
#include "src/cli/commands.h"
#include "src/core/bf16.h"
#include "src/core/flags.h"
#include "src/core/philox.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/tools/ceiling.h"
#include "src/train/run_config.h"

namespace ladder {
namespace {

struct Flags {
  std::string config = "configs/gpt2-124m.conf";
  std::string tokens = "1,4,16,64,256,512";
  int64_t reps = 5;
};

// One weight matrix [OC, C] in every format.
struct Matrix {
  int64_t OC, C;
  std::vector<float> f32, bias;
  std::vector<bf16> b16;
  std::vector<int8_t> q;
  std::vector<float> scales;
};

Matrix MakeMatrix(int64_t OC, int64_t C, PhiloxStream& rng) {
  Matrix m{OC, C, std::vector<float>(OC * C), std::vector<float>(OC), {}, {}, {}};
  for (float& v : m.f32) v = 0.02f * (rng.NextUniform() - 0.5f);
  for (float& v : m.bias) v = 0.01f * rng.NextUniform();
  m.b16.resize(OC * C);
  for (int64_t i = 0; i < OC * C; ++i) m.b16[i] = FloatToBf16(m.f32[i]);
  std::vector<int8_t> q(OC * C);
  std::vector<float> scales(OC * C / 32);
  QuantizeRows(m.f32.data(), OC, C, 32, q.data(), scales.data());
  m.q.resize(OC * C);
  m.scales.resize(OC * C / 32);
  PackInt8Panels(q.data(), scales.data(), OC, C, 32, m.q.data(), m.scales.data());
  return m;
}

enum class Path { kBlas, kF32, kBF16, kInt8 };
constexpr Path kPaths[] = {Path::kBlas, Path::kF32, Path::kBF16, Path::kInt8};
const char* PathName(Path p) {
  switch (p) {
    case Path::kBlas:
      return "sgemm";
    case Path::kF32:
      return "fp32";
    case Path::kBF16:
      return "bf16";
    case Path::kInt8:
      return "int8";
  }
  return "?";
}

// Bytes of one matrix's weights as `p` stores them.
int64_t WeightBytes(const Matrix& m, Path p) {
  switch (p) {
    case Path::kBlas:
    case Path::kF32:
      return m.OC * m.C * 4;
    case Path::kBF16:
      return m.OC * m.C * 2;
    case Path::kInt8:
      return m.OC * m.C + m.OC * m.C / 32 * 4;
  }
  return 0;
}

// The matrices and activations are host vectors: the CPU backend's tensors.
absl::Status Multiply(Backend& be, Path p, Matrix& m, std::vector<float>& x, std::vector<float>& y,
                      int64_t N) {
  constexpr Device kHost = Device::kCpu;
  Tensor in = Tensor::F32(x.data(), {N, m.C}, kHost), out = Tensor::F32(y.data(), {N, m.OC}, kHost);
  Tensor bias = Tensor::F32(m.bias.data(), {m.OC}, kHost);
  switch (p) {
    case Path::kBlas:
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N),
                  static_cast<int>(m.OC), static_cast<int>(m.C), 1.0f, x.data(),
                  static_cast<int>(m.C), m.f32.data(), static_cast<int>(m.C), 0.0f, y.data(),
                  static_cast<int>(m.OC));
      return absl::OkStatus();
    case Path::kF32:
      return be.MatmulForward(out, in, Tensor::F32(m.f32.data(), {m.OC, m.C}, kHost), bias);
    case Path::kBF16:
      return be.MatmulForward(out, in, Tensor::BF16(m.b16.data(), {m.OC, m.C}, kHost), bias);
    case Path::kInt8:
      return be.MatmulInt8Forward(out, in, Tensor::I8(m.q.data(), {m.OC, m.C}, kHost),
                                  Tensor::F32(m.scales.data(), {m.OC, m.C / 32}, kHost), bias);
  }
  return absl::OkStatus();
}

absl::Status Run(const Flags& f) {
  ASSIGN_OR_RETURN(RunConfig rc, LoadRunConfig(f.config));
  const int64_t C = rc.model.n_embd, L = rc.model.n_layer;
  if (C % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("n_embd must be a multiple of 32, got ", C));
  }
  std::vector<int64_t> counts;
  for (absl::string_view s : absl::StrSplit(f.tokens, ',')) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(s, &n) || n < 1 || n > 65536) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tokens must be a comma-separated list of counts in [1, 65536], got '", f.tokens, "'"));
    }
    counts.push_back(n);
  }
  if (f.reps < 1) return absl::InvalidArgumentError("--reps must be positive");

  // Every layer's four matrices, as a decode step reads them.
  PhiloxStream rng(rc.seed, kSyntheticDataStream);
  std::vector<std::vector<Matrix>> layers(L);
  for (auto& layer : layers) {
    const std::initializer_list<std::pair<int64_t, int64_t>> shapes = {
        {3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}};
    for (auto [oc, c] : shapes) {
      layer.push_back(MakeMatrix(oc, c, rng));
    }
  }
  int64_t params = 0;
  for (const Matrix& m : layers[0]) params += m.OC * m.C;
  const int64_t max_n = *std::max_element(counts.begin(), counts.end());
  std::vector<float> x(max_n * 4 * C), y(max_n * 4 * C);
  for (float& v : x) v = rng.NextUniform() - 0.5f;
  // This command times ladder's own CPU kernels against OpenBLAS and the
  // memory bandwidth: it always runs the CPU backend.
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend("cpu"));
  Backend& be = *backend;
  ReadBandwidthProbe probe(4 * params * L);  // as large as the fp32 weights

  std::printf("bench matmul: %s, a block's 4 linear layers (%.2fM weights), %lld layers\n",
              f.config.c_str(), params / 1e6, static_cast<long long>(L));
  std::printf("kernels: %s; ladder's own: %s\n", BlasSummary().c_str(), CpuIsaName(ActiveCpuIsa()));
  std::printf("%6s  %-6s %10s  %16s  %16s  %8s\n", "tokens", "path", "ms/block", "rate", "ceiling",
              "fraction");
  std::string json;
  for (int64_t N : counts) {
    const bool small = N <= cpu::kSmallBatch;
    double sgemm_gflops = 0;
    for (Path p : kPaths) {
      // Few tokens: all layers in turn, memory-bound. Many: one layer.
      const int64_t passes = small ? L : 1;
      auto pass = [&]() -> absl::Status {
        for (int64_t l = 0; l < passes; ++l) {
          for (Matrix& m : layers[l]) RETURN_IF_ERROR(Multiply(be, p, m, x, y, N));
        }
        return absl::OkStatus();
      };
      RETURN_IF_ERROR(pass());  // warm-up
      int64_t bytes = 0;
      for (const Matrix& m : layers[0]) bytes += WeightBytes(m, p);
      double seconds, rate, ceiling, fraction;
      const char* unit;
      if (small) {
        PairedBandwidth paired;
        RETURN_IF_ERROR(
            TimeAgainstBandwidth(probe, bytes * passes, static_cast<int>(f.reps), pass, &paired));
        seconds = paired.seconds / passes;
        rate = bytes / seconds / 1e9;
        ceiling = paired.bandwidth / 1e9;
        fraction = paired.fraction;
        unit = "GB/s";
      } else {
        absl::Status status;
        seconds = BestSeconds([&] { status.Update(pass()); }, static_cast<int>(f.reps), false);
        RETURN_IF_ERROR(status);
        rate = 2.0 * N * params / seconds / 1e9;
        if (p == Path::kBlas) sgemm_gflops = rate;
        ceiling = sgemm_gflops;
        fraction = rate / ceiling;
        unit = "GFLOP/s";
      }
      std::printf("%6lld  %-6s %10.3f  %8.1f %-7s  %8.1f %-7s  %8.2f\n", static_cast<long long>(N),
                  PathName(p), 1e3 * seconds, rate, unit, ceiling, unit, fraction);
      absl::StrAppend(&json, json.empty() ? "" : ",", "{\"tokens\":", N, ",\"path\":\"",
                      PathName(p), "\",\"ms\":", 1e3 * seconds, ",\"fraction\":", fraction, "}");
    }
  }
  std::printf("[%s]\n", json.c_str());
  return absl::OkStatus();
}

}  // namespace

int BenchMatmulCommand(int argc, char** argv) {
  Flags f;
  FlagSet flags("ladder bench matmul",
                "A transformer block's linear layers in fp32, bf16 and int8, from decoding to "
                "prefill: bytes/s against the read bandwidth for up to 16 tokens, GFLOP/s against "
                "cblas_sgemm of the same shapes beyond. The last line is JSON.");
  flags.String("config", &f.config, "model config whose shapes to time");
  flags.String("tokens", &f.tokens, "comma-separated token counts per call");
  flags.Int("reps", &f.reps,
            "timed repetitions: the median against the bandwidth read around each (up to 16 "
            "tokens), the best (beyond)");
  return RunCommand(flags, argc, argv, [&] { return Run(f); });
}

}  // namespace ladder
