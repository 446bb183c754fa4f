// A tiny BERT checkpoint directory for tests: config.json, model.safetensors (the f32 weights of
// models/bert/random_bert.h for this shape) and the synthetic WordPiece tokenizer.json, with an
// optional planted fault: every third value of one tensor negated.
#pragma once

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "models/bert/random_bert.h"
#include "tiny_hf_model.h"

namespace rinfer::test {

// 4 layers of 64 (2 heads of 32, which the CUDA attention takes), FFN 128, a vocabulary of 1000.
inline EncoderHParams tiny_bert_shape() {
  EncoderHParams hp;
  hp.architecture = "bert";
  hp.n_vocab = 1000;
  hp.n_embd = 64;
  hp.n_layer = 4;
  hp.n_head = 2;
  hp.n_ff = 128;
  hp.n_positions = 128;
  hp.n_token_types = 2;
  hp.norm_eps = 1e-12f;
  return hp;
}

// Writes the directory `name` and returns its path. `faulty` (a tensor's Hugging Face name, or
// ""): the tensor whose every third value is negated.
inline std::string write_tiny_bert(const std::string& name, const std::string& faulty = "") {
  const EncoderHParams hp = tiny_bert_shape();
  auto file = bert::random_safetensors(hp, name);
  std::string bytes(reinterpret_cast<const char*>(file->data()), file->size());
  if (!faulty.empty()) {
    uint64_t hn = 0;
    std::memcpy(&hn, bytes.data(), 8);
    const auto header = nlohmann::json::parse(bytes.substr(8, hn));
    const auto& off = header.at(faulty).at("data_offsets");
    auto* v = reinterpret_cast<float*>(bytes.data() + 8 + hn + off[0].get<uint64_t>());
    const uint64_t n = (off[1].get<uint64_t>() - off[0].get<uint64_t>()) / 4;
    for (uint64_t i = 0; i < n; i += 3) v[i] = -v[i];
  }
  const std::string dir = fresh_dir(name);
  const nlohmann::json config = {{"model_type", "bert"},
                                 {"vocab_size", hp.n_vocab},
                                 {"hidden_size", hp.n_embd},
                                 {"num_hidden_layers", hp.n_layer},
                                 {"num_attention_heads", hp.n_head},
                                 {"intermediate_size", hp.n_ff},
                                 {"max_position_embeddings", hp.n_positions},
                                 {"type_vocab_size", hp.n_token_types},
                                 {"hidden_act", "gelu"},
                                 {"layer_norm_eps", hp.norm_eps}};
  write_file(dir + "/config.json", config.dump(2));
  write_file(dir + "/model.safetensors", bytes);
  write_file(dir + "/tokenizer.json", bert::synthetic_tokenizer_json(hp.n_vocab));
  return dir;
}

}  // namespace rinfer::test
