#include "src/parallel/pipeline_parallel/schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/core/trace.h"

namespace ladder::pp {

absl::StatusOr<Schedule> ParseSchedule(std::string_view name) {
  if (name == "gpipe") return Schedule::kGPipe;
  if (name == "1f1b") return Schedule::k1F1B;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown pipeline schedule '", std::string(name), "' (gpipe or 1f1b)"));
}

const char* ScheduleName(Schedule s) { return s == Schedule::kGPipe ? "gpipe" : "1f1b"; }

std::vector<Op> StageOps(Schedule s, int stages, int stage, int microbatches) {
  const int M = microbatches;
  std::vector<Op> ops;
  if (s == Schedule::kGPipe) {
    for (int m = 0; m < M; ++m) ops.push_back({true, m});
    for (int m = 0; m < M; ++m) ops.push_back({false, m});
    return ops;
  }
  const int warmup = std::min(stages - stage - 1, M);
  for (int m = 0; m < warmup; ++m) ops.push_back({true, m});
  for (int i = 0; i + warmup < M; ++i) {
    ops.push_back({true, i + warmup});
    ops.push_back({false, i});
  }
  for (int m = std::max(0, M - warmup); m < M; ++m) ops.push_back({false, m});
  return ops;
}

std::vector<Op> ForwardOps(int microbatches) {
  std::vector<Op> ops;
  for (int m = 0; m < microbatches; ++m) ops.push_back({true, m});
  return ops;
}

int ActivationSlots(Schedule s, int stages, int stage, int microbatches) {
  if (s == Schedule::kGPipe) return microbatches;
  return std::max(1, std::min(microbatches, stages - stage));
}

double TextbookBubble(int stages, int microbatches) {
  return static_cast<double>(stages - 1) / (microbatches + stages - 1);
}

absl::Status RunStage(const std::vector<Op>& ops, Communicator* group, const StageFunctions& f,
                      StageTiming* timing, bool overlap) {
  const int stage = group ? group->rank() : 0, stages = group ? group->size() : 1;
  const bool first = stage == 0, last = stage == stages - 1;
  const int prev = stage - 1, next = stage + 1;
  // The microbatch whose input / output gradient a combined SendRecv has
  // already received (-1: none).
  int input_ready = -1, grad_ready = -1;
  // One chain of clock readings: each pass starts where the stretch before
  // it ends, so passes and bubbles tile the wall time.
  const int64_t start = timing != nullptr && timing->begin_ns != 0 ? timing->begin_ns : NowNanos();
  int64_t mark = start;
  int64_t forward_ns = 0, backward_ns = 0;
  // Runs one pass (F or B of `micro`) from the mark on, and traces it and
  // the bubble before it.
  auto pass = [&](bool forward, int micro) -> absl::Status {
    const int64_t begin = stages > 1 ? NowNanos() : mark;
    if (stages > 1) TraceInterval(TraceTrack::kStep, "bubble", "bubble", mark, begin);
    RETURN_IF_ERROR(forward ? f.forward(micro) : f.backward(micro));
    mark = NowNanos();
    (forward ? forward_ns : backward_ns) += mark - begin;
    const char* name = forward ? "forward" : "backward";
    if (TraceEvent* e = TraceInterval(TraceTrack::kStep, name, name, begin, mark)) {
      e->AddArg("microbatch", micro);
    }
    return absl::OkStatus();
  };
  // With overlap: the transfers in flight, at most one per hand-over
  // buffer. A send must complete before its buffer is written again (the
  // next pass of its kind); the output gradient's receive is posted as soon
  // as its buffer is free, one backward ahead, so it arrives while the
  // passes before that backward run.
  overlap = overlap && stages > 1;
  std::unique_ptr<PendingOp> output_send, grad_send, grad_recv;
  auto finish = [](std::unique_ptr<PendingOp>& op) -> absl::Status {
    if (op == nullptr) return absl::OkStatus();
    const absl::Status s = op->Wait();
    op.reset();
    return s;
  };
  // Posts the receive for the first backward at or after ops[from].
  auto post_grad_recv = [&](size_t from) -> absl::Status {
    if (!overlap || last || grad_recv != nullptr) return absl::OkStatus();
    for (size_t j = from; j < ops.size(); ++j) {
      if (ops[j].forward) continue;
      ASSIGN_OR_RETURN(grad_recv, group->StartRecv(f.output_grad(), next));
      break;
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(post_grad_recv(0));
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    const Op* following = i + 1 < ops.size() ? &ops[i + 1] : nullptr;
    if (op.forward) {
      if (!first && input_ready != op.microbatch) {
        RETURN_IF_ERROR(group->Recv(f.input(op.microbatch), prev));
      }
      RETURN_IF_ERROR(finish(output_send));
      RETURN_IF_ERROR(pass(true, op.microbatch));
      if (last) continue;
      if (overlap) {
        ASSIGN_OR_RETURN(output_send, group->StartSend(f.output(), next));
      } else if (following != nullptr && !following->forward) {
        RETURN_IF_ERROR(group->SendRecv(f.output(), next, f.output_grad(), next));
        grad_ready = following->microbatch;
      } else {
        RETURN_IF_ERROR(group->Send(f.output(), next));
      }
    } else {
      if (grad_recv != nullptr) {
        RETURN_IF_ERROR(finish(grad_recv));  // posted for this backward
      } else if (!last && grad_ready != op.microbatch) {
        RETURN_IF_ERROR(group->Recv(f.output_grad(), next));
      }
      RETURN_IF_ERROR(finish(grad_send));
      RETURN_IF_ERROR(pass(false, op.microbatch));
      RETURN_IF_ERROR(post_grad_recv(i + 1));
      if (first) continue;
      if (overlap) {
        ASSIGN_OR_RETURN(grad_send, group->StartSend(f.input_grad(), prev));
      } else if (following != nullptr && following->forward) {
        RETURN_IF_ERROR(
            group->SendRecv(f.input_grad(), prev, f.input(following->microbatch), prev));
        input_ready = following->microbatch;
      } else {
        RETURN_IF_ERROR(group->Send(f.input_grad(), prev));
      }
    }
  }
  RETURN_IF_ERROR(finish(output_send));
  RETURN_IF_ERROR(finish(grad_send));
  const int64_t end = stages > 1 ? NowNanos() : mark;
  if (stages > 1) TraceInterval(TraceTrack::kStep, "bubble", "bubble", mark, end);
  if (timing != nullptr) {
    timing->wall_seconds = static_cast<double>(end - start) * 1e-9;
    timing->forward_seconds = static_cast<double>(forward_ns) * 1e-9;
    timing->backward_seconds = static_cast<double>(backward_ns) * 1e-9;
    // From the summed nanoseconds, as the wall time is: the two parts
    // converted and added could round past a wall time they tile exactly.
    timing->compute_seconds = static_cast<double>(forward_ns + backward_ns) * 1e-9;
    timing->begin_ns = start;
    timing->end_ns = end;
  }
  return absl::OkStatus();
}

}  // namespace ladder::pp
