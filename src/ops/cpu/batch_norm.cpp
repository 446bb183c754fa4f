// batch_norm: inference batch normalization over NHWC rows, then an activation: the unfolded
// baseline of the batch-norm folding strategy. Reference: double per element. Fast: the scale
// and shift per channel computed once (in double, rounded to f32), then the epilogue kernel on
// x * scale (a multiply pass) with the shift as its bias.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/conv_internal.h"

namespace rinfer::cpu {

void batch_norm(const OpContext& ctx, float* x, int64_t n_rows, int64_t c, const float* gamma,
                const float* beta, const float* mean, const float* var, float eps, Activation act) {
  if (n_rows <= 0 || c <= 0) return;
  if (ctx.impl == Impl::kReference) {
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t i = 0; i < c; ++i) {
        float& v = x[r * c + i];
        const double z = (double(v) - double(mean[i])) / std::sqrt(double(var[i]) + double(eps)) *
                             double(gamma[i]) +
                         double(beta[i]);
        v = static_cast<float>(activation_ref(z, act));
      }
    }
    return;
  }
  std::vector<float> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i) {
    const double sc = double(gamma[i]) / std::sqrt(double(var[i]) + double(eps));
    scale[i] = static_cast<float>(sc);
    shift[i] = static_cast<float>(double(beta[i]) - double(mean[i]) * sc);
  }
  const auto fn = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x + r * c;
      for (int64_t i = 0; i < c; ++i) xr[i] *= scale[i];
    }
    conv_epilogue_rows(x + r0 * c, shift.data(), nullptr, r1 - r0, c, act);
  };
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && n_rows * c >= (int64_t{1} << 15)) {
    ctx.pool->parallel_for(0, n_rows, std::max<int64_t>(1, 8192 / c), fn);
  } else {
    fn(0, n_rows);
  }
}

}  // namespace rinfer::cpu
