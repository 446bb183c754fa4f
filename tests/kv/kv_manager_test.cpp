// The KV manager: unit cases, then a property test that drives it through random
// attach / allocate / commit / free / swap sequences (evictions happen inside allocate) and
// checks its invariants after every operation, with a shadow model of what each block holds
// so that a prefix hit is checked to hand out blocks with the right content.
#include "kv/kv_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

namespace rinfer::kv {
namespace {

KvSpec spec_of(std::vector<int64_t> windows, int64_t block_size, int64_t n_ctx) {
  auto s = KvSpec::make(windows, 8, DType::kF32, block_size, n_ctx);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return *s;
}

KvManager make(const KvSpec& spec, std::vector<int32_t> blocks, std::vector<int32_t> host = {},
               bool prefix = true) {
  KvManagerOptions o;
  o.n_blocks = std::move(blocks);
  o.n_host_blocks = std::move(host);
  o.prefix_caching = prefix;
  auto m = KvManager::create(spec, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(*m);
}

std::vector<int32_t> seq_tokens(int64_t n, int32_t salt) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(i * 7 + salt));
  return t;
}

TEST(KvSpec, GroupsLayersByWindow) {
  const std::vector<int64_t> w{512, 512, 0, 512, 0};
  auto s = KvSpec::make(w, 256, DType::kBF16, 16, 4096);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->n_groups(), 2);
  EXPECT_EQ(s->groups[0].layers, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(s->groups[1].layers, (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(s->group_of_layer[3], 0);
  EXPECT_EQ(s->slot_in_group[4], 1);
  EXPECT_EQ(s->block_bytes(0), 3u * 2 * 16 * 256 * 2);
  EXPECT_EQ(s->max_blocks_per_seq(1, 512), 256);
  EXPECT_EQ(s->max_blocks_per_seq(0, 512), (512 + 511 + 15) / 16 + 1);
  EXPECT_FALSE(KvSpec::make(w, 0, DType::kF32, 16, 64).ok());
  EXPECT_FALSE(KvSpec::make(w, 8, DType::kQ4_0, 16, 64).ok());
  EXPECT_FALSE(KvSpec::make(std::vector<int64_t>{-1}, 8, DType::kF32, 16, 64).ok());
}

TEST(KvManager, AllocatesAsTheSequenceGrowsAndFreesEverything) {
  KvManager m = make(spec_of({0, 0}, 4, 64), {10});
  ASSERT_TRUE(m.attach(1, seq_tokens(9, 0), 0).ok());
  EXPECT_EQ(m.blocks_needed(1, 9), 3);
  ASSERT_TRUE(m.allocate(1, 9));
  EXPECT_EQ(m.table(1, 0).size(), 3u);
  ASSERT_TRUE(m.allocate(1, 12));  // still 3 blocks
  EXPECT_EQ(m.table(1, 0).size(), 3u);
  ASSERT_TRUE(m.allocate(1, 13));
  EXPECT_EQ(m.table(1, 0).size(), 4u);
  EXPECT_EQ(m.pool(0).num_free(), 6);
  // A watermark keeps room for running sequences.
  ASSERT_TRUE(m.attach(2, seq_tokens(20, 1), 0).ok());
  EXPECT_FALSE(m.allocate(2, 20, 2));  // 5 blocks would leave 1 < 2
  EXPECT_TRUE(m.table(2, 0).empty());
  EXPECT_TRUE(m.allocate(2, 20, 1));
  ASSERT_TRUE(m.check_invariants().ok());
  m.free(1);
  m.free(2);
  EXPECT_EQ(m.pool(0).num_free(), 10);
  EXPECT_TRUE(m.check_invariants().ok());
}

TEST(KvManager, PrefixHitSharesFullBlocksAndAlwaysLeavesOneTokenToCompute) {
  KvManager m = make(spec_of({0}, 4, 64), {16});
  const auto a = seq_tokens(10, 0);
  ASSERT_EQ(*m.attach(1, a, 0), 0);
  ASSERT_TRUE(m.allocate(1, 10));
  m.commit(1, a, 10);  // blocks 0 and 1 full
  EXPECT_EQ(m.pool(0).stats().n_cached, 2);
  // Same first 9 tokens, different after: blocks 0 and 1 are shared.
  auto b = a;
  b.resize(9);
  b.push_back(999);
  ASSERT_EQ(*m.attach(2, b, 0), 8);
  EXPECT_EQ(m.table(2, 0)[0], m.table(1, 0)[0]);
  EXPECT_EQ(m.pool(0).ref_count(m.table(1, 0)[0]), 2);
  // Exactly 8 tokens: the last one must be computed, so only block 0 hits.
  std::vector<int32_t> c(a.begin(), a.begin() + 8);
  ASSERT_EQ(*m.attach(3, c, 0), 4);
  // Another extra key never shares.
  ASSERT_EQ(*m.attach(4, a, 1), 0);
  ASSERT_TRUE(m.check_invariants().ok());
  for (SeqId s : {1, 2, 3, 4}) m.free(s);
  EXPECT_EQ(m.pool(0).num_free(), 16);
  // Freed blocks stay cached until reused.
  ASSERT_EQ(*m.attach(5, a, 0), 8);
  EXPECT_GT(m.usage().hit_rate(), 0.0);
  m.free(5);
  EXPECT_TRUE(m.check_invariants().ok());
}

TEST(KvManager, SlidingWindowGroupReleasesBlocksOutOfTheWindow) {
  // Layer 0 window 6, layer 1 full; blocks of 4.
  KvManager m = make(spec_of({6, 0}, 4, 64), {8, 8});
  const auto t = seq_tokens(20, 3);
  ASSERT_TRUE(m.attach(1, t, 0).ok());
  ASSERT_TRUE(m.allocate(1, 16));
  m.commit(1, t, 16);
  // Position 16 sees 11..16: block 2 (8..11) stays, blocks 0, 1 go.
  EXPECT_EQ(m.table(1, 0)[0], kNoBlock);
  EXPECT_EQ(m.table(1, 0)[1], kNoBlock);
  EXPECT_NE(m.table(1, 0)[2], kNoBlock);
  EXPECT_EQ(m.pool(0).num_free(), 6);
  EXPECT_EQ(m.pool(1).num_free(), 4);
  ASSERT_TRUE(m.check_invariants().ok());
  // A prefix hit of 16 tokens needs the window blocks of the sliding group cached: they are
  // (released blocks stay cached while free).
  ASSERT_EQ(*m.attach(2, t, 0), 16);
  EXPECT_EQ(m.table(2, 0)[0], kNoBlock);
  EXPECT_EQ(m.table(2, 0)[2], m.table(1, 0)[2]);
  EXPECT_TRUE(m.check_invariants().ok());
  m.free(1);
  m.free(2);
  EXPECT_EQ(m.pool(0).num_free(), 8);
  EXPECT_EQ(m.pool(1).num_free(), 8);
}

TEST(KvManager, SwapOutAndInMovesBlocksThroughHostSpace) {
  KvManager m = make(spec_of({0}, 4, 64), {4}, {4});
  const auto t = seq_tokens(12, 0);
  ASSERT_TRUE(m.attach(1, t, 0).ok());
  ASSERT_TRUE(m.allocate(1, 12));
  m.commit(1, t, 12);
  const std::vector<BlockId> before(m.table(1, 0).begin(), m.table(1, 0).end());
  auto out = m.swap_out(1);
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ((*out)[i].src, before[i]);
  EXPECT_TRUE(m.is_swapped(1));
  EXPECT_EQ(m.pool(0).num_free(), 4);
  EXPECT_EQ(m.host_pool(0).num_free(), 1);
  ASSERT_TRUE(m.check_invariants().ok());
  // Another sequence takes 2 device blocks; 2 are left: not enough to swap back 3.
  ASSERT_TRUE(m.attach(2, seq_tokens(8, 5), 0).ok());
  ASSERT_TRUE(m.allocate(2, 8));
  EXPECT_FALSE(m.can_swap_in(1));
  EXPECT_FALSE(m.swap_in(1, t).ok());
  m.free(2);
  auto in = m.swap_in(1, t);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->size(), 3u);
  EXPECT_FALSE(m.is_swapped(1));
  EXPECT_EQ(m.host_pool(0).num_free(), 4);
  ASSERT_TRUE(m.check_invariants().ok());
  m.free(1);
  EXPECT_EQ(m.pool(0).num_free(), 4);
}

TEST(KvManager, RefusesBadOptions) {
  const KvSpec s = spec_of({0, 5}, 4, 32);
  KvManagerOptions o;
  o.n_blocks = {4};
  EXPECT_FALSE(KvManager::create(s, o).ok());
  o.n_blocks = {4, 0};
  EXPECT_FALSE(KvManager::create(s, o).ok());
  o.n_blocks = {4, 4};
  o.n_host_blocks = {1};
  EXPECT_FALSE(KvManager::create(s, o).ok());
}

// ---- property test ----------------------------------------------------------------------------

// A stand-in for the keys and values: the value at a position is a hash of the sequence's
// tokens up to it (what a real K/V row depends on), written into the block that the table maps
// the position to when the position is computed. A prefix hit must hand out blocks whose every
// visible position already holds the value the new sequence would compute.
struct Shadow {
  std::vector<std::vector<uint64_t>> dev;   // [group][block * bs + offset]
  std::vector<std::vector<uint64_t>> host;  // [group][block * bs + offset]
};

uint64_t prefix_value(const std::vector<int32_t>& t, int64_t p, uint64_t extra) {
  uint64_t h = 1469598103934665603ULL ^ extra;
  for (int64_t i = 0; i <= p; ++i)
    h = (h ^ static_cast<uint64_t>(t[static_cast<size_t>(i)])) * 1099511628211ULL;
  return h;
}

struct SimSeq {
  std::vector<int32_t> tokens;
  uint64_t extra = 0;
  int64_t allocated = 0;  // positions with blocks
  int64_t computed = 0;
};

void run_property(uint32_t seed, std::vector<int64_t> windows, int64_t bs, int32_t n_blocks,
                  int32_t n_host, bool prefix) {
  const int64_t n_ctx = 96;
  const KvSpec spec = spec_of(windows, bs, n_ctx);
  std::vector<int32_t> nb(static_cast<size_t>(spec.n_groups()), n_blocks);
  std::vector<int32_t> nh(n_host > 0 ? static_cast<size_t>(spec.n_groups()) : 0, n_host);
  KvManager m = make(spec, nb, nh, prefix);
  Shadow sh;
  for (int32_t g = 0; g < spec.n_groups(); ++g) {
    sh.dev.emplace_back(static_cast<size_t>(n_blocks * bs), 0);
    sh.host.emplace_back(static_cast<size_t>(std::max(n_host, 0) * bs), 0);
  }
  std::mt19937 rng(seed);
  auto rnd = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint32_t>(n)); };
  // A few base prompts so that prefixes repeat.
  std::vector<std::vector<int32_t>> bases;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> b;
    for (int64_t j = 0; j < n_ctx; ++j) b.push_back(static_cast<int32_t>(rnd(5)));
    bases.push_back(b);
  }
  std::map<SeqId, SimSeq> live;
  SeqId next_id = 1;
  const std::vector<PoolStats> start = [&] {
    std::vector<PoolStats> s;
    for (int32_t g = 0; g < spec.n_groups(); ++g) s.push_back(m.pool(g).stats());
    return s;
  }();

  // Every position the token at position `next` of `id` sees holds the sequence's own value.
  auto check_visible = [&](SeqId id, const SimSeq& s, int64_t next) {
    for (int32_t g = 0; g < spec.n_groups(); ++g) {
      const auto t = m.table(id, g);
      const int64_t w = spec.groups[static_cast<size_t>(g)].window;
      for (int64_t p = w > 0 ? std::max<int64_t>(0, next - w + 1) : 0; p < next; ++p) {
        const BlockId b = t[static_cast<size_t>(p / bs)];
        ASSERT_NE(b, kNoBlock) << "group " << g << " position " << p;
        ASSERT_EQ(sh.dev[static_cast<size_t>(g)][static_cast<size_t>(b * bs + p % bs)],
                  prefix_value(s.tokens, p, s.extra))
            << "group " << g << " position " << p;
      }
    }
  };
  int64_t n_swaps = 0, n_failed_allocs = 0;
  for (int step = 0; step < 3000; ++step) {
    const int64_t op = rnd(10);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " step " << step << " op " << op);
    if (op <= 1 || live.empty()) {  // attach
      SimSeq s;
      const int64_t n = 1 + rnd(n_ctx - 1);
      const auto& base = bases[static_cast<size_t>(rnd(3))];
      const int64_t keep = rnd(n + 1);
      for (int64_t i = 0; i < n; ++i) {
        s.tokens.push_back(i < keep ? base[static_cast<size_t>(i)] : static_cast<int32_t>(rnd(5)));
      }
      s.extra = static_cast<uint64_t>(rnd(2));
      const SeqId id = next_id++;
      auto hit = m.attach(id, s.tokens, s.extra);
      ASSERT_TRUE(hit.ok());
      ASSERT_EQ(*hit % bs, 0);
      ASSERT_LT(*hit, static_cast<int64_t>(s.tokens.size()));
      if (!prefix) ASSERT_EQ(*hit, 0);
      // Every position the next token sees must hold this sequence's value.
      check_visible(id, s, *hit);
      if (::testing::Test::HasFatalFailure()) return;
      s.allocated = s.computed = *hit;
      live.emplace(id, s);
    } else {
      auto it = live.begin();
      std::advance(it, rnd(static_cast<int64_t>(live.size())));
      const SeqId id = it->first;
      SimSeq& s = it->second;
      const bool swapped = m.is_swapped(id);
      if (op <= 4 && !swapped) {  // allocate a chunk, compute it, commit
        const auto n_tok = static_cast<int64_t>(s.tokens.size());
        if (s.computed >= n_tok) {
          if (n_tok >= n_ctx) continue;
          s.tokens.push_back(static_cast<int32_t>(rnd(5)));  // a generated token
        }
        const int64_t end =
            std::min<int64_t>(static_cast<int64_t>(s.tokens.size()), s.computed + 1 + rnd(12));
        const int64_t need = m.blocks_needed(id, end);
        const int32_t free_before = m.min_free_blocks();
        const bool ok = m.allocate(id, end, static_cast<int32_t>(rnd(2)));
        if (!ok) {
          ASSERT_EQ(m.blocks_needed(id, end), need);  // nothing changed
          ASSERT_EQ(m.min_free_blocks(), free_before);
          ++n_failed_allocs;
        } else {
          for (int32_t g = 0; g < spec.n_groups(); ++g) {
            const auto t = m.table(id, g);
            ASSERT_GE(static_cast<int64_t>(t.size()) * bs, end);
            for (int64_t p = s.computed; p < end; ++p) {
              const BlockId b = t[static_cast<size_t>(p / bs)];
              ASSERT_NE(b, kNoBlock);
              // A block being written must not be shared: nobody else may see this write.
              ASSERT_EQ(m.pool(g).ref_count(b), 1) << "position " << p;
              sh.dev[static_cast<size_t>(g)][static_cast<size_t>(b * bs + p % bs)] =
                  prefix_value(s.tokens, p, s.extra);
            }
          }
          s.computed = end;
          m.commit(id, s.tokens, end);
          check_visible(id, s, end);
          if (::testing::Test::HasFatalFailure()) return;
        }
      } else if (op <= 6) {  // free (a finished or aborted request)
        m.free(id);
        live.erase(it);
      } else if (op == 7 && m.can_swap() && !swapped) {
        auto copies = m.swap_out(id);
        if (copies.ok()) {
          for (const BlockCopy& c : *copies) {
            for (int64_t o = 0; o < bs; ++o) {
              sh.host[static_cast<size_t>(c.group)][static_cast<size_t>(c.dst * bs + o)] =
                  sh.dev[static_cast<size_t>(c.group)][static_cast<size_t>(c.src * bs + o)];
            }
          }
          ASSERT_TRUE(m.is_swapped(id));
          ++n_swaps;
        } else {
          ASSERT_EQ(copies.status().code(), StatusCode::kOutOfMemory);
          ASSERT_FALSE(m.is_swapped(id));
        }
      } else if (op >= 8 && swapped) {
        if (!m.can_swap_in(id)) {
          ASSERT_FALSE(m.swap_in(id, s.tokens).ok());
          continue;
        }
        auto copies = m.swap_in(id, s.tokens);
        ASSERT_TRUE(copies.ok());
        for (const BlockCopy& c : *copies) {
          for (int64_t o = 0; o < bs; ++o) {
            sh.dev[static_cast<size_t>(c.group)][static_cast<size_t>(c.dst * bs + o)] =
                sh.host[static_cast<size_t>(c.group)][static_cast<size_t>(c.src * bs + o)];
          }
        }
        check_visible(id, s, s.computed);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    const Status inv = m.check_invariants();
    ASSERT_TRUE(inv.ok()) << inv.to_string();
  }
  for (auto& [id, s] : live) m.free(id);
  ASSERT_TRUE(m.check_invariants().ok());
  for (int32_t g = 0; g < spec.n_groups(); ++g) {
    EXPECT_EQ(m.pool(g).num_free(), start[static_cast<size_t>(g)].n_free);
    if (m.can_swap()) EXPECT_EQ(m.host_pool(g).num_free(), n_host);
  }
  if (prefix) EXPECT_GT(m.usage().prefix_hits, 0);
  EXPECT_GT(n_failed_allocs, 0);  // the pools ran full, so evictions and refusals happened
  if (m.can_swap()) EXPECT_GT(n_swaps, 0);
  if (prefix) EXPECT_GT(m.usage().evictions, 0);
}

TEST(KvManagerProperty, FullAttentionWithPrefixCaching) {
  for (uint32_t seed = 1; seed <= 4; ++seed) run_property(seed, {0, 0}, 4, 40, 0, true);
}

TEST(KvManagerProperty, SlidingAndFullGroupsWithSwapping) {
  for (uint32_t seed = 11; seed <= 14; ++seed) run_property(seed, {10, 0, 10}, 4, 28, 24, true);
}

TEST(KvManagerProperty, OddBlockSizeWithoutPrefixCaching) {
  for (uint32_t seed = 21; seed <= 23; ++seed) run_property(seed, {0, 7}, 5, 30, 12, false);
}

}  // namespace
}  // namespace rinfer::kv
