// The Status API of the serving ops in ops_cuda.h: paged attention, the paged K/V store and
// per-row device sampling.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <numeric>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer::cuda {

namespace {

Status launched(cudaError_t err, const char* op) {
  if (err == cudaSuccess) return ok_status();
  return cuda_status(err, op);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

int64_t paged_attention_tokens_per_item(int64_t n_head, int64_t n_head_kv, int32_t rows) {
  if (n_head_kv <= 0 || n_head % n_head_kv != 0 || (rows != 64 && rows != 128)) return 0;
  return rows / (n_head / n_head_kv);
}

int32_t paged_attention_rows(std::span<const int32_t> query_start, int64_t n_head,
                             int64_t n_head_kv, int64_t head_dim, DType kv_dtype) {
  if (kv_dtype != DType::kBF16 || !kern::attn_paged_rows_supported(head_dim, 128)) return 64;
  const int64_t per = paged_attention_tokens_per_item(n_head, n_head_kv, 128);
  if (per <= 0) return 64;
  for (size_t s = 0; s + 1 < query_start.size(); ++s) {
    if (query_start[s + 1] - query_start[s] >= per) return 128;
  }
  return 64;
}

void paged_attention_work(std::span<const int32_t> query_start, std::span<const int32_t> kv_len,
                          int64_t n_head, int64_t n_head_kv, std::vector<int32_t>& work,
                          int32_t rows) {
  work.clear();
  const int64_t per = paged_attention_tokens_per_item(n_head, n_head_kv, rows);
  if (per <= 0) return;
  struct Item {
    int32_t seq, t0, last_pos;
  };
  std::vector<Item> items;
  for (size_t s = 0; s < kv_len.size(); ++s) {
    const int32_t nq = query_start[s + 1] - query_start[s];
    const int32_t pos0 = kv_len[s] - nq;
    for (int32_t t0 = 0; t0 < nq; t0 += static_cast<int32_t>(per)) {
      const int32_t last = pos0 + std::min<int32_t>(nq, t0 + static_cast<int32_t>(per)) - 1;
      items.push_back({static_cast<int32_t>(s), t0, last});
    }
  }
  // Longest first: causal work grows with the item's last position.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.last_pos > b.last_pos; });
  work.reserve(items.size() * 2);
  for (const Item& it : items) {
    work.push_back(it.seq);
    work.push_back(it.t0);
  }
}

int32_t paged_attention_splits(int64_t n_work, int64_t n_head_kv, int64_t max_kv_len,
                               int64_t head_dim, int32_t max_splits) {
  const int64_t blocks = n_work * n_head_kv;
  const int64_t want = 2 * static_cast<int64_t>(kern::sm_count());
  if (blocks <= 0 || blocks >= want || max_splits <= 1) return 1;
  const int64_t tiles =
      (max_kv_len + kern::attn_paged_tile(head_dim) - 1) / kern::attn_paged_tile(head_dim);
  // At least two tiles a split: a split of one tile costs more in the merge than it gains.
  const int64_t by_len = std::max<int64_t>(1, tiles / 2);
  const int64_t by_grid = want / blocks;  // within one wave of two blocks an SM
  return static_cast<int32_t>(std::clamp<int64_t>(std::min(by_len, by_grid), 1, max_splits));
}

void set_paged_attention_config(int c) { kern::set_attn_paged_config(c); }

size_t paged_attention_workspace_bytes(int64_t n_tokens, int64_t n_head, int64_t head_dim,
                                       int32_t n_splits) {
  if (n_splits <= 1) return 0;
  return static_cast<size_t>(n_splits) * static_cast<size_t>(n_tokens * n_head) *
         static_cast<size_t>(head_dim + 2) * sizeof(float);
}

Status paged_attention(const PagedAttentionParams& p, const void* k_cache, const void* v_cache,
                       const float* q, uint16_t* out, void* workspace, size_t workspace_bytes,
                       cudaStream_t stream) {
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) {
    return unsupported("paged_attention: head_dim {} (64, 128 or 256)", p.head_dim);
  }
  if (p.n_head <= 0 || p.n_head_kv <= 0 || p.n_head % p.n_head_kv != 0 ||
      p.n_head / p.n_head_kv > p.rows) {
    return invalid_argument("paged_attention: {} query heads over {} KV heads", p.n_head,
                            p.n_head_kv);
  }
  if (p.n_tokens < 0 || p.n_tokens > INT32_MAX || p.n_work < 0 || p.n_splits < 1 ||
      p.block_size <= 0 || p.table_stride <= 0) {
    return invalid_argument(
        "paged_attention: n_tokens {}, n_work {}, n_splits {}, block_size {}, table_stride {}",
        p.n_tokens, p.n_work, p.n_splits, p.block_size, p.table_stride);
  }
  if (p.window < 0 || (p.window > 0 && !p.causal)) {
    return invalid_argument("paged_attention: window {} ({})", p.window,
                            p.causal ? "causal" : "a sliding window needs a causal mask");
  }
  if (p.n_work > 65535) {
    return invalid_argument("paged_attention: {} work items (at most 65535 a launch)", p.n_work);
  }
  if (p.n_tokens == 0 || p.n_work == 0) return ok_status();
  if (q == nullptr || out == nullptr || k_cache == nullptr || v_cache == nullptr ||
      p.work == nullptr || p.query_start == nullptr || p.kv_len == nullptr || p.tables == nullptr) {
    return invalid_argument("paged_attention: null pointer");
  }
  if (reinterpret_cast<uintptr_t>(p.work) % 8 != 0) {
    return invalid_argument("paged_attention: the work items must be 8-byte aligned");
  }
  if (!aligned16(q) || p.q_stride % 4 != 0 || p.out_stride % 2 != 0 ||
      p.q_stride < p.n_head * p.head_dim || p.out_stride < p.n_head * p.head_dim) {
    return invalid_argument(
        "paged_attention: q (stride {}) must be 16-byte aligned rows, out "
        "rows (stride {}) at least n_head * head_dim",
        p.q_stride, p.out_stride);
  }
  if (p.rows != 64 && p.rows != 128) {
    return invalid_argument("paged_attention: {} rows a block (64 or 128)", p.rows);
  }
  if (p.kv_dtype == DType::kBF16 && !kern::attn_paged_rows_supported(p.head_dim, p.rows)) {
    return unsupported("paged_attention: blocks of {} rows at head_dim {} (this tile configuration)",
                       p.rows, p.head_dim);
  }
  if (p.kv_dtype != DType::kBF16 && p.kv_dtype != DType::kF32) {
    return unsupported("paged_attention: a {} KV arena (bf16 or f32)", dtype_name(p.kv_dtype));
  }
  const size_t need = p.kv_dtype == DType::kF32 ? 0
                      : paged_attention_workspace_bytes(p.n_tokens, p.n_head, p.head_dim,
                                                        p.n_splits);
  if (workspace_bytes < need || (need > 0 && (workspace == nullptr || !aligned16(workspace)))) {
    return invalid_argument("paged_attention: {} splits need a {}-byte workspace, got {}",
                            p.n_splits, need, workspace_bytes);
  }
  kern::PagedAttnArgs a{};
  a.n_tokens = p.n_tokens;
  a.n_head = p.n_head;
  a.n_head_kv = p.n_head_kv;
  a.head_dim = p.head_dim;
  a.kv_row_stride = p.n_head_kv * p.head_dim;
  a.q_stride = p.q_stride;
  a.out_stride = p.out_stride;
  a.block_size = p.block_size;
  a.table_stride = p.table_stride;
  a.window = static_cast<int>(p.window);
  a.n_work = p.n_work;
  a.n_splits = p.n_splits;
  a.causal = p.causal;
  a.scale = p.scale;
  a.work = reinterpret_cast<const int2*>(p.work);
  a.query_start = p.query_start;
  a.kv_len = p.kv_len;
  a.tables = p.tables;
  a.rows = p.rows;
  auto log2_of = [](int64_t x) {
    return x > 0 && (x & (x - 1)) == 0 ? std::countr_zero(static_cast<uint64_t>(x)) : -1;
  };
  a.block_shift = log2_of(p.block_size);
  a.group_shift = log2_of(p.n_head / p.n_head_kv);
  if (p.kv_dtype == DType::kF32) {
    a.n_splits = 1;
    const auto per =
        static_cast<int>(paged_attention_tokens_per_item(p.n_head, p.n_head_kv, p.rows));
    return launched(kern::launch_attn_paged_f32(a, per, q, static_cast<const float*>(k_cache),
                                                static_cast<const float*>(v_cache), out, stream),
                    "paged_attention launch (f32 arena)");
  }
  auto* part_o = static_cast<float*>(workspace);
  float* part_ml =
      need > 0 ? part_o + static_cast<size_t>(p.n_splits) * p.n_tokens * p.n_head * p.head_dim
               : nullptr;
  return launched(
      kern::launch_attn_paged(a, q, static_cast<const uint16_t*>(k_cache),
                              static_cast<const uint16_t*>(v_cache), out, part_o, part_ml, stream),
      "paged_attention launch");
}

Status kv_store_slots(const float* k, const float* v, int64_t n_tokens, int64_t kv_dim,
                      int64_t src_stride, DType cache_dtype, void* k_cache, void* v_cache,
                      const int32_t* slots, cudaStream_t stream) {
  if (cache_dtype != DType::kF32 && cache_dtype != DType::kBF16) {
    return invalid_argument("kv_store_slots: cache dtype {} (f32 or bf16)",
                            dtype_name(cache_dtype));
  }
  if (n_tokens < 0 || kv_dim <= 0 || src_stride < kv_dim) {
    return invalid_argument("kv_store_slots: n_tokens {}, kv_dim {}, src_stride {}", n_tokens,
                            kv_dim, src_stride);
  }
  if (n_tokens == 0) return ok_status();
  if (k == nullptr || v == nullptr || k_cache == nullptr || v_cache == nullptr ||
      slots == nullptr) {
    return invalid_argument("kv_store_slots: null pointer");
  }
  return launched(
      kern::launch_kv_store_slots(k, v, n_tokens, kv_dim, src_stride, cache_dtype == DType::kBF16,
                                  k_cache, v_cache, slots, stream),
      "kv_store_slots launch");
}

Result<RowSample> row_sample(const DecodeSampling& s, int64_t n_vocab, int32_t hist_off,
                             int32_t hist_len, float uniform) {
  RINFER_RETURN_IF_ERROR(decode_sampling_supported(s, n_vocab));
  if (hist_off < 0 || hist_len < 0 || hist_len > kMaxDecodeHistory) {
    return invalid_argument("row_sample: history [{}, +{}) (at most {} ids)", hist_off, hist_len,
                            kMaxDecodeHistory);
  }
  if (!(uniform >= 0.0f && uniform < 1.0f)) {
    return invalid_argument("row_sample: the uniform draw {} is outside [0, 1)", uniform);
  }
  const bool greedy = s.chain.temperature <= 0.0f;
  RowSample r{};
  r.top_k = greedy ? 1 : static_cast<int>(std::min<int64_t>(s.chain.top_k, n_vocab));
  r.temperature = s.chain.temperature;
  r.top_p = s.chain.top_p;
  r.min_p = s.chain.min_p;
  r.repeat_penalty = s.repeat_penalty;
  r.presence_penalty = s.presence_penalty;
  r.hist_off = hist_off;
  r.hist_len = hist_len;
  r.uniform = uniform;
  return r;
}

Status sample_rows(float* logits, int64_t n_rows, int64_t n_vocab, const RowSample* args,
                   const int32_t* hist, int32_t* out, cudaStream_t stream) {
  if (n_rows < 0 || n_rows > INT32_MAX || n_vocab <= 0 || n_vocab > INT32_MAX) {
    return invalid_argument("sample_rows: [{}, {}]", n_rows, n_vocab);
  }
  if (n_rows == 0) return ok_status();
  if (logits == nullptr || args == nullptr || out == nullptr) {
    return invalid_argument("sample_rows: null pointer");
  }
  return launched(kern::launch_sample_rows(logits, n_rows, n_vocab, args, hist, out, stream),
                  "sample_rows launch");
}

Status mask_tokens(float* logits, int64_t n_rows, int64_t n_vocab, const uint32_t* bits,
                   cudaStream_t stream) {
  if (n_rows < 0 || n_rows > 65535 || n_vocab <= 0 || n_vocab > INT32_MAX) {
    return invalid_argument("mask_tokens: [{}, {}]", n_rows, n_vocab);
  }
  if (n_rows == 0) return ok_status();
  if (logits == nullptr || bits == nullptr) return invalid_argument("mask_tokens: null pointer");
  return launched(kern::launch_token_mask(logits, n_rows, n_vocab, bits, stream),
                  "mask_tokens launch");
}

Status decode_pull(const int32_t* src, int64_t stride, int64_t n, int32_t* dst,
                   const int32_t* parity, cudaStream_t stream) {
  if (n < 0 || stride < n) return invalid_argument("decode_pull: {} words a half of {}", n, stride);
  if (src == nullptr || dst == nullptr || parity == nullptr) {
    return invalid_argument("decode_pull: null pointer");
  }
  return launched(kern::launch_decode_pull(src, stride, n, dst, parity, stream),
                  "decode_pull launch");
}

Status decode_feed(const int32_t* ids, int32_t* token, int32_t* hist, const int32_t* feed_at,
                   int32_t* host_out, int32_t* parity, cudaStream_t stream) {
  if (ids == nullptr || token == nullptr || hist == nullptr || feed_at == nullptr ||
      host_out == nullptr || parity == nullptr) {
    return invalid_argument("decode_feed: null pointer");
  }
  return launched(kern::launch_decode_feed(ids, token, hist, feed_at, host_out, parity, stream),
                  "decode_feed launch");
}

}  // namespace rinfer::cuda
