#include "src/train/straggler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ladder {

absl::Status StragglerOptions::Validate() const {
  if (window < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--straggler-window must be at least 1, got ", window));
  }
  if (!(factor > 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--straggler-factor must be greater than 1, got ", factor));
  }
  return absl::OkStatus();
}

StragglerDetector::Verdict StragglerDetector::Observe(const std::vector<double>& compute,
                                                      double step_seconds) {
  compute_.push_back(compute);
  step_seconds_.push_back(step_seconds);
  if (static_cast<int>(compute_.size()) > options_.window) {
    compute_.pop_front();
    step_seconds_.pop_front();
  }
  Verdict v;
  const size_t ranks = compute.size();
  if (static_cast<int>(compute_.size()) == options_.window && ranks > 1) {
    std::vector<double> mean(ranks, 0.0);
    for (const std::vector<double>& step : compute_) {
      for (size_t q = 0; q < ranks; ++q) mean[q] += step[q] / options_.window;
    }
    double step_mean = 0;
    for (double s : step_seconds_) step_mean += s / options_.window;
    std::vector<double> sorted = mean;
    std::sort(sorted.begin(), sorted.end());
    const double median =
        ranks % 2 ? sorted[ranks / 2] : (sorted[ranks / 2 - 1] + sorted[ranks / 2]) / 2;
    const int slowest = static_cast<int>(std::max_element(mean.begin(), mean.end()) - mean.begin());
    if (median > 0 && mean[slowest] > options_.factor * median) {
      StepRecord::Straggler s;
      s.rank = slowest;
      s.ratio = mean[slowest] / median;
      s.wait_share = step_mean > 0 ? std::min(1.0, (mean[slowest] - median) / step_mean) : 0;
      v.straggler = s;
    }
  }
  const int now = v.straggler ? v.straggler->rank : -1;
  v.episode_start = now >= 0 && now != named_;
  named_ = now;
  return v;
}

}  // namespace ladder
