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
// the step's time split is measured with, so a span built from readings
// already taken (TraceInterval) covers exactly the interval they measured.
//
// On a device whose work runs after the host queues it (a GPU), host spans
// measure the queueing. A recorder given the device's DeviceTimer also marks
// each compute span's start and end on the device's stream, and
// ResolveDeviceSpans turns the marks into the same spans on the "device"
// track, in device time.
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

#include "absl/status/statusor.h"

namespace ladder {

// The rows of one rank's timeline. kStep: each step and its top-level parts
// (data, forward and backward per microbatch, bubble, optimizer, then the
// checkpoint stall and validation beside the step). kCompute: the model's
// work inside them (embedding, layers, attention, matmuls, head, loss,
// gradient norm, AdamW). kComm: each communication call, named by axis.
// kDevice: the compute spans again, as the device ran them (only with a
// DeviceTimer).
enum class TraceTrack { kStep = 0, kCompute = 1, kComm = 2, kDevice = 3 };
inline constexpr int kNumTraceTracks = 4;
// "step", "compute", "comm", "device".
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
  // DeviceTimer marks at the span's start and end (-1: none).
  int device_begin = -1, device_end = -1;

  void SetName(const char* n);
  // Adds an integer argument; past kMaxArgs it is dropped.
  void AddArg(const char* key, int64_t value);
};

// A device's clock for work queued on its stream: marks recorded in stream
// order, resolved to times once the work has run. The CUDA backend's are
// CUDA events (src/backend/cuda/event_timer.h); the CPU needs none.
// Called from the thread that owns the device's backend.
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  // Forgets every mark, waits for the work queued so far, and records the
  // anchor mark: the device is idle, so its time is the host's now.
  virtual absl::Status Anchor() = 0;
  // Records a mark after the work queued so far; its id, or -1 if the
  // device refused (the span then has no device time).
  virtual int Mark() = 0;
  // Waits for mark `id`; the nanoseconds from the anchor to it.
  virtual absl::StatusOr<int64_t> SinceAnchor(int id) = 0;
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

  // Marks compute spans on `timer` from now on (null: none), its anchor
  // taken at host time anchor_ns (right after DeviceTimer::Anchor).
  void SetDeviceTimer(DeviceTimer* timer, int64_t anchor_ns) {
    device_ = timer;
    anchor_ns_ = anchor_ns;
  }
  DeviceTimer* device_timer() const { return device_; }
  // Appends, for every event with both device marks, its copy on the
  // device track in device time (waiting for the device). Errors are the
  // device's.
  absl::Status ResolveDeviceSpans();

  // The events as Chrome trace JSON objects joined by commas (no brackets),
  // to be placed in a file's "traceEvents" array, preceded by "M" metadata
  // events naming the process `process_name` (pid `pid`) and its tracks.
  // A span's "ts" is (begin_ns - zero_ns) and its "dur" (end_ns - begin_ns)
  // in microseconds, with three decimals (nanosecond resolution).
  std::string ToJson(int pid, const std::string& process_name, int64_t zero_ns) const;

 private:
  static inline TraceRecorder* active_ = nullptr;
  std::vector<TraceEvent> events_;
  DeviceTimer* device_ = nullptr;
  int64_t anchor_ns_ = 0;
};

// Records [begin_ns, end_ns], an interval whose clock readings the caller
// has taken already (the step's time split, a communicator's call), as a
// span on `track` in the active recorder. Returns the event, to add
// arguments to (valid until the next span is recorded), or null when no
// recorder is active (or the interval is empty).
TraceEvent* TraceInterval(TraceTrack track, const char* category, const char* name,
                          int64_t begin_ns, int64_t end_ns);

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
