// The Llama-family sample against an independent numpy implementation (tests/tools/ref_llama.py):
// two tiny synthetic models (qwen2 with NeoX RoPE, biases, separate output and linear RoPE
// scaling; llama with multi-query attention, partial rotation and tied output) and the real
// SmolLM2-135M Q4_1, run through a one-seat engine core (tests/core_logits.h). Also: decoding
// through the KV cache vs one pass, chunked prefill, the runner's batch checks and cancellation,
// and the loader's validation messages.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "core/thread_pool.h"
#include "core_logits.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "kv/kv_arena.h"
#include "models/llama/llama_model.h"
#include "models/model.h"
#include "test_util.h"

namespace rinfer {
namespace {

using test::rel_l2;
using test::test_data_path;

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string b = ss.str();
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

int32_t argmax_row(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

std::vector<int32_t> iota_ids(size_t n, int32_t start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

struct Loaded {
  std::unique_ptr<DecoderModel> model;
};

Loaded load(const std::string& path, cpu::Impl impl, ThreadPool* pool,
            bool quantize_activations = true) {
  LoadOptions opts;
  opts.cpu.ops.impl = impl;
  opts.cpu.ops.pool = pool;
  opts.cpu.ops.quantize_activations = quantize_activations;
  auto m = load_decoder_model(path, opts);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  return {std::move(m).value()};
}

// The logits of every row [n, n_vocab] of `ids` in one forward pass from an empty cache.
std::vector<float> all_logits(Loaded& l, const std::vector<int32_t>& ids) {
  return test::core_logits(*l.model, ids);
}

// The same, one token a pass through the KV cache (chunk 1), or in passes of `chunk` tokens.
std::vector<float> decode_logits(Loaded& l, const std::vector<int32_t>& ids, int64_t chunk = 1) {
  test::CoreLogitsOptions o;
  o.chunk = chunk;
  return test::core_logits(*l.model, ids, o);
}

using RunnerRig = test::OneSequence;

class TinyModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string model_path() const { return test_data_path("llama/tiny_" + GetParam() + ".gguf"); }
  nlohmann::json fixture() const {
    return read_json(test_data_path("llama/tiny_" + GetParam() + "_logits.json"));
  }
  std::vector<float> expected() const {
    return read_f32(test_data_path("llama/tiny_" + GetParam() + "_logits.f32"));
  }
};

TEST_P(TinyModelTest, HyperParametersFromMetadata) {
  Loaded l = load(model_path(), cpu::Impl::kReference, nullptr);
  ASSERT_TRUE(l.model);
  const DecoderHParams& hp = l.model->hparams();
  EXPECT_EQ(hp.n_layer, 2);
  EXPECT_EQ(hp.n_embd, 64);
  EXPECT_EQ(hp.head_dim, 16);
  EXPECT_EQ(hp.n_vocab, 96);
  if (GetParam() == "qwen2") {
    EXPECT_EQ(hp.rope.mode, cpu::RopeMode::kNeox);
    EXPECT_TRUE(hp.attn_bias);
    EXPECT_FALSE(hp.tied_output);
    EXPECT_FLOAT_EQ(hp.rope.freq_scale, 0.5f);
    EXPECT_EQ(hp.n_head_kv, 2);
  } else {
    EXPECT_EQ(hp.rope.mode, cpu::RopeMode::kNormal);
    EXPECT_FALSE(hp.attn_bias);
    EXPECT_TRUE(hp.tied_output);
    EXPECT_EQ(hp.rope.n_rot, 8);
    EXPECT_EQ(hp.n_head_kv, 1);
  }
  EXPECT_NE(l.model->describe().find(GetParam()), std::string::npos);
  EXPECT_GT(l.model->weight_bytes_per_token(), 0u);
}

TEST_P(TinyModelTest, ReferenceKernelsMatchNumpy) {
  Loaded l = load(model_path(), cpu::Impl::kReference, nullptr);
  ASSERT_TRUE(l.model);
  const nlohmann::json fx = fixture();
  const std::vector<int32_t> ids = fx["ids"];
  const std::vector<float> got = all_logits(l, ids);
  EXPECT_LT(rel_l2(got, expected()), 1e-5);
  const int64_t n_vocab = fx["n_vocab"];
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(argmax_row(got.data() + i * n_vocab, n_vocab), fx["argmax"][i].get<int32_t>())
        << "position " << i;
  }
}

// The fast kernels have two modes for quantized weights: 8-bit activations with integer dot
// products (the default; its rounding is the only error), and f32 activations (exact up to f32).
TEST_P(TinyModelTest, FastKernelsMatchNumpy) {
  ThreadPool pool(2);
  const nlohmann::json fx = fixture();
  const std::vector<int32_t> ids = fx["ids"];
  Loaded exact = load(model_path(), cpu::Impl::kFast, &pool, false);
  ASSERT_TRUE(exact.model);
  EXPECT_LT(rel_l2(all_logits(exact, ids), expected()), 1e-5);
  Loaded q8 = load(model_path(), cpu::Impl::kFast, &pool);
  ASSERT_TRUE(q8.model);
  EXPECT_LT(rel_l2(all_logits(q8, ids), expected()), 5e-2);  // measured 2.7e-2 (qwen2)
}

// The KV cache is an optimization only: decoding token by token through it gives the logits of
// recomputing the whole prefix. Checked with the exact kernels, where any difference would be a
// cache bug; with 8-bit activations the batched and the single-token matmuls round a few
// activations differently, and those differences grow over the layers (see RealModelTest).
TEST_P(TinyModelTest, KvCacheDecodeEqualsFullRecompute) {
  for (cpu::Impl impl : {cpu::Impl::kReference, cpu::Impl::kFast}) {
    ThreadPool pool(2);
    Loaded l = load(model_path(), impl, &pool, false);
    ASSERT_TRUE(l.model);
    const std::vector<int32_t> ids = fixture()["ids"];
    const std::vector<float> full = all_logits(l, ids);
    const std::vector<float> step = decode_logits(l, ids);
    EXPECT_LT(rel_l2(step, full), 1e-6);
  }
}

TEST_P(TinyModelTest, ChunkedPrefillEqualsOneBatch) {
  ThreadPool pool(2);
  Loaded l = load(model_path(), cpu::Impl::kFast, &pool);
  ASSERT_TRUE(l.model);
  const std::vector<int32_t> ids = fixture()["ids"];
  EXPECT_LT(rel_l2(decode_logits(l, ids, 5), all_logits(l, ids)), 1e-5);  // 12: 5 + 5 + 2
}

// strategies.kv_cache.dtype int8: the cache holds 8-bit codes with a scale per position and KV
// head. The logits stay near the f32 cache's, one pass and step by step agree as they do with
// f32 (every pass reads the codes, its own rows too), and a position takes about a quarter of
// the bytes.
TEST_P(TinyModelTest, Int8KvCacheStaysNearF32) {
  for (cpu::Impl impl : {cpu::Impl::kReference, cpu::Impl::kFast}) {
    ThreadPool pool(2);
    Loaded f32 = load(model_path(), impl, &pool, false);
    ASSERT_TRUE(f32.model);
    LoadOptions opts;
    opts.cpu.ops.impl = impl;
    opts.cpu.ops.pool = &pool;
    opts.cpu.ops.quantize_activations = false;
    opts.kv_dtype = DType::kI8;
    auto m8 = load_decoder_model(model_path(), opts);
    ASSERT_TRUE(m8.ok()) << m8.status().to_string();
    Loaded i8{std::move(m8).value()};
    const std::vector<int32_t> ids = fixture()["ids"];
    const std::vector<float> ref = all_logits(f32, ids), one = all_logits(i8, ids);
    const double err = rel_l2(one, ref);
    EXPECT_LT(err, 2e-2);
    EXPECT_GT(err, 0.0);  // the codes were read, not the f32 rows
    EXPECT_LT(rel_l2(decode_logits(i8, ids), one), 1e-5);
    const DecoderHParams& hp = i8.model->hparams();
    auto s8 = i8.model->kv_spec(64, 16);
    auto s32 = f32.model->kv_spec(64, 16);
    ASSERT_TRUE(s8.ok() && s32.ok());
    EXPECT_EQ(s8->dtype, DType::kI8);
    EXPECT_EQ(s8->row_bytes(),
              static_cast<uint64_t>(hp.kv_dim() + 4 * hp.kv_dim() / s8->i8_group()));
    EXPECT_EQ(s8->i8_group(), hp.head_dim % 16 == 0 ? 16 : hp.head_dim);
    EXPECT_EQ(s32->row_bytes(), static_cast<uint64_t>(4 * hp.kv_dim()));
  }
}

// strategies.quantization.weights int8 (W8A8): every layer matrix becomes int8 codes with a scale
// per row, packed for the integer kernel, and the activations int8 with a scale per token. The
// logits stay near the exact f32 ones (the weights' and the activations' rounding), the fast and
// the reference kernels agree to float rounding (the reference dequantizes and sums in double),
// and decoding step by step gives the one pass's logits (a token's codes do not depend on the
// tokens beside it).
TEST_P(TinyModelTest, Int8WeightsStayNearF32) {
  ThreadPool pool(2);
  Loaded f32 = load(model_path(), cpu::Impl::kReference, &pool, false);
  ASSERT_TRUE(f32.model);
  const std::vector<int32_t> ids = fixture()["ids"];
  const std::vector<float> ref = all_logits(f32, ids);
  std::vector<float> fast;
  for (cpu::Impl impl : {cpu::Impl::kFast, cpu::Impl::kReference}) {
    LoadOptions opts;
    opts.cpu.ops.impl = impl;
    opts.cpu.ops.pool = &pool;
    opts.weight_format = DType::kI8;
    auto m = load_decoder_model(model_path(), opts);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    Loaded i8{std::move(m).value()};
    const std::vector<float> one = all_logits(i8, ids);
    const double err = rel_l2(one, ref);
    EXPECT_LT(err, 5e-2);
    EXPECT_GT(err, 0.0);
    if (impl == cpu::Impl::kFast) {
      fast = one;
      EXPECT_LT(rel_l2(decode_logits(i8, ids), one), 1e-5);
    } else {
      // Same codes and scales; the fast path also rounds the activations to int8.
      EXPECT_LT(rel_l2(fast, one), 5e-2);
    }
  }
}

TEST_P(TinyModelTest, RequestedRowsOnly) {
  Loaded l = load(model_path(), cpu::Impl::kReference, nullptr);
  ASSERT_TRUE(l.model);
  const std::vector<int32_t> ids = fixture()["ids"];
  const std::vector<float> full = all_logits(l, ids);
  const int64_t v = l.model->hparams().n_vocab;
  const std::vector<int32_t> rows = {3, 7, 11};
  const std::vector<int32_t> pos = iota_ids(ids.size());
  std::vector<float> got(rows.size() * v);
  RunnerRig r = RunnerRig::make(*l.model, 64);
  ASSERT_TRUE(r.forward(ids, pos, rows, got.data()).ok());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<float> a(got.begin() + i * v, got.begin() + (i + 1) * v);
    std::vector<float> b(full.begin() + rows[i] * v, full.begin() + (rows[i] + 1) * v);
    EXPECT_LT(rel_l2(a, b), 1e-6) << "row " << rows[i];
  }
  // No rows: only the cache is filled; the next token's logits then equal the full pass's.
  RunnerRig r2 = RunnerRig::make(*l.model, 64);
  const size_t n = ids.size() - 1;
  ASSERT_TRUE(r2.forward(std::span(ids).first(n), std::span(pos).first(n), {}, nullptr).ok());
  const int32_t row0 = 0;
  std::vector<float> last(v);
  ASSERT_TRUE(r2.forward(std::span(ids).subspan(n, 1), std::span(pos).subspan(n, 1),
                         std::span(&row0, 1), last.data())
                  .ok());
  EXPECT_LT(rel_l2(last, std::vector<float>(full.begin() + n * v, full.end())), 1e-6);
}

TEST_P(TinyModelTest, RunnerRejectsBadBatches) {
  Loaded l = load(model_path(), cpu::Impl::kFast, nullptr);
  ASSERT_TRUE(l.model);
  const int64_t v = l.model->hparams().n_vocab;
  std::vector<float> logits(4 * v);
  RunnerRig r = RunnerRig::make(*l.model, 16, 12);
  ASSERT_TRUE(r.ok());
  const std::vector<int32_t> ids = {1, 2, 3, 4}, pos = {0, 1, 2, 3}, last = {3};
  ASSERT_TRUE(r.forward(ids, pos, last, logits.data()).ok());

  auto expect_error = [&](const ForwardBatch& b, const std::string& needle) {
    Status st = r.runner->forward(b, *r.arena, logits.data());
    EXPECT_FALSE(st.ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  const std::vector<int32_t> qs = {0, 4}, len = {8}, pos4 = {4, 5, 6, 7};
  ForwardBatch good;
  good.tokens = ids;
  good.positions = pos4;
  good.query_start = qs;
  good.kv_len = len;
  good.block_tables = r.table;
  good.table_stride = static_cast<int32_t>(r.table.size());
  good.logit_rows = last;
  ForwardBatch b = good;
  b.positions = pos;  // must end at kv_len - 1
  expect_error(b, "is at position 0, not 4");
  const std::vector<int32_t> rows_desc = {2, 1};
  b = good;
  b.logit_rows = rows_desc;
  expect_error(b, "out of order");
  const std::vector<int32_t> many(13, 1), many_pos = iota_ids(13), qs13 = {0, 13}, len13 = {13};
  b = good;
  b.tokens = many;
  b.positions = many_pos;
  b.query_start = qs13;
  b.kv_len = len13;
  expect_error(b, "the runner takes at most 12");
  const std::vector<int32_t> len20 = {20}, pos20 = {16, 17, 18, 19};
  b = good;
  b.positions = pos20;
  b.kv_len = len20;
  expect_error(b, "context 16");
  b = good;
  b.tokens = {};
  expect_error(b, "no tokens");
  b = good;
  b.block_tables = std::span(r.table).first(2);
  expect_error(b, "block_tables holds 2 entries");
  // An arena of another model's shape.
  auto spec = l.model->kv_spec(16, 4);
  ASSERT_TRUE(spec.ok());
  spec->kv_dim += 8;
  auto bad_arena = kv::HostKvArena::create(*spec, std::vector<int32_t>(spec->n_groups(), 4));
  ASSERT_TRUE(bad_arena.ok());
  Status st = r.runner->forward(good, **bad_arena, logits.data());
  EXPECT_FALSE(st.ok());
}

INSTANTIATE_TEST_SUITE_P(Archs, TinyModelTest, ::testing::Values("qwen2", "llama"));

// Guards Ctrl-C during a long forward: ForwardBatch::cancel is checked between layers, so a flag
// raised mid-forward (here from the layer observer, after a layer) stops the pass before the
// next layer with kCancelled, and the same batch afterwards (its rows rewritten) gives the logits
// of a run never cancelled.
TEST(LlamaCancel, StopsBetweenLayers) {
  Loaded l = load(test_data_path("llama/tiny_llama.gguf"), cpu::Impl::kFast, nullptr);
  ASSERT_TRUE(l.model);
  auto* lm = dynamic_cast<llama::LlamaModel*>(l.model.get());
  ASSERT_NE(lm, nullptr);
  const int64_t n_layer = l.model->hparams().n_layer, n_vocab = l.model->hparams().n_vocab;
  ASSERT_GE(n_layer, 2);
  std::atomic<bool> cancel{false};
  int64_t blocks = 0, trip_at = -1;  // blocks run; raise the flag after block number trip_at
  lm->set_layer_observer([&](int64_t layer, int64_t, const float*, int64_t, int64_t) {
    if (layer < 0) return;
    if (blocks++ == trip_at) cancel = true;
  });
  RunnerRig r = RunnerRig::make(*l.model, 16);
  const std::vector<int32_t> prefix = {1, 2, 3}, ids = {5, 17, 42, 8, 9, 23, 11};
  std::vector<float> want(n_vocab), got(n_vocab, -1.0f);
  const int32_t last = static_cast<int32_t>(ids.size()) - 1;
  const std::vector<int32_t> pos = iota_ids(ids.size(), 3);
  auto run = [&](std::vector<float>& out) {
    return r.forward(ids, pos, std::span<const int32_t>(&last, 1), out.data(), &cancel);
  };
  ASSERT_TRUE(r.forward(prefix, iota_ids(3), {}, nullptr).ok());
  ASSERT_TRUE(run(want).ok());
  // After the first block, then after the last but one.
  for (int64_t trip : {int64_t{0}, n_layer - 2}) {
    blocks = 0;
    trip_at = trip;
    cancel = false;
    Status st = run(got);
    EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.to_string();
    EXPECT_NE(st.message().find("cancelled before layer " + std::to_string(trip + 1)),
              std::string::npos)
        << st.message();
    EXPECT_EQ(blocks, trip + 1);  // nothing ran after the block that raised the flag
  }
  // Raised before the call: no block runs.
  blocks = 0;
  trip_at = -1;
  cancel = true;
  EXPECT_EQ(run(got).code(), StatusCode::kCancelled);
  EXPECT_EQ(blocks, 0);
  cancel = false;
  ASSERT_TRUE(run(got).ok());
  EXPECT_EQ(got, want);
}

// ---- validation -------------------------------------------------------------------------------

// Copies tiny_qwen2.gguf with edits: `drop` tensors are left out, `reshape` tensors get a new
// shape (data from `reshape_from`), metadata in `meta` replaces or adds keys, `drop_keys` go.
struct Edit {
  std::vector<std::string> drop;
  std::string reshape, reshape_from;
  std::vector<std::pair<std::string, GgufWriter::Value>> meta;
  std::vector<std::string> drop_keys;
};

std::string edited_model(const std::string& name, const Edit& e) {
  auto src = GgufFile::open(test_data_path("llama/tiny_qwen2.gguf"));
  EXPECT_TRUE(src.ok());
  GgufWriter w;
  for (const auto& [k, v] : src->metadata()) {
    if (std::find(e.drop_keys.begin(), e.drop_keys.end(), k) != e.drop_keys.end()) continue;
    w.set(std::string(k), GgufWriter::Value::copy_of(v));
  }
  for (const auto& [k, v] : e.meta) w.set(k, v);
  for (const GgufTensorInfo& t : src->tensors()) {
    const std::string n(t.name);
    if (std::find(e.drop.begin(), e.drop.end(), n) != e.drop.end()) continue;
    const GgufTensorInfo* from = &t;
    if (n == e.reshape) from = src->find_tensor(e.reshape_from);
    EXPECT_TRUE(w.add_tensor(n, from->dtype, from->shape,
                             std::string(reinterpret_cast<const char*>(from->data), from->nbytes))
                    .ok());
  }
  auto bytes = w.to_bytes();
  EXPECT_TRUE(bytes.ok());
  return test::write_temp_file(name, *bytes);
}

std::string load_error(const std::string& path) {
  auto m = load_model(path, LoadOptions{});
  return m.ok() ? std::string("loaded") : m.status().message();
}

TEST(LlamaValidation, Bf16MatmulsAreAnEncoderStrategy) {
  LoadOptions opts;
  opts.cpu.bf16_matmuls = true;
  auto m = load_decoder_model(test_data_path("llama/tiny_llama.gguf"), opts);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().to_string().find("activations: bf16"), std::string::npos)
      << m.status().to_string();
}

TEST(LlamaValidation, Fp8WeightsAreRefusedOffCuda) {
  LoadOptions opts;
  opts.weight_format = DType::kF8E4M3;
  auto m = load_decoder_model(test_data_path("llama/tiny_llama.gguf"), opts);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().to_string().find("weights: fp8 runs on CUDA devices"), std::string::npos)
      << m.status().to_string();
}

TEST(LlamaValidation, MissingTensorIsNamedWithItsShape) {
  const std::string msg =
      load_error(edited_model("missing.gguf", {.drop = {"blk.1.ffn_up.weight"}}));
  EXPECT_NE(msg.find("'blk.1.ffn_up.weight' is missing (expected shape [128, 64])"),
            std::string::npos)
      << msg;
}

TEST(LlamaValidation, WrongShapeNamesExpectedAndActual) {
  const std::string msg = load_error(edited_model(
      "shape.gguf", {.reshape = "blk.0.attn_k.weight", .reshape_from = "blk.0.attn_q.weight"}));
  EXPECT_NE(msg.find("'blk.0.attn_k.weight' has shape [64, 64], expected [32, 64]"),
            std::string::npos)
      << msg;
}

TEST(LlamaValidation, MissingOrBadMetadata) {
  std::string msg = load_error(edited_model("nokey.gguf", {.drop_keys = {"qwen2.block_count"}}));
  EXPECT_NE(msg.find("qwen2.block_count"), std::string::npos) << msg;

  msg = load_error(edited_model("heads.gguf", {.meta = {{"qwen2.attention.head_count_kv",
                                                         GgufWriter::Value::of<uint32_t>(3)}}}));
  EXPECT_NE(msg.find("not a multiple of head_count_kv 3"), std::string::npos) << msg;

  msg = load_error(edited_model(
      "zero.gguf", {.meta = {{"qwen2.embedding_length", GgufWriter::Value::of<uint32_t>(0)}}}));
  EXPECT_NE(msg.find("embedding_length"), std::string::npos) << msg;

  msg = load_error(edited_model(
      "yarn.gguf", {.meta = {{"qwen2.rope.scaling.type", GgufWriter::Value::string("yarn")}}}));
  EXPECT_NE(msg.find("rope scaling 'yarn' is not supported"), std::string::npos) << msg;

  msg = load_error(edited_model(
      "arch.gguf", {.meta = {{"general.architecture", GgufWriter::Value::string("mamba")}}}));
  EXPECT_NE(msg.find("no model sample for architecture 'mamba'"), std::string::npos) << msg;
}

TEST(LlamaValidation, NotAFile) {
  EXPECT_NE(load_error("/nonexistent/model.gguf").find("/nonexistent/model.gguf"),
            std::string::npos);
}

// ---- Real models against the numpy float64 reference (tests/tools/ref_llama.py) -------------
// SmolLM2-135M Q4_1 (llama) and Qwen2.5-Coder 0.5B and 1.5B Q4_K_M (qwen2: Q/K/V biases, NeoX
// RoPE, K-quants and Q5_0 / Q8_0 / Q6_K).

struct RealModel {
  const char* model;
  const char* fixture;  // tests/data/llama/<fixture>_logits.json
  double int8_max_rel;  // the fast kernels with 8-bit activations: rel L2 of the last row
  int int8_min_top1;    // ... and the positions (of 16) whose top-1 agrees
};
void PrintTo(const RealModel& m, std::ostream* os) { *os << m.fixture; }

class RealModelTest : public ::testing::TestWithParam<RealModel> {
 protected:
  void SetUp() override {
    const std::string name = GetParam().fixture;
#if RINFER_TEST_SLOW_BUILD
    // Under the sanitizers the 1.5B model's cases took 77 s of a 2-core CI run; Qwen 0.5B runs
    // the same architecture here, and the optimized preset runs the 1.5B.
    if (name == "qwen15") GTEST_SKIP() << "the 1.5B model runs in the optimized build";
#endif
    auto p = test::reference_model(GetParam().model);
    if (!p) GTEST_SKIP() << test::missing_model_message(GetParam().model);
    path_ = *p;
    fx_ = read_json(test_data_path("llama/" + name + "_logits.json"));
    if (fx_.contains("last_logits_file")) {
      last_ = read_f32(test_data_path("llama/" + fx_["last_logits_file"].get<std::string>()));
    }
  }

