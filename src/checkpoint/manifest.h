// The checkpoint manifest: what a committed checkpoint directory holds and
// where, as text (docs/formats.md, "Checkpoints"). Written by rank 0 last,
// so its presence (and its final checksum line) is what makes a checkpoint.
//
// Tensors are described in *logical* coordinates: every piece a rank wrote is
// a set of rows (runs of consecutive rows) and a column range of one logical
// tensor, so a checkpoint written in one parallel layout loads in any other.
// Parsing validates everything a hostile file could use to read or allocate
// out of bounds: numbers, tensor indices, row runs and column ranges against
// the logical shapes, piece extents against the shard file sizes, and that
// the pieces of each kind tile every tensor exactly once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/model/gpt_config.h"
#include "src/train/guard.h"

namespace ladder {

inline constexpr int kManifestVersion = 1;
inline constexpr char kShardMagic[8] = {'L', 'A', 'D', 'D', 'E', 'R', 'S', '\0'};
inline constexpr int kShardHeaderBytes = 16;  // magic, u32 version, u32 rank

// What a piece holds: fp32 weights or one of AdamW's moments.
enum class PieceKind { kWeights, kMomentM, kMomentV };
inline constexpr int kNumPieceKinds = 3;
const char* PieceKindName(PieceKind k);  // "w", "m", "v"

struct RowRun {
  int64_t start = 0, count = 0;
};

struct Piece {
  PieceKind kind = PieceKind::kWeights;
  int tensor = 0;      // index in GptParameterSpecs(model)
  int file = 0;        // index in Manifest::files
  int64_t offset = 0;  // bytes into the file
  std::vector<RowRun> rows;
  int64_t col_start = 0, cols = 1;  // 1-D tensors: one column
  uint32_t crc = 0;                 // CRC-32 of the piece's bytes
  int64_t numel() const;
};

// The pieces carry the checksums; a file is checked by its size and magic.
struct ShardFile {
  std::string name;  // plain file name inside the checkpoint directory
  int64_t bytes = 0;
};

struct Manifest {
  int64_t step = 0;    // optimizer updates done
  int64_t tokens = 0;  // training tokens seen
  uint64_t seed = 0;
  GptConfig model;
  int dp = 1, tp = 1, pp = 1, zero = 0;  // the layout that wrote it
  int cp = 1;                            // its context parallelism (a "context" line when > 1)
  // The data loader's position (every data-parallel rank's is the same).
  uint64_t loader_epoch = 0, loader_index = 0;
  StepGuard::State guard;  // the step guard's running statistics
  std::vector<ShardFile> files;
  std::vector<Piece> pieces;
};

// The manifest as text, ending with a line "end <crc32 of the text before it>".
std::string SerializeManifest(const Manifest& m);
// DataLoss naming `source` and the problem for anything malformed,
// inconsistent or out of bounds.
absl::StatusOr<Manifest> ParseManifest(absl::string_view text, const std::string& source);

}  // namespace ladder
