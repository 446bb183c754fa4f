// swiglu: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
// Reference: double precision with std::exp. Fast: Highway's vector Exp (1 ulp) in f32,
// relative error ~1e-7 (exp(-g) overflows to inf for g < -88, giving silu = -0 as it should).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/swiglu.cpp"
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

void SwigluSpan(const float* gate, const float* up, int64_t n, float* out) {
  const hn::ScalableTag<float> df;
  const auto nl = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  // Exp's valid range ends at +104: clamp -g there (the result is 0 / -0 either way).
  const auto hi = hn::Set(df, 100.0f);
  int64_t i = 0;
  for (; i + nl <= n; i += nl) {
    const auto g = hn::LoadU(df, gate + i);
    const auto e = hn::Exp(df, hn::Min(hn::Neg(g), hi));
    const auto s = hn::Div(g, hn::Add(one, e));
    hn::StoreU(hn::Mul(s, hn::LoadU(df, up + i)), df, out + i);
  }
  // The tail through the same vector arithmetic (partial loads), so an element's result never
  // depends on where the span ends (batch invariance).
  if (i < n) {
    const auto m = static_cast<size_t>(n - i);
    HWY_ALIGN float gb[HWY_MAX_BYTES / 4] = {}, ub[HWY_MAX_BYTES / 4] = {};
    std::copy(gate + i, gate + n, gb);
    std::copy(up + i, up + n, ub);
    const auto g = hn::Load(df, gb);
    const auto e = hn::Exp(df, hn::Min(hn::Neg(g), hi));
    const auto s = hn::Div(g, hn::Add(one, e));
    hn::Store(hn::Mul(s, hn::Load(df, ub)), df, gb);
    std::copy(gb, gb + m, out + i);
  }
}

}  // namespace rinfer::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu {

HWY_EXPORT(SwigluSpan);

void swiglu(const OpContext& ctx, const float* gate, const float* up, int64_t n, float* out) {
  if (n <= 0) return;
  if (ctx.impl == Impl::kReference) {
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[i];
      out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * static_cast<double>(up[i]));
    }
    return;
  }
  // Spans start at multiples of 64 elements, so an element is in the same vector lane however
  // the work is split.
  constexpr int64_t kUnit = 64;
  const auto fn = [&](int64_t u0, int64_t u1) {
    const int64_t i0 = u0 * kUnit, i1 = std::min(n, u1 * kUnit);
    HWY_DYNAMIC_DISPATCH(SwigluSpan)(gate + i0, up + i0, i1 - i0, out + i0);
  };
  const int64_t units = (n + kUnit - 1) / kUnit;
  // ~0.25 ns per element: split only above ~100 us of work (a pool round trip is up to ~50 us).
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && n >= (int64_t{1} << 19)) {
    ctx.pool->parallel_for(0, units, 8192 / kUnit, fn);
  } else {
    fn(0, units);
  }
}

}  // namespace rinfer::cpu
#endif  // HWY_ONCE
