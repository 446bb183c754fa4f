// The serving ops against the CPU references: paged attention (cpu::paged_attention, kReference)
// over batches that mix decode rows, prefill chunks with a cached prefix and whole prompts, with
// shuffled block tables, GQA ratios 1, 3, 4 and 8, head dims 64, 128 and 256, sliding windows,
// the bidirectional mask and split KV; the paged K/V store; per-row device sampling against the
// host Sampler with the same uniforms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/sampler.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer {
namespace {

struct Seq {
  int32_t n_new, n_kv;
};

struct Case {
  std::vector<Seq> seqs;
  int64_t n_head, n_head_kv, head_dim;
  int64_t block_size = 16;
  int64_t window = 0;
  bool causal = true;
  int32_t splits = 1;   // 0: paged_attention_splits' choice
  bool f32_kv = false;  // an f32 arena (unrounded keys and values; the scalar kernel)
  int32_t rows = 64;    // query rows a block (64 or 128)
};

std::string name(const Case& c) {
  std::string s = "heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + " d " +
                  std::to_string(c.head_dim) + " block " + std::to_string(c.block_size) +
                  " window " + std::to_string(c.window) + (c.causal ? " causal" : " bidir") +
                  " splits " + std::to_string(c.splits) + (c.f32_kv ? " f32 arena" : "") +
                  " rows " + std::to_string(c.rows) + " seqs";
  for (const Seq& q : c.seqs) s += " " + std::to_string(q.n_new) + "/" + std::to_string(q.n_kv);
  return s;
}

class CudaPaged : public test::CudaTest {
 public:
  // Relative L2 error of the kernel against the reference (negative on failure).
  double run(const Case& c, uint64_t seed) {
    const int64_t D = c.head_dim, kv_dim = c.n_head_kv * D, bs = c.block_size;
    const int64_t n_seq = static_cast<int64_t>(c.seqs.size());
    std::vector<int32_t> qstart{0}, kv_len;
    int64_t stride = 1, total_blocks = 0;
    for (const Seq& q : c.seqs) {
      qstart.push_back(qstart.back() + q.n_new);
      kv_len.push_back(q.n_kv);
      stride = std::max<int64_t>(stride, (q.n_kv + bs - 1) / bs);
      total_blocks += (q.n_kv + bs - 1) / bs;
    }
    const int64_t nt = qstart.back();
    // Shuffled physical blocks (a few spare), so no sequence's blocks are contiguous.
    const int64_t n_blocks = total_blocks + 3;
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> tables(static_cast<size_t>(n_seq * stride), -1);
    size_t next = 0;
    for (int64_t s = 0; s < n_seq; ++s) {
      const int64_t nb = (c.seqs[static_cast<size_t>(s)].n_kv + bs - 1) / bs;
      for (int64_t i = 0; i < nb; ++i) tables[static_cast<size_t>(s * stride + i)] = ids[next++];
    }
    const size_t arena_n = static_cast<size_t>(n_blocks * bs * kv_dim);
    std::vector<float> k = test::random_floats(arena_n, seed + 1);
    std::vector<float> v = test::random_floats(arena_n, seed + 2);
    if (!c.f32_kv) {
      k = test::round_bf16(k);
      v = test::round_bf16(v);
    }
    const int64_t q_stride = c.n_head * D + 2 * kv_dim;  // the q part of qkv rows
    const std::vector<float> qkv =
        test::round_bf16(test::random_floats(static_cast<size_t>(nt * q_stride), seed + 3));
    // The reference reads contiguous q rows.
    std::vector<float> q(static_cast<size_t>(nt * c.n_head * D));
    for (int64_t t = 0; t < nt; ++t) {
      std::copy_n(qkv.begin() + t * q_stride, c.n_head * D, q.begin() + t * c.n_head * D);
    }
    std::vector<cpu::AttentionSeq> seqs;
    for (int64_t s = 0; s < n_seq; ++s) {
      cpu::AttentionSeq a;
      a.q_start = qstart[static_cast<size_t>(s)];
      a.n_tokens = c.seqs[static_cast<size_t>(s)].n_new;
      a.n_kv = c.seqs[static_cast<size_t>(s)].n_kv;
      a.block_table = tables.data() + s * stride;
      seqs.push_back(a);
    }
    cpu::PagedAttentionShape sh;
    sh.n_head = c.n_head;
    sh.n_head_kv = c.n_head_kv;
    sh.head_dim = D;
    sh.kv_row_stride = kv_dim;
    sh.block_size = bs;
    sh.n_blocks = n_blocks;
    sh.scale = 1.0f / std::sqrt(static_cast<float>(D));
    sh.window = c.window;
    sh.causal = c.causal;
    cpu::OpContext ctx;
    ctx.impl = cpu::Impl::kReference;
    std::vector<float> ref(q.size());
    const Status rs = cpu::paged_attention(ctx, sh, seqs, q.data(), k.data(), v.data(), ref.data());
    EXPECT_TRUE(rs.ok()) << rs.to_string();
    if (!rs.ok()) return -1.0;

    std::vector<uint16_t> kb(arena_n), vb(arena_n);
    for (size_t i = 0; i < arena_n; ++i) {
      kb[i] = f32_to_bf16(k[i]);
      vb[i] = f32_to_bf16(v[i]);
    }
    std::vector<int32_t> work;
    cuda::paged_attention_work(qstart, kv_len, c.n_head, c.n_head_kv, work, c.rows);
    const int64_t max_len = *std::max_element(kv_len.begin(), kv_len.end());
    const int32_t n_work = static_cast<int32_t>(work.size() / 2);
    const int32_t splits =
        c.splits > 0 ? c.splits : cuda::paged_attention_splits(n_work, c.n_head_kv, max_len, D, 16);
    cuda::DeviceBuffer dk = c.f32_kv ? upload(k) : upload(kb);
    cuda::DeviceBuffer dv = c.f32_kv ? upload(v) : upload(vb);
    cuda::DeviceBuffer dq = upload(qkv);
    cuda::DeviceBuffer dwork = upload(work), dqs = upload(qstart), dlen = upload(kv_len),
                       dtab = upload(tables);
    const size_t out_n = static_cast<size_t>(nt * c.n_head * D);
    cuda::DeviceBuffer out = poisoned<uint16_t>(out_n);
    const size_t ws_bytes = cuda::paged_attention_workspace_bytes(nt, c.n_head, D, splits);
    auto ws = cuda::DeviceBuffer::create(ws_bytes + 16, 0, stream());
    EXPECT_TRUE(ws.ok());
    cuda::PagedAttentionParams p;
    p.n_tokens = nt;
    p.n_head = c.n_head;
    p.n_head_kv = c.n_head_kv;
    p.head_dim = D;
    p.q_stride = q_stride;
    p.out_stride = c.n_head * D;
    p.block_size = static_cast<int32_t>(bs);
    p.table_stride = static_cast<int32_t>(stride);
    p.window = c.window;
    p.causal = c.causal;
    p.scale = sh.scale;
    p.n_work = n_work;
    p.n_splits = splits;
    p.work = dwork.as<int32_t>();
    p.query_start = dqs.as<int32_t>();
    p.kv_len = dlen.as<int32_t>();
    p.tables = dtab.as<int32_t>();
    p.kv_dtype = c.f32_kv ? DType::kF32 : DType::kBF16;
    p.rows = c.rows;
    const Status st = cuda::paged_attention(p, dk.data(), dv.data(), dq.as<float>(),
                                            out.as<uint16_t>(), ws->data(), ws->bytes(), stream());
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return -1.0;
    const std::vector<float> got = test::bf16_to_f32(download<uint16_t>(out, out_n));
    EXPECT_EQ(test::count_non_finite(got), 0u);
    return test::rel_l2(got, ref);
  }
};

void run_cases(CudaPaged* t, const std::vector<Case>& cases, uint64_t seed) {
  for (const Case& c : cases) {
    SCOPED_TRACE(name(c));
    const double err = t->run(c, seed += 10);
    EXPECT_GE(err, 0.0);
    // bf16 tensor-core inputs and a bf16 output; an f32 arena: the output's rounding alone.
    EXPECT_LT(err, c.f32_kv ? 4e-3 : 1e-2);
  }
}

// Decode rows, chunks over a cached prefix and whole prompts of one batch.
const std::vector<Seq> kMixed = {{1, 1},  {1, 77},   {1, 300}, {40, 40}, {17, 130},
                                 {1, 16}, {64, 200}, {3, 3},   {1, 1025}};

TEST_F(CudaPaged, MatchesTheReferenceForEveryGqaRatioAndHeadDim) {
  run_cases(this,
            {{kMixed, 32, 8, 128},
             {kMixed, 9, 3, 64},
             {kMixed, 8, 8, 64},
             {kMixed, 4, 1, 256},
             {kMixed, 16, 2, 128},
             {kMixed, 64, 1, 64}},
            100);
}

TEST_F(CudaPaged, BlockSizesWindowsAndTheBidirectionalMask) {
  Case c{kMixed, 32, 8, 128};
  c.block_size = 32;
  Case c8 = c;
  c8.block_size = 8;
  Case c12 = c;  // not a power of two: the lookups divide (attention_paged.cu)
  c12.block_size = 12;
  Case w{kMixed, 4, 1, 256};
  w.window = 50;
  Case w2{kMixed, 9, 3, 64};
  w2.window = 16;
  Case bi{{{5, 5}, {64, 64}, {100, 100}, {1, 1}}, 12, 12, 64};
  bi.causal = false;
  run_cases(this, {c, c8, c12, w, w2, bi}, 200);
}

TEST_F(CudaPaged, SplitKvMatchesOneSplit) {
  Case a{{{1, 5000}, {1, 300}, {1, 17}}, 32, 8, 128};
  a.splits = 0;  // the launcher's choice: several splits for three sequences
  Case b = a;
  b.splits = 7;
  Case c{{{1, 2000}, {20, 900}}, 9, 3, 64};
  c.splits = 4;
  Case w{{{1, 3000}, {1, 40}}, 4, 1, 256};
  w.window = 512;
  w.splits = 5;
  EXPECT_GT(cuda::paged_attention_splits(3, 8, 5000, 128, 16), 1);
  EXPECT_EQ(cuda::paged_attention_splits(512, 8, 5000, 128, 16), 1);
  run_cases(this, {a, b, c, w}, 300);
}

// The tile and pipeline configurations (32 positions in 3 or 4 stages) on the same batches.
TEST_F(CudaPaged, EveryTileConfigurationMatchesTheReference) {
  Case w{kMixed, 9, 3, 64};
  w.window = 40;
  Case sp{{{1, 3000}, {7, 700}, {1, 33}}, 32, 8, 128};
  sp.splits = 0;
  for (int c : {1, 2, 0}) {
    SCOPED_TRACE("configuration " + std::to_string(c));
    cuda::set_paged_attention_config(c);
    run_cases(this, {{kMixed, 32, 8, 128}, {kMixed, 8, 8, 64}, w, sp}, 400 + 50 * c);
  }
}

// An f32 arena (strategies.kv_cache.dtype f32) through the scalar kernel: every head dim and GQA
// ratio, windows, the bidirectional mask, and splits asked for (it runs one).
TEST_F(CudaPaged, F32ArenaMatchesTheReference) {
  std::vector<Case> cases = {
      {kMixed, 32, 8, 128}, {kMixed, 9, 3, 64}, {kMixed, 4, 1, 256}, {kMixed, 64, 1, 64}};
  Case w{kMixed, 9, 3, 64};
  w.window = 16;
  Case bi{{{5, 5}, {64, 64}, {100, 100}, {1, 1}}, 12, 12, 64};
  bi.causal = false;
  Case sp{{{1, 3000}, {7, 700}, {1, 33}}, 32, 8, 128};
  sp.splits = 4;
  Case b8{kMixed, 16, 2, 128};
  b8.block_size = 8;
  for (Case c : {w, bi, sp, b8}) cases.push_back(c);
  for (Case& c : cases) c.f32_kv = true;
  run_cases(this, cases, 500);
}

// Blocks of 128 query rows (8 warps; batches with long prompt chunks): every GQA ratio of head
// dims 64 and 128, windows, the bidirectional mask, splits; and when the runner takes them.
TEST_F(CudaPaged, BlocksOf128RowsMatchTheReference) {
  std::vector<Case> cases = {{kMixed, 32, 8, 128},
                             {kMixed, 9, 3, 64},
                             {kMixed, 8, 8, 64},
                             {kMixed, 16, 2, 128},
                             {kMixed, 64, 1, 64}};
  Case w{kMixed, 9, 3, 64};
  w.window = 40;
  Case bi{{{5, 5}, {64, 64}, {100, 100}, {1, 1}}, 12, 12, 64};
  bi.causal = false;
  Case sp{{{1, 3000}, {300, 700}, {1, 33}}, 32, 8, 128};
  sp.splits = 0;
  Case b8{kMixed, 32, 8, 128};
  b8.block_size = 8;
  for (Case c : {w, bi, sp, b8}) cases.push_back(c);
  for (Case& c : cases) c.rows = 128;
  run_cases(this, cases, 600);
  // 128 rows where a sequence brings a whole block's tokens (128 / G), bf16, head dims 64 / 128.
  const std::vector<int32_t> long_chunk = {0, 1, 33}, short_chunks = {0, 1, 2, 31};
  EXPECT_EQ(cuda::paged_attention_rows(long_chunk, 32, 8, 128, DType::kBF16), 128);
  EXPECT_EQ(cuda::paged_attention_rows(short_chunks, 32, 8, 128, DType::kBF16), 64);
  EXPECT_EQ(cuda::paged_attention_rows(long_chunk, 32, 8, 128, DType::kF32), 64);
  EXPECT_EQ(cuda::paged_attention_rows(long_chunk, 4, 1, 256, DType::kBF16), 64);
}

TEST_F(CudaPaged, RejectsBadArguments) {
  cuda::PagedAttentionParams p;
  p.n_tokens = 1;
  p.n_head = 8;
  p.n_head_kv = 3;
  p.head_dim = 64;
  p.table_stride = 1;
  p.n_work = 1;
  EXPECT_EQ(
      cuda::paged_attention(p, nullptr, nullptr, nullptr, nullptr, nullptr, 0, stream()).code(),
      StatusCode::kInvalidArgument);
  p.n_head_kv = 8;
  p.head_dim = 96;
  EXPECT_EQ(
      cuda::paged_attention(p, nullptr, nullptr, nullptr, nullptr, nullptr, 0, stream()).code(),
      StatusCode::kUnsupported);
  p.head_dim = 64;
  p.window = 4;
  p.causal = false;
  EXPECT_EQ(
      cuda::paged_attention(p, nullptr, nullptr, nullptr, nullptr, nullptr, 0, stream()).code(),
      StatusCode::kInvalidArgument);
}

// Rows with a negative slot (a batch graph's padding rows) are skipped: every arena row no slot
// names keeps its poison.
TEST_F(CudaPaged, KvStoreSlotsWritesEachRowToItsSlot) {
  const int64_t nt = 37, kv_dim = 192, stride = 256, n_rows = 100;
  const std::vector<float> src = test::random_floats(static_cast<size_t>(nt * stride), 7);
  std::vector<int32_t> slots(static_cast<size_t>(nt));
  std::iota(slots.begin(), slots.end(), 0);
  std::mt19937 rng(3);
  std::vector<int32_t> all(static_cast<size_t>(n_rows));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::copy_n(all.begin(), nt, slots.begin());
  for (int64_t r = 3; r < nt; r += 5) slots[static_cast<size_t>(r)] = -1;
  for (DType t : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(t));
    const size_t es = t == DType::kBF16 ? 2 : 4;
    const size_t n = static_cast<size_t>(n_rows * kv_dim);
    cuda::DeviceBuffer dsrc = upload(src), dslots = upload(slots);
    cuda::DeviceBuffer k = poisoned<uint8_t>(n * es), v = poisoned<uint8_t>(n * es);
    const float* kp = dsrc.as<float>();
    CU_ASSERT_OK(cuda::kv_store_slots(kp, kp + 64, nt, kv_dim, stride, t, k.data(), v.data(),
                                      dslots.as<int32_t>(), stream()));
    std::vector<float> kh, vh;
    if (t == DType::kBF16) {
      kh = test::bf16_to_f32(download<uint16_t>(k, n));
      vh = test::bf16_to_f32(download<uint16_t>(v, n));
    } else {
      kh = download<float>(k, n);
      vh = download<float>(v, n);
    }
    std::vector<bool> written(static_cast<size_t>(n_rows), false);
    for (int64_t r = 0; r < nt; ++r) {
      if (slots[static_cast<size_t>(r)] < 0) continue;
      written[static_cast<size_t>(slots[static_cast<size_t>(r)])] = true;
      for (int64_t e = 0; e < kv_dim; ++e) {
        const size_t at = static_cast<size_t>(slots[static_cast<size_t>(r)] * kv_dim + e);
        const float want_k = src[static_cast<size_t>(r * stride + e)];
        const float want_v = src[static_cast<size_t>(r * stride + 64 + e)];
        const float tol = t == DType::kBF16 ? 4e-3f : 0.0f;
        ASSERT_NEAR(kh[at], want_k, tol * std::fabs(want_k)) << "row " << r << " elem " << e;
        ASSERT_NEAR(vh[at], want_v, tol * std::fabs(want_v)) << "row " << r << " elem " << e;
      }
    }
    int64_t kept = 0;
    for (int64_t row = 0; row < n_rows; ++row) {
      if (written[static_cast<size_t>(row)]) continue;
      for (int64_t e = 0; e < kv_dim; ++e) {
        const size_t at = static_cast<size_t>(row * kv_dim + e);
        ASSERT_TRUE(std::isnan(kh[at]) && std::isnan(vh[at])) << "arena row " << row;
      }
      ++kept;
    }
    EXPECT_EQ(kept, n_rows - (nt - (nt - 3 + 4) / 5));  // the skipped rows wrote nothing
  }
}

