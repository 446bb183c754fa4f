// Reader for a Hugging Face `config.json` (decoder LLMs such as Llama, Qwen2, Mistral, Gemma, and
// BERT-style encoders). Only the architecture-independent hyperparameters are decoded; the raw
// JSON text is kept for anything model-specific.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

struct HfConfig {
  std::vector<std::string> architectures;  // "LlamaForCausalLM", ... (empty when absent)
  std::string model_type;                  // "llama", "bert", ... (required)
  int64_t hidden_size = 0;                 // required, > 0
  int64_t num_hidden_layers = 0;           // required, > 0
  int64_t intermediate_size = 0;           // required, > 0
  int64_t num_attention_heads = 0;         // required, > 0
  int64_t num_key_value_heads = 0;         // defaults to num_attention_heads; divides it
  int64_t head_dim = 0;                    // defaults to hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;     // required, > 0
  int64_t vocab_size = 0;                  // required, > 0
  double rope_theta = 10000.0;  // "rope_theta", else "rope_parameters.rope_theta", else 10000
  // "position_embedding_type": "absolute" (BERT-style learned positions): no rotary embedding,
  // so rope_theta means nothing.
  bool absolute_positions = false;
  // "rms_norm_eps", else "layer_norm_eps", else "layer_norm_epsilon"; one is required.
  double norm_eps = 0.0;
  // When absent: false for model types whose transformers config defaults it to false (llama,
  // mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, phi3), true otherwise (the
  // PretrainedConfig default).
  bool tie_word_embeddings = true;
  std::string torch_dtype;                // "torch_dtype", else "dtype"; empty when absent or null
  std::optional<int64_t> sliding_window;  // absent, null, or "use_sliding_window": false -> none
  std::string raw_json;                   // the whole file, verbatim
};

// Reads and parses `path`; error messages start with the path.
Result<HfConfig> read_hf_config(const std::string& path);

// Parses config JSON text; error messages start with `name_for_errors`.
Result<HfConfig> parse_hf_config(std::string_view json, const std::string& name_for_errors);

}  // namespace rinfer
