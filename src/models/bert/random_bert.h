// Random weights of a real BERT encoder's shape (a recipe's `model: random:<shape>` in an
// embedding recipe): the encoder's speed without its checkpoint. The weights are a safetensors
// checkpoint made in memory with Hugging Face's names, read by the same loader as a file; the
// tokenizer is a synthetic WordPiece vocabulary of the model's size (the special tokens at
// BERT's ids, then single characters and their "##" continuations, the rest unused), so texts
// embed as they would, at about one token per character.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "models/encoder.h"

namespace rinfer::bert {

// "minilm-l6" (all-MiniLM-L6-v2: 6 layers, 384, FFN 1536, 12 heads, vocabulary 30522, 512
// positions) and "bert-base" (12 layers, 768, 3072, 12 heads, the same vocabulary and positions).
std::vector<std::string> random_shape_names();
Result<EncoderHParams> random_shape(std::string_view name);

// The checkpoint of `hp` in the safetensors format, f32, drawn from a fixed seed (weights
// normal with std 0.02 as BERT initializes them, LayerNorm gains near 1); `source` names it.
std::shared_ptr<const MappedFile> random_safetensors(const EncoderHParams& hp,
                                                     const std::string& source);

// tokenizer.json text of the synthetic WordPiece vocabulary of `n_vocab` pieces (>= 1000).
std::string synthetic_tokenizer_json(int64_t n_vocab);

}  // namespace rinfer::bert
