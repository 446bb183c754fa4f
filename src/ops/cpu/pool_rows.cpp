// pool_rows: one vector per sequence from its rows of hidden states (mean or first row), with an
// optional L2 normalization. Sums in double: the pooled rows are few, the cost is the reads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/ops.h"

namespace rinfer::cpu {

void pool_rows(PoolKind kind, bool normalize, const float* hidden, int64_t n,
               std::span<const int32_t> starts, std::span<const int32_t> lengths, float* out) {
  std::vector<double> acc(static_cast<size_t>(n));
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int64_t start = starts[s];
    const int64_t len = kind == PoolKind::kCls ? 1 : lengths[s];
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t r = start; r < start + len; ++r) {
      const float* h = hidden + r * n;
      for (int64_t i = 0; i < n; ++i) acc[static_cast<size_t>(i)] += double(h[i]);
    }
    double norm2 = 0.0;
    for (double& v : acc) {
      v /= double(len);
      norm2 += v * v;
    }
    const double scale = normalize && norm2 > 0.0 ? 1.0 / std::sqrt(norm2) : 1.0;
    float* o = out + static_cast<int64_t>(s) * n;
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(acc[static_cast<size_t>(i)] * scale);
  }
}

}  // namespace rinfer::cpu
