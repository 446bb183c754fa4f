#include "models/op_profile.h"

#include <algorithm>

namespace rinfer {

OpCost matmul_cost(int64_t rows, int64_t n_in, int64_t n_out, double weight_bytes,
                   double x_elem_bytes, double y_elem_bytes) {
  const auto r = static_cast<double>(rows), ni = static_cast<double>(n_in),
             no = static_cast<double>(n_out);
  return {weight_bytes + r * ni * x_elem_bytes + r * no * y_elem_bytes, 2.0 * r * ni * no};
}

OpCost stream_cost(int64_t read, int64_t written, double elem_bytes, double flops_per) {
  return {static_cast<double>(read + written) * elem_bytes, static_cast<double>(read) * flops_per};
}

OpCost attention_cost(std::span<const AttentionSeqShape> seqs, int64_t n_head, int64_t n_head_kv,
                      int64_t head_dim, bool causal, int64_t window, double kv_elem_bytes,
                      double io_elem_bytes) {
  double pairs = 0, kv_rows = 0, q_rows = 0;
  for (const AttentionSeqShape& s : seqs) {
    q_rows += static_cast<double>(s.n_new);
    for (int64_t r = 0; r < s.n_new; ++r) {
      int64_t seen = causal ? s.n_kv - s.n_new + r + 1 : s.n_kv;
      if (window > 0) seen = std::min(seen, window);
      pairs += static_cast<double>(std::max<int64_t>(seen, 0));
    }
    // Rows a window never reaches are not read.
    const int64_t reach = window > 0 ? std::min(s.n_kv, window + s.n_new - 1) : s.n_kv;
    kv_rows += static_cast<double>(reach);
  }
  const auto hd = static_cast<double>(head_dim);
  OpCost c;
  c.bytes = kv_rows * 2.0 * static_cast<double>(n_head_kv) * hd * kv_elem_bytes +
            q_rows * 2.0 * static_cast<double>(n_head) * hd * io_elem_bytes;
  c.flops = 4.0 * pairs * static_cast<double>(n_head) * hd;
  return c;
}

}  // namespace rinfer
