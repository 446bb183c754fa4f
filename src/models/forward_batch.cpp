#include "models/forward_batch.h"

#include "core/error.h"

namespace rinfer {

Status check_forward_batch(const ForwardBatch& b, const kv::KvSpec& spec, int64_t n_embd,
                           int64_t max_tokens, const float* logits) {
  const int64_t n = b.n_tokens();
  const int32_t n_seq = b.n_seq();
  if (n == 0 || n_seq == 0) return invalid_argument("forward batch: no tokens");
  if (n > max_tokens) {
    return invalid_argument("forward batch: {} tokens, the runner takes at most {}", n, max_tokens);
  }
  if (static_cast<int64_t>(b.positions.size()) != n) {
    return invalid_argument("forward batch: {} positions for {} tokens", b.positions.size(), n);
  }
  if (!b.embeddings.empty() && static_cast<int64_t>(b.embeddings.size()) != n * n_embd) {
    return invalid_argument("forward batch: {} embedding values, {} tokens x {} expected",
                            b.embeddings.size(), n, n_embd);
  }
  if (b.query_start.size() != static_cast<size_t>(n_seq) + 1 || b.query_start[0] != 0 ||
      b.query_start[static_cast<size_t>(n_seq)] != n) {
    return invalid_argument(
        "forward batch: query_start must have n_seq + 1 = {} entries from 0 to {} tokens",
        n_seq + 1, n);
  }
  if (b.table_stride <= 0 || static_cast<int64_t>(b.block_tables.size()) !=
                                 static_cast<int64_t>(spec.n_groups()) * n_seq * b.table_stride) {
    return invalid_argument(
        "forward batch: block_tables holds {} entries, {} groups x {} sequences x stride {} "
        "expected",
        b.block_tables.size(), spec.n_groups(), n_seq, b.table_stride);
  }
  for (int32_t s = 0; s < n_seq; ++s) {
    const int32_t q0 = b.query_start[static_cast<size_t>(s)];
    const int32_t q1 = b.query_start[static_cast<size_t>(s) + 1];
    const int32_t kv = b.kv_len[static_cast<size_t>(s)];
    if (q1 <= q0) return invalid_argument("forward batch: sequence {} has no tokens", s);
    if (kv < q1 - q0 || kv > spec.n_ctx) {
      return invalid_argument(
          "forward batch: sequence {} has {} new tokens and kv_len {} (context {})", s, q1 - q0, kv,
          spec.n_ctx);
    }
    if (spec.blocks_for(kv) > b.table_stride) {
      return invalid_argument("forward batch: sequence {} needs {} blocks, tables hold {}", s,
                              spec.blocks_for(kv), b.table_stride);
    }
    for (int32_t r = q0; r < q1; ++r) {
      const int32_t want = kv - (q1 - r);
      if (b.positions[static_cast<size_t>(r)] != want) {
        return invalid_argument("forward batch: row {} (sequence {}) is at position {}, not {}", r,
                                s, b.positions[static_cast<size_t>(r)], want);
      }
    }
  }
  for (size_t i = 0; i < b.logit_rows.size(); ++i) {
    const int32_t r = b.logit_rows[i];
    if (r < 0 || r >= n || (i > 0 && r <= b.logit_rows[i - 1])) {
      return invalid_argument(
          "forward batch: logit row {} (entry {}) is out of order or outside "
          "the {} rows",
          r, i, n);
    }
  }
  if (!b.logit_rows.empty() && logits == nullptr) {
    return invalid_argument("forward batch: logits requested without an output buffer");
  }
  return ok_status();
}

}  // namespace rinfer
