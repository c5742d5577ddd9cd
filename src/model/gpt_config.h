// GptConfig: the shape of a GPT-2 style model. Everything else (parameter
// table, activation arena, FLOP counts) is derived from it.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "src/backend/backend.h"
#include "src/core/config.h"

namespace ladder {

struct GptConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int context = 64;      // maximum sequence length (rows of wpe)
  int vocab_size = 256;  // real vocabulary (the tokenizer's)
  AttentionKind attention = AttentionKind::kFlash;

  // The embedding/head is padded to a multiple of 128 rows so the head GEMM
  // has friendly shapes; padded rows stay zero and padded logits are ignored.
  int padded_vocab() const { return (vocab_size + 127) / 128 * 128; }
  int head_size() const { return n_embd / n_head; }

  // Bounds far past any model a machine can hold, which keep every size
  // computed from the shape inside its integer type.
  // (With these, NumParameters cannot overflow its int64.)
  static constexpr int kMaxLayers = 1 << 16;
  static constexpr int kMaxEmbd = 1 << 20;
  static constexpr int kMaxVocab = 1 << 24;
  static constexpr double kMaxParameters = 1e13;

  // InvalidArgument naming the key for a non-positive size, n_embd not
  // divisible by n_head or above kMaxEmbd, vocab_size below 256 or above
  // kMaxVocab, n_layer above kMaxLayers, or more than kMaxParameters
  // parameters.
  absl::Status Validate() const;
  // Reads the model keys (n_layer, n_head, n_embd, context, vocab_size,
  // attention) from a config; absent keys keep their current values.
  absl::Status ReadFrom(const KeyValueConfig& cfg);
  // The same keys as config text, for saving beside the weights.
  std::string ToText() const;

  int64_t NumParameters() const;  // including the padded embedding rows
  // Training FLOPs per token (forward + backward): 6 * parameters (without
  // the position table, which is a lookup) plus attention's 12 * L * C * T
  // (PaLM's accounting: the full T x T square, as usually reported).
  double TrainingFlopsPerToken() const;
};

}  // namespace ladder
