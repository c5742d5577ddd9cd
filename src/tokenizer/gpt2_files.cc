// GPT-2's tokenizer files (docs/formats.md, "GPT-2 tokenizer"):
//   vocab.json   one JSON object, token text -> id, token text spelled in
//                GPT-2's byte alphabet (byte_unicode.h); `<|endoftext|>` is
//                the special end-of-text token
//   merges.txt   an optional "#version: ..." first line, then one merge
//                "A B" per line in rank order (A and B token texts)
#include <algorithm>
#include <exception>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "src/core/file_util.h"
#include "src/core/status.h"
#include "src/tokenizer/bpe.h"
#include "src/tokenizer/byte_unicode.h"

namespace ladder {
namespace {

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// How a token's bytes are spelled as a vocab.json key or a merges.txt part.
std::string Spell(const std::string& bytes) {
  if (bytes == Tokenizer::kEndOfText) return bytes;
  return BytesToSymbols(bytes);
}

std::string Quoted(absl::string_view text) {
  return nlohmann::json(std::string(text))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::LoadGpt2(const std::string& vocab_path,
                                              const std::string& merges_path) {
  // vocab.json
  ASSIGN_OR_RETURN(std::string vocab_text, ReadFile(vocab_path));
  auto vocab_error = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(vocab_path, ": ", parts...));
  };
  nlohmann::json vocab;
  std::unordered_set<std::string> seen;  // keys of the top object, to catch duplicates
  std::string duplicate;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string() &&
        !seen.insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  try {
    vocab = nlohmann::json::parse(vocab_text, on_event);
  } catch (const std::exception& e) {
    return vocab_error("not valid JSON (", e.what(), ")");
  }
  if (!duplicate.empty()) return vocab_error("token ", Quoted(duplicate), " appears twice");
  seen = {};
  if (!vocab.is_object()) {
    return vocab_error("expected a JSON object of token -> id, got ", vocab.type_name());
  }
  if (vocab.size() < 256 || vocab.size() > static_cast<size_t>(kMaxVocabSize)) {
    return vocab_error(vocab.size(), " tokens, outside [256, ", kMaxVocabSize,
                       "] (every byte needs one)");
  }
  const int32_t size = static_cast<int32_t>(vocab.size());
  Tokenizer tok;
  tok.kind_ = TokenizerKind::kGpt2;
  tok.tokens_.assign(static_cast<size_t>(size), std::string());
  std::vector<std::string> key_of(static_cast<size_t>(size));  // to name duplicates
  std::unordered_map<std::string, int32_t> id_of;              // spelled token -> id
  id_of.reserve(static_cast<size_t>(size));
  for (const auto& item : vocab.items()) {
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    if (!value.is_number_integer()) {
      return vocab_error("token ", Quoted(key), ": id must be an integer, got ", value.dump());
    }
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id >= size) {
      return vocab_error("token ", Quoted(key), ": id ", id, " out of range [0, ", size,
                         ") (ids must be 0..N-1 for N tokens)");
    }
    if (!tok.tokens_[id].empty()) {
      return vocab_error("tokens ", Quoted(key_of[id]), " and ", Quoted(key), " share id ", id);
    }
    std::string bytes;
    if (key == kEndOfText) {
      bytes = key;
      tok.end_of_text_ = static_cast<int32_t>(id);
    } else if (std::optional<std::string> b = SymbolsToBytes(key); b && !b->empty()) {
      bytes = std::move(*b);
    } else {
      return vocab_error("token ", Quoted(key),
                         " is not spelled in GPT-2's byte alphabet (nor is it <|endoftext|>)");
    }
    key_of[id] = key;
    tok.tokens_[id] = std::move(bytes);
    id_of.emplace(key, static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(BytesToSymbols(std::string(1, static_cast<char>(b))));
    if (it == id_of.end()) {
      return vocab_error("no token for byte 0x", absl::Hex(b, absl::kZeroPad2), " (",
                         Quoted(BytesToSymbols(std::string(1, static_cast<char>(b)))),
                         "); every byte needs one");
    }
    tok.byte_ids_[b] = it->second;
  }

