// The KV transfer protocol between `ladder serve --role decode` and
// `ladder serve --role prefill` (docs/formats.md, "KV transfer"): framed
// messages over one TCP connection, each a 32-byte header and a payload.
//
//   header (little-endian): magic u32 "LK\r\n", version u16, type u16,
//   request id u64, payload bytes u64, payload CRC-32 u32, and the CRC-32
//   of the 28 bytes before it.
//
// A connection opens with kHello from the decode side (its model's shape,
// weight format and KV format), answered by kHelloOk or kError (a mismatch: the message
// says which). Then any number of exchanges: kPrefill (the prompt's
// tokens) answered by kKv (the rows of every prompt token but the last,
// KvCache::ReadRows' layout) or kError, with the request's id echoed.
//
// The helpers here are stateless; any thread may call them on its own
// socket.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/model/gpt_config.h"
#include "src/model/kv_cache.h"
#include "src/model/weight_format.h"

namespace ladder::transfer {

// The bytes "LK\r\n". The line end is there for the servers a decode
// server may be pointed at by mistake: a line-based one (HTTP's, for one)
// reads the hello's first line at once and answers it or hangs up, where
// it would wait seconds for a line that never ends. (PNG's signature holds
// a CR LF for a like reason.)
inline constexpr uint32_t kMagic = 0x0A0D4B4C;
inline constexpr uint16_t kVersion = 2;  // version 1's magic was "LDKV"
inline constexpr size_t kHeaderBytes = 32;

enum class FrameType : uint16_t {
  kHello = 1,    // decode -> prefill: EncodeHello's payload
  kHelloOk = 2,  // prefill -> decode: empty
  kPrefill = 3,  // decode -> prefill: token count u32, then the tokens (i32)
  kKv = 4,       // prefill -> decode: row count u64, then the rows
  kError = 5,    // prefill -> decode: a one-line message (UTF-8)
};

struct Frame {
  FrameType type = FrameType::kError;
  uint64_t request = 0;
  std::string payload;
};

// Sends one frame (blocking). Unavailable naming the socket error.
absl::Status WriteFrame(int fd, FrameType type, uint64_t request, absl::string_view payload);
// Receives one frame (blocking, within the socket's timeouts).
//   Unavailable  the peer closed the connection or it failed (before or
//                inside the frame: a truncated frame is one);
//   DataLoss     the bytes are not a frame of this protocol: wrong magic,
//                version or type, a header or payload checksum that does
//                not match, or a payload over max_payload bytes.
absl::StatusOr<Frame> ReadFrame(int fd, uint64_t max_payload);
// True for ReadFrame's error when the peer closed the connection between
// frames (the normal end of a connection), not inside one.
bool IsCleanClose(const absl::Status& status);

// What both sides must share for cache rows to mean the same to both: the
// model's shape, the format its weights run in, and the KV format.
struct PeerModel {
  GptConfig config;
  WeightFormat weights = WeightFormat::kF32;
  KvFormat kv = KvFormat::kF32;
};

// kHello's payload: the KV format (0 fp32, 1 int8), the weight format (0
// fp32, 1 bf16, 2 int8, 3 int8-channel), then layers, heads, width,
// vocabulary and context (u32 each).
std::string EncodeHello(const PeerModel& model);
// OK when a decode server's hello matches this (the prefill) side;
// FailedPrecondition saying what differs (DataLoss for a malformed one).
absl::Status CheckHello(absl::string_view payload, const PeerModel& model);

std::string EncodePrompt(const std::vector<int32_t>& tokens);
// DataLoss when the payload is not a token count and that many tokens.
absl::StatusOr<std::vector<int32_t>> DecodePrompt(absl::string_view payload);

// kKv's payload: the row count, then the rows.
std::string EncodeRows(int64_t tokens, absl::string_view rows);
// The rows, checked to be those of `tokens` tokens of bytes_per_token
// each; DataLoss otherwise.
absl::StatusOr<std::string> DecodeRows(absl::string_view payload, int64_t tokens,
                                       int64_t bytes_per_token);

}  // namespace ladder::transfer
