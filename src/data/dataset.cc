#include "src/data/dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "src/core/file_util.h"
#include "src/core/status.h"
#include "src/data/shards.h"

namespace ladder {
namespace {

bool IsValBlock(uint64_t b, double f) {
  return std::floor(static_cast<double>(b + 1) * f) > std::floor(static_cast<double>(b) * f);
}

}  // namespace

TokenSplits SplitTrainVal(const std::vector<int32_t>& tokens, double val_fraction) {
  TokenSplits out;
  if (!(val_fraction > 0)) {
    out.train = tokens;
    return out;
  }
  // m blocks are the fewest for which the rule picks a validation block (the
  // loop only corrects rounding); more than n means no block size can work.
  const size_t n = tokens.size();
  const double inverse = std::ceil(1.0 / val_fraction);
  size_t m = inverse > static_cast<double>(n) ? n + 1 : static_cast<size_t>(inverse);
  while (m <= n && !IsValBlock(m - 1, val_fraction)) ++m;
  const size_t block = m <= n / kSplitBlockTokens ? kSplitBlockTokens : std::max<size_t>(1, n / m);
  for (size_t begin = 0, b = 0; begin < n; begin += block, ++b) {
    const size_t end = std::min(n, begin + block);
    std::vector<int32_t>& dst = IsValBlock(b, val_fraction) ? out.val : out.train;
    dst.insert(dst.end(), tokens.begin() + begin, tokens.begin() + end);
  }
  return out;
}

absl::StatusOr<TokenSplits> LoadPrepared(const std::string& dir) {
  TokenSplits out;
  ASSIGN_OR_RETURN(out.train, ReadShard(dir + "/" + kTrainShardName));
  ASSIGN_OR_RETURN(out.val, ReadShard(dir + "/" + kValShardName));
  return out;
}

absl::StatusOr<TokenSplits> LoadCorpus(const std::string& path, const Tokenizer& tok,
                                       double val_fraction) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    ASSIGN_OR_RETURN(TokenSplits splits, LoadPrepared(path));
    for (const auto* part : {&splits.train, &splits.val}) {
      const auto it = std::max_element(part->begin(), part->end());
      if (it != part->end() && *it >= tok.vocab_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " holds token id ", *it, " but the tokenizer has ", tok.vocab_size(),
                         " ids (prepared with another tokenizer? use its ", kTokenizerName, ")"));
      }
    }
    return splits;
  }
  if (!(val_fraction >= 0 && val_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("validation fraction ", val_fraction, " outside [0, 1)"));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return SplitTrainVal(tok.Encode(text), val_fraction);
}

}  // namespace ladder
