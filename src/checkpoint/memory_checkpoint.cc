#include "src/checkpoint/memory_checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/checkpoint/manifest.h"
#include "src/core/crc32.h"
#include "src/core/file_util.h"
#include "src/core/status.h"

namespace ladder {
namespace {

namespace fs = std::filesystem;

constexpr int kKeepInMemory = 2;  // the newest step and the one before

std::string ReplicaName(int rank) { return "replica-" + ShardFileName(rank); }

Tensor Bytes(std::string* s) {
  return Tensor(s->data(), DType::kI8, {static_cast<int64_t>(s->size())}, Device::kCpu);
}
// Bytes only sent (a Send's or a broadcast root's buffer, which MPI reads).
Tensor Bytes(absl::string_view s) {
  return Tensor(const_cast<char*>(s.data()), DType::kI8, {static_cast<int64_t>(s.size())},
                Device::kCpu);
}

absl::Status Refuse(const std::string& why) { return absl::FailedPreconditionError(why); }

}  // namespace

std::string MemoryCheckpointArea(const std::string& checkpoint_dir) {
  const char* root = std::getenv("LADDER_MEM_CHECKPOINT_ROOT");
  std::error_code ec;
  const std::string path = fs::weakly_canonical(fs::absolute(checkpoint_dir), ec).string();
  return absl::StrFormat("%s/ladder-%08x", root != nullptr && *root ? root : "/dev/shm",
                         Crc32(0, path.data(), path.size()));
}

// ---- one node's area ----------------------------------------------------

absl::Status MemoryStore::Begin(int64_t step) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  // A step still .tmp was never committed: its writer died or gave up.
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().extension() == ".tmp") fs::remove_all(e.path(), ec);
  }
  const std::string tmp = dir_ + "/" + CheckpointStepName(step) + ".tmp";
  if (!fs::create_directory(tmp, ec) || ec) {
    return absl::InternalError(absl::StrCat("cannot create checkpoint '", dir_, "/",
                                            CheckpointStepName(step),
                                            "': ", ec ? ec.message() : "already exists"));
  }
  return absl::OkStatus();
}

absl::Status MemoryStore::Put(int64_t step, const std::string& name,
                              const std::string& bytes) const {
  return WriteFileAtomically(dir_ + "/" + CheckpointStepName(step) + ".tmp/" + name, bytes);
}

absl::Status MemoryStore::Commit(int64_t step, const std::string& manifest, int keep) {
  // Node memory: nothing to flush.
  return CommitCheckpointStep(dir_, step, manifest, keep, WriteFileAtomically,
                              /*durable=*/false);
}

absl::StatusOr<int64_t> MemoryStore::Latest() const {
  // The same marker as a disk checkpoint directory's.
  return LatestCheckpointStep(dir_);
}

absl::StatusOr<std::string> MemoryStore::Get(int64_t step, const std::string& name) const {
  // One copy out of shared memory into a buffer of the file's size (a
  // stream into a growing string would copy a shard several times).
  const std::string path = dir_ + "/" + CheckpointStepName(step) + "/" + name;
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (!in) return absl::DataLossError(absl::StrCat("error reading '", path, "'"));
  return bytes;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  std::swap(addr_, other.addr_);
  std::swap(size_, other.size_);
  return *this;
}

MappedFile::~MappedFile() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
}

