#include "src/cli/device_flag.h"

namespace ladder {

void AddDeviceFlag(FlagSet& flags, std::string* device) {
  flags.String("device", device,
               "where the model runs: auto (cuda if a GPU and the CUDA backend are both "
               "there, else cpu), cpu, cuda or cuda-sim");
}

}  // namespace ladder
