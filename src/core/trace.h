// A step timeline: spans of host time recorded while a trace is on, written
// in the Chrome trace event format (the JSON that Perfetto, chrome://tracing
// and PyTorch's profiler read; docs/formats.md).
//
// One TraceRecorder per process (a rank) collects the spans of its training
// thread. While none is active, which is always outside a traced window, a
// span costs one predictable branch: no clock read, no allocation. While one
// is active, opening a span reads the clock and appends one event to a
// growing vector; closing it reads the clock again.
//
//   TraceSpan layer(TraceTrack::kCompute, "layer", "layer %d fwd", l);
//   ... the layer's work, with finer spans inside ...
//   // the span ends when `layer` goes out of scope
//
// Spans come in tracks (one row each in a viewer); spans of one track nest
// (a span opened inside another closes first), as RAII guarantees on one
// thread. Times are NowNanos() readings (src/core/timer.h): the same clock
// the step's time split is measured with, so a span built from a Timer's
// readings (Add) covers exactly the interval that timer measured.
//
// Threads: only the thread that activated the recorder (the training
// thread) may open spans or add events while it is active; other threads
// (the asynchronous checkpoint writer) must not record. The recorder is not
// locked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ladder {

// The rows of one rank's timeline. kStep: each step and its top-level parts
// (data, forward and backward per microbatch, bubble, optimizer, then the
// checkpoint stall and validation beside the step). kCompute: the model's
// work inside them (embedding, layers, attention, matmuls, head, loss,
// gradient norm, AdamW). kComm: each communication call, named by axis.
enum class TraceTrack { kStep = 0, kCompute = 1, kComm = 2 };
inline constexpr int kNumTraceTracks = 3;
// "step", "compute", "comm".
const char* TraceTrackName(TraceTrack track);

// One complete span ("X" event). Names are copied (truncated to fit);
// categories and argument keys and texts must be string literals (or outlive
// the recorder).
struct TraceEvent {
  static constexpr int kMaxArgs = 3;
  int64_t begin_ns = 0, end_ns = 0;  // NowNanos() readings
  TraceTrack track = TraceTrack::kStep;
  const char* category = "";
  char name[48] = {};
  // Integer arguments (bytes, microbatch, step), and one text argument.
  const char* arg_keys[kMaxArgs] = {};
  int64_t arg_values[kMaxArgs] = {};
  int num_args = 0;
  const char* text_key = nullptr;
  const char* text = nullptr;

  void SetName(const char* n);
  // Adds an integer argument; past kMaxArgs it is dropped.
  void AddArg(const char* key, int64_t value);
};

class TraceRecorder {
 public:
  TraceRecorder();
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;
  // Deactivates the recorder if it is the active one.
  ~TraceRecorder();

  // The recorder spans go to; null while tracing is off.
  static TraceRecorder* active() { return active_; }
  // Makes this recorder the one spans go to, or none. Call from the training
  // thread, with no span of another recorder open.
  void Activate() { active_ = this; }
  static void Deactivate() { active_ = nullptr; }

  // Appends an event and returns its index (for End and the arguments).
  size_t Add(const TraceEvent& e);
  TraceEvent& event(size_t index) { return events_[index]; }
  const std::vector<TraceEvent>& events() const { return events_; }
  void Clear() { events_.clear(); }

  // The events as Chrome trace JSON objects joined by commas (no brackets),
  // to be placed in a file's "traceEvents" array, preceded by "M" metadata
  // events naming the process `process_name` (pid `pid`) and its tracks.
  // A span's "ts" is (begin_ns - zero_ns) and its "dur" (end_ns - begin_ns)
  // in microseconds, with three decimals (nanosecond resolution).
  std::string ToJson(int pid, const std::string& process_name, int64_t zero_ns) const;

 private:
  static inline TraceRecorder* active_ = nullptr;
  std::vector<TraceEvent> events_;
};

// A span on `track` from construction to destruction, recorded in the
// recorder active at construction (nothing when none is). Not copyable or
// movable: it lives in one scope.
class TraceSpan {
 public:
  TraceSpan(TraceTrack track, const char* category, const char* name) {
    if (TraceRecorder::active() == nullptr) [[likely]]
      return;
    Open(track, category)->SetName(name);
  }
  // The name printf-formatted from `format` and `args` (only when recording).
  template <typename... Args>
  TraceSpan(TraceTrack track, const char* category, const char* format, Args... args) {
    if (TraceRecorder::active() == nullptr) [[likely]]
      return;
    TraceEvent* e = Open(track, category);
    std::snprintf(e->name, sizeof e->name, format, args...);
  }
  ~TraceSpan() {
    if (recorder_ != nullptr) Close();
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

  // Adds an integer argument to the span (nothing when not recording).
  TraceSpan& Arg(const char* key, int64_t value) {
    if (recorder_ != nullptr) recorder_->event(index_).AddArg(key, value);
    return *this;
  }

 private:
  TraceEvent* Open(TraceTrack track, const char* category);
  void Close();

  TraceRecorder* recorder_ = nullptr;
  size_t index_ = 0;
};

}  // namespace ladder
