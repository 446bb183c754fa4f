#include "engine/kv_cache.h"

#include "core/error.h"

namespace rinfer {

Result<KvCache> KvCache::create(int64_t n_layer, int64_t n_ctx, int64_t kv_dim) {
  if (n_layer <= 0 || n_ctx <= 0 || kv_dim <= 0) {
    return invalid_argument("KV cache: bad dimensions n_layer {}, n_ctx {}, kv_dim {}", n_layer,
                            n_ctx, kv_dim);
  }
  KvCache c;
  c.n_layer_ = n_layer;
  c.n_ctx_ = n_ctx;
  c.kv_dim_ = kv_dim;
  auto k = Tensor::empty({n_layer, n_ctx, kv_dim}, DType::kF32);
  if (!k.ok()) return k.status().with_context("allocating the KV cache (keys)");
  auto v = Tensor::empty({n_layer, n_ctx, kv_dim}, DType::kF32);
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
  c.backend_ = std::move(storage);
  return c;
}

Status KvCache::truncate(int64_t n) {
  if (n < 0 || n > size_) {
    return out_of_range("KV cache: cannot truncate {} positions to {}", size_, n);
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
  return ok_status();
}

}  // namespace rinfer
