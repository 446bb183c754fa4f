// rms_norm: y = x / sqrt(mean(x^2) + eps) * w, row by row.
// Reference: sum of squares in double, scale rounded to f32 once (as ggml does), then
// y = (x * scale) * w in f32. Fast: the same with f32 vector sums (relative error ~1e-7),
// rows spread over the pool.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/rms_norm.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include <cmath>

#include "ops/cpu/ops.h"

HWY_BEFORE_NAMESPACE();
namespace rinfer::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void RmsNormRows(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, int64_t n_rows,
                 int64_t n, float eps, float* y) {
  const hn::ScalableTag<float> df;
  const auto nl = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;  // [n]
    float* yr = y + r * n;        // [n]
    auto acc0 = hn::Zero(df);
    auto acc1 = hn::Zero(df);
    int64_t i = 0;
    for (; i + 2 * nl <= n; i += 2 * nl) {
      const auto a = hn::LoadU(df, xr + i);
      const auto b = hn::LoadU(df, xr + i + nl);
      acc0 = hn::MulAdd(a, a, acc0);
      acc1 = hn::MulAdd(b, b, acc1);
    }
    float ss = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
    for (; i < n; ++i) ss += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    const auto vs = hn::Set(df, scale);
    i = 0;
    for (; i + nl <= n; i += nl) {
      auto v = hn::Mul(hn::LoadU(df, xr + i), vs);
      if (w != nullptr) v = hn::Mul(v, hn::LoadU(df, w + i));
      hn::StoreU(v, df, yr + i);
    }
    for (; i < n; ++i) yr[i] = w != nullptr ? (xr[i] * scale) * w[i] : xr[i] * scale;
  }
}

}  // namespace rinfer::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu {

HWY_EXPORT(RmsNormRows);

void rms_norm(const OpContext& ctx, const float* x, const float* w, int64_t n_rows, int64_t n,
              float eps, float* y) {
  if (n_rows <= 0 || n <= 0) return;
  if (ctx.impl == Impl::kReference) {
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* xr = x + r * n;  // [n]
      float* yr = y + r * n;        // [n]
      double ss = 0.0;
      for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      const auto scale = static_cast<float>(
          1.0 / std::sqrt(ss / static_cast<double>(n) + static_cast<double>(eps)));
      for (int64_t i = 0; i < n; ++i) yr[i] = w != nullptr ? (xr[i] * scale) * w[i] : xr[i] * scale;
    }
    return;
  }
  const auto fn = [&](int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(RmsNormRows)(x + r0 * n, w, r1 - r0, n, eps, y + r0 * n);
  };
  // Below ~100 us of work a pool round trip (up to ~50 us) costs more than it saves.
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && n_rows > 1 && n_rows * n >= (1 << 21)) {
    ctx.pool->parallel_for(0, n_rows, 1, fn);
  } else {
    fn(0, n_rows);
  }
}

}  // namespace rinfer::cpu
#endif  // HWY_ONCE
