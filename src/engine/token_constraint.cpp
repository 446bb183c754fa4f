#include "engine/token_constraint.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace rinfer {

void apply_token_mask(std::span<const uint32_t> bits, std::span<float> row) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = row.size();
  const size_t words = std::min(bits.size(), (n + 31) / 32);
  for (size_t w = 0; w < words; ++w) {
    const uint32_t word = bits[w];
    if (word == 0xFFFFFFFFu) continue;  // every token of these 32 allowed
    const size_t end = std::min(n, (w + 1) * 32);
    for (size_t i = w * 32; i < end; ++i) {
      if (((word >> (i - w * 32)) & 1u) == 0) row[i] = kNegInf;
    }
  }
}

Status TokenConstraintState::mask(std::span<float> row) {
  scratch_.resize(static_cast<size_t>(token_mask_words(static_cast<int64_t>(row.size()))));
  RINFER_RETURN_IF_ERROR(fill(scratch_));
  apply_token_mask(scratch_, row);
  return ok_status();
}

}  // namespace rinfer
