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
//
// Sequence parallelism (Megatron-LM's, inside the tensor-parallel group):
// between the blocks (LayerNorms, the residual stream, the embedding's
// output) every rank holds only N/P of the N token rows, rank r rows
// [r N/P, (r+1) N/P). A block's input is all-gathered (EnterColumn) and its
// output reduce-scattered instead of all-reduced, so the forward moves the
// same bytes as with tensor parallelism alone (an all-reduce is a
// reduce-scatter plus an all-gather) while those activations shrink by P.
// In the backward the two swap (the residual gradient is all-gathered, the
// column layer's input gradient reduce-scattered), and the column layer's
// weight gradient needs its whole input again: the LayerNorm output is kept
// as a shard and gathered a second time, one all-gather more per block than
// tensor parallelism alone (Megatron does the same and hides it behind the
// backward's matmuls). LayerNorm weights see only their rank's rows, so
// their gradients are partial sums the trainer all-reduces once a step.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "src/backend/backend.h"
#include "src/parallel/comm.h"

namespace ladder::tp {

// The tensor-parallel group as the layers see it. Converts from a bare
// communicator (null or a group of one: no tensor parallelism).
struct Group {
  Group(Communicator* c = nullptr) : comm(c) {}  // NOLINT: implicit on purpose
  Communicator* comm = nullptr;
  // Sequence parallelism (size() > 1 only): the [N, C] buffers a block's
  // whole input is gathered into (`whole`) and a row-parallel output or
  // column-parallel input gradient is formed in before its reduce-scatter
  // (`partial`). Distinct, each at least N x C of the activations' dtype.
  bool sequence_parallel = false;
  Tensor whole, partial;
  int size() const { return comm == nullptr ? 1 : comm->size(); }
  bool splits_sequence() const { return sequence_parallel && size() > 1; }
};

// A column-parallel block's whole input: `x` itself, or with sequence
// parallelism the group's shards of it ([N/P, C] each) gathered in rank
// order into the first N rows of g.whole, which is returned.
absl::StatusOr<Tensor> EnterColumn(const Group& g, Tensor x);

// out [N, OC/P] = inp [N, C] @ w[OC/P, C]^T + b[OC/P] (b may be empty).
absl::Status ColumnLinearForward(Backend& be, Tensor out, Tensor inp, Tensor w, Tensor b);
// The same with the GELU fused (Backend::MatmulGeluForward): pre = the
// linear layer's output, out = gelu(pre), both [N, OC/P].
absl::Status ColumnLinearGeluForward(Backend& be, Tensor out, Tensor pre, Tensor inp, Tensor w,
                                     Tensor b);
// dw, db += this rank's slices; dinp [N, C] = all-reduce of dout @ w. With
// sequence parallelism `inp` is the whole input (EnterColumn) and dinp this
// rank's [N/P, C] rows of the sum, reduce-scattered from g.partial.
absl::Status ColumnLinearBackward(Backend& be, const Group& g, Tensor dinp, Tensor dw, Tensor db,
                                  Tensor dout, Tensor inp, Tensor w);

// out [N, OC] = all-reduce(inp [N, C/P] @ w[OC, C/P]^T) + b[OC] (b may be
// empty). With sequence parallelism out is this rank's [N/P, OC] rows of
// that, reduce-scattered from g.partial.
absl::Status RowLinearForward(Backend& be, const Group& g, Tensor out, Tensor inp, Tensor w,
                              Tensor b);
// dinp [N, C/P] = dout @ w; dw += dout^T @ inp; db += column sums of dout (the
// same on every rank: dout is whole everywhere; with sequence parallelism,
// gathered by EnterColumn first).
absl::Status RowLinearBackward(Backend& be, Tensor dinp, Tensor dw, Tensor db, Tensor dout,
                               Tensor inp, Tensor w);
// The same for a layer whose input is inp = gelu(pre) (the MLP's down
// projection), the GELU's backward fused (Backend::MatmulGeluBackward):
// dpre = (dout @ w) * gelu'(pre), the gradient of the GELU's input.
absl::Status RowLinearGeluBackward(Backend& be, Tensor dpre, Tensor dw, Tensor db, Tensor dout,
                                   Tensor inp, Tensor w, Tensor pre);

// out [N, C] = the embedding of `tokens` [N] from a vocabulary shard (rows
// [vocab_start, vocab_start + rows) of the logical wte) plus the rows of wpe
// at `positions` [N], summed over the group. Positions are added by group
// rank 0 only. With sequence parallelism out is this rank's [N/P, C] rows of
// the sum, reduce-scattered from g.partial.
absl::Status VocabEmbeddingForward(Backend& be, const Group& g, Tensor out, Tensor tokens,
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
