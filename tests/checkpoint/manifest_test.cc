// The manifest parser against good, damaged and hostile manifests: a round
// trip keeps everything; any truncation or flipped bit is refused by the
// checksum; and contents that are well sealed but inconsistent (pieces past
// their tensor or file, double or partial coverage, a foreign model) are
// refused with DataLoss, never read out of bounds.
#include "src/checkpoint/manifest.h"

#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "src/core/crc32.h"
#include "src/model/parameters.h"

namespace ladder {
namespace {

// A consistent manifest of a small model: one shard file holding every
// tensor whole, weights then moments.
Manifest Small() {
  Manifest m;
  m.step = 7;
  m.tokens = 7 * 256;
  m.seed = 42;
  m.model.n_layer = 2;
  m.model.n_head = 2;
  m.model.n_embd = 16;
  m.model.context = 8;
  m.model.vocab_size = 256;
  m.dp = 2;
  m.zero = 1;
  m.loader_epoch = 1;
  m.loader_index = 3;
  int64_t offset = kShardHeaderBytes;
  const std::vector<ParamSpec> specs = GptParameterSpecs(m.model);
  for (PieceKind k : {PieceKind::kWeights, PieceKind::kMomentM, PieceKind::kMomentV}) {
    for (size_t t = 0; t < specs.size(); ++t) {
      Piece p;
      p.kind = k;
      p.tensor = static_cast<int>(t);
      p.offset = offset;
      p.rows = {{0, specs[t].shape[0]}};
      p.cols = specs[t].shape.size() == 2 ? specs[t].shape[1] : 1;
      p.crc = static_cast<uint32_t>(t);
      offset += p.numel() * 4;
      m.pieces.push_back(p);
    }
  }
  m.files.push_back({"rank-00000.bin", offset});
  return m;
}

// Replaces the checksum line so that edited text is well sealed.
std::string Reseal(std::string text) {
  text.erase(text.rfind("end "));
  return text + absl::StrFormat("end %08x\n", Crc32(0, text.data(), text.size()));
}

TEST(ManifestTest, RoundTrip) {
  const Manifest m = Small();
  const std::string text = SerializeManifest(m);
  absl::StatusOr<Manifest> back = ParseManifest(text, "m");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(SerializeManifest(*back), text);
  EXPECT_EQ(back->step, 7);
  EXPECT_EQ(back->loader_index, 3u);
  EXPECT_EQ(back->pieces.size(), m.pieces.size());
}

TEST(ManifestTest, EveryTruncationAndRandomBitFlipsAreRefused) {
  const std::string text = SerializeManifest(Small());
  for (size_t n = 0; n + 1 < text.size(); n += 7) {  // (the last newline is optional)
    absl::StatusOr<Manifest> r = ParseManifest(text.substr(0, n), "m");
    ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << "length " << n;
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 500; ++i) {
    std::string bad = text;
    bad[rng() % bad.size()] ^= static_cast<char>(1 << (rng() % 8));
    if (bad == text) continue;
    ASSERT_EQ(ParseManifest(bad, "m").status().code(), absl::StatusCode::kDataLoss) << i;
  }
}

TEST(ManifestTest, SealedButInconsistentIsRefusedByName) {
  const std::string good = SerializeManifest(Small());
  struct Case {
    std::string from, to, message;
  };
  const std::vector<Case> cases = {
      // A row run past wte's 256 rows.
      {"piece w 0 0 16 0+256 ", "piece w 0 0 16 0+257 ", "row run outside the tensor"},
      // Columns past the width.
      {"piece w 0 0 16 0+256 0 16 ", "piece w 0 0 16 0+256 1 16 ", "column range outside"},
      // A piece past the end of its file.
      {absl::StrCat("rank-00000.bin ", Small().files[0].bytes), "rank-00000.bin 100",
       "past its shard file"},
      // wpe covered by half its rows.
      {"piece w 1 0 16400 0+8 ", "piece w 1 0 16400 0+4 ", "not covered exactly"},
      // A file name that leaves the directory.
      {"rank-00000.bin", "../etc.bin", "malformed file line"},
      // Another model's tensor list.
      {"model n_embd = 16", "model n_embd = 32", "does not match the model config"},
      {"model n_layer = 2", "model n_layer = 99999999", "n_layer must be at most 65536"},
      {"model n_embd = 16", "model n_embd = 65536", "implausibly large"},
  };
  for (const Case& c : cases) {
    const std::string bad = Reseal(absl::StrReplaceAll(good, {{c.from, c.to}}));
    ASSERT_NE(bad, good) << c.from;
    absl::StatusOr<Manifest> r = ParseManifest(bad, "ck/manifest");
    ASSERT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << c.to;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << r.status();
    EXPECT_EQ(r.status().message().find("ck/manifest:"), 0u) << r.status();
  }
}

}  // namespace
}  // namespace ladder
