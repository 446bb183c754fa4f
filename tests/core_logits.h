// Teacher-forced logits through a one-seat engine core (EngineCore::score): how the models'
// tests run a token sequence now that the engine core is the only path. For test areas that
// link rinfer_engine.
#pragma once

#include <gtest/gtest.h>

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

}  // namespace rinfer::test