absl::StatusOr<MappedFile> MemoryStore::Map(int64_t step, const std::string& name) const {
  const std::string path = dir_ + "/" + CheckpointStepName(step) + "/" + name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  MappedFile f;
  f.size_ = static_cast<size_t>(::lseek(fd, 0, SEEK_END));
  if (f.size_ > 0) {
    // Populated at once: the pages are in memory already (tmpfs), so this
    // only fills the page tables, in one call instead of a fault a page.
    void* addr = ::mmap(nullptr, f.size_, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (addr == MAP_FAILED) {
      ::close(fd);
      return absl::DataLossError(absl::StrCat("cannot map '", path, "'"));
    }
    f.addr_ = addr;
  }
  ::close(fd);
  return f;
}

// ---- the collective protocol --------------------------------------------

absl::StatusOr<MemoryCheckpointer> MemoryCheckpointer::Create(const std::string& checkpoint_dir,
                                                              const CheckpointContext& ctx) {
  ASSIGN_OR_RETURN(NodeMap nodes, NodeMapFromEnv(ctx.world->size()));
  return MemoryCheckpointer(MemoryCheckpointArea(checkpoint_dir), nodes, ctx);
}

MemoryStore MemoryCheckpointer::Store(int rank) const {
  return MemoryStore(absl::StrCat(area_, "/node-", nodes_.node(rank)));
}

absl::StatusOr<std::string> MemoryCheckpointer::Save(Trainer& trainer) {
  Communicator* world = ctx_->world;
  const int rank = world->rank();
  const bool leader = nodes_.leads(rank);
  MemoryStore store = Store(rank);
  const int64_t step = trainer.step();
  ASSIGN_OR_RETURN(CheckpointSnapshot snap, TakeSnapshot(trainer, *ctx_));
  RETURN_IF_ERROR(Agree(world, leader ? store.Begin(step) : absl::OkStatus(),
                        "starting the memory checkpoint"));
  absl::Status wrote = store.Put(step, ShardFileName(rank), snap.shard);
  if (nodes_.nodes() > 1) {
    // The ring: my shard to the next node, the previous node's to me.
    const int next = nodes_.successor(rank), prev = nodes_.predecessor(rank);
    int64_t size = static_cast<int64_t>(snap.shard.size()), prev_size = 0;
    RETURN_IF_ERROR(world->SendRecv(Tensor(&size, DType::kI8, {8}, Device::kCpu), next,
                                    Tensor(&prev_size, DType::kI8, {8}, Device::kCpu), prev));
    std::string replica(static_cast<size_t>(prev_size), '\0');
    RETURN_IF_ERROR(world->SendRecv(Bytes(&snap.shard), next, Bytes(&replica), prev));
    if (wrote.ok()) wrote = store.Put(step, ReplicaName(prev), replica);
  }
  written_step_ = -1;
  RETURN_IF_ERROR(Agree(world, wrote, "writing the memory checkpoint"));
  written_step_ = step;
  written_manifest_ = SerializeManifest(snap.manifest);
  return absl::StrFormat("%s in memory on %d node%s%s", CheckpointStepName(step), nodes_.nodes(),
                         nodes_.nodes() > 1 ? "s" : "",
                         nodes_.nodes() > 1 ? ", replicas on the next node" : "");
}

absl::Status MemoryCheckpointer::Commit() {
  if (written_step_ < 0) return absl::OkStatus();
  const int rank = ctx_->world->rank();
  const int64_t step = written_step_;
  written_step_ = -1;
  return Agree(ctx_->world,
               nodes_.leads(rank) ? Store(rank).Commit(step, written_manifest_, kKeepInMemory)
                                  : absl::OkStatus(),
               "committing the memory checkpoint");
}

absl::StatusOr<std::string> MemoryCheckpointer::Restore(Trainer& trainer, int64_t disk_step) {
  Communicator* world = ctx_->world;
  const int rank = world->rank(), n = world->size();
  const MemoryStore store = Store(rank);

  // 1. The step: the newest every node's `latest` reaches (a save that died
  //    mid-commit leaves some nodes one step ahead; kept steps cover it).
  absl::StatusOr<int64_t> latest = store.Latest();
  ASSIGN_OR_RETURN(std::vector<int64_t> steps,
                   AllGatherValues<int64_t>(*world, {latest.ok() ? *latest : -1}));
  int64_t step = -1;
  for (int64_t s : steps) {
    if (s >= 0) step = step < 0 ? s : std::min(step, s);
  }
  if (step < 0) return Refuse("no memory checkpoint");
  const std::string name = CheckpointStepName(step);
  if (step <= disk_step) {
    return Refuse(absl::StrCat("memory checkpoint ", name, " is not newer than the disk's ",
                               CheckpointStepName(disk_step)));
  }

  // 2. The manifest: every node that has one must hold the same text; a
  //    wiped node's ranks receive it.
  absl::StatusOr<std::string> text = store.Get(step, "manifest");
  const int64_t crc = text.ok() ? static_cast<int64_t>(Crc32(0, text->data(), text->size())) : -1;
  ASSIGN_OR_RETURN(
      std::vector<int64_t> crcs,
      AllGatherValues<int64_t>(*world, {crc, text.ok() ? static_cast<int64_t>(text->size()) : 0}));
  int source = -1;
  for (int r = 0; r < n; ++r) {
    if (crcs[2 * r] < 0) continue;
    if (source < 0) source = r;
    if (crcs[2 * r] != crcs[2 * source]) {
      return Refuse(absl::StrCat("the memory manifests of ", name, " differ between node ",
                                 nodes_.node(source), " and node ", nodes_.node(r)));
    }
  }
  if (source < 0) return Refuse(absl::StrCat("no node holds the manifest of memory ", name));
  std::string manifest_text = text.ok() ? *text : std::string(crcs[2 * source + 1], '\0');
  RETURN_IF_ERROR(world->Broadcast(Bytes(&manifest_text), source));
  absl::StatusOr<Manifest> parsed = ParseManifest(manifest_text, "memory " + name);
  RETURN_IF_ERROR(Agree(world, parsed.status(), "reading the memory manifest"));
  const Manifest& m = *parsed;
  const Grid& grid = *ctx_->grid;
  const GridShape written{m.dp, m.tp, m.pp, m.cp};
  if (LayoutName(written) != LayoutName(grid.shape()) || static_cast<int>(m.files.size()) != n) {
    return Refuse(absl::StrCat("memory ", name, " was written by ", LayoutName(written),
                               ", this run is ", LayoutName(grid.shape())));
  }

  // 3. Each shard's copies: its own node's, and the replica on the next
  //    node. A copy counts only when its size, magic and checksums match.
  // The copies are read where they lie, mapped, not copied out.
  auto intact = [&](const absl::StatusOr<MappedFile>& copy, int file) {
    return copy.ok() && CheckShardPieces(copy->bytes(), m, file, name).ok();
  };
  absl::StatusOr<MappedFile> own = store.Map(step, ShardFileName(rank));
  const bool own_ok = intact(own, rank);
  const int prev = nodes_.predecessor(rank), next = nodes_.successor(rank);
  absl::StatusOr<MappedFile> replica = nodes_.nodes() > 1
                                           ? store.Map(step, ReplicaName(prev))
                                           : absl::StatusOr<MappedFile>(absl::NotFoundError(""));
  const bool replica_ok = intact(replica, prev);
  ASSIGN_OR_RETURN(std::vector<int64_t> ok, AllGatherValues<int64_t>(*world, {own_ok, replica_ok}));
  int from_neighbour = 0;
  for (int r = 0; r < n; ++r) {
    if (ok[2 * r]) continue;
    if (nodes_.nodes() == 1 || !ok[2 * nodes_.successor(r) + 1]) {
      return Refuse(absl::StrFormat("rank %d's shard of memory %s has no intact copy (%s)", r, name,
                                    nodes_.nodes() > 1 ? "its node's and the next node's are "
                                                         "missing or corrupt"
                                                       : "missing or corrupt, no other node"));
    }
    ++from_neighbour;
  }
  // Replicas travel back to the ranks whose own copy is gone.
  const bool send = !ok[2 * prev], receive = !own_ok;
  std::string received;  // this rank's shard from the next node
  if (receive) received.assign(static_cast<size_t>(m.files[rank].bytes), '\0');
  if (send && receive) {
    RETURN_IF_ERROR(world->SendRecv(Bytes(replica->bytes()), prev, Bytes(&received), next));
  } else if (send) {
    RETURN_IF_ERROR(world->Send(Bytes(replica->bytes()), prev));
  } else if (receive) {
    RETURN_IF_ERROR(world->Recv(Bytes(&received), next));
  }

  // 4. Every rank gets every shard (a rank's tensors may span several
  //    files, as on disk), then loads them as a disk checkpoint would be.
  std::vector<std::string> others(static_cast<size_t>(n));
  std::vector<absl::string_view> shards(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (r == rank) {
      shards[r] = own_ok ? own->bytes() : absl::string_view(received);
      RETURN_IF_ERROR(world->Broadcast(Bytes(shards[r]), r));
    } else {
      others[r].assign(static_cast<size_t>(m.files[r].bytes), '\0');
      RETURN_IF_ERROR(world->Broadcast(Bytes(&others[r]), r));
      shards[r] = others[r];
    }
  }
  // Every shard was checked where it lay (its own copy or the replica it
  // came from) and MPI delivers what was sent: no second checksum pass.
  RETURN_IF_ERROR(LoadShards(m, shards, /*checked=*/true, "memory " + name, trainer, *ctx_));
  return from_neighbour == 0
             ? absl::StrCat("memory ", name, " (own node's copies)")
             : absl::StrFormat("memory %s (%d shard%s from the next node's replicas)", name,
                               from_neighbour, from_neighbour > 1 ? "s" : "");
}

void MemoryCheckpointer::Remove() {
  const int rank = ctx_->world->rank();
  if (!nodes_.leads(rank)) return;
  std::error_code ec;
  fs::remove_all(Store(rank).dir(), ec);
  fs::remove(area_, ec);  // once the last node's area is gone
}

}  // namespace ladder
