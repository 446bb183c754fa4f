// The KV cache of one sequence, preallocated for the whole context.
//
// Layout: for each layer, K and V are [rows(layer), kv_dim] f32 (kv_dim = n_head_kv * head_dim).
// A layer is either
//   linear: rows == n_ctx, position p in row p (every global-attention layer), or
//   a ring: rows < n_ctx, position p in row p % rows. Only a sliding-window layer (window W)
//           can be a ring, and it needs rows >= W + chunk - 1 to run a forward chunk of `chunk`
//           new tokens: the chunk's first token still sees the W - 1 positions before it, and
//           the chunk's own rows must not overwrite them (max_chunk() is that limit).
// A forward pass writes the keys and values of its new tokens straight into their rows (no copy)
// and attends over them in place. Nothing is allocated after create(): decoding a token touches
// only memory that already exists.
//
// size() counts positions (not rows): positions [0, size()) are filled, and a ring layer still
// holds the last rows(layer) of them, which is all its window needs.
//
// Disabling the cache (the unoptimized baseline) is a policy of the generator, not of this
// class: the generator then clears the cache before every step and recomputes the whole
// prefix, so these buffers only serve as the scratch K/V of one forward pass.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

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

// How many rows each layer of a cache holds.
struct KvLayerSpec {
  int64_t rows = 0;    // == n_ctx: linear; < n_ctx: a ring (needs window > 0, rows >= window)
  int64_t window = 0;  // the layer's sliding window (0: global attention)
};

struct KvCacheSpec {
  int64_t n_ctx = 0;
  int64_t kv_dim = 0;
  std::vector<KvLayerSpec> layers;  // [n_layer]

  // n_layer linear layers of n_ctx rows.
  static KvCacheSpec uniform(int64_t n_layer, int64_t n_ctx, int64_t kv_dim);
  // One layer per entry of `windows`: a global layer (0) keeps n_ctx rows, a sliding-window
  // layer (W > 0) min(n_ctx, W + max_batch - 1) rows, enough for forward chunks of up to
  // max_batch tokens.
  static KvCacheSpec windowed(std::span<const int64_t> windows, int64_t n_ctx, int64_t kv_dim,
                              int64_t max_batch);

  // The bytes of K and V for every layer with `elem_bytes` per element: 2 * sum(rows) * kv_dim
  // * elem_bytes (what create() allocates with f32, 4; a CUDA cache's bf16 is 2).
  uint64_t bytes(uint64_t elem_bytes) const;
};

class KvCache {
 public:
  KvCache() = default;
  // Allocates 2 * n_layer * n_ctx * kv_dim floats (fails with kOutOfMemory, not a crash).
  static Result<KvCache> create(int64_t n_layer, int64_t n_ctx, int64_t kv_dim);
  // Allocates 2 * sum(rows) * kv_dim floats; checks the spec (positive sizes, rows <= n_ctx,
  // a ring layer has a window and at least `window` rows).
  static Result<KvCache> create(const KvCacheSpec& spec);
  // A cache whose K/V live in `storage` (no host buffers): k()/v() must not be called.
  static KvCache with_backend(int64_t n_layer, int64_t n_ctx, int64_t kv_dim,
                              std::unique_ptr<KvBackendStorage> storage);
  KvBackendStorage* backend() const { return backend_.get(); }

  int64_t n_layer() const { return n_layer_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t kv_dim() const { return kv_dim_; }
  // The allocation: the backend's bytes, or 2 * sum(rows) * kv_dim * 4 on the host.
  uint64_t bytes() const {
    return backend_ ? backend_->bytes() : 2 * static_cast<uint64_t>(total_rows_ * kv_dim_) * 4;
  }

  // Rows held by `layer`; a ring when rows(layer) < n_ctx().
  int64_t rows(int64_t layer) const { return layers_[static_cast<size_t>(layer)].rows; }
  int64_t window(int64_t layer) const { return layers_[static_cast<size_t>(layer)].window; }
  bool is_ring(int64_t layer) const { return rows(layer) < n_ctx_; }
  // The row of position p in `layer`.
  int64_t row_of(int64_t layer, int64_t p) const { return p % rows(layer); }
  // The most new tokens one forward chunk may write without overwriting a row its first token
  // still needs: min over ring layers of rows - window + 1 (n_ctx without rings).
  int64_t max_chunk() const { return max_chunk_; }

  // Positions filled: each layer holds valid keys and values for the positions of [0, size())
  // that its attention can still see.
  int64_t size() const { return size_; }
  int64_t free_positions() const { return n_ctx_ - size_; }

  // [rows(layer), kv_dim] of layer `layer`.
  float* k(int64_t layer) { return k_.mutable_data_as<float>() + offset(layer); }
  float* v(int64_t layer) { return v_.mutable_data_as<float>() + offset(layer); }
  const float* k(int64_t layer) const { return k_.data_as<float>() + offset(layer); }
  const float* v(int64_t layer) const { return v_.data_as<float>() + offset(layer); }

  // Forgets everything (keeps the memory).
  void clear() {
    size_ = 0;
    written_ = 0;
  }
  // Keeps the first n positions (n <= size()): rewinds to a common prefix. On a cache with ring
  // layers this fails (kOutOfRange, the cache unchanged) when a ring has already
  // overwritten a position that the token at position n would attend to; the caller then
  // clears the cache and recomputes.
  Status truncate(int64_t n);
  // Marks n more positions as filled, after a forward pass wrote them.
  Status commit(int64_t n);
  // Called by a model before it writes the rows of positions < end (committed or not), so that
  // truncate() knows which ring rows were overwritten.
  void note_written(int64_t end) { written_ = std::max(written_, end); }

 private:
  int64_t offset(int64_t layer) const { return row_offset_[static_cast<size_t>(layer)] * kv_dim_; }

  int64_t n_layer_ = 0;
  int64_t n_ctx_ = 0;
  int64_t kv_dim_ = 0;
  int64_t size_ = 0;
  int64_t written_ = 0;  // one past the highest position written since clear()
  int64_t total_rows_ = 0;
  int64_t max_chunk_ = 0;
  std::vector<KvLayerSpec> layers_;  // [n_layer]
  std::vector<int64_t> row_offset_;  // [n_layer] first row of each layer in k_ / v_
  Tensor k_;                         // [sum(rows), kv_dim] f32
  Tensor v_;                         // [sum(rows), kv_dim] f32
  std::unique_ptr<KvBackendStorage> backend_;
};

}  // namespace rinfer
