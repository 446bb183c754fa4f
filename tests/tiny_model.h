// tiny_llama.gguf (tests/data/llama), or another GGUF, with a 96-token SentencePiece vocabulary
// (<unk>, <s>, </s>, "▁" and 92 ASCII characters), so that the engine can tokenize: for CLI tests
// that run whole recipes.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "test_util.h"

namespace rinfer::test {

// Writes a copy of the GGUF model `in_path` with the 96-token vocabulary to `out_path` (its
// vocab_size must be 96 or more) and returns out_path.
inline std::string with_tiny_tokenizer(const std::string& in_path, const std::string& out_path) {
  auto in = GgufFile::open(in_path);
  EXPECT_TRUE(in.ok());
  if (!in.ok()) return out_path;
  GgufWriter w;
  for (const auto& [k, v] : in->metadata()) w.set(std::string(k), GgufWriter::Value::copy_of(v));
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xe2\x96\x81"};
  for (char c = '!'; tokens.size() < 96; ++c) tokens.emplace_back(1, c);
  std::vector<float> scores(96, 0.0f);
  std::vector<int32_t> types(96, 1);
  types[0] = 2;
  types[1] = types[2] = 3;
  w.set("tokenizer.ggml.model", GgufWriter::Value::string("llama"));
  w.set("tokenizer.ggml.tokens", GgufWriter::Value::strings_array(tokens));
  w.set("tokenizer.ggml.scores", GgufWriter::Value::array(scores));
  w.set("tokenizer.ggml.token_type", GgufWriter::Value::array(types));
  w.set("tokenizer.ggml.bos_token_id", GgufWriter::Value::of<uint32_t>(1));
  w.set("tokenizer.ggml.eos_token_id", GgufWriter::Value::of<uint32_t>(2));
  w.set("tokenizer.ggml.unknown_token_id", GgufWriter::Value::of<uint32_t>(0));
  for (const GgufTensorInfo& t : in->tensors()) {
    EXPECT_TRUE(w.add_tensor(std::string(t.name), t.dtype, t.shape,
                             std::string(reinterpret_cast<const char*>(t.data), t.nbytes))
                    .ok());
  }
  EXPECT_TRUE(w.write(out_path).ok());
  return out_path;
}

// Writes the model to dir/tiny_tok.gguf and returns its path.
inline std::string tiny_model_with_tokenizer(const std::string& dir) {
  return with_tiny_tokenizer(test_data_path("llama/tiny_llama.gguf"), dir + "/tiny_tok.gguf");
}

}  // namespace rinfer::test
