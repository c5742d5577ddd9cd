#include "src/parallel/tensor_parallel/layers.h"

#include "absl/strings/str_cat.h"
#include "src/core/status.h"

namespace ladder::tp {
namespace {

absl::Status AllReduce(Communicator* tp, Tensor x, ReduceOp op) {
  if (tp == nullptr || tp->size() == 1) return absl::OkStatus();
  return tp->AllReduce(x, op);
}

bool AddsBias(const Communicator* tp) { return tp == nullptr || tp->rank() == 0; }

// The first rows x cols values of `buffer`, as a [rows, cols] tensor.
absl::StatusOr<Tensor> Rows(const char* what, const Tensor& buffer, int64_t rows, int64_t cols) {
  if (buffer.numel() < rows * cols) {
    return absl::InvalidArgumentError(absl::StrCat("sequence parallelism: the ", what, " buffer (",
                                                   buffer.numel(), " values) is smaller than ",
                                                   rows, " x ", cols));
  }
  return buffer.Slice(0, {rows, cols});
}

// out (this rank's rows) = the group's sum of `whole`'s rows, when the
// sequence is split; otherwise `whole` is out and is all-reduced in place.
absl::Status ScatterSum(const Group& g, Tensor whole, Tensor out) {
  if (!g.splits_sequence()) return AllReduce(g.comm, out, ReduceOp::kSum);
  return g.comm->ReduceScatter(whole, out);
}

// Where a layer writes an output that ScatterSum then reduces: g.partial's
// first size() x out rows when the sequence is split, else out itself.
absl::StatusOr<Tensor> SumTarget(const Group& g, const Tensor& out) {
  if (!g.splits_sequence()) return out;
  const int64_t cols = out.dim(-1);
  return Rows("partial", g.partial, out.numel() / cols * g.size(), cols);
}

}  // namespace

absl::StatusOr<Tensor> EnterColumn(const Group& g, Tensor x) {
  if (!g.splits_sequence()) return x;
  const int64_t cols = x.dim(-1);
  ASSIGN_OR_RETURN(Tensor whole, Rows("whole", g.whole, x.numel() / cols * g.size(), cols));
  RETURN_IF_ERROR(g.comm->AllGather(x, whole));
  return whole;
}

absl::Status ColumnLinearForward(Backend& be, Tensor out, Tensor inp, Tensor w, Tensor b) {
  return be.MatmulForward(out, inp, w, b);
}

absl::Status ColumnLinearGeluForward(Backend& be, Tensor out, Tensor pre, Tensor inp, Tensor w,
                                     Tensor b) {
  return be.MatmulGeluForward(out, pre, inp, w, b);
}

absl::Status ColumnLinearBackward(Backend& be, const Group& g, Tensor dinp, Tensor dw, Tensor db,
                                  Tensor dout, Tensor inp, Tensor w) {
  ASSIGN_OR_RETURN(Tensor sum, SumTarget(g, dinp));
  RETURN_IF_ERROR(be.MatmulBackward(sum, dw, db, dout, inp, w));
  return ScatterSum(g, sum, dinp);
}

absl::Status RowLinearForward(Backend& be, const Group& g, Tensor out, Tensor inp, Tensor w,
                              Tensor b) {
  ASSIGN_OR_RETURN(Tensor sum, SumTarget(g, out));
  RETURN_IF_ERROR(be.MatmulForward(sum, inp, w, AddsBias(g.comm) ? b : Tensor()));
  return ScatterSum(g, sum, out);
}

absl::Status RowLinearBackward(Backend& be, Tensor dinp, Tensor dw, Tensor db, Tensor dout,
                               Tensor inp, Tensor w) {
  return be.MatmulBackward(dinp, dw, db, dout, inp, w);
}

absl::Status RowLinearGeluBackward(Backend& be, Tensor dpre, Tensor dw, Tensor db, Tensor dout,
                                   Tensor inp, Tensor w, Tensor pre) {
  return be.MatmulGeluBackward(dpre, dw, db, dout, inp, w, pre);
}

absl::Status VocabEmbeddingForward(Backend& be, const Group& g, Tensor out, Tensor tokens,
                                   Tensor positions, Tensor wte, Tensor wpe, int64_t vocab_start) {
  ASSIGN_OR_RETURN(Tensor sum, SumTarget(g, out));
  RETURN_IF_ERROR(be.EmbeddingForward(sum, tokens, positions, wte,
                                      AddsBias(g.comm) ? wpe : Tensor(), vocab_start));
  return ScatterSum(g, sum, out);
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
