#include "src/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "src/checkpoint/manifest.h"
#include "src/core/crc32.h"
#include "src/core/file_util.h"
#include "src/core/status.h"

namespace ladder {

std::string CheckpointStepName(int64_t step) { return absl::StrFormat("step-%08d", step); }

std::string LatestFileContents(int64_t step) { return CheckpointStepName(step) + "\n"; }

std::string ShardFileName(int rank) { return absl::StrFormat("rank-%05d.bin", rank); }

namespace {

namespace fs = std::filesystem;

// A rename or a new file is durable only once its directory is synced.
absl::Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open directory '", dir, "'"));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return absl::InternalError(absl::StrCat("cannot fsync directory '", dir, "'"));
  return absl::OkStatus();
}

}  // namespace

absl::Status Agree(Communicator* world, const absl::Status& mine, const char* what) {
  int32_t failed = mine.ok() ? -1 : world->rank();
  int32_t any = failed;
  RETURN_IF_ERROR(world->AllReduce(Tensor::I32(&any, {1}, Device::kCpu), ReduceOp::kMax));
  if (any < 0) return absl::OkStatus();
  if (!mine.ok()) return mine;
  return absl::Status(absl::StatusCode::kAborted, absl::StrCat(what, ": rank ", any, " failed"));
}

namespace {

// ---- what this rank writes ---------------------------------------------

struct Shard {
  std::string bytes;  // header + pieces
  std::vector<Piece> pieces;
};

// Local tensor i's rows as runs of consecutive logical rows.
std::vector<RowRun> LogicalRuns(const ParameterTable& t, int i) {
  const std::vector<int64_t>& shape = t.local_shape(i);
  const int64_t rows = shape[0];
  std::vector<RowRun> runs;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = t.LogicalRow(i, r);
    if (!runs.empty() && runs.back().start + runs.back().count == row) {
      ++runs.back().count;
    } else {
      runs.push_back({row, 1});
    }
  }
  return runs;
}

bool WritesTensor(const ParameterTable& t, int i) {
  if (t.IsTiedCopy(i)) return false;
  return t.spec(i).split != TpSplit::kReplicated || t.layout().tp_rank == 0;
}

Shard BuildShard(const ParameterTable& t, int rank, bool writer, const float* w, const float* m,
                 const float* v) {
  Shard s;
  s.bytes.assign(kShardMagic, kShardMagic + 8);
  const uint32_t header[2] = {static_cast<uint32_t>(kManifestVersion), static_cast<uint32_t>(rank)};
  s.bytes.append(reinterpret_cast<const char*>(header), sizeof(header));
  if (!writer) return s;
  // One allocation: growing a gigabyte string by doubling costs more than
  // the checksums.
  size_t total = s.bytes.size();
  for (int i = 0; i < t.size(); ++i) {
    if (WritesTensor(t, i)) total += kNumPieceKinds * static_cast<size_t>(t.numel(i)) * 4;
  }
  s.bytes.reserve(total);
  for (int i = 0; i < t.size(); ++i) {
    if (!WritesTensor(t, i)) continue;
    const std::vector<int64_t>& shape = t.local_shape(i);
    const PieceKind kinds[] = {PieceKind::kWeights, PieceKind::kMomentM, PieceKind::kMomentV};
    const float* sources[] = {w, m, v};
    for (int k = 0; k < kNumPieceKinds; ++k) {
      Piece p;
      p.kind = kinds[k];
      p.tensor = t.logical_index(i);
      p.offset = static_cast<int64_t>(s.bytes.size());
      p.rows = LogicalRuns(t, i);
      p.col_start = t.LogicalColumnStart(i);
      p.cols = shape.size() == 2 ? shape[1] : 1;
      const char* data = reinterpret_cast<const char*>(sources[k] + t.offset(i));
      const size_t bytes = static_cast<size_t>(t.numel(i)) * sizeof(float);
      p.crc = Crc32(0, data, bytes);
      s.bytes.append(data, bytes);
      s.pieces.push_back(std::move(p));
    }
  }
  return s;
}

// A rank's shard entry as int64s for the gather to rank 0:
// [bytes, pieces, {kind, tensor, offset, col_start, cols, crc, runs, {start, count}...}...]
std::vector<int64_t> Encode(const Shard& s) {
  std::vector<int64_t> e = {static_cast<int64_t>(s.bytes.size()),
                            static_cast<int64_t>(s.pieces.size())};
  for (const Piece& p : s.pieces) {
    e.insert(e.end(), {static_cast<int64_t>(p.kind), p.tensor, p.offset, p.col_start, p.cols, p.crc,
                       static_cast<int64_t>(p.rows.size())});
    for (const RowRun& r : p.rows) e.insert(e.end(), {r.start, r.count});
  }
  return e;
}

