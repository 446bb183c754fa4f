#include "kv/block_pool.h"

#include <algorithm>
#include <cassert>

#include "core/error.h"

namespace rinfer::kv {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t hash_block(uint64_t parent, uint64_t extra, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent ^ 0x9e3779b97f4a7c15ULL);
  h = mix(h ^ mix(extra + 0x632be59bd9b4e019ULL));
  for (int32_t t : tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 1));
  return h == 0 ? 1 : h;  // 0 is "no parent"
}

BlockPool::BlockPool(int32_t n_blocks, int64_t block_size)
    : block_size_(block_size),
      ref_(static_cast<size_t>(n_blocks), 0),
      prev_(static_cast<size_t>(n_blocks) + 1),
      next_(static_cast<size_t>(n_blocks) + 1),
      in_free_(static_cast<size_t>(n_blocks), 0),
      cached_(static_cast<size_t>(n_blocks), 0),
      hash_(static_cast<size_t>(n_blocks), 0),
      parent_(static_cast<size_t>(n_blocks), 0),
      tokens_(static_cast<size_t>(n_blocks) * static_cast<size_t>(block_size)) {
  const int32_t s = n_blocks;  // the sentinel
  prev_[static_cast<size_t>(s)] = next_[static_cast<size_t>(s)] = s;
  for (BlockId b = 0; b < n_blocks; ++b) push_back(b);
}

void BlockPool::grow(int32_t n_blocks) {
  const int32_t old = size();
  if (n_blocks <= old) return;
  // The free queue in order, relinked around the new sentinel; the new blocks go first (they
  // hold no cached prefix).
  std::vector<BlockId> order;
  order.reserve(static_cast<size_t>(n_free_));
  for (int32_t b = next_[static_cast<size_t>(old)]; b != old; b = next_[static_cast<size_t>(b)]) {
    order.push_back(b);
  }
  const auto n = static_cast<size_t>(n_blocks);
  ref_.resize(n, 0);
  prev_.assign(n + 1, 0);
  next_.assign(n + 1, 0);
  in_free_.assign(n, 0);
  cached_.resize(n, 0);
  hash_.resize(n, 0);
  parent_.resize(n, 0);
  tokens_.resize(n * static_cast<size_t>(block_size_));
  const int32_t s = n_blocks;
  prev_[n] = next_[n] = s;
  n_free_ = 0;
  for (BlockId b = old; b < n_blocks; ++b) push_back(b);
  for (BlockId b : order) push_back(b);
}

void BlockPool::unlink(BlockId id) {
  const auto i = static_cast<size_t>(id);
  next_[static_cast<size_t>(prev_[i])] = next_[i];
  prev_[static_cast<size_t>(next_[i])] = prev_[i];
  in_free_[i] = 0;
  --n_free_;
}

void BlockPool::push_front(BlockId id) {
  const int32_t s = size();
  const auto i = static_cast<size_t>(id);
  const int32_t first = next_[static_cast<size_t>(s)];
  prev_[i] = s;
  next_[i] = first;
  prev_[static_cast<size_t>(first)] = id;
  next_[static_cast<size_t>(s)] = id;
  in_free_[i] = 1;
  ++n_free_;
}

void BlockPool::push_back(BlockId id) {
  const int32_t s = size();
  const auto i = static_cast<size_t>(id);
  const int32_t last = prev_[static_cast<size_t>(s)];
  next_[i] = s;
  prev_[i] = last;
  next_[static_cast<size_t>(last)] = id;
  prev_[static_cast<size_t>(s)] = id;
  in_free_[i] = 1;
  ++n_free_;
}

void BlockPool::evict(BlockId id) {
  const auto i = static_cast<size_t>(id);
  if (!cached_[i]) return;
  by_hash_.erase(hash_[i]);
  cached_[i] = 0;
  hash_[i] = 0;
  parent_[i] = 0;
}

