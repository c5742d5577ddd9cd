#include "src/core/config.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/core/file_util.h"

namespace ladder {

absl::StatusOr<KeyValueConfig> KeyValueConfig::ParseFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);  // a directory is refused
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("config file: ", text.status().message()));
  }
  return ParseText(*text, path);
}

absl::StatusOr<KeyValueConfig> KeyValueConfig::ParseText(absl::string_view text,
                                                         std::string source) {
  KeyValueConfig cfg;
  cfg.source_ = std::move(source);
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (size_t hash = line.find('#'); hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(cfg.source_, ":", line_no, ": expected 'key = value', got '", line, "'"));
    }
    std::string key(absl::StripAsciiWhitespace(line.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (key.empty() || value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(cfg.source_, ":", line_no, ": empty key or value"));
    }
    if (cfg.entries_.count(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat(cfg.source_, ":", line_no, ": key '", key, "' given twice"));
    }
    cfg.entries_[key] = {value, line_no};
  }
  return cfg;
}

const KeyValueConfig::Entry* KeyValueConfig::Lookup(absl::string_view key) const {
  auto it = entries_.find(std::string(key));
  if (it == entries_.end()) return nullptr;
  read_.insert(it->first);
  return &it->second;
}

absl::Status KeyValueConfig::BadValue(absl::string_view key, const Entry& e,
                                      absl::string_view expected) const {
  return absl::InvalidArgumentError(absl::StrCat(source_, ":", e.line, ": '", key, "' expects ",
                                                 expected, ", got '", e.value, "'"));
}

absl::Status KeyValueConfig::Get(absl::string_view key, int64_t* out) const {
  const Entry* e = Lookup(key);
  if (e && !absl::SimpleAtoi(e->value, out)) return BadValue(key, *e, "an integer");
  return absl::OkStatus();
}

absl::Status KeyValueConfig::Get(absl::string_view key, int* out) const {
  const Entry* e = Lookup(key);
  if (e && !absl::SimpleAtoi(e->value, out)) return BadValue(key, *e, "an integer");
  return absl::OkStatus();
}

absl::Status KeyValueConfig::Get(absl::string_view key, double* out) const {
  const Entry* e = Lookup(key);
  if (e && !absl::SimpleAtod(e->value, out)) return BadValue(key, *e, "a number");
  return absl::OkStatus();
}

absl::Status KeyValueConfig::Get(absl::string_view key, float* out) const {
  const Entry* e = Lookup(key);
  if (e && !absl::SimpleAtof(e->value, out)) return BadValue(key, *e, "a number");
  return absl::OkStatus();
}

absl::Status KeyValueConfig::Get(absl::string_view key, std::string* out) const {
  const Entry* e = Lookup(key);
  if (e) *out = e->value;
  return absl::OkStatus();
}

absl::Status KeyValueConfig::Get(absl::string_view key, bool* out) const {
  const Entry* e = Lookup(key);
  if (e && !absl::SimpleAtob(e->value, out)) return BadValue(key, *e, "true or false");
  return absl::OkStatus();
}

void KeyValueConfig::Set(const std::string& key, const std::string& value) {
  entries_[key] = {value, 0};
}

absl::Status KeyValueConfig::CheckAllRead() const {
  for (const auto& [key, e] : entries_) {
    if (!read_.count(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ":", e.line, ": unknown key '", key, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ladder