void Decode(const int64_t* e, int file, Manifest* m) {
  m->files.push_back({ShardFileName(file), e[0]});
  const int64_t n = e[1];
  e += 2;
  for (int64_t i = 0; i < n; ++i) {
    Piece p;
    p.kind = static_cast<PieceKind>(e[0]);
    p.tensor = static_cast<int>(e[1]);
    p.file = file;
    p.offset = e[2];
    p.col_start = e[3];
    p.cols = e[4];
    p.crc = static_cast<uint32_t>(e[5]);
    const int64_t runs = e[6];
    e += 7;
    for (int64_t r = 0; r < runs; ++r, e += 2) p.rows.push_back({e[0], e[1]});
    m->pieces.push_back(std::move(p));
  }
}

// Every rank's encoded entry, on every rank (lengths first, then the
// entries padded to the longest, moved as bytes).
absl::StatusOr<std::vector<std::vector<int64_t>>> GatherEntries(Communicator* world,
                                                                const std::vector<int64_t>& mine) {
  const int n = world->size();
  std::vector<int32_t> lengths(n);
  int32_t len = static_cast<int32_t>(mine.size());
  RETURN_IF_ERROR(world->AllGather(Tensor::I32(&len, {1}, Device::kCpu),
                                   Tensor::I32(lengths.data(), {n}, Device::kCpu)));
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<int64_t> padded(mine);
  padded.resize(longest, 0);
  ASSIGN_OR_RETURN(const std::vector<int64_t> all, AllGatherValues(*world, std::move(padded)));
  std::vector<std::vector<int64_t>> out(n);
  for (int r = 0; r < n; ++r) {
    out[r].assign(all.begin() + r * longest, all.begin() + r * longest + lengths[r]);
  }
  return out;
}

// Committed step directories under dir, newest first.
std::vector<std::pair<int64_t, std::string>> CommittedSteps(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> steps;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    absl::string_view digits = name;
    int64_t step = 0;
    if (e.is_directory() && absl::ConsumePrefix(&digits, "step-") &&
        absl::SimpleAtoi(digits, &step) && fs::exists(e.path() / "manifest")) {
      steps.push_back({step, e.path().string()});
    }
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

}  // namespace

absl::Status CommitCheckpointStep(const std::string& dir, int64_t step, const std::string& manifest,
                                  int keep, const FileWriter& write, bool durable) {
  const std::string final_dir = dir + "/" + CheckpointStepName(step), tmp = final_dir + ".tmp";
  auto sync = [durable](const std::string& d) { return durable ? SyncDir(d) : absl::OkStatus(); };
  RETURN_IF_ERROR(write(tmp + "/manifest", manifest));
  RETURN_IF_ERROR(sync(tmp));
  std::error_code ec;
  fs::remove_all(final_dir, ec);  // a same-step checkpoint from an earlier attempt
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot commit checkpoint '", final_dir, "': ", ec.message()));
  }
  RETURN_IF_ERROR(sync(dir));
  RETURN_IF_ERROR(write(dir + "/latest", LatestFileContents(step)));
  RETURN_IF_ERROR(sync(dir));
  // Only now may old checkpoints go; the newest is never among them.
  std::vector<std::pair<int64_t, std::string>> steps = CommittedSteps(dir);
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < steps.size(); ++i) {
    fs::remove_all(steps[i].second, ec);
  }
  return absl::OkStatus();
}

namespace {

// ---- loading ------------------------------------------------------------

// Everything a rank needs from one checkpoint, verified, in host memory.
struct Loaded {
  std::vector<float> w, m, v;  // this rank's table
  Trainer::Position position;
};

// Resolves a checkpoint directory (its `latest`) or a step directory to the
// step directory.
absl::StatusOr<std::string> StepDir(const std::string& path) {
  if (fs::exists(path + "/manifest")) return path;
  ASSIGN_OR_RETURN(std::string latest, ReadFile(path + "/latest"));
  return path + "/" + std::string(absl::StripAsciiWhitespace(latest));
}

absl::StatusOr<Manifest> ReadManifest(const std::string& step_dir) {
  const std::string path = step_dir + "/manifest";
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseManifest(text, path);
}

// Opens a shard file after checking its size against the manifest and its
// magic (the pieces' checksums cover the rest).
absl::StatusOr<std::ifstream> OpenShard(const std::string& path, int64_t bytes) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return absl::DataLossError(absl::StrCat("cannot read shard '", path, "'"));
  if (static_cast<int64_t>(size) != bytes) {
    return absl::DataLossError(
        absl::StrCat("shard '", path, "' has ", size, " bytes, the manifest says ", bytes));
  }
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  if (!in || std::memcmp(magic, kShardMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat("'", path, "' is not a ladder shard file"));
  }
  return in;
}

