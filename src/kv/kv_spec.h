// What a model's KV cache looks like, as the KV manager and the arenas see it (layer 1: no
// model code here).
//
// The layers of a model fall into groups that share one attention kind: full causal
// attention, or a sliding window of W positions (Gemma 3's local layers). Each group has its
// own block pool and its own block table per sequence, because a sliding-window group needs
// only the blocks of the last W positions while a full group needs them all. A block holds
// `block_size` consecutive positions of one sequence for every layer of its group: K and V
// [block_size, kv_dim] per layer.
//
// The contiguous layout (the baseline) is the same machinery with block_size = the context
// length: one block per sequence, reserved whole when the sequence starts.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "rinfer/status.h"

namespace rinfer::kv {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;  // a table entry whose block was released (out of window)

enum class Layout : uint8_t {
  kContiguous,  // one block of n_ctx positions per sequence (the baseline)
  kPaged,       // blocks of block_size positions, allocated as the sequence grows
};
std::string_view layout_name(Layout l);

struct GroupSpec {
  int64_t window = 0;           // 0: full causal attention; > 0: sliding window of that many
  std::vector<int32_t> layers;  // the model layers of this group, ascending
};

struct KvSpec {
  int64_t n_layer = 0;
  int64_t kv_dim = 0;  // elements per position per layer: n_head_kv * head_dim
  // f32, bf16, f16, or i8: 8-bit codes with a scale per group of values (see row_bytes).
  DType dtype = DType::kF32;
  int64_t head_dim = 0;     // elements per KV head (needed by i8; 0: not given)
  int64_t block_size = 16;  // positions per block
  int64_t n_ctx = 0;        // the longest sequence (positions)
  std::vector<GroupSpec> groups;
  std::vector<int32_t> group_of_layer;  // [n_layer]
  std::vector<int32_t> slot_in_group;   // [n_layer] the layer's index in its group's layers

  // One group per distinct window of `windows` (one entry per layer, 0 = full attention), in
  // order of first appearance. Errors on non-positive sizes, a negative window, a dtype other
  // than f32 / bf16 / f16 / i8, or i8 without a head_dim that divides kv_dim (a multiple of 4).
  static Result<KvSpec> make(std::span<const int64_t> windows, int64_t kv_dim, DType dtype,
                             int64_t block_size, int64_t n_ctx, int64_t head_dim = 0);

  // Bytes of one position's keys (or values) in one layer: kv_dim elements; for i8, kv_dim
  // codes (KV head h at h * head_dim) then one f32 scale per group of i8_group() codes (value =
  // code * scale, scale = max |x| / 127 over the group).
  uint64_t row_bytes() const;
  // i8: codes per scale, 16 where head_dim is a multiple of 16 (a head's outlier channels then
  // cost the precision of their own group only: docs/strategies/kv_cache.md), else head_dim.
  int64_t i8_group() const { return head_dim % 16 == 0 ? 16 : head_dim; }

  int32_t n_groups() const { return static_cast<int32_t>(groups.size()); }
  int64_t window_of_layer(int64_t layer) const {
    return groups[static_cast<size_t>(group_of_layer[static_cast<size_t>(layer)])].window;
  }
  // Blocks that cover n positions.
  int64_t blocks_for(int64_t n) const { return (n + block_size - 1) / block_size; }
  // The first block of group g that the token at position p (or any later one) can see: 0 for
  // full attention, the block of p - window + 1 for a sliding window.
  int64_t first_visible_block(int32_t g, int64_t p) const {
    const int64_t w = groups[static_cast<size_t>(g)].window;
    return w == 0 ? 0 : (p - w + 1 > 0 ? p - w + 1 : 0) / block_size;
  }
  // Bytes of one block of group g: every layer's K and V.
  uint64_t block_bytes(int32_t g) const;
  // The most blocks of group g one sequence holds at once: every block of n_ctx for a full
  // group; for a sliding window the blocks of window + chunk - 1 positions (a chunk of `chunk`
  // new tokens still needs the window before its first token) plus one for misalignment.
  int64_t max_blocks_per_seq(int32_t g, int64_t chunk) const;
  // "2 groups (15 layers window 512, 3 layers full), block 16, bf16, 4608 B/position"
  std::string describe() const;
};

}  // namespace rinfer::kv
