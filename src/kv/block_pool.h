// A pool of fixed-size KV blocks: the bookkeeping of one arena (which blocks are in use, by how
// many sequences, and which free ones still hold a cached prefix). The memory itself is the
// arena's (kv/kv_arena.h); the pool only hands out block ids.
//
//   reference counts  a block in use has ref >= 1: one per block table that holds it (prefix
//                     sharing puts the same block in several tables)
//   free queue        blocks with ref 0, in one doubly linked list that doubles as the LRU
//                     order of the prefix cache: allocate() takes the head; a released block
//                     that holds a cached prefix goes to the tail (evicted last), an uncached
//                     one to the head (reused first, so cached content lives longer)
//   prefix cache      a full block can be registered under its content key (the chained hash
//                     of its tokens and every token before it, verified against the stored
//                     tokens and parent hash on lookup, so a hash collision is a miss, never
//                     wrong keys and values); a cached block stays findable while it is free and
//                     is evicted when allocate() reuses it
// Nothing is allocated after construction except the hash map's nodes (and by grow()).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_spec.h"
#include "rinfer/status.h"

namespace rinfer::kv {

// The content key of a full block: its chained hash, its parent's (0 for the first block) and
// its tokens (block_size of them).
struct BlockKey {
  uint64_t hash = 0;
  uint64_t parent = 0;
  std::span<const int32_t> tokens;
};

struct PoolStats {
  int32_t n_blocks = 0;
  int32_t n_free = 0;     // ref 0 (cached ones included: they can be taken)
  int32_t n_cached = 0;   // registered under a key (in use or free)
  int64_t evictions = 0;  // cached blocks reused for other content
  int32_t n_used() const { return n_blocks - n_free; }
};

class BlockPool {
 public:
  BlockPool() = default;
  // n_blocks blocks of block_size positions, all free.
  BlockPool(int32_t n_blocks, int64_t block_size);

  int32_t size() const { return static_cast<int32_t>(ref_.size()); }
  // Grows the pool to n_blocks (no-op when not larger): the new blocks are free and come first
  // in the free queue; the blocks that were there keep their ids, counts and cached keys.
  void grow(int32_t n_blocks);
  int64_t block_size() const { return block_size_; }
  int32_t num_free() const { return n_free_; }

  // Takes the head of the free queue (ref 1); its cached key, if any, is evicted. nullopt when
  // no block is free.
  std::optional<BlockId> allocate();
  // One more holder of an allocated block, or a free cached block taken back from the queue.
  void ref(BlockId id);
  // One holder fewer; at 0 the block joins the free queue (tail when cached, head when not).
  void unref(BlockId id);
  int32_t ref_count(BlockId id) const { return ref_[static_cast<size_t>(id)]; }

  // Registers a full block in use under `key` (its tokens are copied). A key that another
  // block already holds is left to that one (this block stays uncached).
  void register_block(BlockId id, const BlockKey& key);
  // The block cached under `key` (hash, parent and tokens all equal), or nullopt.
  std::optional<BlockId> lookup(const BlockKey& key) const;
  // Whether the block is registered, and its hash.
  bool is_cached(BlockId id) const { return cached_[static_cast<size_t>(id)] != 0; }
  uint64_t hash_of(BlockId id) const { return hash_[static_cast<size_t>(id)]; }
  // Forgets every cached key (free blocks stay free).
  void clear_cache();

  PoolStats stats() const;
  // Every invariant: ref >= 0; the free queue holds exactly the blocks with ref 0, once each,
  // linked both ways; n_free matches; the map and the per-block cache marks agree. For tests.
  Status check_invariants() const;

 private:
  void unlink(BlockId id);
  void push_front(BlockId id);
  void push_back(BlockId id);
  void evict(BlockId id);

  int64_t block_size_ = 0;
  std::vector<int32_t> ref_;      // [n_blocks]
  std::vector<int32_t> prev_;     // [n_blocks + 1] free-queue links; index n_blocks: sentinel
  std::vector<int32_t> next_;     // [n_blocks + 1]
  std::vector<uint8_t> in_free_;  // [n_blocks]
  std::vector<uint8_t> cached_;   // [n_blocks]
  std::vector<uint64_t> hash_;    // [n_blocks]
  std::vector<uint64_t> parent_;  // [n_blocks]
  std::vector<int32_t> tokens_;   // [n_blocks, block_size] of cached blocks
  std::unordered_map<uint64_t, BlockId> by_hash_;
  int32_t n_free_ = 0;
  int64_t evictions_ = 0;
};

// The chained content hash of a block: mixes the parent's hash, the extra key (a LoRA id, an
// image hash, a cache salt: requests with different extra keys never share) and the tokens.
uint64_t hash_block(uint64_t parent, uint64_t extra, std::span<const int32_t> tokens);

}  // namespace rinfer::kv
