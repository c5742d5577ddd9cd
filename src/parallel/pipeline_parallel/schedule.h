// Pipeline schedules: the order in which one stage runs the forward (F) and
// backward (B) passes of M microbatches, and the executor that runs that
// order, moving activations forward and gradients back between neighbouring
// stages over the pipeline group. The math of a pass is the caller's
// (src/model/gpt.h); this module only orders and moves.
//
//   GPipe  F0 F1 ... F(M-1), then B0 B1 ... B(M-1). A stage keeps all M
//          microbatches' activations until their backward.
//   1F1B   (PipeDream-flush, Megatron's default) stage s of P runs
//          W = min(P-s-1, M) warm-up forwards, then alternates one forward
//          and one backward, then drains the remaining backwards. At most
//          P-s microbatches are in flight, so it keeps min(M, P-s) of them.
//
// Both leave every stage idle for the same share of the step when a pass
// takes the same time on every stage: the bubble, (P-1)/(M+P-1). 1F1B buys
// memory, not time. Backwards run in microbatch order in both schedules, so
// the gradients accumulate in the order a single process adds them.
//
// Deadlock freedom: a forward followed by a backward sends its activation
// and receives the next gradient in one SendRecv (and a backward followed by
// a forward sends its gradient and receives the next activation), the pairing
// Megatron uses. With two blocking sends facing each other, neighbouring
// 1F1B stages would each wait for the other to receive.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "src/core/tensor.h"
#include "src/parallel/comm.h"

namespace ladder::pp {

enum class Schedule { kGPipe, k1F1B };

// "gpipe" or "1f1b"; anything else is InvalidArgument naming it.
absl::StatusOr<Schedule> ParseSchedule(std::string_view name);
const char* ScheduleName(Schedule s);

struct Op {
  bool forward;  // F or B
  int microbatch;
};

// The passes stage `stage` of `stages` runs for `microbatches` microbatches.
std::vector<Op> StageOps(Schedule s, int stages, int stage, int microbatches);
// A stage's forward-only passes (validation): F0 .. F(M-1).
std::vector<Op> ForwardOps(int microbatches);
// Microbatches whose activations the stage keeps at once; microbatch m uses
// slot m % ActivationSlots(...).
int ActivationSlots(Schedule s, int stages, int stage, int microbatches);
// The textbook bubble fraction (P-1)/(M+P-1).
double TextbookBubble(int stages, int microbatches);

// What a stage computes, and where the hand-over tensors live. Tensors are
// looked up when needed (a slot's input buffer belongs to its microbatch).
struct StageFunctions {
  std::function<absl::Status(int microbatch)> forward, backward;
  // Not called on the first stage: where F(m)'s input is received.
  std::function<Tensor(int microbatch)> input;
  // Not called on the last stage: F's output, sent to the next stage, and
  // where B's incoming gradient is received (two buffers: see RunStage's
  // overlap).
  std::function<Tensor()> output, output_grad;
  // Not called on the first stage: B's gradient of the input, sent back.
  std::function<Tensor()> input_grad;
};

struct StageTiming {
  double wall_seconds = 0;  // the whole schedule
  // Inside forward and inside backward; compute_seconds is their sum.
  double forward_seconds = 0, backward_seconds = 0;
  double compute_seconds = 0;
  // The schedule's first and last clock readings (NowNanos, src/core/timer.h).
  // A caller may set begin_ns before the call to its own last reading: the
  // schedule then starts its chain there (0: at the call).
  int64_t begin_ns = 0, end_ns = 0;
  // The stage's idle share: (wall - compute) / wall.
  double bubble() const {
    return wall_seconds > 0 ? (wall_seconds - compute_seconds) / wall_seconds : 0.0;
  }
};

// Runs `ops` on this rank's stage (its rank in `group`; null or a group of
// one: a single stage, no messages). Every stage of the group must run the
// ops of the same schedule and microbatch count.
//
// While a trace records (src/core/trace.h), each pass is a "forward" or
// "backward" span on the step track (argument "microbatch"), and with two
// or more stages each stretch between passes (waiting for a neighbour, and
// the sends and receives) is a "bubble" span; a single stage has no waits,
// so each pass runs on from where the one before ended. Read from one chain
// of clock readings, the spans tile the schedule's wall time, and the
// timing's seconds are their sums.
//
// `overlap` (the group must StartsPointToPoint()): every send is started
// and left in flight while the stage computes on, completed only before its
// buffer is written again (an activation send before the next forward, an
// input-gradient send before the next backward), and each backward's
// incoming gradient is received one backward ahead, while the passes before
// it run; so output and output_grad must be different buffers, and a
// forward must write neither output_grad nor input_grad. A forward's input
// is still received when the forward starts (its slot may hold the
// activations of a microbatch not yet back-propagated until then). The
// messages, and so the results, are the same bit for bit; only the waiting
// moves. Every transfer has completed when the call returns.
absl::Status RunStage(const std::vector<Op>& ops, Communicator* group, const StageFunctions& f,
                      StageTiming* timing, bool overlap = false);

}  // namespace ladder::pp
