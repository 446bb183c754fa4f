// add_bias: x[r, :] += bias, row by row (the bias of a linear layer).
#include <algorithm>

#include "ops/cpu/ops.h"

namespace rinfer::cpu {

void add_bias(const OpContext& ctx, float* x, const float* bias, int64_t n_rows, int64_t n) {
  if (n_rows <= 0 || n <= 0) return;
  const auto fn = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x + r * n;
      for (int64_t i = 0; i < n; ++i) xr[i] += bias[i];
    }
  };
  if (ctx.impl == Impl::kFast && ctx.pool != nullptr && ctx.pool->size() > 1 &&
      n_rows * n >= (int64_t{1} << 17)) {
    ctx.pool->parallel_for(0, n_rows, std::max<int64_t>(1, 16384 / n), fn);
  } else {
    fn(0, n_rows);
  }
}

}  // namespace rinfer::cpu
