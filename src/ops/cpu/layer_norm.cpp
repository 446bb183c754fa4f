// layer_norm: y = (z - mean) / sqrt(var + eps) * gamma + beta, z = x (+ res), row by row.
// Reference: sums in double. Fast: f32 two-pass sums (the compiler vectorizes the loops), rows
// spread over the pool.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/ops.h"

namespace rinfer::cpu {

namespace {

void reference_row(const float* x, const float* res, const float* gamma, const float* beta,
                   int64_t n, float eps, float* y) {
  std::vector<double> z(static_cast<size_t>(n));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    z[static_cast<size_t>(i)] = double(x[i]) + (res != nullptr ? double(res[i]) : 0.0);
    sum += z[static_cast<size_t>(i)];
  }
  const double mean = sum / double(n);
  double var = 0.0;
  for (double v : z) var += (v - mean) * (v - mean);
  const double inv = 1.0 / std::sqrt(var / double(n) + double(eps));
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<float>((z[static_cast<size_t>(i)] - mean) * inv * double(gamma[i]) +
                              double(beta[i]));
  }
}

void fast_rows(const float* x, const float* res, const float* gamma, const float* beta, int64_t r0,
               int64_t r1, int64_t n, float eps, float* y, float* z) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    const float* rr = res != nullptr ? res + r * n : nullptr;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      z[i] = rr != nullptr ? xr[i] + rr[i] : xr[i];
      sum += z[i];
    }
    const float mean = sum / static_cast<float>(n);
    float var = 0.0f;
    for (int64_t i = 0; i < n; ++i) var += (z[i] - mean) * (z[i] - mean);
    const float inv = 1.0f / std::sqrt(var / static_cast<float>(n) + eps);
    float* yr = y + r * n;
    for (int64_t i = 0; i < n; ++i) yr[i] = (z[i] - mean) * inv * gamma[i] + beta[i];
  }
}

}  // namespace

void layer_norm(const OpContext& ctx, const float* x, const float* res, const float* gamma,
                const float* beta, int64_t n_rows, int64_t n, float eps, float* y) {
  if (n_rows <= 0 || n <= 0) return;
  if (ctx.impl == Impl::kReference) {
    for (int64_t r = 0; r < n_rows; ++r) {
      reference_row(x + r * n, res != nullptr ? res + r * n : nullptr, gamma, beta, n, eps,
                    y + r * n);
    }
    return;
  }
  const auto fn = [&](int64_t r0, int64_t r1) {
    std::vector<float> z(static_cast<size_t>(n));  // z of one row (y may alias x or res)
    fast_rows(x, res, gamma, beta, r0, r1, n, eps, y, z.data());
  };
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && n_rows * n >= (int64_t{1} << 15)) {
    ctx.pool->parallel_for(0, n_rows, std::max<int64_t>(1, 4096 / n), fn);
  } else {
    fn(0, n_rows);
  }
}

}  // namespace rinfer::cpu
