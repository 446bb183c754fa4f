// One forward pass over many sequences: what the engine hands a runner each step.
//
// The new tokens of every sequence sit one after another in `tokens` (sequence s owns rows
// [query_start[s], query_start[s + 1])); a decode step contributes one row, a prefill chunk
// many. Each sequence attends to its own KV: kv_len[s] positions after this pass (its cached
// context plus its new tokens, which are the last of them), found through its block table
// (one per layer group of the KV spec: block_tables[g, s, i] holds positions
// [i * block_size, (i + 1) * block_size)). The model writes the new tokens' keys and values
// into those blocks and owns no KV state: which positions are valid is the engine's business.
//
// Rows whose logits are wanted are listed in logit_rows (ascending): a decode row, the last
// row of a prefill's final chunk, or every row (perplexity).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "kv/kv_spec.h"
#include "models/taps.h"
#include "rinfer/status.h"

namespace rinfer {

class OpProfileSink;  // models/op_profile.h

enum class MaskKind : uint8_t {
  kCausal,         // a token sees the positions up to its own (decoders)
  kBidirectional,  // every token of a sequence sees all of it (encoders)
};

struct ForwardBatch {
  std::span<const int32_t> tokens;     // [n_tokens]
  std::span<const int32_t> positions;  // [n_tokens] position of each token in its sequence
  // [n_tokens, n_embd]: when set, these rows enter the first layer instead of the token
  // embeddings (image features of a vision-language model); tokens still count the rows.
  std::span<const float> embeddings;
  std::span<const int32_t> query_start;   // [n_seq + 1], 0 first, n_tokens last, ascending
  std::span<const int32_t> kv_len;        // [n_seq]
  std::span<const int32_t> block_tables;  // [n_groups, n_seq, table_stride]
  int32_t table_stride = 0;
  std::span<const int32_t> logit_rows;  // [n_out] ascending rows of tokens
  MaskKind mask = MaskKind::kCausal;
  // When it reads true the runner stops early (between layers) with kCancelled.
  const std::atomic<bool>* cancel = nullptr;
  // Named activations to hand out during this pass (models/taps.h); null: none, at no cost.
  TapSink* taps = nullptr;
  // Per-op times of this pass (models/op_profile.h); null: none, at no cost.
  OpProfileSink* profile = nullptr;

  int32_t n_seq() const { return static_cast<int32_t>(kv_len.size()); }
  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
  // Group g's table of sequence s: [table_stride].
  const int32_t* table(int32_t g, int32_t s) const {
    return block_tables.data() +
           (static_cast<int64_t>(g) * n_seq() + s) * static_cast<int64_t>(table_stride);
  }
};

// What every runner checks of a batch, whatever the device: the spans agree in size, every
// sequence has at least one row, its positions are kv_len - n_new ... kv_len - 1, kv_len fits
// the context, the tables are wide enough for kv_len, logit rows ascend inside the batch and
// have an output buffer, embeddings (when set) have n_tokens * n_embd values. Each error names
// the sequence or row.
Status check_forward_batch(const ForwardBatch& b, const kv::KvSpec& spec, int64_t n_embd,
                           int64_t max_tokens, const float* logits);

}  // namespace rinfer
