// A format-independent summary of a model file: what `rinfer info` prints. Reads GGUF files and
// safetensors models (a file, a directory with config.json, or a sharded index) and PyTorch
// checkpoints (tensors only).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "rinfer/status.h"

namespace rinfer {

struct DTypeUsage {
  uint64_t tensors = 0;
  uint64_t elements = 0;
  uint64_t bytes = 0;
};

struct ModelInfo {
  std::string path;
  std::string format;           // "gguf", "safetensors", "pytorch (legacy)", "pytorch (zip)"
  uint32_t format_version = 0;  // GGUF version; 0 for safetensors
  std::string name;             // general.name, or the config's first architecture
  std::string architecture;     // "llama", "gemma3", "bert", ...
  std::vector<std::string> classes;  // config.json architectures (safetensors only)

  // Hyper-parameters; absent when the file does not say.
  std::optional<int64_t> n_layers;
  std::optional<int64_t> n_embd;
  std::optional<int64_t> n_ff;
  std::optional<int64_t> n_head;
  std::optional<int64_t> n_head_kv;
  std::optional<int64_t> head_dim;
  std::optional<int64_t> context_length;
  std::optional<int64_t> vocab_size;
  std::optional<double> rope_freq_base;
  std::optional<int64_t> sliding_window;
  std::optional<double> norm_eps;

  // Convolutional networks (PyTorch state dicts): 4-D weights, the first one's input channels,
  // and the last 2-D weight's rows (the classifier's classes). Absent for the other models.
  std::optional<int64_t> n_convolutions;
  std::optional<int64_t> input_channels;
  std::optional<int64_t> n_classes;

  uint64_t n_tensors = 0;
  uint64_t n_elements = 0;  // parameters
  uint64_t tensor_bytes = 0;
  uint64_t file_bytes = 0;
  std::map<DType, DTypeUsage> by_dtype;

  std::string tokenizer;  // "gpt2 (byte-level BPE, pre smollm)", "llama (SentencePiece)", ...
  uint64_t tokenizer_tokens = 0;
  bool has_chat_template = false;
};

// Detects the format from the file's first bytes (or a directory's contents).
Result<ModelInfo> read_model_info(const std::string& path);

// Human-readable multi-line report.
std::string format_model_info(const ModelInfo& info);

}  // namespace rinfer
