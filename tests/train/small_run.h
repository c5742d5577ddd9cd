// What the training tests train: a two-layer model small enough for
// milliseconds per step, and a random token stream.
#pragma once

#include <cstdint>
#include <vector>

#include "src/core/philox.h"
#include "src/train/run_config.h"

namespace ladder {

inline RunConfig SmallRun() {
  RunConfig rc;
  rc.model.n_layer = 2;
  rc.model.n_head = 2;
  rc.model.n_embd = 32;
  rc.model.context = 16;
  rc.model.vocab_size = 256;
  rc.batch_size = 4;
  rc.steps = 6;
  rc.lr = 3e-3;
  rc.warmup_steps = 2;
  rc.eval_batches = 2;
  return rc;
}

// `n` tokens drawn uniformly from 0..255 by Philox stream `seed`.
inline std::vector<int32_t> RandomTokens(int n, uint64_t seed) {
  PhiloxStream rng(seed, 0);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng.NextU32() % 256);
  return t;
}

}  // namespace ladder
