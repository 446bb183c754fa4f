// Element types: plain scalars and the GGUF block-quantized formats.
//
// A block format packs `block_size` consecutive elements of a row into `block_bytes` bytes
// (scales + packed quants). Rows of a quantized tensor must be a whole number of blocks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "rinfer/status.h"

namespace rinfer {

enum class DType : uint8_t {
  // scalars
  kF32,
  kF16,
  kBF16,
  kF64,
  kI8,
  kU8,
  kI16,
  kI32,
  kI64,
  kBool,
  kF8E4M3,
  kF8E5M2,
  // GGUF block formats (ggml's layouts, bit-exact)
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ8_0,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
};

inline constexpr int kDTypeCount = static_cast<int>(DType::kQ8_K) + 1;

struct DTypeTraits {
  std::string_view name;  // "f32", "q4_k", ...
  int64_t block_size;     // elements per block (1 for scalars)
  int64_t block_bytes;    // bytes per block (element size for scalars)
  bool is_quantized;      // a GGUF block format
  bool is_float;          // float scalar or dequantizes to float
};

const DTypeTraits& dtype_traits(DType t);
inline std::string_view dtype_name(DType t) { return dtype_traits(t).name; }
inline bool is_quantized(DType t) { return dtype_traits(t).is_quantized; }

// Parses the names printed by dtype_name ("q4_k", "bf16", case-insensitive).
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes for `n` elements in one row: n must be a multiple of the block size. Fails (rather than
// wrapping) on overflow or a ragged row.
Result<uint64_t> dtype_row_bytes(DType t, uint64_t n);

// IEEE half and bfloat16 conversions (round to nearest even, NaN preserved).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);
float f8e4m3_to_f32(uint8_t v);
float f8e5m2_to_f32(uint8_t v);

// Dequantizes (or converts) `n` elements of one row to f32. `n` must be a multiple of the block
// size. This is the scalar reference: it matches ggml's dequantize_row_* bit for bit.
Status dequantize_row(DType t, const void* src, float* dst, int64_t n);

}  // namespace rinfer
