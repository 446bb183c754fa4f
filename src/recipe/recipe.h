// Recipes: the YAML files under recipes/<scenario>/<model>/ that say which model to run, on
// which device, with which optimization strategies, how to sample, how to benchmark and what
// precision a variant must keep. The full schema is docs/recipes.md.
//
//   base: optimized.yaml                # optional: start from another recipe (path relative
//                                       # to this file); this file states only what differs
//   model: smollm2-135m-instruct-q4_1   # a cache name, or a path (./ and ../ are relative to
//                                       # the recipe's folder)
//   device: cpu                         # cpu | cuda:N (checked against the machine at load)
//   scenario: llm-chat
//   context_length: 2048                # 0: the model's training context
//   strategies:                         # src/strategies/registry.h, docs/strategies/*.md
//     kv_cache: {enabled: true}
//     kernels: {impl: fast}             # reference | fast (CPU)
//     threads: {count: 0}               # 0: all cores
//     fusion: {attention: true, residual_norm: true, swiglu: true, qkv: true}   # CUDA
//     quantization: {weights: keep, keep_layers: [0, -1], embeddings: false, activations: int8}
//     cuda_graphs: {enabled: true}      # CUDA
//     device_sampling: {enabled: true}  # CUDA
//     allocator: {kind: caching}        # caching | plain (CUDA)
//   sampling: {temperature: 0.2, top_k: 40, top_p: 0.9, min_p: 0.05, repeat_penalty: 1.1,
//              repeat_last_n: 64, presence_penalty: 0, frequency_penalty: 0, seed: 42,
//              max_tokens: 256, stop: []}
//   chat_template: chatml               # optional: override the model's template
//   bench: {prompt_tokens: 512, gen_tokens: 128, repeat: 5, warmup: 1, prompts: ./p.txt}
//   precision: {min_top1: 0.95, max_mean_kl: 0.02, max_ppl_change: 0.01}
//   serve: {name: smollm2, aliases: [gpt-4o-mini]}   # rinfer serve's model names
//   embedding: {pooling: mean, normalize: true, max_length: 0}   # scenario: embedding
//   classifier:                         # scenario: image-classification
//     network: {family: inverted_residual, strides: [1, 2, ...], activation: relu6,
//               padding: symmetric, bn_eps: 1.0e-5}
//     preprocess: {resize: 256, crop: 224, mean: [0.485, 0.456, 0.406], std: [...]}
//     labels: imagenet-classes          # a JSON list of class names
//     top_k: 5
//     max_batch: 32
//
// Parsing is strict: an unknown key, a wrong type (a quoted "0.5" is a string, not a number),
// an out-of-range value, a duplicate key or a YAML syntax error is a Status naming the file,
// the line, the key path (`sampling.top_p`) and what was expected. yaml-cpp's exceptions are
// caught here and never escape.
//
// Inheritance: the base chain is applied deepest first, each file over the previous result:
// mappings merge key by key, scalars and lists replace. Each file's errors name that file, and
// relative paths (model, bench.prompts) are relative to the file that wrote them. A missing
// base or a cycle is an error naming the chain.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "ops/cpu/ops.h"
#include "ops/cpu/sampler.h"
#include "ops/cpu/vision_ops.h"
#include "rinfer/status.h"
#include "strategies/strategy_config.h"

