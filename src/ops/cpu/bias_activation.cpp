// The convolution epilogue (bias, residual, activation) and the standalone bias + activation op:
// ReLU, ReLU6 and SiLU on f32 vectors. SiLU is z / (1 + exp(-z)) with Highway's exp (relative
// error ~1e-7 against the double reference).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/bias_activation.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "ops/cpu/activation-inl.h"
// clang-format on

#include <algorithm>
#include <cmath>

#include "ops/cpu/conv_internal.h"

HWY_BEFORE_NAMESPACE();
namespace rinfer::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <Activation A>
void EpilogueT(float* y, const float* bias, const float* res, int64_t n_rows, int64_t n) {
  const hn::ScalableTag<float> df;
  const auto nl = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < n_rows; ++r) {
    float* yr = y + r * n;                                     // [n]
    const float* rr = res != nullptr ? res + r * n : nullptr;  // [n]
    int64_t i = 0;
    for (; i + nl <= n; i += nl) {
      auto z = hn::LoadU(df, yr + i);
      if (bias != nullptr) z = hn::Add(z, hn::LoadU(df, bias + i));
      if (rr != nullptr) z = hn::Add(z, hn::LoadU(df, rr + i));
      hn::StoreU(ActVec<A>(df, z), df, yr + i);
    }
    if (i < n) {  // the tail through the same arithmetic
      HWY_ALIGN float buf[HWY_MAX_BYTES / 4] = {};
      const auto m = static_cast<size_t>(n - i);
      for (size_t k = 0; k < m; ++k) {
        const auto j = i + static_cast<int64_t>(k);
        buf[k] = yr[j] + (bias != nullptr ? bias[j] : 0.0f) + (rr != nullptr ? rr[j] : 0.0f);
      }
      hn::Store(ActVec<A>(df, hn::Load(df, buf)), df, buf);
      std::copy(buf, buf + m, yr + i);
    }
  }
}

void EpilogueRows(float* y, const float* bias, const float* res, int64_t n_rows, int64_t n,
                  Activation act) {
  switch (act) {
    case Activation::kNone: return EpilogueT<Activation::kNone>(y, bias, res, n_rows, n);
    case Activation::kRelu: return EpilogueT<Activation::kRelu>(y, bias, res, n_rows, n);
    case Activation::kRelu6: return EpilogueT<Activation::kRelu6>(y, bias, res, n_rows, n);
    case Activation::kSilu: return EpilogueT<Activation::kSilu>(y, bias, res, n_rows, n);
  }
}

}  // namespace rinfer::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu {

HWY_EXPORT(EpilogueRows);

double activation_ref(double z, Activation act) {
  switch (act) {
    case Activation::kNone: return z;
    case Activation::kRelu: return std::max(z, 0.0);
    case Activation::kRelu6: return std::min(std::max(z, 0.0), 6.0);
    case Activation::kSilu: return z / (1.0 + std::exp(-z));
  }
  return z;
}

void conv_epilogue_rows(float* y, const float* bias, const float* res, int64_t n_rows, int64_t n,
                        Activation act) {
  if (bias == nullptr && res == nullptr && act == Activation::kNone) return;
  HWY_DYNAMIC_DISPATCH(EpilogueRows)(y, bias, res, n_rows, n, act);
}

void bias_activation(const OpContext& ctx, float* x, const float* bias, int64_t n_rows, int64_t n,
                     Activation act) {
  if (n_rows <= 0 || n <= 0) return;
  if (ctx.impl == Impl::kReference) {
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        float& v = x[r * n + i];
        v = static_cast<float>(
            activation_ref(double(v) + (bias != nullptr ? double(bias[i]) : 0.0), act));
      }
    }
    return;
  }
  const auto fn = [&](int64_t r0, int64_t r1) {
    conv_epilogue_rows(x + r0 * n, bias, nullptr, r1 - r0, n, act);
  };
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && n_rows * n >= (int64_t{1} << 15)) {
    ctx.pool->parallel_for(0, n_rows, std::max<int64_t>(1, 8192 / n), fn);
  } else {
    fn(0, n_rows);
  }
}

}  // namespace rinfer::cpu
#endif  // HWY_ONCE
