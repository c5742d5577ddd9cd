// ladder report RUN_DIR [--out FILE]: one self-contained HTML page about a
// training run, with a PNG of each plot beside it (src/report/report.h).
#include "src/report/report.h"

#include <cstdio>

#include "src/cli/commands.h"
#include "src/core/flags.h"
#include "src/core/status.h"

namespace ladder {

int ReportCommand(int argc, char** argv) {
  std::string out;
  FlagSet flags("ladder report",
                "Write an HTML report of a training run (loss, throughput, time split, memory, "
                "communication, per-rank times, events, GPU telemetry) and its plots as PNGs.",
                "RUN_DIR");
  flags.String("out", &out, "the HTML file to write; the PNGs go beside it", "RUN_DIR/report.html");
  return RunCommand(flags, argc, argv, [&]() -> absl::Status {
    if (flags.positional().size() != 1) {
      return absl::InvalidArgumentError(
          "expected one argument: RUN_DIR (a `ladder train --out` directory)");
    }
    std::vector<std::string> warnings;
    ASSIGN_OR_RETURN(const std::string path, WriteRunReport(flags.positional()[0], out, &warnings));
    for (const std::string& w : warnings)
      std::fprintf(stderr, "ladder report: warning: %s\n", w.c_str());
    std::printf("report: %s\n", path.c_str());
    return absl::OkStatus();
  });
}

}  // namespace ladder