  // The relative L2 error of the last logits row: the whole row, or (large vocabularies) the
  // reference's largest entries the fixture keeps.
  double last_row_error(const std::vector<float>& last) const {
    if (!last_.empty()) return rel_l2(last, last_);
    const std::vector<int32_t> ids = fx_["last_top"]["ids"];
    const std::vector<float> want = fx_["last_top"]["logits"];
    std::vector<float> have;
    for (int32_t id : ids) have.push_back(last[static_cast<size_t>(id)]);
    return rel_l2(have, want);
  }

  // Checks a run against the fixture: rel L2 of the last row and top-1 agreement.
  void check(cpu::Impl impl, bool quantize_activations, double max_rel, int min_top1) {
    ThreadPool pool(2);
    Loaded l = load(path_, impl, &pool, quantize_activations);
    ASSERT_TRUE(l.model);
    const std::vector<int32_t> ids = fx_["ids"];
    const std::vector<float> got = all_logits(l, ids);
    const int64_t v = l.model->hparams().n_vocab;
    ASSERT_EQ(v, fx_["n_vocab"].get<int64_t>());
    const std::vector<float> last(got.end() - v, got.end());
    const double rel = last_row_error(last);
    EXPECT_LT(rel, max_rel);
    int agree = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t want = fx_["positions"][i]["ids"][0];
      const int32_t have = argmax_row(got.data() + i * v, v);
      agree += want == have;
      if (min_top1 == static_cast<int>(ids.size())) EXPECT_EQ(have, want) << "position " << i;
    }
    EXPECT_GE(agree, min_top1);
    RecordProperty("rel_l2_last", fmt::format("{:.3g}", rel));
    RecordProperty("top1_agreement", agree);
  }

