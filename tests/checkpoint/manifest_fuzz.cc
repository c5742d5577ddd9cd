// libFuzzer target for the manifest parser (scripts/fuzz.sh builds and runs
// it with clang's -fsanitize=fuzzer,address). The input is sealed with a
// valid checksum line first, so the fuzzer explores the parser behind the
// checksum instead of only the checksum: whatever the bytes, parsing must
// return an error or a manifest whose pieces lie inside their tensors and
// files, never read or allocate out of bounds.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"
#include "src/checkpoint/manifest.h"
#include "src/core/crc32.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  if (text.empty() || text.back() != '\n') text += '\n';
  text += absl::StrFormat("end %08x\n", ladder::Crc32(0, text.data(), text.size()));
  ladder::ParseManifest(text, "fuzz").status().IgnoreError();
  return 0;
}
