// Config files: one format for model and run settings, used everywhere
// (configs/*.conf, the config stored inside a saved model).
//
//   # comment
//   n_layer = 4        # trailing comments too
//   lr = 1e-3
//
// Keys are read through typed getters; after reading, CheckAllRead() turns any
// key nobody asked for into an error naming it and its line, so a typo never
// silently falls back to a default.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ladder {

class KeyValueConfig {
 public:
  static absl::StatusOr<KeyValueConfig> ParseFile(const std::string& path);
  static absl::StatusOr<KeyValueConfig> ParseText(absl::string_view text, std::string source);

  // Each getter leaves *out unchanged when the key is absent.
  absl::Status Get(absl::string_view key, int64_t* out) const;
  absl::Status Get(absl::string_view key, int* out) const;
  absl::Status Get(absl::string_view key, double* out) const;
  absl::Status Get(absl::string_view key, float* out) const;
  absl::Status Get(absl::string_view key, std::string* out) const;
  absl::Status Get(absl::string_view key, bool* out) const;

  void Set(const std::string& key, const std::string& value);
  bool Has(absl::string_view key) const { return entries_.count(std::string(key)) > 0; }
  absl::Status CheckAllRead() const;
  const std::string& source() const { return source_; }

 private:
  struct Entry {
    std::string value;
    int line = 0;
  };
  const Entry* Lookup(absl::string_view key) const;
  absl::Status BadValue(absl::string_view key, const Entry& e, absl::string_view expected) const;

  std::string source_;
  std::map<std::string, Entry> entries_;
  mutable std::set<std::string> read_;
};

}  // namespace ladder