// Every row with its own settings gives the host Sampler's id with the same uniform.
TEST_F(CudaPaged, SampleRowsMatchesTheHostSamplerRowByRow) {
  const int64_t n_vocab = 5000, n_rows = 24;
  std::vector<float> logits =
      test::random_floats(static_cast<size_t>(n_rows * n_vocab), 11, -8.0f, 8.0f);
  std::vector<int32_t> hist;
  std::vector<cuda::RowSample> rows;
  std::vector<SamplingParams> params;
  std::vector<std::vector<int32_t>> histories;
  std::mt19937 rng(5);
  for (int64_t r = 0; r < n_rows; ++r) {
    SamplingParams sp;
    sp.temperature = r % 3 == 0 ? 0.0f : 0.3f + 0.1f * static_cast<float>(r % 7);
    sp.top_k = 1 + static_cast<int32_t>((r * 37) % 300);
    sp.top_p = r % 4 == 0 ? 1.0f : 0.9f;
    sp.min_p = r % 5 == 0 ? 0.0f : 0.05f;
    sp.repeat_penalty = r % 2 == 0 ? 1.3f : 1.0f;
    sp.presence_penalty = r % 6 == 1 ? 0.5f : 0.0f;
    sp.repeat_last_n = 64;
    std::vector<int32_t> h(static_cast<size_t>(10 + r * 5));
    // Repeats, and the row's current best ids, so the penalties change the outcome.
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<int32_t>(rng() % 40);
    const float* row = logits.data() + r * n_vocab;
    h.push_back(static_cast<int32_t>(std::max_element(row, row + n_vocab) - row));
    const float u = static_cast<float>(r) / static_cast<float>(n_rows + 1);
    const bool pen = sp.repeat_penalty != 1.0f || sp.presence_penalty != 0.0f;
    const size_t w = pen ? std::min<size_t>(h.size(), 64) : 0;
    cuda::DecodeSampling ds;
    ds.chain = {sp.temperature, sp.top_k, sp.top_p, sp.min_p};
    ds.repeat_penalty = sp.repeat_penalty;
    ds.presence_penalty = sp.presence_penalty;
    ds.last_n = sp.repeat_last_n;
    auto rs = cuda::row_sample(ds, n_vocab, static_cast<int32_t>(hist.size()),
                               static_cast<int32_t>(w), u);
    ASSERT_TRUE(rs.ok()) << rs.status().to_string();
    hist.insert(hist.end(), h.end() - static_cast<std::ptrdiff_t>(w), h.end());
    rows.push_back(*rs);
    params.push_back(sp);
    histories.push_back(h);
  }
  // A row with NaN is reported.
  logits[static_cast<size_t>(5 * n_vocab + 17)] = std::nanf("");
  std::vector<uint8_t> raw(rows.size() * sizeof(cuda::RowSample));
  std::memcpy(raw.data(), rows.data(), raw.size());
  cuda::DeviceBuffer dl = upload(logits), dargs = upload(raw), dh = upload(hist);
  cuda::DeviceBuffer out = poisoned<int32_t>(static_cast<size_t>(n_rows));
  CU_ASSERT_OK(cuda::sample_rows(dl.as<float>(), n_rows, n_vocab,
                                 static_cast<const cuda::RowSample*>(dargs.data()),
                                 dh.as<int32_t>(), out.as<int32_t>(), stream()));
  const std::vector<int32_t> got = download<int32_t>(out, static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    Sampler s(params[static_cast<size_t>(r)], n_vocab);
    std::vector<float> row(logits.begin() + r * n_vocab, logits.begin() + (r + 1) * n_vocab);
    auto want = s.sample_with_uniform(row, histories[static_cast<size_t>(r)],
                                      static_cast<double>(rows[static_cast<size_t>(r)].uniform));
    if (r == 5) {
      EXPECT_FALSE(want.ok());
      EXPECT_EQ(got[static_cast<size_t>(r)], -1);
      continue;
    }
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    EXPECT_EQ(got[static_cast<size_t>(r)], *want);
  }
  // Settings the device does not take.
  cuda::DecodeSampling bad;
  bad.chain.top_k = 0;
  EXPECT_EQ(cuda::row_sample(bad, n_vocab, 0, 0, 0.5f).status().code(), StatusCode::kUnsupported);
  bad.chain.top_k = 40;
  EXPECT_EQ(cuda::row_sample(bad, n_vocab, 0, 2000, 0.5f).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::row_sample(bad, n_vocab, 0, 0, 1.0f).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CudaPaged, MaskTokensClearsExactlyTheDisallowedTokens) {
  const int64_t n_vocab = 5003, n_rows = 7, words = (n_vocab + 31) / 32;
  std::vector<float> logits =
      test::random_floats(static_cast<size_t>(n_rows * n_vocab), 21, -8.0f, 8.0f);
  std::vector<uint32_t> bits(static_cast<size_t>(n_rows * words));
  std::mt19937 rng(9);
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t kind = rng() % 4;  // whole words allowed or refused, and mixed ones
    bits[i] = kind == 0 ? 0xFFFFFFFFu : kind == 1 ? 0u : static_cast<uint32_t>(rng());
  }
  cuda::DeviceBuffer dl = upload(logits), db = upload(bits);
  CU_ASSERT_OK(cuda::mask_tokens(dl.as<float>(), n_rows, n_vocab, db.as<uint32_t>(), stream()));
  const std::vector<float> got = download<float>(dl, logits.size());
  int64_t masked = 0;
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t t = 0; t < n_vocab; ++t) {
      const size_t i = static_cast<size_t>(r * n_vocab + t);
      const bool allowed = ((bits[static_cast<size_t>(r * words + t / 32)] >> (t % 32)) & 1u) != 0;
      masked += allowed ? 0 : 1;
      if (allowed) {
        ASSERT_EQ(got[i], logits[i]) << r << "," << t;
      } else {
        ASSERT_TRUE(std::isinf(got[i]) && got[i] < 0) << r << "," << t << ": " << got[i];
      }
    }
  }
  EXPECT_GT(masked, 0);
  EXPECT_LT(masked, n_rows * n_vocab);
  EXPECT_EQ(cuda::mask_tokens(dl.as<float>(), -1, n_vocab, db.as<uint32_t>(), stream()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::mask_tokens(nullptr, 1, n_vocab, db.as<uint32_t>(), stream()).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rinfer
