#include "kv/kv_cache.h"

#include "core/error.h"

namespace rinfer {

KvCacheSpec KvCacheSpec::uniform(int64_t n_layer, int64_t n_ctx, int64_t kv_dim) {
  KvCacheSpec s;
  s.n_ctx = n_ctx;
  s.kv_dim = kv_dim;
  s.layers.assign(static_cast<size_t>(std::max<int64_t>(n_layer, 0)), KvLayerSpec{n_ctx, 0});
  return s;
}

KvCacheSpec KvCacheSpec::windowed(std::span<const int64_t> windows, int64_t n_ctx, int64_t kv_dim,
                                  int64_t max_batch) {
  KvCacheSpec s;
  s.n_ctx = n_ctx;
  s.kv_dim = kv_dim;
  s.layers.reserve(windows.size());
  for (const int64_t w : windows) {
    const int64_t rows = w > 0 ? std::min(n_ctx, w + std::max<int64_t>(max_batch, 1) - 1) : n_ctx;
    s.layers.push_back({rows, w});
  }
  return s;
}

uint64_t KvCacheSpec::bytes(uint64_t elem_bytes) const {
  uint64_t rows = 0;
  for (const KvLayerSpec& l : layers) rows += static_cast<uint64_t>(std::max<int64_t>(l.rows, 0));
  return 2 * rows * static_cast<uint64_t>(std::max<int64_t>(kv_dim, 0)) * elem_bytes;
}

Result<KvCache> KvCache::create(int64_t n_layer, int64_t n_ctx, int64_t kv_dim) {
  if (n_layer <= 0 || n_ctx <= 0 || kv_dim <= 0) {
    return invalid_argument("KV cache: bad dimensions n_layer {}, n_ctx {}, kv_dim {}", n_layer,
                            n_ctx, kv_dim);
  }
  return create(KvCacheSpec::uniform(n_layer, n_ctx, kv_dim));
}

Result<KvCache> KvCache::create(const KvCacheSpec& spec) {
  const auto n_layer = static_cast<int64_t>(spec.layers.size());
  if (n_layer <= 0 || spec.n_ctx <= 0 || spec.kv_dim <= 0) {
    return invalid_argument("KV cache: bad dimensions n_layer {}, n_ctx {}, kv_dim {}", n_layer,
                            spec.n_ctx, spec.kv_dim);
  }
  KvCache c;
  c.n_layer_ = n_layer;
  c.n_ctx_ = spec.n_ctx;
  c.kv_dim_ = spec.kv_dim;
  c.layers_ = spec.layers;
  c.max_chunk_ = spec.n_ctx;
  c.row_offset_.reserve(spec.layers.size());
  for (int64_t il = 0; il < n_layer; ++il) {
    const KvLayerSpec& l = spec.layers[static_cast<size_t>(il)];
    if (l.rows <= 0 || l.rows > spec.n_ctx || l.window < 0) {
      return invalid_argument("KV cache: layer {} has {} rows and window {} (context {})", il,
                              l.rows, l.window, spec.n_ctx);
    }
    if (l.rows < spec.n_ctx) {
      if (l.window == 0 || l.rows < l.window) {
        return invalid_argument(
            "KV cache: layer {} holds {} of {} positions, which needs a sliding window of at most "
            "{} rows (window {})",
            il, l.rows, spec.n_ctx, l.rows, l.window);
      }
      c.max_chunk_ = std::min(c.max_chunk_, l.rows - l.window + 1);
    }
    c.row_offset_.push_back(c.total_rows_);
    c.total_rows_ += l.rows;
  }
  auto k = Tensor::empty({c.total_rows_, spec.kv_dim}, DType::kF32);
  if (!k.ok()) return k.status().with_context("allocating the KV cache (keys)");
  auto v = Tensor::empty({c.total_rows_, spec.kv_dim}, DType::kF32);
  if (!v.ok()) return v.status().with_context("allocating the KV cache (values)");
  c.k_ = std::move(k).value();
  c.v_ = std::move(v).value();
  return c;
}

KvCache KvCache::with_backend(int64_t n_layer, int64_t n_ctx, int64_t kv_dim,
                              std::unique_ptr<KvBackendStorage> storage) {
  KvCache c;
  c.n_layer_ = n_layer;
  c.n_ctx_ = n_ctx;
  c.kv_dim_ = kv_dim;
  c.max_chunk_ = n_ctx;
  c.layers_.assign(static_cast<size_t>(std::max<int64_t>(n_layer, 0)), KvLayerSpec{n_ctx, 0});
  c.row_offset_.assign(c.layers_.size(), 0);
  c.backend_ = std::move(storage);
  return c;
}

Status KvCache::truncate(int64_t n) {
  if (n < 0 || n > size_) {
    return out_of_range("KV cache: cannot truncate {} positions to {}", size_, n);
  }
  if (n > 0) {
    for (int64_t il = 0; il < n_layer_; ++il) {
      if (!is_ring(il)) continue;
      // The token at position n attends to [n - window + 1, n); the ring still holds position q
      // when no position q + rows has been written.
      const int64_t lo = std::max<int64_t>(0, n - window(il) + 1);
      if (lo + rows(il) < written_) {
        return out_of_range(
            "KV cache: cannot rewind to {} positions: layer {} keeps a ring of {} rows (sliding "
            "window {}) and positions up to {} overwrote position {}; clear and recompute",
            n, il, rows(il), window(il), written_ - 1, lo);
      }
    }
  }
  size_ = n;
  return ok_status();
}

Status KvCache::commit(int64_t n) {
  if (n < 0 || size_ + n > n_ctx_) {
    return out_of_range("KV cache: {} + {} positions exceed the context length {}", size_, n,
                        n_ctx_);
  }
  size_ += n;
  note_written(size_);
  return ok_status();
}

}  // namespace rinfer
