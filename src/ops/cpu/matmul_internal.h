// Internals shared by the matmul files (not part of the ops API; tests use them to check the
// activation quantizer and the per-target kernels).
//
// The fast quantized matmul works on two internal formats:
//
// Quantized activations (QActs), one row per token, K = n_in rounded up to kKPad elements
// (the padding is zero):
//   qs   [n_tokens, K]        int8, x[i] ~= d[b] * qs[i], b = i / 32, |qs| <= 127
//   dexp [n_tokens, K / 4]    f32, d of the block holding bytes 4j..4j+3 (one per int32 lane)
//   d32  [n_tokens, G32]      f32, d per block of 32              (G32 = K/32 rounded up to 16)
//   s32  [n_tokens, G32]      f32, d * sum(qs) per block of 32
//   s16  [n_tokens, G16]      f32, d * sum(qs) per group of 16     (G16 = K/16 rounded up to 16)
//   qs4  [n_tokens, K4]       qs regrouped for the direct Q4 matvec kernels: per 4 blocks
//                             (128 elements), elements 0..15 of blocks 0..3, then 16..31 of
//                             blocks 0..3 (K4 = K rounded up to 128)
//
// Unpacked weight tiles (WTile), a chunk of rows at a time, every format turned into
//   q    [rows, K]           uint8 quants, value = ws[g] * q + wm[g] for the group g of 16 or 32
//   sexp [rows, K / 4]       f32, ws of the group holding bytes 4j..4j+3
//   m    [rows, G]           f32, wm per group (G = G16 or G32 by format; zero padded)
// so that one integer kernel serves every format:
//   y[t, o] = sum_j sexp[o, j] * dexp[t, j] * dot4(q[o, 4j..], qs[t, 4j..])
//           + sum_g m[o, g] * s[t, g]
// Symmetric formats fold their offset into wm (Q4_0: q - 8 gives wm = -8 d).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/dtype.h"

namespace rinfer::cpu::internal {

inline constexpr int64_t kKPad = 64;      // K is padded to this (one 512-bit vector of int8)
inline constexpr int64_t kGroupPad = 16;  // group arrays are padded to this many floats
// The micro-kernels' register tile is 4 rows x 4 tokens.

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// A growable 64-byte-aligned buffer, one per thread and purpose, so steady-state calls never
// allocate.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(p_); }
  void* get(size_t bytes) {
    if (bytes > size_) {
      std::free(p_);
      size_ = static_cast<size_t>(round_up(static_cast<int64_t>(bytes), 4096));
      p_ = std::aligned_alloc(64, size_);
      if (p_ == nullptr) size_ = 0;
    }
    return p_;
  }

 private:
  void* p_ = nullptr;
  size_t size_ = 0;
};

struct QActsLayout {
  int64_t k = 0;    // logical n_in
  int64_t kp = 0;   // padded K
  int64_t g16 = 0;  // padded group counts
  int64_t g32 = 0;
  int64_t k4 = 0;  // padded K of qs4

  explicit QActsLayout(int64_t n_in)
      : k(n_in),
        kp(round_up(n_in, kKPad)),
        g16(round_up(kp / 16, kGroupPad)),
        g32(round_up(kp / 32, kGroupPad)),
        k4(round_up(n_in, 128)) {}
  // Bytes of one token's row in each array.
  int64_t qs_bytes() const { return kp; }
  int64_t dexp_floats() const { return kp / 4; }
};

// Views of one quantized-activation buffer (n rows).
struct QActs {
  QActsLayout layout{0};
  int64_t n = 0;
  int8_t* qs = nullptr;   // [n, kp]
  float* dexp = nullptr;  // [n, kp / 4]
  float* d32 = nullptr;   // [n, g32]
  float* s32 = nullptr;   // [n, g32]
  float* s16 = nullptr;   // [n, g16]
  int8_t* qs4 = nullptr;  // [n, k4]
};

// Bytes needed by a QActs of n rows (all arrays 64-byte aligned inside one block).
size_t qacts_bytes(const QActsLayout& l, int64_t n);
// Carves the arrays out of `mem` (64-byte aligned, qacts_bytes(l, n) long).
QActs qacts_view(const QActsLayout& l, int64_t n, void* mem);
// Rows [t0, t0 + n) of `a` as a QActs of n rows (no copy).
QActs qacts_rows(const QActs& a, int64_t t0, int64_t n);

// Quantizes one f32 row x[k] into row `t` of `a` (SIMD, dispatched).
void quantize_act_row(const float* x, const QActs& a, int64_t t);
// Scalar reference of the same (round half away from zero, d = amax / 127).
void quantize_act_row_ref(const float* x, const QActs& a, int64_t t);

// Whether the integer path handles dtype t (has an unpacker), and its group size (16 or 32).
bool has_int8_path(DType t);
int64_t int8_group(DType t);

