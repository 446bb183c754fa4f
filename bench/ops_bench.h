// Shared by ops_bench's files (ops_bench.cpp, ops_bench_w8a8.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace ops_bench {

// Median seconds of fn() over `reps` runs after one warm-up (at least min_time in total).
double time_median(int reps, const std::function<void()>& fn, double min_time = 0.0);
// Random weights: random bytes with every block's f16 scale fields set to small sane values.
std::vector<uint8_t> make_weights(rinfer::DType t, int64_t n_out, int64_t n_in, uint32_t seed);
// The W8A8 against Q8_0 table into j["w8a8"].
void bench_w8a8(std::span<rinfer::ThreadPool* const> pools, int reps, nlohmann::json& j);

}  // namespace ops_bench
