// In-memory checkpoints: every rank's shard kept in its node's shared
// memory, with a copy on the next node, so a restarted job resumes in
// seconds instead of reading the disk (docs/formats.md, "Memory
// checkpoints"; docs/ARCHITECTURE.md, "Memory checkpoints").
//
// Nodes. Ranks are grouped into nodes as src/parallel/nodes.h says (K ranks
// each, LADDER_RANKS_PER_NODE simulating nodes on one machine); rank r's
// ring neighbour, the rank with the same local index on the next node,
// keeps r's replica.
//
// Memory. Each node has one area, a directory of tmpfs files under /dev/shm
// (the memory POSIX shm_open hands out): ROOT/ladder-<key>/node-<n>/, ROOT
// being LADDER_MEM_CHECKPOINT_ROOT or /dev/shm and <key> a hash of the
// checkpoint directory's absolute path, so the same command rerun finds it.
// The area outlives the processes (a killed rank's successor on the same
// node finds it) and goes with the node (deleting it simulates a lost node).
//
// The pieces, encoding and checksums are the disk checkpoint's
// (src/checkpoint/checkpoint.h); loading goes through LoadShards, the same
// verification and slicing as a disk load.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/checkpoint/checkpoint.h"
#include "src/parallel/nodes.h"

namespace ladder {

// The memory area of a checkpoint directory's job, ROOT/ladder-<key>.
std::string MemoryCheckpointArea(const std::string& checkpoint_dir);

// One node's area: committed steps step-<N>/ (the manifest, this node's own
// shards rank-<r>.bin, and the previous node's replica-rank-<r>.bin), the
// one being written step-<N>.tmp/, and `latest` naming the newest committed
// step. Plain files; not collective. Any process may use it; concurrent
// writers of one area must not overlap (the node's local rank 0 begins and
// commits, every rank of the node puts its files in between).
// A file of a memory area mapped read-only: the node's memory itself,
// nothing copied or newly allocated. Movable; unmaps when destroyed.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  absl::string_view bytes() const { return {static_cast<const char*>(addr_), size_}; }

 private:
  friend class MemoryStore;
  void* addr_ = nullptr;
  size_t size_ = 0;
};

class MemoryStore {
 public:
  explicit MemoryStore(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  // Creates the area if needed and an empty step-<step>.tmp/, removing any
  // uncommitted step left by a dead writer.
  absl::Status Begin(int64_t step);
  // Writes `bytes` as file `name` of the step being written.
  absl::Status Put(int64_t step, const std::string& name, const std::string& bytes) const;
  // Writes the manifest into step-<step>.tmp/, renames it to step-<step>/,
  // replaces `latest` atomically, then deletes committed steps beyond the
  // newest `keep`. Until `latest` is replaced the previous step stays the
  // latest.
  absl::Status Commit(int64_t step, const std::string& manifest, int keep);
  // The step `latest` names; NotFound when the area holds none.
  absl::StatusOr<int64_t> Latest() const;
  // File `name` of committed step `step`; NotFound if it is not there.
  absl::StatusOr<std::string> Get(int64_t step, const std::string& name) const;
  // The same file mapped instead of copied (a shard: the restore reads it
  // where it lies); NotFound if it is not there.
  absl::StatusOr<MappedFile> Map(int64_t step, const std::string& name) const;

 private:
  std::string dir_;
};

// The collective side: saves every rank's shard into its node's area and
// the neighbour node's, and restores from them. Every rank of the world
// holds one and calls Save and Restore together. Single-threaded.
class MemoryCheckpointer {
 public:
  // `checkpoint_dir` names the job's area (MemoryCheckpointArea). The
  // context must outlive this object.
  static absl::StatusOr<MemoryCheckpointer> Create(const std::string& checkpoint_dir,
                                                   const CheckpointContext& ctx);

  // Snapshots the trainer's state (TakeSnapshot), writes this rank's shard
  // into its node's area and a replica into its neighbour's, and returns
  // once every rank has written: a line describing what was written.
  // Nothing is committed until Commit (a run first writes the step's
  // metrics line). On error every rank returns an error, nothing is
  // committed and Commit has nothing to do.
  absl::StatusOr<std::string> Save(Trainer& trainer);
  // Commits the step the last successful Save wrote on every node (the
  // newest two steps are kept); OK with nothing to do when there is none.
  // On error a node that did not commit keeps its previous step as the
  // latest, and every rank returns an error.
  absl::Status Commit();

  // Restores the newest step that every node's `latest` reaches, if it is
  // newer than `disk_step` (-1: no disk checkpoint), in this run's layout,
  // and every rank's shard has an intact copy (checksums) in its own node's
  // area or else in its neighbour's. Returns a line saying which copies
  // were used; otherwise FailedPrecondition saying why, the same on every
  // rank, and the trainer untouched.
  absl::StatusOr<std::string> Restore(Trainer& trainer, int64_t disk_step);

  // Deletes this job's areas (each node's local rank 0 its own node's); not
  // collective. A later Save starts them afresh.
  void Remove();

  const NodeMap& nodes() const { return nodes_; }

 private:
  MemoryCheckpointer(std::string area, NodeMap nodes, const CheckpointContext& ctx)
      : area_(std::move(area)), nodes_(nodes), ctx_(&ctx) {}
  MemoryStore Store(int rank) const;

  std::string area_;
  NodeMap nodes_;
  const CheckpointContext* ctx_;
  // What the last successful Save wrote and Commit has yet to commit.
  int64_t written_step_ = -1;
  std::string written_manifest_;
};

}  // namespace ladder
