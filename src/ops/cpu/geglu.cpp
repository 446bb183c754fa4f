// geglu_tanh: out = gelu_tanh(gate) * up, gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi)(g + c g^3))),
// c = 0.044715 (the GELU approximation Gemma uses). Reference: double. Fast: f32, written as
// g / (1 + exp(-2u)) (equal to 0.5 g (1 + tanh(u)), without its cancellation for g << 0), split
// over the pool for large n (scalar; a Highway version is future work). Relative error ~1e-7.
#include <cmath>

#include "ops/cpu/ops.h"

namespace rinfer::cpu {

namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluC = 0.044715;

void geglu_span_f32(const float* gate, const float* up, int64_t n, float* out) {
  constexpr auto a = static_cast<float>(kSqrt2OverPi);
  constexpr auto c = static_cast<float>(kGeluC);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    // 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): no cancellation where tanh(u) ~ -1.
    out[i] = g / (1.0f + std::exp(-2.0f * a * (g + c * g * g * g))) * up[i];
  }
}

}  // namespace

void geglu_tanh(const OpContext& ctx, const float* gate, const float* up, int64_t n, float* out) {
  if (n <= 0) return;
  if (ctx.impl == Impl::kReference) {
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[i];
      const double gl = 0.5 * g * (1.0 + std::tanh(kSqrt2OverPi * (g + kGeluC * g * g * g)));
      out[i] = static_cast<float>(gl * static_cast<double>(up[i]));
    }
    return;
  }
  const auto fn = [&](int64_t i0, int64_t i1) {
    geglu_span_f32(gate + i0, up + i0, i1 - i0, out + i0);
  };
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && n >= (int64_t{1} << 16)) {
    ctx.pool->parallel_for(0, n, 8192, fn);
  } else {
    fn(0, n);
  }
}

}  // namespace rinfer::cpu
