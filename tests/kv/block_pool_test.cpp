#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace rinfer::kv {
namespace {

std::vector<int32_t> toks(int32_t first, int64_t n) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(first + static_cast<int32_t>(i));
  return t;
}

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsOut) {
  BlockPool pool(5, 4);
  std::vector<BlockId> got;
  for (int i = 0; i < 5; ++i) {
    auto b = pool.allocate();
    ASSERT_TRUE(b.has_value());
    got.push_back(*b);
    ASSERT_TRUE(pool.check_invariants().ok());
  }
  EXPECT_FALSE(pool.allocate().has_value());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<BlockId>{0, 1, 2, 3, 4}));
  EXPECT_EQ(pool.num_free(), 0);
  for (BlockId b : got) pool.unref(b);
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, GrowKeepsBlocksCountsAndCachedKeysAndHandsOutTheNewOnesFirst) {
  BlockPool pool(4, 4);
  const BlockId a = *pool.allocate(), b = *pool.allocate();
  pool.ref(a);  // two holders
  const std::vector<int32_t> t = toks(10, 4);
  const BlockKey key{hash_block(0, 0, t), 0, t};
  pool.register_block(b, key);
  pool.unref(b);  // free, cached: evicted last
  pool.grow(9);
  ASSERT_TRUE(pool.check_invariants().ok());
  EXPECT_EQ(pool.size(), 9);
  EXPECT_EQ(pool.num_free(), 8);
  EXPECT_EQ(pool.ref_count(a), 2);
  EXPECT_EQ(pool.lookup(key), std::optional<BlockId>(b));
  // The five new blocks come first, then the two old uncached ones, the cached block last.
  std::vector<BlockId> order;
  while (auto x = pool.allocate()) order.push_back(*x);
  ASSERT_EQ(order.size(), 8u);
  EXPECT_EQ(std::vector<BlockId>(order.begin(), order.begin() + 5),
            (std::vector<BlockId>{4, 5, 6, 7, 8}));
  EXPECT_EQ(order.back(), b);
  pool.grow(3);  // never shrinks
  EXPECT_EQ(pool.size(), 9);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, SharedBlockIsFreedByItsLastHolder) {
  BlockPool pool(3, 4);
  const BlockId b = *pool.allocate();
  pool.ref(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.unref(b);
  EXPECT_EQ(pool.num_free(), 2);
  pool.unref(b);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, CachedBlocksAreEvictedLastAndInLruOrder) {
  BlockPool pool(4, 2);
  std::vector<BlockId> b;
  for (int i = 0; i < 4; ++i) b.push_back(*pool.allocate());
  const auto t0 = toks(10, 2), t1 = toks(20, 2);
  const BlockKey k0{hash_block(0, 0, t0), 0, t0};
  const BlockKey k1{hash_block(0, 0, t1), 0, t1};
  pool.register_block(b[0], k0);
  pool.register_block(b[1], k1);
  // Freed in the order b0 (cached), b2 (plain), b1 (cached), b3 (plain).
  pool.unref(b[0]);
  pool.unref(b[2]);
  pool.unref(b[1]);
  pool.unref(b[3]);
  ASSERT_TRUE(pool.check_invariants().ok());
  EXPECT_EQ(pool.lookup(k0), b[0]);
  EXPECT_EQ(pool.lookup(k1), b[1]);
  // Plain blocks first (most recently freed first), then cached ones, least recently freed
  // first.
  EXPECT_EQ(*pool.allocate(), b[3]);
  EXPECT_EQ(*pool.allocate(), b[2]);
  EXPECT_EQ(*pool.allocate(), b[0]);
  EXPECT_EQ(pool.stats().evictions, 1);
  EXPECT_FALSE(pool.lookup(k0).has_value());
  EXPECT_EQ(pool.lookup(k1), b[1]);
  // Taking a cached free block back by reference removes it from the free queue.
  pool.ref(b[1]);
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, LookupVerifiesTokensAndParentNotOnlyTheHash) {
  BlockPool pool(2, 2);
  const BlockId b = *pool.allocate();
  const auto t = toks(1, 2);
  pool.register_block(b, BlockKey{1234, 7, t});
  EXPECT_EQ(pool.lookup(BlockKey{1234, 7, t}), b);
  const auto other = toks(2, 2);
  EXPECT_FALSE(pool.lookup(BlockKey{1234, 7, other}).has_value());  // a collision
  EXPECT_FALSE(pool.lookup(BlockKey{1234, 8, t}).has_value());
  // A second block with the same key stays uncached.
  const BlockId c = *pool.allocate();
  pool.register_block(c, BlockKey{1234, 7, t});
  EXPECT_FALSE(pool.is_cached(c));
  EXPECT_EQ(pool.stats().n_cached, 1);
  pool.clear_cache();
  EXPECT_FALSE(pool.lookup(BlockKey{1234, 7, t}).has_value());
  EXPECT_TRUE(pool.check_invariants().ok());
}

TEST(BlockPool, HashChainsDependOnParentExtraAndTokens) {
  const auto t = toks(5, 4);
  const uint64_t h = hash_block(0, 0, t);
  EXPECT_NE(h, hash_block(1, 0, t));
  EXPECT_NE(h, hash_block(0, 1, t));
  EXPECT_NE(h, hash_block(0, 0, toks(6, 4)));
  EXPECT_EQ(h, hash_block(0, 0, t));
  EXPECT_NE(h, 0u);
}

}  // namespace
}  // namespace rinfer::kv
