// strategies.dynamic_batching: how an embedding recipe groups its inputs into forward passes.
// packed sorts the inputs by length and packs each batch's sequences back to back (no padding:
// attention stays within each sequence); padded keeps the input order and pads every sequence
// to the batch's longest (what a framework with dense [batch, seq] tensors does); single, the
// baseline, runs one input per pass. Hook: EmbedderOptions (engine/embedder.h).
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"policy", "max_seqs", "max_tokens"}));
  DynamicBatchingConfig& b = s.dynamic_batching;
  RINFER_ASSIGN_OR_RETURN(auto policy, m.get_enum("policy", {"single", "padded", "packed"}));
  if (policy) b.policy = static_cast<EmbedBatching>(*policy);
  RINFER_ASSIGN_OR_RETURN(auto seqs, m.get_int("max_seqs", 1, 65536));
  if (seqs) b.max_seqs = *seqs;
  RINFER_ASSIGN_OR_RETURN(auto tokens, m.get_int("max_tokens", 1, int64_t{1} << 20));
  if (tokens) b.max_tokens = *tokens;
  for (const char* k : {"policy", "max_seqs", "max_tokens"}) note_origin(m, k, s);
  return ok_status();
}

Status validate(const StrategyConfig&, const Device&) { return ok_status(); }

std::string describe(const StrategyConfig& s, const Device&) {
  const DynamicBatchingConfig& b = s.dynamic_batching;
  if (!s.origins.has("strategies.dynamic_batching.policy") &&
      !s.origins.has("strategies.dynamic_batching.max_seqs") &&
      !s.origins.has("strategies.dynamic_batching.max_tokens")) {
    return "";  // only embedding recipes set it
  }
  if (b.policy == EmbedBatching::kSingle) return "dynamic batching off (one input per pass)";
  return fmt::format("dynamic batching {} (up to {} inputs, {} tokens per pass)",
                     embed_batching_name(b.policy), b.max_seqs, b.max_tokens);
}

}  // namespace

std::string_view embed_batching_name(EmbedBatching p) {
  switch (p) {
    case EmbedBatching::kSingle: return "single";
    case EmbedBatching::kPadded: return "padded";
    case EmbedBatching::kPacked: return "packed";
  }
  return "?";
}

const StrategyInfo& dynamic_batching_strategy() {
  static const StrategyInfo info{
      "dynamic_batching",
      "embeddings: many inputs per forward pass, sorted by length and packed without padding, "
      "or padded batches, or one at a time",
      {{"policy", "single | padded | packed", "packed",
        "single: one input per pass; padded: input order, padded to the longest; packed: "
        "sorted by length, no padding"},
       {"max_seqs", "int in [1, 65536]", "256", "inputs per forward pass"},
       {"max_tokens", "int in [1, 1048576]", "8192", "rows per forward pass, padding included"}},
      "{policy: single}",
      "EmbedderOptions::batching",
      "cpu, cuda",
      "docs/strategies/dynamic_batching.md",
      parse,
      validate,
      describe};
  return info;
}

}  // namespace rinfer
