// KvCache: uniform and windowed (ring) layouts, their sizes and row addressing, what truncate()
// allows on a ring, and, with the tiny synthetic gemma3 (sliding window 4 on 5 of 6 layers), that
// a ring cache gives the same logits as a full-length one (and as the numpy reference).
#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "models/model.h"
#include "test_util.h"

namespace rinfer {
namespace {

TEST(KvCache, UniformLayout) {
  auto c = KvCache::create(3, 10, 8);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->bytes(), 2u * 3 * 10 * 8 * 4);
  EXPECT_EQ(c->max_chunk(), 10);
  for (int64_t il = 0; il < 3; ++il) {
    EXPECT_EQ(c->rows(il), 10);
    EXPECT_FALSE(c->is_ring(il));
    EXPECT_EQ(c->row_of(il, 7), 7);
  }
  EXPECT_EQ(c->k(1) - c->k(0), 10 * 8);
  EXPECT_EQ(c->v(2) - c->v(1), 10 * 8);
  EXPECT_EQ(KvCache::create(0, 10, 8).status().code(), StatusCode::kInvalidArgument);
}

TEST(KvCache, WindowedLayout) {
  const std::vector<int64_t> windows = {4, 4, 0, 4};
  // Sliding-window layers hold window + max_batch - 1 = 6 rows, the global one all 100.
  auto c = KvCache::create(KvCacheSpec::windowed(windows, 100, 8, 3));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->bytes(), 2u * (6 + 6 + 100 + 6) * 8 * 4);
  EXPECT_EQ(c->max_chunk(), 3);
  EXPECT_TRUE(c->is_ring(0));
  EXPECT_FALSE(c->is_ring(2));
  EXPECT_EQ(c->rows(0), 6);
  EXPECT_EQ(c->rows(2), 100);
  EXPECT_EQ(c->window(3), 4);
  EXPECT_EQ(c->row_of(0, 13), 1);
  EXPECT_EQ(c->row_of(2, 13), 13);
  EXPECT_EQ(c->k(1) - c->k(0), 6 * 8);  // layers packed one after the other
  EXPECT_EQ(c->k(3) - c->k(2), 100 * 8);
  // A short context: window + max_batch - 1 >= n_ctx keeps every layer linear.
  auto s = KvCache::create(KvCacheSpec::windowed(windows, 5, 8, 3));
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->is_ring(0));
  EXPECT_EQ(s->bytes(), 2u * 4 * 5 * 8 * 4);
  EXPECT_EQ(s->max_chunk(), 5);
}

TEST(KvCache, SpecErrors) {
  KvCacheSpec s = KvCacheSpec::uniform(2, 16, 4);
  s.layers[1] = {8, 0};  // a ring without a window
  auto c = KvCache::create(s);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("layer 1"), std::string::npos) << c.status().message();
  s.layers[1] = {3, 4};  // fewer rows than the window
  EXPECT_EQ(KvCache::create(s).status().code(), StatusCode::kInvalidArgument);
  s.layers[1] = {17, 0};  // more rows than the context
  EXPECT_EQ(KvCache::create(s).status().code(), StatusCode::kInvalidArgument);
  s.layers.clear();
  EXPECT_EQ(KvCache::create(s).status().code(), StatusCode::kInvalidArgument);
}

TEST(KvCache, CommitAndTruncateOnALinearCache) {
  auto c = KvCache::create(2, 10, 4);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->commit(9).ok());
  EXPECT_EQ(c->free_positions(), 1);
  EXPECT_EQ(c->commit(2).code(), StatusCode::kOutOfRange);
  EXPECT_TRUE(c->truncate(1).ok());  // any prefix of a linear cache
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->truncate(2).code(), StatusCode::kOutOfRange);
}

