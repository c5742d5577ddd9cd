#include "src/serve/transfer_protocol.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/core/crc32.h"
#include "src/core/status.h"

namespace ladder::transfer {
namespace {

// The wire is little-endian, and so is every host ladder builds for; the
// integers are copied as they are in memory.
static_assert(std::endian::native == std::endian::little, "the transfer protocol is little-endian");

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T Get(const char* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

// Sends the header and the payload with one call where the socket takes
// them: a small frame leaves as one segment, so a peer that reads its first
// bytes and hangs up (a server of another protocol) has read all of it and
// closes cleanly, instead of resetting the connection over unread bytes.
absl::Status WriteAll(int fd, absl::string_view header, absl::string_view payload) {
  iovec parts[2] = {{const_cast<char*>(header.data()), header.size()},
                    {const_cast<char*>(payload.data()), payload.size()}};
  int first = 0;
  while (first < 2) {
    msghdr m = {};
    m.msg_iov = parts + first;
    m.msg_iovlen = static_cast<size_t>(2 - first);
    const ssize_t n = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    auto sent = static_cast<size_t>(n);
    while (first < 2 && sent >= parts[first].iov_len) sent -= parts[first++].iov_len;
    if (first < 2) {
      parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + sent;
      parts[first].iov_len -= sent;
    }
  }
  return absl::OkStatus();
}

constexpr absl::string_view kClosedMessage = "the peer closed the connection";

// `what` names the part being read, for the error.
absl::Status ReadAll(int fd, char* data, size_t size, const char* what) {
  const size_t want = size;
  while (size > 0) {
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 && size == want && std::strcmp(what, "frame header") == 0) {
      return absl::UnavailableError(kClosedMessage);
    }
    if (n == 0) return absl::UnavailableError(absl::StrCat("connection closed inside a ", what));
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat(
          "receiving a ", what, ": ",
          errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : std::strerror(errno)));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

bool IsCleanClose(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable && status.message() == kClosedMessage;
}

absl::Status WriteFrame(int fd, FrameType type, uint64_t request, absl::string_view payload) {
  std::string header;
  Put(&header, kMagic);
  Put(&header, kVersion);
  Put(&header, static_cast<uint16_t>(type));
  Put(&header, request);
  Put(&header, static_cast<uint64_t>(payload.size()));
  Put(&header, Crc32(0, payload.data(), payload.size()));
  Put(&header, Crc32(0, header.data(), header.size()));
  return WriteAll(fd, header, payload);
}

absl::StatusOr<Frame> ReadFrame(int fd, uint64_t max_payload) {
  char h[kHeaderBytes];
  RETURN_IF_ERROR(ReadAll(fd, h, sizeof h, "frame header"));
  if (Get<uint32_t>(h) != kMagic) {
    // The first bytes as text too when they are: "HTTP" says what answered.
    const bool text = std::all_of(h, h + 4, [](char c) { return c >= 0x20 && c < 0x7f; });
    return absl::DataLossError(absl::StrCat(
        "not a ladder KV transfer frame (magic 0x", absl::Hex(Get<uint32_t>(h)),
        text ? absl::StrCat(", \"", absl::string_view(h, 4), "\"") : std::string(), ")"));
  }
  if (Get<uint16_t>(h + 4) != kVersion) {
    return absl::DataLossError(absl::StrCat("KV transfer protocol version ", Get<uint16_t>(h + 4),
                                            ", expected ", kVersion));
  }
  if (Get<uint32_t>(h + 28) != Crc32(0, h, 28)) {
    return absl::DataLossError("the frame header's checksum does not match");
  }
  const uint16_t type = Get<uint16_t>(h + 6);
  if (type < static_cast<uint16_t>(FrameType::kHello) ||
      type > static_cast<uint16_t>(FrameType::kError)) {
    return absl::DataLossError(absl::StrCat("unknown frame type ", type));
  }
  const uint64_t size = Get<uint64_t>(h + 16);
  if (size > max_payload) {
    return absl::DataLossError(
        absl::StrCat("a frame of ", size, " bytes exceeds the limit of ", max_payload));
  }
  Frame f;
  f.type = static_cast<FrameType>(type);
  f.request = Get<uint64_t>(h + 8);
  f.payload.resize(size);
  RETURN_IF_ERROR(ReadAll(fd, f.payload.data(), size, "frame payload"));
  if (Get<uint32_t>(h + 24) != Crc32(0, f.payload.data(), size)) {
    return absl::DataLossError("the frame payload's checksum does not match");
  }
  return f;
}

std::string EncodeHello(const PeerModel& model) {
  std::string out;
  Put<uint32_t>(&out, model.kv == KvFormat::kInt8 ? 1 : 0);
  Put<uint32_t>(&out, static_cast<uint32_t>(model.weights));
  const GptConfig& c = model.config;
  for (int v : {c.n_layer, c.n_head, c.n_embd, c.vocab_size, c.context}) {
    Put<uint32_t>(&out, static_cast<uint32_t>(v));
  }
  return out;
}

absl::Status CheckHello(absl::string_view payload, const PeerModel& model) {
  const std::string mine = EncodeHello(model);
  if (payload.size() != mine.size() || Get<uint32_t>(payload.data()) > 1 ||
      Get<uint32_t>(payload.data() + 4) > static_cast<uint32_t>(WeightFormat::kInt8Channel)) {
    return absl::DataLossError("a malformed KV transfer hello");
  }
  const KvFormat kv = Get<uint32_t>(payload.data()) == 1 ? KvFormat::kInt8 : KvFormat::kF32;
  if (kv != model.kv) {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV format mismatch: the decode server uses ", KvFormatName(kv), ", the prefill server ",
        KvFormatName(model.kv), " (start both with the same --kv)"));
  }
  const auto weights = static_cast<WeightFormat>(Get<uint32_t>(payload.data() + 4));
  if (weights != model.weights) {
    return absl::FailedPreconditionError(
        absl::StrCat("weight format mismatch: the decode server uses ", WeightFormatName(weights),
                     ", the prefill server ", WeightFormatName(model.weights),
                     " (start both with the same --weights)"));
  }
  if (payload != mine) {
    auto shape = [](const char* at) {
      return absl::StrCat(Get<uint32_t>(at + 8), " layers, ", Get<uint32_t>(at + 12),
                          " heads, width ", Get<uint32_t>(at + 16), ", vocabulary ",
                          Get<uint32_t>(at + 20), ", context ", Get<uint32_t>(at + 24));
    };
    return absl::FailedPreconditionError(
        absl::StrCat("model mismatch: the decode server's model has ", shape(payload.data()),
                     "; the prefill server's ", shape(mine.data()), " (serve the same --model)"));
  }
  return absl::OkStatus();
}

std::string EncodePrompt(const std::vector<int32_t>& tokens) {
  std::string out;
  Put(&out, static_cast<uint32_t>(tokens.size()));
  out.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(int32_t));
  return out;
}

