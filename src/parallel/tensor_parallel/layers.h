// Megatron's tensor-parallel layers: what one rank of a tensor-parallel group
// runs, the math being the backend's ops and the communication the group's
// all-reduces. Every member calls the same function with its own shard.
//
//   column-parallel linear   W [OC, C] split by output rows: each rank computes
//                            its slice of the output from the whole input. No
//                            communication forward; the input gradient is a
//                            sum over the ranks' slices, all-reduced backward.
//   row-parallel linear      W split by input columns: each rank multiplies its
//                            slice of the input; the partial outputs are
//                            all-reduced forward (bias added once), and the
//                            input gradient needs no communication.
//   vocabulary-parallel      the embedding and the tied head split the
//   embedding, cross-entropy (padded) vocabulary; lookups are summed, and the
//                            loss reduces three [N] statistics instead of
//                            gathering [N, V] logits.
//
// A column-parallel layer followed by a row-parallel one (QKV -> attention
// -> projection, MLP-up -> GELU -> MLP-down) costs one all-reduce forward and
// one backward. `tp` may be null or a group of one: then these are the plain
// single-device layers.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "src/backend/backend.h"
#include "src/parallel/comm.h"

namespace ladder::tp {

// out [N, OC/P] = inp [N, C] @ w[OC/P, C]^T + b[OC/P] (b may be empty).
absl::Status ColumnLinearForward(Backend& be, Tensor out, Tensor inp, Tensor w, Tensor b);
// The same with the GELU fused (Backend::MatmulGeluForward): pre = the
// linear layer's output, out = gelu(pre), both [N, OC/P].
absl::Status ColumnLinearGeluForward(Backend& be, Tensor out, Tensor pre, Tensor inp, Tensor w,
                                     Tensor b);
// dw, db += this rank's slices; dinp [N, C] = all-reduce of dout @ w.
absl::Status ColumnLinearBackward(Backend& be, Communicator* tp, Tensor dinp, Tensor dw, Tensor db,
                                  Tensor dout, Tensor inp, Tensor w);

// out [N, OC] = all-reduce(inp [N, C/P] @ w[OC, C/P]^T) + b[OC] (b may be empty).
absl::Status RowLinearForward(Backend& be, Communicator* tp, Tensor out, Tensor inp, Tensor w,
                              Tensor b);
// dinp [N, C/P] = dout @ w; dw += dout^T @ inp; db += column sums of dout (the
// same on every rank: dout is whole everywhere).
absl::Status RowLinearBackward(Backend& be, Tensor dinp, Tensor dw, Tensor db, Tensor dout,
                               Tensor inp, Tensor w);

// out [N, C] = the embedding of `tokens` [N] from a vocabulary shard (rows
// [vocab_start, vocab_start + rows) of the logical wte) plus the rows of wpe
// at `positions` [N], summed over the group. Positions are added by group
// rank 0 only.
absl::Status VocabEmbeddingForward(Backend& be, Communicator* tp, Tensor out, Tensor tokens,
                                   Tensor positions, Tensor wte, Tensor wpe, int64_t vocab_start);

// The [N] statistics the vocabulary-parallel cross-entropy keeps.
struct CrossEntropyStats {
  Tensor row_max, sum_exp, target_logit;
  Tensor lse;  // log-sum-exp over the whole vocabulary, saved for the backward
};
// losses [N] of the logits shard [N, Vp/P] (columns [vocab_start, ...) of the
// logical, padded vocabulary; the first vocab_size are real).
absl::Status VocabCrossEntropyForward(Backend& be, Communicator* tp, Tensor losses,
                                      const CrossEntropyStats& stats, Tensor logits, Tensor targets,
                                      int64_t vocab_start, int vocab_size);

}  // namespace ladder::tp