  std::string path_;
  nlohmann::json fx_;
  std::vector<float> last_;
};

TEST_P(RealModelTest, ReferenceKernelsMatchNumpy) {
#if !defined(NDEBUG) && defined(__SANITIZE_ADDRESS__)
  // The scalar reference over 16 tokens and 135M+ weights takes minutes under ASan at -O0; the
  // optimized build (ctest --preset default) runs it in seconds. The tiny models above cover
  // the reference path here.
  GTEST_SKIP() << "reference kernels on real models run in the optimized build only";
#endif
  check(cpu::Impl::kReference, false, 1e-3, 16);
}

// With f32 activations the fast kernels agree with numpy to f32 precision.
TEST_P(RealModelTest, FastKernelsExactActivationsMatchNumpy) {
  check(cpu::Impl::kFast, false, 1e-5, 16);
}

// With 8-bit activations (the default fast path, as ggml does it) each matmul is off by
// 0.3-1.3% on real activations and the errors compound over the layers (the numpy reference with
// the same int8 rounding gives 4.9e-2 on SmolLM2).
TEST_P(RealModelTest, FastKernelsMatchNumpy) {
  check(cpu::Impl::kFast, true, GetParam().int8_max_rel, GetParam().int8_min_top1);
}

TEST_P(RealModelTest, KvCacheEqualsRecompute) {
  ThreadPool pool(2);
  Loaded l = load(path_, cpu::Impl::kFast, &pool, false);
  ASSERT_TRUE(l.model);
  std::vector<int32_t> ids = fx_["ids"];
  ids.resize(6);
  EXPECT_LT(rel_l2(decode_logits(l, ids), all_logits(l, ids)), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Models, RealModelTest,
    ::testing::Values(RealModel{"smollm2-135m-instruct-q4_1", "smollm2", 3e-2, 15},
                      RealModel{"qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen05", 3e-2, 15},
                      RealModel{"qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen15", 2e-2, 15}),
    [](const auto& info) { return std::string(info.param.fixture); });

}  // namespace
}  // namespace rinfer