std::optional<BlockId> BlockPool::allocate() {
  if (n_free_ == 0) return std::nullopt;
  const BlockId id = next_[static_cast<size_t>(size())];
  unlink(id);
  if (cached_[static_cast<size_t>(id)]) {
    evict(id);
    ++evictions_;
  }
  ref_[static_cast<size_t>(id)] = 1;
  return id;
}

void BlockPool::ref(BlockId id) {
  const auto i = static_cast<size_t>(id);
  if (ref_[i] == 0) {
    assert(in_free_[i]);
    unlink(id);
  }
  ++ref_[i];
}

void BlockPool::unref(BlockId id) {
  const auto i = static_cast<size_t>(id);
  assert(ref_[i] > 0);
  if (--ref_[i] > 0) return;
  if (cached_[i]) {
    push_back(id);
  } else {
    push_front(id);
  }
}

void BlockPool::register_block(BlockId id, const BlockKey& key) {
  const auto i = static_cast<size_t>(id);
  if (cached_[i] || static_cast<int64_t>(key.tokens.size()) != block_size_) return;
  if (by_hash_.count(key.hash) != 0) return;
  by_hash_.emplace(key.hash, id);
  cached_[i] = 1;
  hash_[i] = key.hash;
  parent_[i] = key.parent;
  std::copy(key.tokens.begin(), key.tokens.end(),
            tokens_.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(block_size_)));
}

std::optional<BlockId> BlockPool::lookup(const BlockKey& key) const {
  auto it = by_hash_.find(key.hash);
  if (it != by_hash_.end() && static_cast<int64_t>(key.tokens.size()) == block_size_) {
    const auto i = static_cast<size_t>(it->second);
    const auto first =
        tokens_.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(block_size_));
    if (parent_[i] == key.parent && std::equal(key.tokens.begin(), key.tokens.end(), first)) {
      return it->second;
    }
  }
  return std::nullopt;
}

void BlockPool::clear_cache() {
  for (BlockId b = 0; b < size(); ++b) evict(b);
}

PoolStats BlockPool::stats() const {
  PoolStats s;
  s.n_blocks = size();
  s.n_free = n_free_;
  s.n_cached = static_cast<int32_t>(by_hash_.size());
  s.evictions = evictions_;
  return s;
}

Status BlockPool::check_invariants() const {
  const int32_t n = size();
  std::vector<uint8_t> seen(static_cast<size_t>(n), 0);
  int32_t count = 0;
  for (int32_t b = next_[static_cast<size_t>(n)], p = n; b != n;
       p = b, b = next_[static_cast<size_t>(b)]) {
    if (b < 0 || b >= n) return internal_error("block pool: free queue holds id {}", b);
    if (prev_[static_cast<size_t>(b)] != p) {
      return internal_error("block pool: block {} links back to {}, not {}", b,
                            prev_[static_cast<size_t>(b)], p);
    }
    if (seen[static_cast<size_t>(b)]++)
      return internal_error("block pool: block {} queued twice", b);
    if (++count > n) return internal_error("block pool: the free queue loops");
  }
  if (count != n_free_) {
    return internal_error("block pool: {} blocks queued, n_free {}", count, n_free_);
  }
  int32_t cached = 0;
  for (BlockId b = 0; b < n; ++b) {
    const auto i = static_cast<size_t>(b);
    if (ref_[i] < 0) return internal_error("block pool: block {} has ref {}", b, ref_[i]);
    if ((ref_[i] == 0) != (seen[i] != 0) || (seen[i] != 0) != (in_free_[i] != 0)) {
      return internal_error("block pool: block {} has ref {} but is {}in the free queue", b,
                            ref_[i], seen[i] ? "" : "not ");
    }
    if (cached_[i]) {
      ++cached;
      auto it = by_hash_.find(hash_[i]);
      if (it == by_hash_.end() || it->second != b) {
        return internal_error("block pool: cached block {} is not in the map", b);
      }
    }
  }
  if (cached != static_cast<int32_t>(by_hash_.size())) {
    return internal_error("block pool: {} cached marks, {} map entries", cached, by_hash_.size());
  }
  return ok_status();
}

}  // namespace rinfer::kv