absl::StatusOr<std::vector<int32_t>> DecodePrompt(absl::string_view payload) {
  if (payload.size() < 4 || payload.size() != 4 + 4 * uint64_t{Get<uint32_t>(payload.data())}) {
    return absl::DataLossError(
        absl::StrCat("a malformed prompt payload of ", payload.size(), " bytes"));
  }
  std::vector<int32_t> tokens(Get<uint32_t>(payload.data()));
  std::memcpy(tokens.data(), payload.data() + 4, tokens.size() * sizeof(int32_t));
  return tokens;
}

std::string EncodeRows(int64_t tokens, absl::string_view rows) {
  std::string out;
  out.reserve(8 + rows.size());
  Put(&out, static_cast<uint64_t>(tokens));
  out.append(rows.data(), rows.size());
  return out;
}

absl::StatusOr<std::string> DecodeRows(absl::string_view payload, int64_t tokens,
                                       int64_t bytes_per_token) {
  if (payload.size() < 8 || Get<uint64_t>(payload.data()) != static_cast<uint64_t>(tokens) ||
      payload.size() - 8 != static_cast<uint64_t>(tokens * bytes_per_token)) {
    return absl::DataLossError(absl::StrCat("a KV payload of ", payload.size(),
                                            " bytes is not the rows of ", tokens, " tokens"));
  }
  return std::string(payload.substr(8));
}

}  // namespace ladder::transfer
