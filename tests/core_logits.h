// How the models' tests run a token sequence now that the engine core is the only path:
// teacher-forced logits through a one-seat engine core (EngineCore::score), or one sequence
// through a model's runner by hand. For test areas that link rinfer_engine.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <numeric>
#include <span>
#include <vector>

#include "engine/engine_core.h"
#include "engine/precision.h"
#include "models/model.h"

namespace rinfer::test {

struct CoreLogitsOptions {
  int64_t chunk = 0;  // tokens a forward pass (1: every row a decode step); 0: all of them
  int64_t n_ctx = 0;  // 0: the tokens' length
  int64_t block_size = 16;
  kv::Layout layout = kv::Layout::kPaged;
};

// The logits of every row of `tokens` [n, n_vocab], or the error.
inline Result<std::vector<float>> try_core_logits(const DecoderModel& m,
                                                  std::span<const int32_t> tokens,
                                                  const CoreLogitsOptions& o = {}) {
  const auto n = static_cast<int64_t>(tokens.size());
  EngineCoreOptions co;
  co.n_ctx = o.n_ctx > 0 ? o.n_ctx : std::max<int64_t>(n, 1);
  co.block_size = o.block_size;
  co.layout = o.layout;
  co.prefix_caching = false;
  co.queue_ahead = false;
  co.scheduler.max_seqs = 1;
  co.scheduler.max_batched_tokens = o.chunk > 0 ? o.chunk : std::max<int64_t>(n, 1);
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::create(m, co, {}));
  return teacher_forced_logits(*core, tokens, o.chunk);
}

// The same, failing the test (and returning nothing) on an error.
inline std::vector<float> core_logits(const DecoderModel& m, std::span<const int32_t> tokens,
                                      const CoreLogitsOptions& o = {}) {
  auto l = try_core_logits(m, tokens, o);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  return l.ok() ? std::move(l).value() : std::vector<float>{};
}

// One sequence through a model's runner by hand: an arena of n_ctx positions (blocks of
// block_size) holding the sequence in blocks 0, 1, ...; forward passes that continue it.
struct OneSequence {
  std::unique_ptr<DecoderRunner> runner;
  std::unique_ptr<kv::KvArena> arena;
  std::vector<int32_t> table;  // every group's, the same ids

  static OneSequence make(const DecoderModel& m, int64_t n_ctx, int64_t max_tokens = 64,
                          int64_t block_size = 4) {
    OneSequence r;
    auto spec = m.kv_spec(n_ctx, block_size);
    EXPECT_TRUE(spec.ok()) << spec.status().to_string();
    if (!spec.ok()) return r;
    auto runner = m.create_runner({max_tokens, 4});
    EXPECT_TRUE(runner.ok()) << runner.status().to_string();
    if (!runner.ok()) return r;
    r.runner = std::move(runner).value();
    const auto nb = static_cast<int32_t>(spec->blocks_for(n_ctx));
    auto arena = r.runner->create_arena(*spec, std::vector<int32_t>(spec->n_groups(), nb));
    EXPECT_TRUE(arena.ok()) << arena.status().to_string();
    if (!arena.ok()) return r;
    r.arena = std::move(arena).value();
    r.table.resize(static_cast<size_t>(nb) * static_cast<size_t>(spec->n_groups()));
    for (int32_t g = 0; g < spec->n_groups(); ++g) {
      std::iota(r.table.begin() + static_cast<std::ptrdiff_t>(g) * nb,
                r.table.begin() + static_cast<std::ptrdiff_t>(g + 1) * nb, 0);
    }
    return r;
  }
  bool ok() const { return runner && arena; }
  // Tokens at positions `pos` (continuing the sequence), logits of `rows` into `logits`.
  Status forward(std::span<const int32_t> ids, std::span<const int32_t> pos,
                 std::span<const int32_t> rows, float* logits,
                 const std::atomic<bool>* cancel = nullptr, TapSink* taps = nullptr) {
    const std::vector<int32_t> qs = {0, static_cast<int32_t>(ids.size())};
    const std::vector<int32_t> len = {pos.empty() ? 0 : pos.back() + 1};
    ForwardBatch b;
    b.tokens = ids;
    b.positions = pos;
    b.query_start = qs;
    b.kv_len = len;
    b.block_tables = table;
    b.table_stride = static_cast<int32_t>(table.size() / arena->spec().n_groups());
    b.logit_rows = rows;
    b.cancel = cancel;
    b.taps = taps;
    return runner->forward(b, *arena, logits);
  }
};

// `tokens`' first n_prefill in one pass (every row's logits), then the rest one token a pass
// (decode steps): [tokens.size(), n_vocab], through the model's runner.
inline std::vector<float> prefill_then_decode(const DecoderModel& m,
                                              std::span<const int32_t> tokens, int64_t n_prefill,
                                              int64_t n_ctx, int64_t block_size = 16) {
  const int64_t nv = m.hparams().n_vocab;
  OneSequence seq = OneSequence::make(m, n_ctx, std::max<int64_t>(n_prefill, 1), block_size);
  if (!seq.ok()) return {};
  std::vector<float> logits(tokens.size() * static_cast<size_t>(nv));
  std::vector<int32_t> pos(tokens.size());
  std::iota(pos.begin(), pos.end(), 0);
  const auto np = static_cast<size_t>(n_prefill);
  Status st = seq.forward(tokens.first(np), std::span<const int32_t>(pos).first(np),
                          std::span<const int32_t>(pos).first(np), logits.data());
  EXPECT_TRUE(st.ok()) << "prefill: " << st.to_string();
  const int32_t row0 = 0;
  for (size_t i = np; i < tokens.size() && st.ok(); ++i) {
    st = seq.forward(tokens.subspan(i, 1), std::span<const int32_t>(pos).subspan(i, 1),
                     std::span<const int32_t>(&row0, 1),
                     logits.data() + i * static_cast<size_t>(nv));
    EXPECT_TRUE(st.ok()) << "decode step " << i << ": " << st.to_string();
  }
  return st.ok() ? logits : std::vector<float>{};
}

}  // namespace rinfer::test
