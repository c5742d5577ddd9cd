// The trace recorder: nothing is recorded while no recorder is active;
// spans nest and carry their arguments; the JSON output parses back (with
// nlohmann::json) with names escaped, metadata for the process and its
// tracks, and times in microseconds exact to the nanosecond.
#include "src/core/trace.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ladder {
namespace {

// The recorder's events as a parsed "traceEvents" array.
nlohmann::json Parse(const TraceRecorder& r, int pid, const std::string& process, int64_t zero_ns) {
  std::string text = "[";
  text += r.ToJson(pid, process, zero_ns);
  text += "]";
  return nlohmann::json::parse(text);
}

TEST(TraceTest, NothingWhileNoRecorderIsActive) {
  TraceRecorder r;
  ASSERT_EQ(TraceRecorder::active(), nullptr);
  {
    TraceSpan span(TraceTrack::kCompute, "layer", "layer %d fwd", 3);
    span.Arg("microbatch", 1);
  }
  EXPECT_TRUE(r.events().empty());
  r.Activate();
  EXPECT_EQ(TraceRecorder::active(), &r);
  TraceRecorder::Deactivate();
  { TraceSpan span(TraceTrack::kStep, "data", "data"); }
  EXPECT_TRUE(r.events().empty());
}

TEST(TraceTest, SpansNestAndCarryArguments) {
  TraceRecorder r;
  r.Activate();
  {
    TraceSpan outer(TraceTrack::kCompute, "layer", "layer %d fwd", 7);
    outer.Arg("microbatch", 2).Arg("slot", 0);
    { TraceSpan inner(TraceTrack::kCompute, "attention", "attention"); }
  }
  TraceRecorder::Deactivate();
  ASSERT_EQ(r.events().size(), 2u);
  const TraceEvent& outer = r.events()[0];
  const TraceEvent& inner = r.events()[1];
  EXPECT_STREQ(outer.name, "layer 7 fwd");
  EXPECT_STREQ(outer.category, "layer");
  EXPECT_STREQ(inner.name, "attention");
  EXPECT_LE(outer.begin_ns, inner.begin_ns);
  EXPECT_LE(inner.begin_ns, inner.end_ns);
  EXPECT_LE(inner.end_ns, outer.end_ns);
  ASSERT_EQ(outer.num_args, 2);
  EXPECT_STREQ(outer.arg_keys[0], "microbatch");
  EXPECT_EQ(outer.arg_values[0], 2);
  EXPECT_EQ(inner.num_args, 0);
}

TEST(TraceTest, DestroyedRecorderIsNoLongerActive) {
  {
    TraceRecorder r;
    r.Activate();
  }
  EXPECT_EQ(TraceRecorder::active(), nullptr);
}

TEST(TraceTest, JsonParsesBackWithEscapesMetadataAndExactTimes) {
  TraceRecorder r;
  const std::string awkward = "say \"hi\"\\\n\t\x01";
  TraceEvent e;
  e.begin_ns = 1000 + 1234567;  // 1234.567 us after zero
  e.end_ns = e.begin_ns + 765433;
  e.track = TraceTrack::kComm;
  e.category = "comm";
  e.SetName(awkward.c_str());
  e.AddArg("bytes", int64_t{1} << 40);
  e.AddArg("first", 1);
  e.AddArg("second", 2);
  e.AddArg("third", 3);  // past kMaxArgs: dropped
  e.text_key = "axis";
  e.text = "tensor";
  r.Add(e);
  TraceEvent early;  // before zero: a negative time
  early.begin_ns = 1000 - 1500;
  early.end_ns = 1000;
  early.SetName(std::string(100, 'x').c_str());
  r.Add(early);

  const nlohmann::json all = Parse(r, 5, "rank 5 (dp \"0\", tp 1, pp 0)", 1000);
  int threads = 0;
  std::string process;
  for (const auto& m : all) {
    if (m["ph"] != "M") continue;
    EXPECT_EQ(m["pid"], 5);
    if (m["name"] == "process_name") process = m["args"]["name"];
    if (m["name"] == "thread_name") {
      EXPECT_EQ(m["args"]["name"], TraceTrackName(static_cast<TraceTrack>(m["tid"].get<int>())));
      ++threads;
    }
  }
  EXPECT_EQ(process, "rank 5 (dp \"0\", tp 1, pp 0)");
  EXPECT_EQ(threads, kNumTraceTracks - 1);  // no device track without a DeviceTimer

  std::vector<nlohmann::json> spans;
  for (const auto& x : all) {
    if (x["ph"] == "X") spans.push_back(x);
  }
  ASSERT_EQ(spans.size(), 2u);
  const nlohmann::json& s = spans[0];
  EXPECT_EQ(s["name"], awkward);
  EXPECT_EQ(s["cat"], "comm");
  EXPECT_EQ(s["pid"], 5);
  EXPECT_EQ(s["tid"], 2);
  EXPECT_DOUBLE_EQ(s["ts"].get<double>(), 1234.567);
  EXPECT_DOUBLE_EQ(s["dur"].get<double>(), 765.433);
  EXPECT_EQ(s["args"]["bytes"], int64_t{1} << 40);
  EXPECT_EQ(s["args"]["first"], 1);
  EXPECT_EQ(s["args"]["second"], 2);
  EXPECT_FALSE(s["args"].contains("third"));
  EXPECT_EQ(s["args"]["axis"], "tensor");
  EXPECT_DOUBLE_EQ(spans[1]["ts"].get<double>(), -1.5);
  EXPECT_EQ(spans[1]["name"], std::string(sizeof(TraceEvent{}.name) - 1, 'x'));
}

}  // namespace
}  // namespace ladder