// A ring of 6 rows for window 4 (chunks of up to 3): the token at position n needs positions
// [n - 3, n), which position q + 6 overwrites.
TEST(KvCache, TruncateOnARing) {
  const std::vector<int64_t> windows = {4, 0};
  auto c = KvCache::create(KvCacheSpec::windowed(windows, 100, 4, 3));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->commit(5).ok());
  EXPECT_TRUE(c->truncate(3).ok());  // nothing overwritten yet
  ASSERT_TRUE(c->commit(7).ok());    // positions 0..9 written
  EXPECT_EQ(c->size(), 10);
  EXPECT_TRUE(c->truncate(8).ok());  // needs 5, 6, 7: rows 5, 0, 1 hold them (10 > 11 - 6)
  ASSERT_TRUE(c->commit(2).ok());
  Status st = c->truncate(4);  // needs 1, 2, 3: position 7 overwrote 1
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("layer 0 keeps a ring of 6 rows"), std::string::npos) << st.message();
  EXPECT_EQ(c->size(), 10);          // unchanged
  EXPECT_TRUE(c->truncate(7).ok());  // needs 4, 5, 6: held (4 + 6 >= 10)
  EXPECT_TRUE(c->truncate(0).ok());  // an empty prefix needs nothing
  // Rows written by a forward pass that was not committed count too.
  c->clear();
  ASSERT_TRUE(c->commit(8).ok());
  c->note_written(11);
  EXPECT_EQ(c->truncate(5).code(), StatusCode::kOutOfRange);  // needs 2: overwritten by 8
  EXPECT_TRUE(c->truncate(8).ok());                           // needs 5, 6, 7: 5 + 6 >= 11
  // clear() forgets the old writes.
  c->clear();
  ASSERT_TRUE(c->commit(4).ok());
  EXPECT_TRUE(c->truncate(2).ok());
}

TEST(KvCache, WithBackendKeepsItsApi) {
  struct Storage : KvBackendStorage {
    uint64_t bytes() const override { return 1234; }
  };
  KvCache c = KvCache::with_backend(2, 32, 8, std::make_unique<Storage>());
  EXPECT_NE(c.backend(), nullptr);
  EXPECT_EQ(c.bytes(), 1234u);
  EXPECT_EQ(c.rows(1), 32);
  EXPECT_FALSE(c.is_ring(1));
  EXPECT_EQ(c.max_chunk(), 32);
  ASSERT_TRUE(c.commit(20).ok());
  EXPECT_TRUE(c.truncate(3).ok());
}

// ---- the tiny synthetic gemma3 through a ring cache --------------------------------------------

constexpr int64_t kCtx = 64;

std::unique_ptr<DecoderModel> load_tiny(int64_t max_batch) {
  LoadOptions o;
  o.cpu.ops.impl = cpu::Impl::kFast;
  o.cpu.ops.quantize_activations = false;
  o.max_batch = max_batch;
  auto m = load_decoder_model(test::test_data_path("gemma3/tiny_gemma3.gguf"), o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<int32_t> ids(size_t n, int32_t salt) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 37 + salt * 11 + 5) % 96);
  return v;
}

// Feeds `tokens` in batches of the given sizes (cycled) and returns every row's logits.
std::vector<float> run_batches(DecoderModel& m, KvCache& c, const std::vector<int32_t>& tokens,
                               const std::vector<int64_t>& sizes) {
  const int64_t nv = m.hparams().n_vocab;
  std::vector<float> out(tokens.size() * static_cast<size_t>(nv));
  std::vector<int32_t> pos(tokens.size()), rows(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    pos[i] = static_cast<int32_t>(i);
    rows[i] = static_cast<int32_t>(i);
  }
  size_t i0 = 0;
  for (size_t b = 0; i0 < tokens.size(); ++b) {
    const size_t n = std::min(tokens.size() - i0, static_cast<size_t>(sizes[b % sizes.size()]));
    const Status st = m.infer({std::span(tokens).subspan(i0, n), std::span(pos).subspan(i0, n),
                               std::span(rows).subspan(0, n)},
                              c, out.data() + i0 * static_cast<size_t>(nv));
    EXPECT_TRUE(st.ok()) << st.to_string();
    i0 += n;
  }
  return out;
}

