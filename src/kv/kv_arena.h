// The memory behind a KV manager's block ids: for every layer, K and V as
// [n_blocks(group), block_size, kv_dim] of the spec's dtype, allocated once. A host arena
// serves the CPU runner and, pinned, the swap space of a device arena; a device arena is the
// backend's (models/<family>/cuda).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "kv/kv_manager.h"
#include "kv/kv_spec.h"
#include "rinfer/status.h"

namespace rinfer::kv {

class KvArena {
 public:
  virtual ~KvArena() = default;

  const KvSpec& spec() const { return spec_; }
  int32_t n_blocks(int32_t group) const { return n_blocks_[static_cast<size_t>(group)]; }
  std::span<const int32_t> n_blocks() const { return n_blocks_; }
  virtual Device device() const = 0;
  uint64_t bytes() const;

  // Layer `layer`'s keys / values: [n_blocks(its group), block_size, kv_dim].
  void* k(int64_t layer) { return k_[static_cast<size_t>(layer)]; }
  void* v(int64_t layer) { return v_[static_cast<size_t>(layer)]; }
  const void* k(int64_t layer) const { return k_[static_cast<size_t>(layer)]; }
  const void* v(int64_t layer) const { return v_[static_cast<size_t>(layer)]; }

  // Copies whole blocks (every layer of the block's group, K and V) from this arena into
  // `dst` (same spec): the swap of a preempted sequence. Errors name the bad block.
  virtual Status copy_blocks(KvArena& dst, std::span<const BlockCopy> copies) const = 0;
  // Grows group g to n_blocks[g] blocks (never fewer than now): new storage, the old blocks
  // copied to the same ids, the new ones zeroed. Pointers from k() / v() change.
  virtual Status grow(std::span<const int32_t> n_blocks) = 0;
  // The other direction, for an arena on a device: copies from `src` (host memory) into this
  // one. A host arena's copy_blocks into a device arena calls it.
  virtual Status pull_blocks(const KvArena& src, std::span<const BlockCopy> copies);

 public:
  // Errors unless dst has this spec and every copy is in range of both arenas.
  Status check_copies(const KvArena& dst, std::span<const BlockCopy> copies) const;

 protected:
  // grow()'s checks: one count per group, none below the current one.
  Status check_grow(std::span<const int32_t> n_blocks) const;
  KvSpec spec_;
  std::vector<int32_t> n_blocks_;  // [n_groups]
  std::vector<void*> k_, v_;       // [n_layer]
};

// Host memory (f32, bf16 or f16 elements), zero-filled.
class HostKvArena final : public KvArena {
 public:
  static Result<std::unique_ptr<HostKvArena>> create(const KvSpec& spec,
                                                     std::span<const int32_t> n_blocks);
  Device device() const override { return Device::cpu(); }
  Status copy_blocks(KvArena& dst, std::span<const BlockCopy> copies) const override;
  Status grow(std::span<const int32_t> n_blocks) override;

  float* kf(int64_t layer) { return static_cast<float*>(k(layer)); }
  float* vf(int64_t layer) { return static_cast<float*>(v(layer)); }

 private:
  std::vector<Tensor> storage_;  // [n_layer * 2]
};

}  // namespace rinfer::kv
