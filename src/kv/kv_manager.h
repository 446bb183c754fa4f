// The KV manager: which blocks each sequence holds, in every layer group, on the device and
// (swapped out) in host memory; prefix sharing; sliding-window release. Bookkeeping only: the
// engine's runner moves the bytes (kv/kv_arena.h) along the copy lists it returns.
//
// A sequence's block table for group g lists, for block index i, the block that holds its
// positions [i * block_size, (i + 1) * block_size), or kNoBlock where a sliding-window group
// released a block no later token can see. The lifecycle of one sequence:
//   attach(seq, tokens, extra)  starts it; with prefix caching, takes the longest run of cached
//                               full blocks of its prompt (chained hashes) and returns how many
//                               leading tokens need no compute (at most tokens - 1: the last
//                               prompt token is always computed, for its logits)
//   allocate(seq, n, watermark) room for positions [0, n): new blocks where the tables end;
//                               false (nothing changed) when a pool would keep fewer than
//                               `watermark` free blocks after it
//   commit(seq, tokens, n)      positions [0, n) are computed: newly full blocks are
//                               registered in the prefix cache, and sliding-window groups
//                               release blocks that the token at position n can no longer see
//   swap_out / swap_in          the sequence's blocks to host blocks and back (copy lists)
//   free(seq)                   every block released, last block first (a deeper prefix is
//                               evicted before the shorter one it extends)
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_spec.h"
#include "rinfer/status.h"

namespace rinfer::kv {

using SeqId = uint64_t;

struct KvManagerOptions {
  std::vector<int32_t> n_blocks;       // [n_groups] device blocks per group
  std::vector<int32_t> n_host_blocks;  // [n_groups] swap space per group (empty: no swapping)
  bool prefix_caching = true;
};

// One block copy of a swap: group g's block src (device or host) to dst.
struct BlockCopy {
  int32_t group = 0;
  BlockId src = 0;
  BlockId dst = 0;
};

struct KvUsage {
  int64_t used_blocks = 0;  // device blocks with ref >= 1, all groups
  int64_t total_blocks = 0;
  int64_t cached_blocks = 0;
  int64_t prefix_hits = 0;     // blocks found by attach
  int64_t prefix_queries = 0;  // blocks looked up by attach
  int64_t evictions = 0;
  double used_fraction() const {
    return total_blocks > 0 ? static_cast<double>(used_blocks) / static_cast<double>(total_blocks)
                            : 0.0;
  }
  double hit_rate() const {
    return prefix_queries > 0
               ? static_cast<double>(prefix_hits) / static_cast<double>(prefix_queries)
               : 0.0;
  }
};

class KvManager {
 public:
  static Result<KvManager> create(KvSpec spec, KvManagerOptions opts);

  const KvSpec& spec() const { return spec_; }
  bool prefix_caching() const { return opts_.prefix_caching; }
  bool can_swap() const { return !host_.empty(); }
  // More device blocks per group (n_blocks[g] >= the pool's size; the arena must have grown to
  // match first): existing tables, counts and cached prefixes are kept.
  Status grow(std::span<const int32_t> n_blocks);

  // Starts `seq` (an error if it exists). Returns the number of leading tokens served by the
  // prefix cache (a multiple of block_size, < tokens.size()), 0 without prefix caching.
  Result<int64_t> attach(SeqId seq, std::span<const int32_t> tokens, uint64_t extra_key);
  bool has(SeqId seq) const { return seqs_.count(seq) != 0; }
  // Device blocks that allocate(seq, n_total) would take, summed over the groups.
  int64_t blocks_needed(SeqId seq, int64_t n_total) const;
  bool allocate(SeqId seq, int64_t n_total, int32_t watermark = 0);
  void commit(SeqId seq, std::span<const int32_t> tokens, int64_t n_computed);
  void free(SeqId seq);

  bool is_swapped(SeqId seq) const;
  // Moves every block of `seq` to host blocks: the copies to run (device -> host) before the
  // device blocks are reused, or kOutOfMemory (nothing changed) without host room. The shared
  // blocks stay on the device for their other holders.
  Result<std::vector<BlockCopy>> swap_out(SeqId seq);
  // Device blocks for a swapped sequence: the copies (host -> device), or false when the
  // device pools lack room (nothing changed). `tokens`: its known tokens, so that its full
  // blocks join the prefix cache again.
  bool can_swap_in(SeqId seq) const;
  Result<std::vector<BlockCopy>> swap_in(SeqId seq, std::span<const int32_t> tokens);

  // Group g's table of `seq` (device block ids; host ids while swapped).
  std::span<const BlockId> table(SeqId seq, int32_t g) const;
  // Forgets every cached prefix (the blocks stay where they are).
  void clear_prefix_cache();
  // Device blocks free in the fullest group (the admission headroom).
  int32_t min_free_blocks() const;

  const BlockPool& pool(int32_t g) const { return pools_[static_cast<size_t>(g)]; }
  const BlockPool& host_pool(int32_t g) const { return host_[static_cast<size_t>(g)]; }
  KvUsage usage() const;
  std::vector<SeqId> sequences() const;
  // The pools' invariants, and every block's reference count equal to the number of tables
  // (device or host) that hold it. For tests.
  Status check_invariants() const;

 private:
  struct Seq {
    std::vector<std::vector<BlockId>> tables;  // [n_groups][blocks]
    std::vector<uint64_t> hashes;  // chained hashes of the full blocks registered so far
    uint64_t extra = 0;
    bool swapped = false;
  };
  KvManager() = default;
  Seq& at(SeqId seq) { return seqs_.at(seq); }
  const Seq& at(SeqId seq) const { return seqs_.at(seq); }
  void release_out_of_window(Seq& s, int64_t n_computed);
  void register_full_blocks(Seq& s, std::span<const int32_t> tokens, int64_t n_computed);

  KvSpec spec_;
  KvManagerOptions opts_;
  std::vector<BlockPool> pools_;  // [n_groups] device
  std::vector<BlockPool> host_;   // [n_groups] host swap space (empty: none)
  std::unordered_map<SeqId, Seq> seqs_;
  int64_t prefix_hits_ = 0;
  int64_t prefix_queries_ = 0;
};

}  // namespace rinfer::kv