// The shard files of a step directory, opened (and checked) on first use.
class DiskShards : public ShardSource {
 public:
  DiskShards(std::string step_dir, const Manifest& m) : dir_(std::move(step_dir)), m_(m) {}
  std::string Name(int file) const override { return dir_ + "/" + m_.files[file].name; }
  absl::Status Read(int file, int64_t offset, int64_t bytes, char* out) override {
    if (!files_.count(file)) {
      ASSIGN_OR_RETURN(std::ifstream in, OpenShard(Name(file), m_.files[file].bytes));
      files_.emplace(file, std::move(in));
    }
    std::ifstream& in = files_.at(file);
    in.seekg(offset);
    in.read(out, static_cast<std::streamsize>(bytes));
    if (!in) return absl::DataLossError(absl::StrCat("cannot read shard '", Name(file), "'"));
    return absl::OkStatus();
  }

 private:
  std::string dir_;
  const Manifest& m_;
  std::map<int, std::ifstream> files_;
};

// Shard files held in memory, whole, in the manifest's file order.
class MemoryShards : public ShardSource {
 public:
  MemoryShards(std::string where, const Manifest& m, const std::vector<absl::string_view>& shards,
               bool checked)
      : where_(std::move(where)), m_(m), shards_(shards), checked_(checked) {}
  bool checked() const override { return checked_; }
  std::string Name(int file) const override { return where_ + "/" + m_.files[file].name; }
  absl::Status Read(int file, int64_t offset, int64_t bytes, char* out) override {
    if (static_cast<size_t>(file) >= shards_.size()) {
      return absl::DataLossError(absl::StrCat("shard '", Name(file), "' is missing"));
    }
    RETURN_IF_ERROR(CheckShardBytes(shards_[file], m_.files[file].bytes, Name(file)));
    std::memcpy(out, shards_[file].data() + offset, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }

 private:
  std::string where_;
  const Manifest& m_;
  const std::vector<absl::string_view>& shards_;
  bool checked_;
};

// Each row of a piece, verified: the piece, the row's index in its logical
// tensor and its p.cols values (logical columns from p.col_start).
using PieceRowSink = std::function<void(const Piece& p, int64_t row, const float* values)>;

// Reads every piece `wanted` accepts, checks its checksum before its values
// are used (unless the source's were checked before; the source checks each
// file's size and magic), and hands its rows to `sink`.
absl::Status ReadPieces(ShardSource& source, const Manifest& m,
                        const std::function<bool(const Piece&)>& wanted, const PieceRowSink& sink) {
  const std::vector<ParamSpec> specs = GptParameterSpecs(m.model);
  // One buffer for every piece, grown to the largest: memory touched for
  // the first time is what a restore pays most for (docs/results.md).
  std::vector<float> data;
  for (const Piece& p : m.pieces) {
    if (!wanted(p)) continue;
    data.resize(static_cast<size_t>(p.numel()));
    const absl::Status read = source.Read(p.file, p.offset, static_cast<int64_t>(data.size() * 4),
                                          reinterpret_cast<char*>(data.data()));
    if (!read.ok()) return read;
    if (!source.checked() && Crc32(0, data.data(), data.size() * 4) != p.crc) {
      return absl::DataLossError(absl::StrCat(
          "shard '", source.Name(p.file), "': checksum mismatch in ", specs[p.tensor].name, " (",
          PieceKindName(p.kind), "): the file is corrupt"));
    }
    const float* values = data.data();
    for (const RowRun& r : p.rows) {
      for (int64_t row = r.start; row < r.start + r.count; ++row, values += p.cols) {
        sink(p, row, values);
      }
    }
  }
  return absl::OkStatus();
}

// This rank's part of the checkpoint `m` describes, read from `source` and
// verified; `where` names it in errors.
absl::StatusOr<Loaded> ReadCheckpoint(const Manifest& m, ShardSource& source,
                                      const std::string& where, Trainer& trainer) {
  const GptConfig& cfg = trainer.config().model;
  if (m.model.ToText() != cfg.ToText()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the checkpoint's model differs from the config's (", m.model.n_layer,
                     " layers, width ", m.model.n_embd, ", vocab ", m.model.vocab_size, ")"));
  }
  const ParameterTable& t = trainer.model().table();
  const std::vector<ParamSpec> specs = GptParameterSpecs(cfg);
  // Where each piece's rows land, straight in this layout's shards (no
  // logical tensor in between): per logical tensor, the local tensors cut
  // from it, each with the local row of every logical row (-1: not held)
  // and its logical column range.
  struct Cut {
    int i;
    std::vector<int64_t> local_row;
    int64_t col_start, cols;
  };
  std::map<int, std::vector<Cut>> cuts;
  for (int i = 0; i < t.size(); ++i) {
    const std::vector<int64_t>& shape = t.local_shape(i);
    Cut c{i, std::vector<int64_t>(static_cast<size_t>(specs[t.logical_index(i)].shape[0]), -1),
          t.LogicalColumnStart(i), shape.size() == 2 ? shape[1] : 1};
    for (int64_t r = 0; r < shape[0]; ++r) c.local_row[t.LogicalRow(i, r)] = r;
    cuts[t.logical_index(i)].push_back(std::move(c));
  }
  Loaded out;
  std::vector<float>* local[] = {&out.w, &out.m, &out.v};
  for (std::vector<float>* l : local) l->assign(t.total_floats(), 0.0f);
  RETURN_IF_ERROR(ReadPieces(
      source, m, [&](const Piece& p) { return cuts.count(p.tensor) > 0; },
      [&](const Piece& p, int64_t row, const float* values) {
        float* base = local[static_cast<int>(p.kind)]->data();
        for (const Cut& c : cuts.at(p.tensor)) {
          const int64_t r = c.local_row[row];
          const int64_t from = std::max(p.col_start, c.col_start);
          const int64_t to = std::min(p.col_start + p.cols, c.col_start + c.cols);
          if (r < 0 || from >= to) continue;
          std::copy(values + (from - p.col_start), values + (to - p.col_start),
                    base + t.offset(c.i) + r * c.cols + (from - c.col_start));
        }
      }));
  out.position.step = m.step;
  out.position.loader = {m.loader_epoch, m.loader_index};
  out.position.guard = m.guard;
  return out;
}

