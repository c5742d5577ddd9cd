// libFuzzer target for the safetensors reader (scripts/fuzz.sh builds and
// runs it with clang's -fsanitize=fuzzer,address,undefined). Each input is
// parsed twice: as a whole file, and with a valid length prefix put in front
// (the header being the bytes up to the first NUL, the data section the
// rest), so that the fuzzer explores the header behind the length instead
// of only the length. Whatever the bytes, parsing must return an error or
// tensors that lie inside the file, match their shapes and tile the data
// section; an accepted file written again must parse to the same tensors.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "src/formats/safetensors.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void Parse(std::string file) {
  absl::StatusOr<ladder::SafetensorsFile> f = ladder::SafetensorsFile::Parse(std::move(file));
  if (!f.ok()) {
    Check(f.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  // Reading every byte below lets ASan catch a span outside the file.
  const std::vector<ladder::SafetensorsTensor>& tensors = f->tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ladder::SafetensorsTensor& t = tensors[i];
    Check(t.bytes.size() ==
          static_cast<size_t>(t.numel()) * static_cast<size_t>(ladder::SafeDTypeBytes(t.dtype)));
    if (i > 0) Check(t.bytes.data() == tensors[i - 1].bytes.data() + tensors[i - 1].bytes.size());
    Check(f->Find(t.name) == &t);
  }
  absl::StatusOr<std::string> again = ladder::SerializeSafetensors(tensors, f->metadata());
  Check(again.ok());
  absl::StatusOr<ladder::SafetensorsFile> back = ladder::SafetensorsFile::Parse(*again);
  Check(back.ok());
  Check(back->metadata() == f->metadata());
  Check(back->tensors().size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ladder::SafetensorsTensor& a = tensors[i];
    const ladder::SafetensorsTensor& b = back->tensors()[i];
    Check(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape &&
          std::string(a.bytes.begin(), a.bytes.end()) ==
              std::string(b.bytes.begin(), b.bytes.end()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  Parse(input);
  const size_t header = input.find('\0') == std::string::npos ? input.size() : input.find('\0');
  std::string sealed;
  for (int i = 0; i < 8; ++i) sealed += static_cast<char>((uint64_t{header} >> (8 * i)) & 0xff);
  Parse(sealed + input);
  return 0;
}