  // merges.txt
  ASSIGN_OR_RETURN(std::string merges_text, ReadFile(merges_path));
  std::vector<absl::string_view> lines = absl::StrSplit(merges_text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();  // final newline
  for (size_t i = 0; i < lines.size(); ++i) {
    auto merge_error = [&](auto&&... parts) {
      return absl::InvalidArgumentError(absl::StrCat(merges_path, ":", i + 1, ": ", parts...));
    };
    absl::string_view line = lines[i];
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (i == 0 && absl::StartsWith(line, "#version")) continue;
    const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return merge_error("expected a merge 'A B' (two tokens, one space), got ", Quoted(line));
    }
    int32_t ids[2];
    for (int k = 0; k < 2; ++k) {
      auto it = id_of.find(std::string(parts[k]));
      if (it == id_of.end()) {
        return merge_error("merge part ", Quoted(parts[k]), " is not in ", vocab_path);
      }
      ids[k] = it->second;
    }
    const std::string result = absl::StrCat(parts[0], parts[1]);
    auto made = id_of.find(result);
    if (made == id_of.end()) {
      return merge_error("merge result ", Quoted(result), " is not in ", vocab_path);
    }
    if (!tok.ranks_.emplace(PairKey(ids[0], ids[1]), static_cast<int32_t>(tok.merges_.size()))
             .second) {
      return merge_error("duplicate merge ", Quoted(line));
    }
    tok.merges_.emplace_back(ids[0], ids[1]);
    tok.merge_ids_.push_back(made->second);
  }
  // Every token is a byte, the end-of-text token or some merge's result: a
  // token no merge makes could never come out of encoding, which is what a
  // truncated merges.txt looks like (its text would encode differently).
  std::vector<bool> reachable(tok.tokens_.size(), false);
  for (int32_t id : tok.byte_ids_) reachable[id] = true;
  for (int32_t id : tok.merge_ids_) reachable[id] = true;
  if (tok.end_of_text_ >= 0) reachable[tok.end_of_text_] = true;
  for (size_t id = 0; id < reachable.size(); ++id) {
    if (!reachable[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat(merges_path, ": no merge makes ", Quoted(key_of[id]), " (id ", id, ", of ",
                       vocab_path, "); it has ", tok.merges_.size(), " merges for ",
                       reachable.size() - 256 - (tok.end_of_text_ >= 0 ? 1 : 0),
                       " tokens beyond the bytes (is it truncated?)"));
    }
  }
  return tok;
}

absl::StatusOr<Tokenizer> Tokenizer::FromGpt2TokenBytes(std::vector<std::string> tokens,
                                                        int32_t end_of_text) {
  const int32_t size = static_cast<int32_t>(tokens.size());
  if (size < 256 || size > kMaxVocabSize) {
    return absl::InvalidArgumentError(
        absl::StrCat(size, " tokens, outside [256, ", kMaxVocabSize, "] (every byte needs one)"));
  }
  if (end_of_text >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("end-of-text id ", end_of_text, " is not below the ", size, " tokens"));
  }
  Tokenizer tok;
  tok.kind_ = TokenizerKind::kGpt2;
  tok.end_of_text_ = end_of_text;
  tok.byte_ids_.fill(-1);
  for (int32_t id = 0; id < size; ++id) {
    if (id == end_of_text || tokens[id].size() != 1) continue;
    const auto b = static_cast<unsigned char>(tokens[id][0]);
    if (tok.byte_ids_[b] >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ids ", tok.byte_ids_[b], " and ", id, " are both the byte ", int{b}));
    }
    tok.byte_ids_[b] = id;
  }
  for (int b = 0; b < 256; ++b) {
    if (tok.byte_ids_[b] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("no token is the byte ", b));
    }
  }
  if (end_of_text >= 0) tokens[end_of_text] = std::string(kEndOfText);
  tok.tokens_ = std::move(tokens);
  std::vector<int32_t> parts;
  for (int32_t id = 0; id < size; ++id) {
    if (id == end_of_text || tok.tokens_[id].size() < 2) continue;
    parts.clear();
    tok.EncodeChunk(tok.tokens_[id], &parts);
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", id, " ", Quoted(Spell(tok.tokens_[id])),
          " is not a merge of two earlier tokens (the merges earlier ids define cut it into ",
          parts.size(), ")"));
    }
    tok.ranks_.emplace(PairKey(parts[0], parts[1]), static_cast<int32_t>(tok.merges_.size()));
    tok.merges_.emplace_back(parts[0], parts[1]);
    tok.merge_ids_.push_back(id);
  }
  return tok;
}

absl::StatusOr<std::vector<std::string>> Tokenizer::Gpt2Tokens() const {
  std::vector<std::string> spelled;
  std::unordered_map<std::string, int32_t> seen;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    std::string key = Spell(tokens_[id]);
    if (auto [it, added] = seen.emplace(key, id); !added) {
      return absl::FailedPreconditionError(
          absl::StrCat("ids ", it->second, " and ", id, " are the same token ", Quoted(it->first),
                       ", which GPT-2's vocabulary cannot hold twice"));
    }
    spelled.push_back(std::move(key));
  }
  return spelled;
}

std::vector<std::string> Tokenizer::Gpt2Merges() const {
  std::vector<std::string> lines;
  for (const auto& [a, b] : merges_) lines.push_back(Spell(tokens_[a]) + " " + Spell(tokens_[b]));
  return lines;
}

absl::StatusOr<Tokenizer::Gpt2Files> Tokenizer::Gpt2FileContents(
    const std::string& vocab_path) const {
  absl::StatusOr<std::vector<std::string>> spelled = Gpt2Tokens();
  if (!spelled.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write '", vocab_path, "': ", spelled.status().message()));
  }
  const std::vector<std::string>& tokens = *spelled;
  // Written by hand, in id order, one token a line.
  Gpt2Files files;
  files.vocab_json = "{";
  for (size_t id = 0; id < tokens.size(); ++id) {
    absl::StrAppend(&files.vocab_json, id == 0 ? "\n" : ",\n", Quoted(tokens[id]), ": ", id);
  }
  files.vocab_json += "\n}\n";
  files.merges_txt = "#version: 0.2\n";
  for (const std::string& line : Gpt2Merges()) absl::StrAppend(&files.merges_txt, line, "\n");
  return files;
}

absl::Status Tokenizer::SaveGpt2(const std::string& vocab_path,
                                 const std::string& merges_path) const {
  ASSIGN_OR_RETURN(Gpt2Files files, Gpt2FileContents(vocab_path));
  return WriteFilesAtomically(
      {{vocab_path, std::move(files.vocab_json)}, {merges_path, std::move(files.merges_txt)}});
}

}  // namespace ladder
