#include "tools/serve_load.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace rinfer {

std::vector<LoadJob> make_load(const LoadSpec& a, int64_t n_vocab, int64_t n_ctx) {
  std::mt19937_64 rng(a.seed);
  std::lognormal_distribution<double> spread(0.0, 1.0);
  std::exponential_distribution<double> gap(a.rate > 0 ? a.rate : 1.0);
  auto length = [&](int64_t median) {
    if (a.mix == "fixed") return median;
    const double x = std::clamp(spread(rng), 0.125, 8.0);
    return std::max<int64_t>(1,
                             static_cast<int64_t>(std::llround(static_cast<double>(median) * x)));
  };
  std::vector<int32_t> shared;
  for (int64_t k = 0; k < a.shared_prefix; ++k) {
    shared.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab)));
  }
  std::vector<LoadJob> jobs;
  double t = 0;
  for (int64_t i = 0; i < a.requests; ++i) {
    LoadJob j;
    int64_t in = length(a.input_len), out = length(a.output_len);
    in = std::min(in, n_ctx - 2);
    out = std::min(out, n_ctx - 1 - in);
    for (int64_t k = 0; k < in; ++k) {
      j.prompt.push_back(k < static_cast<int64_t>(shared.size())
                             ? shared[static_cast<size_t>(k)]
                             : static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab)));
    }
    j.output = out;
    if (a.rate > 0) t += gap(rng);
    j.arrival_s = t;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace rinfer