absl::StatusOr<Loaded> ReadStepDir(const std::string& step_dir, Trainer& trainer) {
  ASSIGN_OR_RETURN(Manifest m, ReadManifest(step_dir));
  DiskShards disk(step_dir, m);
  return ReadCheckpoint(m, disk, step_dir, trainer);
}

// Sets what every rank has read and verified.
absl::Status Install(const Loaded& loaded, Trainer& trainer) {
  RETURN_IF_ERROR(trainer.model().SetWeights(loaded.w.data()));
  RETURN_IF_ERROR(trainer.SetOptimizerState(loaded.m, loaded.v));
  return trainer.Restore(loaded.position);
}

}  // namespace

absl::Status CheckShardBytes(absl::string_view bytes, int64_t expected, const std::string& name) {
  if (static_cast<int64_t>(bytes.size()) != expected) {
    return absl::DataLossError(absl::StrCat("shard '", name, "' has ", bytes.size(),
                                            " bytes, the manifest says ", expected));
  }
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kShardMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat("'", name, "' is not a ladder shard file"));
  }
  return absl::OkStatus();
}

absl::Status CheckShardPieces(absl::string_view bytes, const Manifest& m, int file,
                              const std::string& name) {
  RETURN_IF_ERROR(CheckShardBytes(bytes, m.files[file].bytes, name));
  for (const Piece& p : m.pieces) {
    if (p.file != file) continue;
    if (Crc32(0, bytes.data() + p.offset, static_cast<size_t>(p.numel()) * 4) != p.crc) {
      return absl::DataLossError(absl::StrCat("shard '", name, "': checksum mismatch in tensor ",
                                              p.tensor, " (", PieceKindName(p.kind), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LatestCheckpointStep(const std::string& dir) {
  absl::StatusOr<std::string> latest = ReadFile(dir + "/latest");
  if (!latest.ok()) return absl::NotFoundError(absl::StrCat("no checkpoint in '", dir, "'"));
  absl::string_view name = absl::StripAsciiWhitespace(*latest);
  int64_t step = 0;
  if (!absl::ConsumePrefix(&name, "step-") || !absl::SimpleAtoi(name, &step) || step < 0) {
    return absl::DataLossError(absl::StrCat("'", dir, "/latest' does not name a step"));
  }
  return step;
}

bool HasCheckpoint(const std::string& dir) { return fs::exists(dir + "/latest"); }

absl::StatusOr<CheckpointSummary> VerifyCheckpoint(const std::string& path) {
  CheckpointSummary out;
  ASSIGN_OR_RETURN(out.step_dir, StepDir(path));
  ASSIGN_OR_RETURN(out.manifest, ReadManifest(out.step_dir));
  for (const ShardFile& f : out.manifest.files) {
    RETURN_IF_ERROR(OpenShard(out.step_dir + "/" + f.name, f.bytes).status());
    out.bytes += f.bytes;
  }
  // Every piece's own checksum, by reading all of them; the weights kept.
  const std::vector<ParamSpec> specs = GptParameterSpecs(out.manifest.model);
  std::vector<int64_t> start(specs.size() + 1, 0);
  for (size_t i = 0; i < specs.size(); ++i) start[i + 1] = start[i] + specs[i].numel();
  out.weights.assign(static_cast<size_t>(start.back()), 0.0f);
  DiskShards disk(out.step_dir, out.manifest);
  RETURN_IF_ERROR(ReadPieces(
      disk, out.manifest, [](const Piece&) { return true; },
      [&](const Piece& p, int64_t row, const float* values) {
        if (p.kind != PieceKind::kWeights) return;
        const int64_t dim1 = specs[p.tensor].shape.size() == 2 ? specs[p.tensor].shape[1] : 1;
        std::copy(values, values + p.cols,
                  out.weights.data() + start[p.tensor] + row * dim1 + p.col_start);
      }));
  return out;
}

absl::StatusOr<CheckpointSnapshot> TakeSnapshot(Trainer& trainer, const CheckpointContext& ctx) {
  const Grid& grid = *ctx.grid;
  const Trainer::Position pos = trainer.position();
  // The state at this step in host memory, gathered where it is sharded
  // (collective over DP), with every piece's checksum.
  const ParameterTable& t = trainer.model().table();
  std::vector<float> w(t.total_floats()), m, v;
  RETURN_IF_ERROR(trainer.model().GetWeights(w.data()));
  RETURN_IF_ERROR(trainer.GetOptimizerState(&m, &v));
  Shard shard = BuildShard(t, grid.rank(), trainer.dp_rank() == 0, w.data(), m.data(), v.data());
  ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> entries,
                   GatherEntries(ctx.world, Encode(shard)));
  CheckpointSnapshot out;
  out.shard = std::move(shard.bytes);
  Manifest& man = out.manifest;
  man.step = pos.step;
  man.tokens = pos.step * trainer.tokens_per_step();
  man.seed = trainer.config().seed;
  man.model = trainer.config().model;
  man.dp = grid.dp_size();
  man.cp = grid.cp_size();
  man.tp = grid.tp_size();
  man.pp = grid.pp_size();
  man.zero = ctx.zero;
  man.loader_epoch = pos.loader.epoch;
  man.loader_index = pos.loader.index;
  man.guard = pos.guard;
  for (int r = 0; r < grid.world_size(); ++r) Decode(entries[r].data(), r, &man);
  return out;
}

absl::Status LoadShards(const Manifest& m, const std::vector<absl::string_view>& shards,
                        bool checked, const std::string& where, Trainer& trainer,
                        const CheckpointContext& ctx) {
  MemoryShards source(where, m, shards, checked);
  absl::StatusOr<Loaded> loaded = ReadCheckpoint(m, source, where, trainer);
  RETURN_IF_ERROR(Agree(ctx.world, loaded.status(), absl::StrCat("loading ", where).c_str()));
  return Install(*loaded, trainer);
}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

absl::Status CheckpointWriter::Start(const std::string& dir, Trainer& trainer,
                                     const CheckpointContext& ctx, int keep, bool async) {
  RETURN_IF_ERROR(Finish().status());  // one save at a time
  Communicator* world = ctx.world;
  const Grid& grid = *ctx.grid;
  const std::string name = CheckpointStepName(trainer.step());
  const std::string tmp = dir + "/" + name + ".tmp";
  absl::Status made = absl::OkStatus();
  if (world->rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    fs::remove_all(tmp, ec);
    if (!fs::create_directory(tmp, ec) || ec) {
      made = absl::InternalError(absl::StrCat("cannot create checkpoint '", dir, "/", name,
                                              "': ", ec ? ec.message() : "already exists"));
    }
  }
  RETURN_IF_ERROR(Agree(world, made, "creating the checkpoint directory"));

  ASSIGN_OR_RETURN(CheckpointSnapshot snap, TakeSnapshot(trainer, ctx));
  auto shard = std::make_shared<std::string>(std::move(snap.shard));
  pending_ = std::make_unique<Pending>();
  Pending& p = *pending_;
  p.ctx = ctx;
  p.dir = dir;
  p.tmp = tmp;
  p.final_dir = dir + "/" + name;
  p.keep = keep;
  p.manifest = std::move(snap.manifest);
  // The shard file: now, or by a thread while training goes on.
  const std::string path = tmp + "/" + ShardFileName(grid.rank());
  auto write = [this, shard, path, env = ctx.env] {
    pending_->wrote = env->WriteFileAtomically(path, *shard);
    pending_->written.store(true);
  };
  if (async) {
    thread_ = std::thread(write);
  } else {
    write();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointWriter::Poll() {
  if (pending_ == nullptr) return std::string();
  // Every rank must take the same decision at the same step.
  int32_t done = pending_->written.load() ? 1 : 0;
  RETURN_IF_ERROR(
      pending_->ctx.world->AllReduce(Tensor::I32(&done, {1}, Device::kCpu), ReduceOp::kSum));
  if (done != pending_->ctx.world->size()) return std::string();
  return Finish();
}

absl::StatusOr<std::string> CheckpointWriter::Finish() {
  if (pending_ == nullptr) return std::string();
  if (thread_.joinable()) thread_.join();
  std::unique_ptr<Pending> p = std::move(pending_);
  Communicator* world = p->ctx.world;
  const absl::Status all_wrote = Agree(world, p->wrote, "writing the checkpoint shards");
  absl::Status committed = absl::OkStatus();
  if (world->rank() == 0) {
    if (!all_wrote.ok()) {
      std::error_code ec;
      fs::remove_all(p->tmp, ec);  // the previous checkpoint stays the latest
    } else {
      committed = p->ctx.write_extra ? p->ctx.write_extra(p->tmp) : absl::OkStatus();
      if (committed.ok()) {
        Env* env = p->ctx.env;
        committed = CommitCheckpointStep(
            p->dir, p->manifest.step, SerializeManifest(p->manifest), p->keep,
            [env](const std::string& path, const std::string& contents) {
              return env->WriteFileAtomically(path, contents);
            },
            /*durable=*/true);
      }
    }
  }
  if (!all_wrote.ok()) {
    return absl::Status(all_wrote.code(),
                        absl::StrCat("checkpoint ", fs::path(p->final_dir).filename().string(),
                                     " not written (", all_wrote.message(), ")"));
  }
  RETURN_IF_ERROR(Agree(world, committed, "committing the checkpoint"));
  return p->final_dir;
}

absl::StatusOr<std::string> LoadCheckpoint(const std::string& path, Trainer& trainer,
                                           const CheckpointContext& ctx, bool strict) {
  // Candidates: the one `latest` names (or `path` itself), then, unless
  // strict, every earlier committed step, newest first.
  std::vector<std::string> candidates;
  if (fs::exists(path + "/manifest")) {
    candidates.push_back(path);
  } else {
    ASSIGN_OR_RETURN(std::string latest, ReadFile(path + "/latest"));
    latest = std::string(absl::StripAsciiWhitespace(latest));
    candidates.push_back(path + "/" + latest);
    if (!strict) {
      for (const auto& [step, dir] : CommittedSteps(path)) {
        if (fs::path(dir).filename() != latest) candidates.push_back(dir);
      }
    }
  }
  absl::Status last = absl::NotFoundError(absl::StrCat("no checkpoint in '", path, "'"));
  for (const std::string& dir : candidates) {
    absl::StatusOr<Loaded> loaded = ReadStepDir(dir, trainer);
    last = Agree(ctx.world, loaded.status(), absl::StrCat("loading ", dir).c_str());
    if (last.ok()) {
      RETURN_IF_ERROR(Install(*loaded, trainer));
      return dir;
    }
    // A different model is a mistake, not damage: never fall back past it.
    if (strict || last.code() == absl::StatusCode::kInvalidArgument) return last;
    if (!loaded.ok()) {
      std::fprintf(stderr, "warning: %s; trying an earlier checkpoint\n",
                   std::string(loaded.status().message()).c_str());
    }
  }
  return last;
}

}  // namespace ladder