namespace rinfer {

// bench: how `rinfer bench` measures this recipe.
struct BenchConfig {
  int64_t prompt_tokens = 512;         // prompt processing: tokens in one prefill
  int64_t gen_tokens = 128;            // generation: decode steps
  int64_t repeat = 5;                  // measured runs (the median is reported)
  int64_t warmup = 1;                  // runs before measuring, discarded
  std::optional<std::string> prompts;  // a text file of prompts, resolved against the recipe's
                                       // folder (absent: the bench tool's built-in text)
};

// precision: the gate a variant must pass against its baseline in `rinfer bench`. A field set
// here replaces that bound's default; an absent one keeps its default (engine/precision.h).
struct PrecisionGate {
  std::optional<double> min_top1;        // top-1 agreement of the logits, in [0, 1]
  std::optional<double> max_mean_kl;     // mean KL(baseline || variant), nats
  std::optional<double> max_ppl_change;  // |ppl_variant / ppl_baseline - 1|
  bool empty() const { return !min_top1 && !max_mean_kl && !max_ppl_change; }
};

// embedding: what an embedding recipe (scenario: embedding) makes of the encoder's output.
struct EmbeddingConfig {
  cpu::PoolKind pooling = cpu::PoolKind::kMean;  // mean | cls
  bool normalize = true;                         // L2-normalize each embedding
  // Tokens per input, [CLS] and [SEP] included; longer inputs are truncated. 0: the model's
  // own (sentence_bert_config.json's max_seq_length, else max_position_embeddings).
  int64_t max_length = 0;
};

// classifier: an image-classification recipe's network description (what a PyTorch checkpoint's
// names and shapes cannot say), its preprocessing and its labels (scenario:
// image-classification).
struct ClassifierNetworkConfig {
  std::string family;                                    // inverted_residual | resnet (required)
  std::vector<int64_t> strides;                          // one per block (required)
  cpu::Activation activation = cpu::Activation::kRelu6;  // none | relu | relu6 | silu
  bool same_padding = false;  // padding: symmetric (PyTorch) | same (TensorFlow)
  float bn_eps = 1e-5f;
};
struct ClassifierPreprocessConfig {
  int64_t resize = 256;  // the shorter side, before the crop (0: no resize)
  int64_t crop = 224;    // the centered square the network sees
  std::array<float, 3> mean{0.485f, 0.456f, 0.406f};  // on the [0, 1] scale, RGB
  std::array<float, 3> std{0.229f, 0.224f, 0.225f};
};
struct ClassifierConfig {
  ClassifierNetworkConfig network;
  ClassifierPreprocessConfig preprocess;
  std::string labels;      // a JSON list of class names (cache name or path; ./ relative), or ""
  int64_t top_k = 5;       // labels printed per image
  int64_t max_batch = 32;  // images per forward pass
};

// serve: how `rinfer serve` names this recipe's model (the `model` field of a request).
struct ServeConfig {
  std::string name;                  // empty: the recipe's `model` as written
  std::vector<std::string> aliases;  // more names for it
};

struct RecipeConfig {
  std::string path;       // the recipe file as given
  std::string model;      // `model` as written
  std::string model_ref;  // what resolve_model() gets: a path made relative to the recipe's
                          // folder for ./ and ../, else the value as written (cache name/path)
  Device device;
  std::string scenario;           // "llm-chat", "llm-serve", "embedding"
  int64_t context_length = 2048;  // 0: the model's training context
  StrategyConfig strategies;
  SamplingParams sampling;  // sampling.seed absent: seed_set is false (a random seed)
  bool seed_set = false;
  int64_t max_tokens = 256;       // sampling.max_tokens (0: until end of generation / context)
  std::vector<std::string> stop;  // sampling.stop
  std::optional<std::string> chat_template;
  BenchConfig bench;
  PrecisionGate precision;
  ServeConfig serve;
  EmbeddingConfig embedding;
  ClassifierConfig classifier;
  // The files applied, the deepest base first and this recipe last.
  std::vector<std::string> chain;

  // Where each explicitly set key was written (strategies.origins; "device", "model", ...).
  const KeyOrigins& origins() const { return strategies.origins; }

  // One line for logs: "kv_cache on, kernels fast, threads 2, activations int8, context 2048"
  // (the strategies that act on this device).
  std::string strategies_summary() const;
};

// Reads and validates a recipe file.
Result<RecipeConfig> load_recipe(const std::string& path);

// Parses recipe text; `path` names it in messages and anchors ./ and ../ paths and `base`.
Result<RecipeConfig> parse_recipe(const std::string& text, const std::string& path);

}  // namespace rinfer
