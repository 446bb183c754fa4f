#include "core/dtype.h"

#include <array>
#include <cctype>
#include <limits>

#include "core/error.h"

namespace rinfer {

namespace {

constexpr std::array<DTypeTraits, kDTypeCount> kTraits = {{
    {"f32", 1, 4, false, true},     {"f16", 1, 2, false, true},     {"bf16", 1, 2, false, true},
    {"f64", 1, 8, false, true},     {"i8", 1, 1, false, false},     {"u8", 1, 1, false, false},
    {"i16", 1, 2, false, false},    {"i32", 1, 4, false, false},    {"i64", 1, 8, false, false},
    {"bool", 1, 1, false, false},   {"f8_e4m3", 1, 1, false, true}, {"f8_e5m2", 1, 1, false, true},
    {"q4_0", 32, 18, true, true},   {"q4_1", 32, 20, true, true},   {"q5_0", 32, 22, true, true},
    {"q5_1", 32, 24, true, true},   {"q8_0", 32, 34, true, true},   {"q2_k", 256, 84, true, true},
    {"q3_k", 256, 110, true, true}, {"q4_k", 256, 144, true, true}, {"q5_k", 256, 176, true, true},
    {"q6_k", 256, 210, true, true}, {"q8_k", 256, 292, true, true},
}};

}  // namespace

const DTypeTraits& dtype_traits(DType t) { return kTraits[static_cast<size_t>(t)]; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (int i = 0; i < kDTypeCount; ++i) {
    std::string_view n = kTraits[static_cast<size_t>(i)].name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t j = 0; j < n.size() && eq; ++j) {
      eq = std::tolower(static_cast<unsigned char>(name[j])) == n[j];
    }
    if (eq) return static_cast<DType>(i);
  }
  return std::nullopt;
}

Result<uint64_t> dtype_row_bytes(DType t, uint64_t n) {
  const DTypeTraits& tr = dtype_traits(t);
  const auto bs = static_cast<uint64_t>(tr.block_size);
  if (n % bs != 0) {
    return invalid_argument("{} elements is not a multiple of the {} block size {}", n, tr.name,
                            bs);
  }
  const uint64_t blocks = n / bs;
  const auto bb = static_cast<uint64_t>(tr.block_bytes);
  if (blocks > std::numeric_limits<uint64_t>::max() / bb) {
    return out_of_range("{} elements of {} overflow a 64-bit byte count", n, tr.name);
  }
  return blocks * bb;
}

}  // namespace rinfer