struct WTile {
  int64_t kp = 0;         // padded K (row stride of q)
  int64_t g = 0;          // padded group count (row stride of m)
  uint8_t* q = nullptr;   // [rows, kp]
  float* sexp = nullptr;  // [.., kp / 4]
  float* m = nullptr;     // [.., g]
  bool wide = false;      // quants may exceed 127 (Q8_0 stored as q + 128)
};

// Unpacks n_rows (<= rows of the tile) weight rows of dtype t (row i at w + i * row_bytes,
// k elements) into the tile (SIMD, dispatched). Rows n_rows.. are left untouched.
void unpack_rows(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t k,
                 const WTile& tile);

// Integer micro-kernel over one unpacked chunk: for tile rows [0, rows) (the tile holds
// round_up(rows, 4) rows, padding rows zeroed) and every token t of `a`:
//   y[t * ldy + row0 + r] = sum_j sexp[r, j] * dexp[t, j] * dot4(q[r, 4j..], qs[t, 4j..])
//                          + sum_g m[r, g] * s[t, g]      (s = s16 or s32 by the group size gs)
void int8_chunk(const WTile& tile, int64_t rows, const QActs& a, int64_t gs, float* y, int64_t ldy,
                int64_t row0);

// f32 micro-kernel over one chunk: w [round_up(rows, 4), kp] (padding rows zeroed), x
// [n_tokens, kp] (zero padded): y[t * ldy + row0 + r] = sum_i w[r, i] * x[t, i].
void f32_chunk(const float* w, int64_t kp, int64_t rows, const float* x, int64_t n_tokens, float* y,
               int64_t ldy, int64_t row0);

// Converts n_rows weight rows of dtype t (f32, f16, bf16 natively, others via dequantize_row)
// to f32 rows of kp floats (zero padded) at dst. Returns false on a dequantize failure.
bool rows_to_f32(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t k,
                 float* dst, int64_t kp);

// Whether the running target has a direct matrix-vector kernel for t.
bool has_direct_matvec(DType t);
// Direct matrix-vector kernel straight from the GGUF blocks (no unpacking), for the formats that
// have one on the running target: y[t * ldy + o] for rows [0, n_rows) and every token t of `a`
// (each group of weight blocks is read once for up to 4 tokens; a token's result has the same
// bits whatever the other tokens are). Returns false when there is none (the caller falls back
// to unpack + int8_chunk).
bool int8_matvec_direct(DType t, const uint8_t* w, int64_t row_bytes, int64_t n_rows, int64_t k,
                        const QActs& a, float* y, int64_t ldy = 0);

const char* simd_target();

// W8A8 (matmul_i8.cpp): activations quantized per token and per group of kW8A8Group columns,
// q [n_tokens, kp] (kp = n_in rounded up to 64, zero padded, 64-byte aligned), x ~= scale[t, g] *
// q[t, :] over group g, sum[t, g] = sum of the group's codes.
inline constexpr int64_t kW8A8Group = 64;
struct I8Acts {
  int64_t kp = 0;
  int64_t k = 0;  // n_in
  int8_t* q = nullptr;
  float* scale = nullptr;  // [n_tokens, groups()] max|x| / 127 over the group (0: all zero)
  int32_t* sum = nullptr;  // [n_tokens, groups()]
  int64_t groups() const { return (k + kW8A8Group - 1) / kW8A8Group; }
};
// Per group: scale = max|x| / 127, q = nearbyint(x * (127 / max|x|)) (round to nearest even):
// AVX-512 where the CPU has VNNI and !scalar, else a scalar loop (the same bits).
void quantize_tokens_i8(const float* x, int64_t n_tokens, int64_t k, const I8Acts& a,
                        bool scalar = false);
// One group's contribution to a row's float sum: acc sums the unsigned weight bytes (code + 128)
// times the codes, code_sum the group's codes; every kernel adds it with this one fused
// multiply-add, group by group, and multiplies the total by the row's scale.
inline float i8_group_add(int32_t acc, int32_t code_sum, float x_scale, float f) {
  return std::fma(static_cast<float>(acc - 128 * code_sum), x_scale, f);
}
// Rows per panel of packed W8A8 weights (pack_w8a8): byte (row j, column i) of panel p is at
// p * 16 * k + (i / 4) * 64 + j * 4 + i % 4, holding code + 128.
inline constexpr int64_t kW8A8Panel = 16;
// y[t * ldy + o] = w_scale[o] * (the i8_group_add chain over the groups) for the rows o < n_out
// of panels [p0, p1) and every token: the VNNI kernel where the CPU has it and !scalar, else the
// scalar loop (the same bits).
void w8a8_panels(const uint8_t* w, int64_t n_out, int64_t k, const float* w_scale, int64_t p0,
                 int64_t p1, const I8Acts& a, int64_t n_tokens, float* y, int64_t ldy, bool scalar);
bool has_i8_vnni();

}  // namespace rinfer::cpu::internal
