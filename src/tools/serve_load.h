// The serving workloads that bench-serve (through the engine core) and loadgen (through a
// running server) share: requests of random token ids with fixed or long-tailed lengths,
// arriving at a fixed concurrency or as a Poisson process, and the percentiles of their figures.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rinfer {

struct LoadSpec {
  int64_t requests = 64;
  int64_t input_len = 128;
  int64_t output_len = 128;
  std::string mix = "fixed";  // fixed | long-tail
  int64_t shared_prefix = 0;  // the first tokens of every prompt are the same (a system prompt)
  double rate = 0;            // > 0: Poisson arrivals, requests per second
  uint64_t seed = 1;
};

struct LoadJob {
  std::vector<int32_t> prompt;
  int64_t output = 0;
  double arrival_s = 0;  // with a rate: when it is sent
};

// Fixed lengths, or a log-normal spread around them (median the given length, sigma 1, clipped
// to [1/8, 8] of it and to the context) for the long-tailed mix; ids uniform in [0, n_vocab).
std::vector<LoadJob> make_load(const LoadSpec& spec, int64_t n_vocab, int64_t n_ctx);

// The p-quantile (p in [0, 1]) by linear interpolation; 0 for no values.
double percentile(std::vector<double> v, double p);

}  // namespace rinfer
