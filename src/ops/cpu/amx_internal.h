// What the AMX kernels (matmul_bf16.cpp, attention_bf16.cpp) share: the tile configuration and
// a vector exp. Everything here is used only inside functions compiled for AMX / AVX-512
// (target attributes), after amx_bf16_available().
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#define RINFER_HAVE_AMX_CODE 1
#endif

namespace rinfer::cpu::amx {

// The 64-byte operand of LDTILECFG: palette 1, every one of the 8 tiles 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};

  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      rows[t] = 16;
      colsb[t] = 64;
    }
  }
};

#if RINFER_HAVE_AMX_CODE
// e^x for 16 floats: x = n ln2 + r, |r| <= ln2 / 2, e^r by a degree-6 polynomial, times 2^n
// (vscalefps). Relative error ~2e-7 on [-87, 88]; below -87 it gives 0.
__attribute__((target("avx512f"))) inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}
#endif

}  // namespace rinfer::cpu::amx