TEST(TinyGemma3Ring, SameLogitsAsAFullCache) {
  auto m = load_tiny(3);
  ASSERT_TRUE(m);
  const DecoderHParams& hp = m->hparams();
  auto ring = m->create_cache(kCtx);
  ASSERT_TRUE(ring.ok()) << ring.status().to_string();
  // 5 local layers of window 4 + 3 - 1 = 6 rows, one global layer of 64.
  EXPECT_EQ(ring->bytes(), 2u * (5 * 6 + 64) * static_cast<uint64_t>(hp.kv_dim()) * 4);
  EXPECT_EQ(ring->max_chunk(), 3);
  auto full = KvCache::create(hp.n_layer, kCtx, hp.kv_dim());
  ASSERT_TRUE(full.ok());
  const std::vector<int32_t> tokens = ids(50, 1);
  // Batches of 1 (decode), 2, 3 and 7 (split into chunks of 3 by the ring's max_chunk).
  for (const std::vector<int64_t>& sizes :
       {std::vector<int64_t>{7, 1, 2, 3}, std::vector<int64_t>{1}, std::vector<int64_t>{50}}) {
    ring->clear();
    full->clear();
    const auto a = run_batches(*m, *ring, tokens, sizes);
    const auto b = run_batches(*m, *full, tokens, sizes);
    EXPECT_LT(test::rel_l2(a, b), 1e-6) << "first batch size " << sizes[0];
    EXPECT_EQ(ring->size(), 50);
  }
}

// The ring against the independent numpy reference (ref_gemma3.py --make-tiny): its 14 ids
// wrap the 6-row rings twice, in chunks of 3 and one by one.
TEST(TinyGemma3Ring, MatchesNumpy) {
  auto m = load_tiny(3);
  ASSERT_TRUE(m);
  std::ifstream jf(test::test_data_path("gemma3/tiny_gemma3_logits.json"));
  ASSERT_TRUE(jf.good());
  const nlohmann::json fx = nlohmann::json::parse(jf);
  const std::vector<int32_t> tokens = fx["ids"];
  std::ifstream lf(test::test_data_path("gemma3/tiny_gemma3_logits.f32"), std::ios::binary);
  std::vector<float> want(tokens.size() * static_cast<size_t>(m->hparams().n_vocab));
  lf.read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * 4));
  ASSERT_TRUE(lf.good());
  auto ring = m->create_cache(kCtx);
  ASSERT_TRUE(ring.ok());
  ASSERT_TRUE(ring->is_ring(0));
  for (int64_t batch : {3, 1}) {
    ring->clear();
    EXPECT_LT(test::rel_l2(run_batches(*m, *ring, tokens, {batch}), want), 1e-4)
        << "batches of " << batch;
  }
}

// A model with max_batch 8 on a ring made for max_batch 3 runs chunks of 3.
TEST(TinyGemma3Ring, ChunkLimitedByTheCache) {
  auto m3 = load_tiny(3);
  auto m8 = load_tiny(8);
  ASSERT_TRUE(m3 && m8);
  auto ring = m3->create_cache(kCtx);
  auto full = KvCache::create(m8->hparams().n_layer, kCtx, m8->hparams().kv_dim());
  ASSERT_TRUE(ring.ok() && full.ok());
  const std::vector<int32_t> tokens = ids(30, 2);
  EXPECT_LT(
      test::rel_l2(run_batches(*m8, *ring, tokens, {8}), run_batches(*m8, *full, tokens, {8})),
      1e-6);
}

TEST(TinyGemma3Ring, RejectsAMismatchedRing) {
  auto m = load_tiny(3);
  ASSERT_TRUE(m);
  const DecoderHParams& hp = m->hparams();
  KvCacheSpec s = KvCacheSpec::uniform(hp.n_layer, kCtx, hp.kv_dim());
  s.layers[5] = {10, 4};  // layer 5 is global
  auto c = KvCache::create(s);
  ASSERT_TRUE(c.ok());
  const int32_t tok = 3, pos = 0, row = 0;
  std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
  const Status st =
      m->infer({std::span(&tok, 1), std::span(&pos, 1), std::span(&row, 1)}, *c, logits.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("layer 5 is a ring"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace rinfer
