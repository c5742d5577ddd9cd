// The small GPT the model and serving tests share: 2 layers, 2 heads,
// width 32, `context` positions, a 256-token vocabulary (unless told
// otherwise). Fast on every backend, the simulator included.
#pragma once

#include "src/model/gpt_config.h"

namespace ladder {

inline GptConfig SmallGpt(int context, int vocab_size = 256) {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.context = context;
  c.vocab_size = vocab_size;
  return c;
}

}  // namespace ladder
