// A request's token constraint (structured output): which tokens may come next, from a grammar
// the request carries. The engine core masks each logits row of a constrained request before
// its sampler draws, then advances the constraint with the token drawn. Where the runner samples
// on its device (DecoderRunner::masks_on_device), the masks are bitmasks filled on the host, in
// parallel, while the device runs the pass, and applied there; else the host masks the rows it
// samples. The grammar engine behind it is engine/grammar.h (XGrammar); this interface keeps it
// out of the engine core.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

// The words of a token bitmask over n_vocab tokens: bit t % 32 of word t / 32 is token t's.
inline int64_t token_mask_words(int64_t n_vocab) { return (n_vocab + 31) / 32; }
// Sets row[t] to -inf for every token t whose bit is clear (bits: token_mask_words(row.size())).
void apply_token_mask(std::span<const uint32_t> bits, std::span<float> row);

// One request's position in the grammar. Used by one thread at a time (the engine core's, or a
// worker filling masks for it while the engine core waits).
class TokenConstraintState {
 public:
  virtual ~TokenConstraintState() = default;
  // Writes the bitmask of the tokens the grammar allows next (token_mask_words(n_vocab) words).
  virtual Status fill(std::span<uint32_t> bits) = 0;
  // Advances past `token`; an error when the grammar does not allow it.
  virtual Status accept(int32_t token) = 0;
  // Sets the logits of every token the grammar does not allow next to -inf (row: [n_vocab]):
  // fill, then apply_token_mask.
  Status mask(std::span<float> row);

 private:
  std::vector<uint32_t> scratch_;
};

// A compiled grammar, shared by every request (and choice) that uses it.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual std::unique_ptr<TokenConstraintState> start() const = 0;
  // "json_object", "json_schema", "grammar": what the constraint is, for messages.
  virtual std::string describe() const = 0;
};

}  // namespace rinfer
