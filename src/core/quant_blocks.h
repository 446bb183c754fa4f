// Byte layouts of the GGUF block-quantized formats, field for field as ggml's ggml-common.h
// defines them. f16 fields are stored as raw IEEE half bits (uint16_t); every block is
// little-endian on disk.
//
// These structs are only ever filled by memcpy from a (possibly unaligned) byte pointer: never
// cast a tensor's data pointer to them. The static_asserts below pin each field's offset so the
// structs and the on-disk bytes cannot drift apart.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rinfer {

inline constexpr int kQK4_0 = 32;  // elements per block of the 32-element formats
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK_K = 256;       // elements per super-block of the k-quants
inline constexpr int kKScaleSize = 12;  // packed 6-bit scales + mins of Q4_K / Q5_K

// 4.5 bits per weight: y = d * (q - 8), q in [0, 15].
struct BlockQ4_0 {
  uint16_t d;              // f16 scale
  uint8_t qs[kQK4_0 / 2];  // element j in the low nibble of qs[j], element j+16 in the high
};

// 5 bits per weight: y = d * q + m, q in [0, 15].
struct BlockQ4_1 {
  uint16_t d;              // f16 scale
  uint16_t m;              // f16 min
  uint8_t qs[kQK4_1 / 2];  // nibbles as in BlockQ4_0
};

// 5.5 bits per weight: y = d * (q - 16), q in [0, 31].
struct BlockQ5_0 {
  uint16_t d;              // f16 scale
  uint8_t qh[4];           // bit j of this little-endian uint32 = bit 4 of element j
  uint8_t qs[kQK5_0 / 2];  // low 4 bits, nibbles as in BlockQ4_0
};

// 6 bits per weight: y = d * q + m, q in [0, 31].
struct BlockQ5_1 {
  uint16_t d;              // f16 scale
  uint16_t m;              // f16 min
  uint8_t qh[4];           // as in BlockQ5_0
  uint8_t qs[kQK5_1 / 2];  // as in BlockQ5_0
};

// 8.5 bits per weight: y = d * q.
struct BlockQ8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[kQK8_0];
};

// 2.625 bits per weight. 16 sub-blocks of 16: y = (d * sc) * q - (dmin * m), q in [0, 3].
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // low nibble: 4-bit scale sc, high nibble: 4-bit min m
  uint8_t qs[kQK_K / 4];       // 2-bit quants, four 32-element groups per 32 bytes
  uint16_t d;                  // f16 super-block scale for the scales
  uint16_t dmin;               // f16 super-block scale for the mins
};

// 3.4375 bits per weight. 16 sub-blocks of 16: y = (d * (sc - 32)) * q, q in [-4, 3].
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // high bit of each quant (set means no -4 offset)
  uint8_t qs[kQK_K / 4];     // low 2 bits, packed as in BlockQ2_K
  uint8_t scales[12];        // 16 6-bit scales (biased by 32)
  uint16_t d;                // f16 super-block scale
};

// 4.5 bits per weight. 8 sub-blocks of 32: y = (d * sc) * q - (dmin * m), q in [0, 15].
struct BlockQ4_K {
  uint16_t d;                   // f16 super-block scale for the scales
  uint16_t dmin;                // f16 super-block scale for the mins
  uint8_t scales[kKScaleSize];  // 8 6-bit scales and 8 6-bit mins
  uint8_t qs[kQK_K / 2];        // 4-bit quants
};

// 5.5 bits per weight. As BlockQ4_K with a fifth bit per quant, q in [0, 31].
struct BlockQ5_K {
  uint16_t d;                   // f16 super-block scale for the scales
  uint16_t dmin;                // f16 super-block scale for the mins
  uint8_t scales[kKScaleSize];  // as in BlockQ4_K
  uint8_t qh[kQK_K / 8];        // high bit of each quant
  uint8_t qs[kQK_K / 2];        // low 4 bits
};

// 6.5625 bits per weight. 16 sub-blocks of 16: y = (d * sc) * q, q in [-32, 31].
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // low 4 bits of the quants
  uint8_t qh[kQK_K / 4];      // high 2 bits of the quants
  int8_t scales[kQK_K / 16];  // 8-bit signed sub-block scales
  uint16_t d;                 // f16 super-block scale
};

// Intermediate format for dot products (activations): y = d * q.
struct BlockQ8_K {
  float d;  // f32 scale (not f16)
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sums of each group of 16 quants (unused by dequantization)
};

static_assert(sizeof(BlockQ4_0) == 18 && offsetof(BlockQ4_0, qs) == 2);
static_assert(sizeof(BlockQ4_1) == 20 && offsetof(BlockQ4_1, qs) == 4);
static_assert(sizeof(BlockQ5_0) == 22 && offsetof(BlockQ5_0, qh) == 2 &&
              offsetof(BlockQ5_0, qs) == 6);
static_assert(sizeof(BlockQ5_1) == 24 && offsetof(BlockQ5_1, qh) == 4 &&
              offsetof(BlockQ5_1, qs) == 8);
static_assert(sizeof(BlockQ8_0) == 34 && offsetof(BlockQ8_0, qs) == 2);
static_assert(sizeof(BlockQ2_K) == 84 && offsetof(BlockQ2_K, qs) == 16 &&
              offsetof(BlockQ2_K, d) == 80 && offsetof(BlockQ2_K, dmin) == 82);
static_assert(sizeof(BlockQ3_K) == 110 && offsetof(BlockQ3_K, qs) == 32 &&
              offsetof(BlockQ3_K, scales) == 96 && offsetof(BlockQ3_K, d) == 108);
static_assert(sizeof(BlockQ4_K) == 144 && offsetof(BlockQ4_K, scales) == 4 &&
              offsetof(BlockQ4_K, qs) == 16);
static_assert(sizeof(BlockQ5_K) == 176 && offsetof(BlockQ5_K, qh) == 16 &&
              offsetof(BlockQ5_K, qs) == 48);
static_assert(sizeof(BlockQ6_K) == 210 && offsetof(BlockQ6_K, qh) == 128 &&
              offsetof(BlockQ6_K, scales) == 192 && offsetof(BlockQ6_K, d) == 208);
static_assert(sizeof(BlockQ8_K) == 292 && offsetof(BlockQ8_K, qs) == 4 &&
              offsetof(BlockQ8_K, bsums) == 260);

}  // namespace rinfer
