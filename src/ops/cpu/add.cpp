// add: out = a + b, elementwise (out may alias a or b). Exact in both versions.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/add.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include "ops/cpu/ops.h"

HWY_BEFORE_NAMESPACE();
namespace rinfer::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AddSpan(const float* a, const float* b, int64_t n, float* out) {
  const hn::ScalableTag<float> df;
  const auto nl = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + nl <= n; i += nl) {
    hn::StoreU(hn::Add(hn::LoadU(df, a + i), hn::LoadU(df, b + i)), df, out + i);
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace rinfer::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu {

HWY_EXPORT(AddSpan);

void add(const OpContext& ctx, const float* a, const float* b, int64_t n, float* out) {
  if (n <= 0) return;
  if (ctx.impl == Impl::kReference) {
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
    return;
  }
  const auto fn = [&](int64_t i0, int64_t i1) {
    HWY_DYNAMIC_DISPATCH(AddSpan)(a + i0, b + i0, i1 - i0, out + i0);
  };
  // Memory bound at ~10 GB/s per core: only very long vectors pay for a pool round trip.
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && n >= (int64_t{1} << 22)) {
    ctx.pool->parallel_for(0, n, 16384, fn);
  } else {
    fn(0, n);
  }
}

}  // namespace rinfer::cpu
#endif  // HWY_ONCE
