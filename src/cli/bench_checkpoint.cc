// ladder bench checkpoint: what a checkpoint of a config costs, against this
// disk's fsync'ed write rate measured in the same run: the stall of a
// synchronous save, the stall of an asynchronous one (the snapshot only),
// and the Young/Daly interval sqrt(2 C MTBF) that cost implies; then the
// memory checkpoint (src/checkpoint/memory_checkpoint.h): its save stall, and
// a restore from memory against one from the disk checkpoint. The state is
// the freshly initialized model and zero moments (a save's cost does not
// depend on the values).
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "src/backend/backend_factory.h"
#include "src/checkpoint/checkpoint.h"
#include "src/checkpoint/memory_checkpoint.h"
#include "src/cli/commands.h"
#include "src/cli/parallel_layout.h"
#include "src/core/file_util.h"
#include "src/core/flags.h"
#include "src/core/status.h"
#include "src/core/timer.h"
#include "src/train/trainer.h"

namespace ladder {
namespace {

struct Flags {
  std::string config, dir = "runs/bench-checkpoint";
  double mtbf_hours = 24;
};

int64_t DirectoryBytes(const std::string& dir) {
  int64_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) bytes += static_cast<int64_t>(e.file_size());
  }
  return bytes;
}

// Drops the files' clean pages from the page cache (they were fsync'ed),
// so the next read of them comes from the disk.
void EvictFromPageCache(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

absl::Status Run(const Flags& f) {
  if (f.config.empty()) return absl::InvalidArgumentError("missing --config FILE");
  if (!(f.mtbf_hours > 0)) return absl::InvalidArgumentError("--mtbf-hours must be positive");
  // The benchmark removes its directory when done, so it must be its own:
  // never one that holds anything already.
  if (std::error_code ec; std::filesystem::exists(f.dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dir '", f.dir,
                     "' exists; give a path that does not, which the benchmark creates and "
                     "removes afterwards"));
  }
  ASSIGN_OR_RETURN(RunConfig rc, LoadRunConfig(f.config));
  rc.total_batch_tokens = 0;
  rc.batch_size = 1;  // activations do not enter a checkpoint
  std::vector<int32_t> tokens(static_cast<size_t>(2 * rc.model.context + 2), 0);
  // A checkpoint's cost is the host and the disk: the CPU backend holds the
  // state where they see it.
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend("cpu"));
  ASSIGN_OR_RETURN(ParallelRun par, SetUpParallelRun(LayoutFlags{}, *backend));
  ASSIGN_OR_RETURN(auto trainer, Trainer::Create(rc, backend.get(), &tokens, &tokens, 0,
                                                 par.groups(LayoutFlags{})));
  std::error_code ec;
  std::filesystem::create_directories(f.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create '", f.dir, "'"));

  // The ceiling: one file of the checkpoint's size, written and fsync'ed.
  const int64_t state_bytes = 3 * trainer->model().table().total_floats() * 4;
  const std::string probe(static_cast<size_t>(state_bytes), '\1');
  Timer t;
  RETURN_IF_ERROR(WriteFileAtomically(f.dir + "/probe", probe));
  const double disk_rate = state_bytes / t.Seconds();
  std::filesystem::remove(f.dir + "/probe", ec);

  CheckpointContext ctx;
  ctx.grid = &par.grid;
  ctx.world = &par.comms[Axis::kWorld];
  CheckpointWriter writer;
  t.Reset();
  RETURN_IF_ERROR(writer.Start(f.dir + "/sync", *trainer, ctx, 1, /*async=*/false));
  RETURN_IF_ERROR(writer.Finish().status());
  const double sync_seconds = t.Seconds();
  const int64_t bytes = DirectoryBytes(f.dir + "/sync");
  t.Reset();
  RETURN_IF_ERROR(writer.Start(f.dir + "/async", *trainer, ctx, 1, /*async=*/true));
  const double async_stall = t.Seconds();
  RETURN_IF_ERROR(writer.Finish().status());
  const double async_total = t.Seconds();

  // Restores: from the synchronous checkpoint just written, its files first
  // evicted from the page cache so that they come from the disk, and from
  // node memory.
  EvictFromPageCache(f.dir + "/sync");
  t.Reset();
  RETURN_IF_ERROR(LoadCheckpoint(f.dir + "/sync", *trainer, ctx, /*strict=*/true).status());
  const double disk_restore = t.Seconds();
  ASSIGN_OR_RETURN(MemoryCheckpointer memory, MemoryCheckpointer::Create(f.dir + "/memory", ctx));
  t.Reset();
  absl::StatusOr<std::string> mem_saved = memory.Save(*trainer);
  if (mem_saved.ok()) {
    if (absl::Status c = memory.Commit(); !c.ok()) mem_saved = c;
  }
  const double mem_save = t.Seconds();
  t.Reset();
  absl::StatusOr<std::string> mem_restored =
      mem_saved.ok() ? memory.Restore(*trainer, /*disk_step=*/-1) : mem_saved;
  const double mem_restore = t.Seconds();
  memory.Remove();
  RETURN_IF_ERROR(mem_restored.status());
  std::filesystem::remove_all(f.dir, ec);

  const double mtbf = f.mtbf_hours * 3600;
  auto interval = [mtbf](double c) { return std::sqrt(2 * c * mtbf); };
  std::printf("bench checkpoint: %s, %.1fM parameters, %.1f MiB per checkpoint\n", f.config.c_str(),
              rc.model.NumParameters() / 1e6, bytes / 1048576.0);
  std::printf("disk: %.0f MiB/s (one fsync'ed file of %.1f MiB)\n", disk_rate / 1048576.0,
              state_bytes / 1048576.0);
  std::printf("synchronous save: %.2f s stall = %.0f MiB/s = %.2f of the disk rate\n", sync_seconds,
              bytes / sync_seconds / 1048576.0, bytes / sync_seconds / disk_rate);
  std::printf("asynchronous save: %.2f s stall (snapshot), %.2f s until committed\n", async_stall,
              async_total);
  std::printf(
      "Young/Daly interval sqrt(2 C MTBF) at MTBF %.0f h: every %.0f s synchronous, every %.0f "
      "s asynchronous\n",
      f.mtbf_hours, interval(sync_seconds), interval(async_stall));
  std::printf("memory save: %.2f s stall (%s)\n", mem_save,
              MemoryCheckpointArea(f.dir + "/memory").c_str());
  std::printf(
      "restore: %.2f s from memory, %.2f s from disk (page cache dropped) = %.2fx the disk's "
      "time\n",
      mem_restore, disk_restore, mem_restore / disk_restore);
  std::printf("(ladder plan --config %s --mtbf-hours %.0f --checkpoint-seconds %.2f)\n",
              f.config.c_str(), f.mtbf_hours, sync_seconds);
  std::printf(
      "{\"bytes\":%lld,\"disk_bytes_per_s\":%.0f,\"sync_s\":%.4f,\"async_stall_s\":%.4f,"
      "\"async_total_s\":%.4f,\"fraction\":%.4f,\"mem_save_s\":%.4f,\"mem_restore_s\":%.4f,"
      "\"disk_restore_s\":%.4f}\n",
      static_cast<long long>(bytes), disk_rate, sync_seconds, async_stall, async_total,
      bytes / sync_seconds / disk_rate, mem_save, mem_restore, disk_restore);
  return absl::OkStatus();
}

}  // namespace

int BenchCheckpointCommand(int argc, char** argv) {
  Flags f;
  FlagSet flags("ladder bench checkpoint",
                "Time a checkpoint of a config (synchronous, asynchronous and in memory) against "
                "this disk's write rate, and a restore from memory against one from disk. The "
                "last line is JSON.");
  flags.String("config", &f.config, "model config (required)");
  flags.String("dir", &f.dir, "scratch directory, which must not exist (removed afterwards)");
  flags.Double("mtbf-hours", &f.mtbf_hours, "mean time between failures for the interval");
  return RunParallelCommand(flags, argc, argv, [&] { return Run(f); });
}

}  // namespace ladder
