// The trace recorder and its Chrome trace JSON (trace.h).
#include "src/core/trace.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "src/core/status.h"
#include "src/core/timer.h"

namespace ladder {
namespace {

// A JSON string literal, quotes included (escapes from nlohmann::json).
std::string Quoted(const char* s) { return nlohmann::json(std::string(s)).dump(); }

// Nanoseconds as microseconds with three decimals, exactly.
std::string Micros(int64_t ns) {
  const char* sign = ns < 0 ? "-" : "";
  const int64_t a = ns < 0 ? -ns : ns;
  return absl::StrFormat("%s%d.%03d", sign, a / 1000, a % 1000);
}

}  // namespace

const char* TraceTrackName(TraceTrack track) {
  switch (track) {
    case TraceTrack::kStep:
      return "step";
    case TraceTrack::kCompute:
      return "compute";
    case TraceTrack::kComm:
      return "comm";
    case TraceTrack::kDevice:
      return "device";
  }
  return "?";
}

void TraceEvent::SetName(const char* n) {
  std::strncpy(name, n, sizeof name - 1);
  name[sizeof name - 1] = '\0';
}

void TraceEvent::AddArg(const char* key, int64_t value) {
  if (num_args == kMaxArgs) return;
  arg_keys[num_args] = key;
  arg_values[num_args] = value;
  ++num_args;
}

// A traced window of a few steps of a small model holds thousands of spans;
// reserving them keeps reallocation out of the first traced step.
TraceRecorder::TraceRecorder() { events_.reserve(1 << 14); }

TraceRecorder::~TraceRecorder() {
  if (active_ == this) Deactivate();
}

size_t TraceRecorder::Add(const TraceEvent& e) {
  events_.push_back(e);
  return events_.size() - 1;
}

absl::Status TraceRecorder::ResolveDeviceSpans() {
  if (device_ == nullptr) return absl::OkStatus();
  const size_t n = events_.size();
  for (size_t i = 0; i < n; ++i) {
    if (events_[i].device_begin < 0 || events_[i].device_end < 0) continue;
    TraceEvent e = events_[i];
    ASSIGN_OR_RETURN(const int64_t begin, device_->SinceAnchor(e.device_begin));
    ASSIGN_OR_RETURN(const int64_t end, device_->SinceAnchor(e.device_end));
    e.begin_ns = anchor_ns_ + begin;
    e.end_ns = anchor_ns_ + std::max(begin, end);
    e.track = TraceTrack::kDevice;
    e.device_begin = e.device_end = -1;
    events_.push_back(e);
  }
  return absl::OkStatus();
}

std::string TraceRecorder::ToJson(int pid, const std::string& process_name, int64_t zero_ns) const {
  std::string out =
      absl::StrCat("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":", pid,
                   ",\"tid\":0,\"args\":{\"name\":", nlohmann::json(process_name).dump(),
                   "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\","
                   "\"pid\":",
                   pid, ",\"tid\":0,\"args\":{\"sort_index\":", pid, "}}");
  for (int t = 0; t < kNumTraceTracks; ++t) {
    if (static_cast<TraceTrack>(t) == TraceTrack::kDevice && device_ == nullptr) continue;
    absl::StrAppend(&out, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", t,
                    ",\"args\":{\"name\":\"", TraceTrackName(static_cast<TraceTrack>(t)),
                    "\"}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":", pid,
                    ",\"tid\":", t, ",\"args\":{\"sort_index\":", t, "}}");
  }
  for (const TraceEvent& e : events_) {
    absl::StrAppend(&out, ",\n{\"name\":", Quoted(e.name), ",\"cat\":", Quoted(e.category),
                    ",\"ph\":\"X\",\"ts\":", Micros(e.begin_ns - zero_ns),
                    ",\"dur\":", Micros(e.end_ns - e.begin_ns), ",\"pid\":", pid,
                    ",\"tid\":", static_cast<int>(e.track), ",\"args\":{");
    for (int i = 0; i < e.num_args; ++i) {
      absl::StrAppend(&out, i ? "," : "", Quoted(e.arg_keys[i]), ":", e.arg_values[i]);
    }
    if (e.text_key != nullptr) {
      absl::StrAppend(&out, e.num_args ? "," : "", Quoted(e.text_key), ":", Quoted(e.text));
    }
    out += "}}";
  }
  return out;
}

TraceEvent* TraceInterval(TraceTrack track, const char* category, const char* name,
                          int64_t begin_ns, int64_t end_ns) {
  TraceRecorder* recorder = TraceRecorder::active();
  if (recorder == nullptr || end_ns <= begin_ns) return nullptr;
  TraceEvent e;
  e.begin_ns = begin_ns;
  e.end_ns = end_ns;
  e.track = track;
  e.category = category;
  e.SetName(name);
  return &recorder->event(recorder->Add(e));
}

TraceEvent* TraceSpan::Open(TraceTrack track, const char* category) {
  recorder_ = TraceRecorder::active();
  TraceEvent e;
  e.track = track;
  e.category = category;
  if (track == TraceTrack::kCompute && recorder_->device_timer() != nullptr) {
    e.device_begin = recorder_->device_timer()->Mark();
  }
  e.begin_ns = NowNanos();
  index_ = recorder_->Add(e);
  return &recorder_->event(index_);
}

void TraceSpan::Close() {
  TraceEvent& e = recorder_->event(index_);
  e.end_ns = NowNanos();
  if (e.device_begin >= 0) e.device_end = recorder_->device_timer()->Mark();
}

}  // namespace ladder
