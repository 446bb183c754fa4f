// The KV cache of one sequence: contiguous and preallocated for the whole context.
//
// Layout: for each layer, K and V are [n_ctx, kv_dim] f32 (kv_dim = n_head_kv * head_dim),
// position p's row at p * kv_dim. A forward pass writes the keys and values of its new tokens
// straight into the next free rows (no copy) and attends over rows [0, size()). Nothing is
// allocated after create(): decoding a token touches only memory that already exists.
//
// Disabling the cache (the unoptimized baseline) is a policy of the generator, not of this
// class: the generator then clears the cache before every step and recomputes the whole
// prefix, so these buffers only serve as the scratch K/V of one forward pass.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "rinfer/status.h"

namespace rinfer {

// Storage a backend keeps for a cache outside host memory (a CUDA model's device K/V). The
// cache owns it; the model that made it knows its concrete type.
class KvBackendStorage {
 public:
  virtual ~KvBackendStorage() = default;
  virtual uint64_t bytes() const = 0;
};

class KvCache {
 public:
  KvCache() = default;
  // Allocates 2 * n_layer * n_ctx * kv_dim floats (fails with kOutOfMemory, not a crash).
  static Result<KvCache> create(int64_t n_layer, int64_t n_ctx, int64_t kv_dim);
  // A cache whose K/V live in `storage` (no host buffers): k()/v() must not be called.
  static KvCache with_backend(int64_t n_layer, int64_t n_ctx, int64_t kv_dim,
                              std::unique_ptr<KvBackendStorage> storage);
  KvBackendStorage* backend() const { return backend_.get(); }

  int64_t n_layer() const { return n_layer_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t kv_dim() const { return kv_dim_; }
  uint64_t bytes() const {
    return backend_ ? backend_->bytes() : 2 * static_cast<uint64_t>(layer_floats()) * n_layer_ * 4;
  }

  // Positions filled: rows [0, size()) of every layer hold valid keys and values.
  int64_t size() const { return size_; }
  int64_t free_positions() const { return n_ctx_ - size_; }

  // [n_ctx, kv_dim] of layer `layer`.
  float* k(int64_t layer) { return k_.mutable_data_as<float>() + layer * layer_floats(); }
  float* v(int64_t layer) { return v_.mutable_data_as<float>() + layer * layer_floats(); }
  const float* k(int64_t layer) const { return k_.data_as<float>() + layer * layer_floats(); }
  const float* v(int64_t layer) const { return v_.data_as<float>() + layer * layer_floats(); }

  // Forgets everything (keeps the memory).
  void clear() { size_ = 0; }
  // Keeps the first n positions (n <= size()): rewinds to a common prefix.
  Status truncate(int64_t n);
  // Marks n more positions as filled, after a forward pass wrote them.
  Status commit(int64_t n);

 private:
  int64_t layer_floats() const { return n_ctx_ * kv_dim_; }

  int64_t n_layer_ = 0;
  int64_t n_ctx_ = 0;
  int64_t kv_dim_ = 0;
  int64_t size_ = 0;
  Tensor k_;  // [n_layer, n_ctx, kv_dim] f32
  Tensor v_;  // [n_layer, n_ctx, kv_dim] f32
  std::unique_ptr<KvBackendStorage> backend_;
};

}  // namespace rinfer
