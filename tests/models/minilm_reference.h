// The sentence-transformers reference of all-MiniLM-L6-v2 (tests/tools/ref_sentence_embeddings.py:
// 1,030 varied inputs and their embeddings, f16) and the embedding engine over the real model,
// shared by the CPU and CUDA tests of the BERT sample.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "engine/embedder.h"
#include "recipe/recipe.h"
#include "test_util.h"

namespace rinfer::test {

struct Reference {
  std::vector<std::string> texts;
  std::vector<float> emb;  // [n, dim]
  int64_t dim = 0;
};

inline const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    std::ifstream f(test_data_path("embedding/minilm_reference.json"), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const auto j = nlohmann::json::parse(ss.str());
    r.texts = j["texts"].get<std::vector<std::string>>();
    r.dim = j["dim"].get<int64_t>();
    std::ifstream b(test_data_path("embedding/minilm_reference.f16"), std::ios::binary);
    std::vector<uint16_t> h(r.texts.size() * static_cast<size_t>(r.dim));
    b.read(reinterpret_cast<char*>(h.data()), static_cast<std::streamsize>(h.size() * 2));
    EXPECT_TRUE(b.good());
    r.emb.resize(h.size());
    for (size_t i = 0; i < h.size(); ++i) r.emb[i] = f16_to_f32(h[i]);
    return r;
  }();
  return ref;
}

inline double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

// An embedding engine over the real model on `device` with these strategies (a YAML map).
inline std::unique_ptr<Embedder> make_minilm_embedder(const std::string& device,
                                                      const std::string& strategies) {
  const std::string text = "model: all-minilm-l6-v2\ndevice: " + device +
                           "\nscenario: embedding\nstrategies: " + strategies +
                           "\nembedding: {pooling: mean, normalize: true}\n";
  auto r = parse_recipe(text, "test.yaml");
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return nullptr;
  auto e = Embedder::create(*r);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

// The first `count` inputs against sentence-transformers: the worst cosine >= min_cos.
inline void expect_minilm_matches(const std::string& device, const std::string& strategies,
                                  size_t count, double min_cos) {
  const Reference& ref = reference();
  ASSERT_GE(ref.texts.size(), 1000u);
  auto e = make_minilm_embedder(device, strategies);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->dim(), ref.dim);
  ASSERT_EQ(e->max_length(), 256);  // sentence_bert_config.json
  const std::span<const std::string> texts(ref.texts.data(), std::min(count, ref.texts.size()));
  EmbedStats st;
  auto out = e->embed(texts, &st);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  double worst = 1.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const double c = cosine(out->data() + i * ref.dim, ref.emb.data() + i * ref.dim, ref.dim);
    if (c < worst) {
      worst = c;
      worst_i = i;
    }
  }
  EXPECT_GE(worst, min_cos) << device << " " << strategies << ": input " << worst_i << ": "
                            << texts[worst_i];
  if (count >= ref.texts.size()) {
    EXPECT_GE(st.truncated, 10) << "some inputs must be over 256";
  }
  std::printf("%s %s: %zu inputs, worst cosine %.6f (input %zu)\n", device.c_str(),
              strategies.c_str(), texts.size(), worst, worst_i);
  ::testing::Test::RecordProperty("worst_cosine", std::to_string(worst));
}

}  // namespace rinfer::test
