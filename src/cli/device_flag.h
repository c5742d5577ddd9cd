// --device auto|cpu|cuda|cuda-sim, declared once for every command that runs
// a model (train, eval, generate, serve, bench train|decode|ops|serve). The
// value goes to MakeBackend (src/backend/backend_factory.h), which rejects
// an unknown name or an unusable device with one line (exit 2).
#pragma once

#include <string>

#include "src/core/flags.h"

namespace ladder {

void AddDeviceFlag(FlagSet& flags, std::string* device);

}  // namespace ladder
