// A request's token constraint (structured output): which tokens may come next, from a grammar
// the request carries. The engine core masks each logits row of a constrained request before
// its sampler draws (on the host: a constrained request's rows never sample on the device), then
// advances the constraint with the token drawn. The grammar engine behind it is
// engine/grammar.h (XGrammar); this interface keeps it out of the engine core.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "rinfer/status.h"

namespace rinfer {

// One request's position in the grammar. Used from the engine core's thread only.
class TokenConstraintState {
 public:
  virtual ~TokenConstraintState() = default;
  // Sets the logits of every token the grammar does not allow next to -inf (row: [n_vocab]).
  virtual Status mask(std::span<float> row) = 0;
  // Advances past `token`; an error when the grammar does not allow it.
  virtual Status accept(int32_t token) = 0;
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
