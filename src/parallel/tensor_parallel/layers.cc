#include "src/parallel/tensor_parallel/layers.h"

#include "src/core/status.h"

namespace ladder::tp {
namespace {

absl::Status AllReduce(Communicator* tp, Tensor x, ReduceOp op) {
  if (tp == nullptr || tp->size() == 1) return absl::OkStatus();
  return tp->AllReduce(x, op);
}

bool AddsBias(const Communicator* tp) { return tp == nullptr || tp->rank() == 0; }

}  // namespace

absl::Status ColumnLinearForward(Backend& be, Tensor out, Tensor inp, Tensor w, Tensor b) {
  return be.MatmulForward(out, inp, w, b);
}

absl::Status ColumnLinearGeluForward(Backend& be, Tensor out, Tensor pre, Tensor inp, Tensor w,
                                     Tensor b) {
  return be.MatmulGeluForward(out, pre, inp, w, b);
}

absl::Status ColumnLinearBackward(Backend& be, Communicator* tp, Tensor dinp, Tensor dw, Tensor db,
                                  Tensor dout, Tensor inp, Tensor w) {
  RETURN_IF_ERROR(be.MatmulBackward(dinp, dw, db, dout, inp, w));
  return AllReduce(tp, dinp, ReduceOp::kSum);
}

absl::Status RowLinearForward(Backend& be, Communicator* tp, Tensor out, Tensor inp, Tensor w,
                              Tensor b) {
  RETURN_IF_ERROR(be.MatmulForward(out, inp, w, AddsBias(tp) ? b : Tensor()));
  return AllReduce(tp, out, ReduceOp::kSum);
}

absl::Status RowLinearBackward(Backend& be, Tensor dinp, Tensor dw, Tensor db, Tensor dout,
                               Tensor inp, Tensor w) {
  return be.MatmulBackward(dinp, dw, db, dout, inp, w);
}

absl::Status VocabEmbeddingForward(Backend& be, Communicator* tp, Tensor out, Tensor tokens,
                                   Tensor positions, Tensor wte, Tensor wpe, int64_t vocab_start) {
  RETURN_IF_ERROR(
      be.EmbeddingForward(out, tokens, positions, wte, AddsBias(tp) ? wpe : Tensor(), vocab_start));
  return AllReduce(tp, out, ReduceOp::kSum);
}

absl::Status VocabCrossEntropyForward(Backend& be, Communicator* tp, Tensor losses,
                                      const CrossEntropyStats& s, Tensor logits, Tensor targets,
                                      int64_t vocab_start, int vocab_size) {
  // 1. The global row max, so every shard's exps share one reference point.
  RETURN_IF_ERROR(be.CrossEntropyRowMax(s.row_max, logits, vocab_start, vocab_size));
  RETURN_IF_ERROR(AllReduce(tp, s.row_max, ReduceOp::kMax));
  // 2. Sums of exps and the target's logit (held by exactly one shard).
  RETURN_IF_ERROR(be.CrossEntropyPartials(s.sum_exp, s.target_logit, logits, targets, s.row_max,
                                          vocab_start, vocab_size));
  RETURN_IF_ERROR(AllReduce(tp, s.sum_exp, ReduceOp::kSum));
  RETURN_IF_ERROR(AllReduce(tp, s.target_logit, ReduceOp::kSum));
  // 3. loss = log-sum-exp - target logit, the same on every rank.
  return be.CrossEntropyLoss(losses, s.lse, s.row_max, s.sum_exp, s.target_logit);
}

}  // namespace ladder::tp
