#include "src/data/shards.h"

#include <iterator>
#include <limits>

#include "absl/strings/str_cat.h"
#include "src/core/file_util.h"
#include "src/core/status.h"

namespace ladder {
namespace {

constexpr int32_t kMagic = 0x4B4F544C;  // "LTOK" in little-endian bytes
constexpr int32_t kVersion = 1;
constexpr size_t kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * 4;

int BytesPerToken(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void PutLittleEndian(uint32_t v, int bytes, char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t GetLittleEndian(const char* in, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

}  // namespace

absl::Status WriteShard(const std::string& path, const std::vector<int32_t>& tokens,
                        int vocab_size) {
  if (vocab_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", path, ": vocab size ", vocab_size));
  }
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", path, ": ", tokens.size(),
                                                   " tokens exceed the 2^31-1 a shard can hold"));
  }
  const int width = BytesPerToken(vocab_size);
  std::string bytes(kHeaderBytes + tokens.size() * width, '\0');
  const int32_t header[] = {kMagic, kVersion, static_cast<int32_t>(tokens.size()), width,
                            vocab_size};
  for (size_t i = 0; i < std::size(header); ++i) {
    PutLittleEndian(static_cast<uint32_t>(header[i]), 4, &bytes[4 * i]);
  }
  char* out = &bytes[kHeaderBytes];
  for (size_t i = 0; i < tokens.size(); ++i, out += width) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("shard ", path, ": token ", tokens[i], " at ",
                                                     i, " outside [0, ", vocab_size, ")"));
    }
    PutLittleEndian(static_cast<uint32_t>(tokens[i]), width, out);
  }
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<std::vector<int32_t>> ReadShard(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", path, ": ", parts...));
  };
  if (bytes.size() < kHeaderBytes) {
    return bad("truncated: ", bytes.size(), " bytes, shorter than the ", kHeaderBytes,
               "-byte header");
  }
  auto field = [&](int i) { return static_cast<int32_t>(GetLittleEndian(&bytes[4 * i], 4)); };
  if (field(0) != kMagic) return bad("not a token shard (bad magic)");
  if (field(1) != kVersion) {
    return bad("unsupported version ", field(1), " (this build reads ", kVersion, ")");
  }
  const int64_t count = field(2);
  const int width = field(3);
  const int64_t vocab = field(4);
  if (count < 0) return bad("negative token count ", count);
  if (vocab < 1) return bad("vocab size ", vocab);
  if (width != BytesPerToken(vocab)) {
    return bad(width, " bytes per token, but vocab size ", vocab, " needs ", BytesPerToken(vocab));
  }
  const size_t expected = kHeaderBytes + static_cast<size_t>(count) * width;
  if (bytes.size() != expected) {
    return bad(bytes.size() < expected ? "truncated: " : "trailing bytes: ", "header says ", count,
               " tokens (", expected, " bytes) but the file has ", bytes.size(), " bytes");
  }
  std::vector<int32_t> tokens(count);
  const char* in = &bytes[kHeaderBytes];
  for (int64_t i = 0; i < count; ++i, in += width) {
    const uint32_t t = GetLittleEndian(in, width);
    if (t >= static_cast<uint64_t>(vocab)) {
      return bad("token ", t, " at ", i, " outside [0, ", vocab, ")");
    }
    tokens[i] = static_cast<int32_t>(t);
  }
  return tokens;
}

}  // namespace ladder
