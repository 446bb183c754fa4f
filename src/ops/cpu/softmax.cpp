// softmax of one row, in place: exp(x - max) / sum, the sum in double. The scalar reference
// (attention's fast path has its own online softmax).

#include <algorithm>
#include <cmath>

#include "ops/cpu/ops.h"

namespace rinfer::cpu {

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float mx = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::exp(static_cast<double>(x[i]) - static_cast<double>(mx));
    x[i] = static_cast<float>(e);
    sum += e;
  }
  const double inv = 1.0 / sum;
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<double>(x[i]) * inv);
}

}  // namespace rinfer::cpu
