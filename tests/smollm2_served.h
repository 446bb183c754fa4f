// The real SmolLM2-135M-Instruct served through the engine core on one device: 64 chat prompts
// of different lengths (16 topics in 4 forms) served together against each served alone. The
// CPU test (fast kernels) and the CUDA one share it. Batching changes the kernels' summation
// order, so replies may part where two tokens are nearly tied: the bar is teacher-forced top-1
// agreement >= 99.5% and at least 60 of 64 greedy replies identical.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "models/text_generation.h"
#include "test_util.h"

namespace rinfer::test {

inline std::vector<std::string> chat_prompts() {
  const char* topics[] = {"the moon",   "bread",        "rain",      "a violin",
                          "chess",      "the ocean",    "volcanoes", "bees",
                          "a library",  "winter",       "trains",    "coffee",
                          "the desert", "a lighthouse", "music",     "mountains"};
  const char* forms[] = {"What is {}?", "Write one sentence about {}.",
                         "Explain {} to a child in two sentences.",
                         "List three facts about {}, and say which one surprises people most."};
  std::vector<std::string> out;
  for (const char* f : forms) {
    for (const char* t : topics) {
      std::string s = f;
      s.replace(s.find("{}"), 2, t);
      out.push_back(s);
    }
  }
  return out;
}

struct ServedReply {
  std::vector<int32_t> tokens;
  std::vector<int32_t> sampled;  // what the sampler chose (differs under teacher forcing)
};

// Greedy replies of n_out tokens to every input on `e` (end of text ignored), optionally with
// `forced`'s tokens forced.
inline std::vector<ServedReply> serve_greedy(EngineCore& e,
                                             const std::vector<std::vector<int32_t>>& inputs,
                                             int64_t n_out,
                                             const std::vector<ServedReply>* forced) {
  std::vector<ServedReply> out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    RequestParams p;
    p.prompt = inputs[i];
    p.max_tokens = n_out;
    p.ignore_eos = true;
    p.sampling.temperature = 0.0f;
    p.sampling.repeat_penalty = 1.0f;
    if (forced != nullptr) p.forced = (*forced)[i].tokens;
    p.on_event = [&out, i](const RequestEvent& ev) {
      out[i].tokens.insert(out[i].tokens.end(), ev.tokens.begin(), ev.tokens.end());
      if (!ev.tokens.empty()) out[i].sampled.push_back(ev.sampled);
      EXPECT_TRUE(ev.error.ok()) << ev.error.to_string();
    };
    EXPECT_TRUE(e.submit(std::move(p)).ok());
  }
  EXPECT_TRUE(e.run_until_idle().ok());
  return out;
}

// The whole check on the model loaded with `lo` (skips when the model file is missing).
inline void expect_smollm2_batched_matches_alone(const LoadOptions& lo, const char* label) {
  constexpr const char* kModel = "smollm2-135m-instruct-q4_1";
  constexpr int64_t kReplyTokens = 24;
  auto path = reference_model(kModel);
  if (!path) GTEST_SKIP() << missing_model_message(kModel);
  auto sample = TextGenerationSample::load_model(*path, lo, "");
  ASSERT_TRUE(sample.ok()) << sample.status().to_string();
  std::vector<std::vector<int32_t>> inputs;
  for (const std::string& p : chat_prompts()) {
    const ChatMessage msg{"user", p};
    auto ids = (*sample)->preprocess(std::span<const ChatMessage>(&msg, 1));
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    inputs.push_back(*ids);
  }
  ASSERT_EQ(inputs.size(), 64u);
  EngineCoreOptions o;
  o.n_ctx = 256;
  o.scheduler.max_batched_tokens = 256;
  o.scheduler.max_seqs = 64;
  auto make = [&] {
    auto e = EngineCore::create((*sample)->decoder(), o, nullptr);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return std::move(e).value();
  };
  std::vector<ServedReply> alone;
  for (const std::vector<int32_t>& in : inputs) {
    alone.push_back(serve_greedy(*make(), {in}, kReplyTokens, nullptr)[0]);
  }
  const std::vector<ServedReply> batched = serve_greedy(*make(), inputs, kReplyTokens, nullptr);
  const std::vector<ServedReply> forced = serve_greedy(*make(), inputs, kReplyTokens, &alone);
  int identical = 0, agree = 0, total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(alone[i].tokens.size(), static_cast<size_t>(kReplyTokens));
    identical += batched[i].tokens == alone[i].tokens ? 1 : 0;
    ASSERT_EQ(forced[i].tokens, alone[i].tokens);  // the forcing itself
    for (size_t t = 0; t < alone[i].tokens.size(); ++t) {
      agree += forced[i].sampled[t] == alone[i].tokens[t] ? 1 : 0;
      ++total;
    }
  }
  const double agreement = static_cast<double>(agree) / total;
  std::printf(
      "%s: identical greedy replies %d of 64; teacher-forced top-1 agreement %.4f "
      "(%d/%d)\n",
      label, identical, agreement, agree, total);
  EXPECT_GE(identical, 60);
  EXPECT_GE(agreement, 0.995);
}

}  // namespace rinfer::test
