// gelu_erf: x = gelu(x + bias), gelu(z) = 0.5 z (1 + erf(z / sqrt(2))), the exact GELU of BERT.
// Reference: double, as 0.5 z erfc(-z / sqrt(2)) (exact in the negative tail too). Fast: f32
// vectors; with u = |z| / sqrt(2) and t = 1 / (1 + p u), erfc(u) ~= t (a1 + t (a2 + t (a3 + t (a4 +
// t a5)))) exp(-u^2) (Abramowitz-Stegun 7.1.26, absolute error <= 1.5e-7), then 1 + erf(z /
// sqrt(2)) is 2 - erfc(u) for z >= 0 and erfc(u) for z < 0 (no cancellation in the negative tail);
// 0 below z = -10.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/gelu.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

#include <algorithm>
#include <cmath>

#include "ops/cpu/ops.h"

HWY_BEFORE_NAMESPACE();
namespace rinfer::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class V>
HWY_INLINE V GeluVec(D d, V z) {
  const auto u = hn::Mul(hn::Abs(z), hn::Set(d, 0.70710678118654752f));
  const auto t = hn::Div(hn::Set(d, 1.0f), hn::MulAdd(hn::Set(d, 0.3275911f), u, hn::Set(d, 1.0f)));
  auto p = hn::Set(d, 1.061405429f);
  p = hn::MulAdd(p, t, hn::Set(d, -1.453152027f));
  p = hn::MulAdd(p, t, hn::Set(d, 1.421413741f));
  p = hn::MulAdd(p, t, hn::Set(d, -0.284496736f));
  p = hn::MulAdd(p, t, hn::Set(d, 0.254829592f));
  p = hn::Mul(p, t);
  // exp(-u^2) underflows for u > ~9.3; its argument is clamped where f32 stays normal.
  const auto e = hn::Exp(d, hn::Max(hn::Neg(hn::Mul(u, u)), hn::Set(d, -87.0f)));
  const auto erfc = hn::Mul(p, e);
  const auto one_plus_erf =
      hn::IfThenElse(hn::Lt(z, hn::Zero(d)), erfc, hn::Sub(hn::Set(d, 2.0f), erfc));
  // Below z = -10 (|gelu| < 1e-22) the result is 0: the tail would reach subnormal floats,
  // which make every later multiply that reads them (the next matmul) microcode-slow.
  const auto g = hn::Mul(hn::Mul(hn::Set(d, 0.5f), z), one_plus_erf);
  return hn::IfThenZeroElse(hn::Lt(z, hn::Set(d, -10.0f)), g);
}

void GeluRows(float* x, const float* bias, int64_t n_rows, int64_t n) {
  const hn::ScalableTag<float> df;
  const auto nl = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < n_rows; ++r) {
    float* xr = x + r * n;  // [n]
    int64_t i = 0;
    for (; i + nl <= n; i += nl) {
      auto z = hn::LoadU(df, xr + i);
      if (bias != nullptr) z = hn::Add(z, hn::LoadU(df, bias + i));
      hn::StoreU(GeluVec(df, z), df, xr + i);
    }
    if (i < n) {  // the tail through the same arithmetic
      HWY_ALIGN float buf[HWY_MAX_BYTES / 4] = {};
      const auto m = static_cast<size_t>(n - i);
      for (size_t k = 0; k < m; ++k)
        buf[k] = xr[i + static_cast<int64_t>(k)] +
                 (bias != nullptr ? bias[i + static_cast<int64_t>(k)] : 0.0f);
      hn::Store(GeluVec(df, hn::Load(df, buf)), df, buf);
      std::copy(buf, buf + m, xr + i);
    }
  }
}

}  // namespace rinfer::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu {

HWY_EXPORT(GeluRows);

void gelu_erf(const OpContext& ctx, float* x, const float* bias, int64_t n_rows, int64_t n) {
  if (n_rows <= 0 || n <= 0) return;
  if (ctx.impl == Impl::kReference) {
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        const double z = double(x[r * n + i]) + (bias != nullptr ? double(bias[i]) : 0.0);
        x[r * n + i] = static_cast<float>(0.5 * z * std::erfc(-z / std::sqrt(2.0)));
      }
    }
    return;
  }
  const auto fn = [&](int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(GeluRows)(x + r0 * n, bias, r1 - r0, n);
  };
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && n_rows * n >= (int64_t{1} << 15)) {
    ctx.pool->parallel_for(0, n_rows, std::max<int64_t>(1, 8192 / n), fn);
  } else {
    fn(0, n_rows);
  }
}

}  // namespace rinfer::cpu
#endif  // HWY_ONCE
