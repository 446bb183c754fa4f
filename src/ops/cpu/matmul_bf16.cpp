// The AMX bf16 matmul (see matmul_bf16.h). Only the functions marked with a target attribute use
// AVX-512 / AMX instructions, so the rest of the library runs on any x86-64 CPU; they are called
// only after amx_bf16_available().
// GCC 12's AVX-512 intrinsics pass an undefined register as the merge source of unmasked
// operations and warn about it inside functions with a target attribute (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "ops/cpu/matmul_bf16.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/cpu/amx_internal.h"

#if RINFER_HAVE_AMX_CODE
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace rinfer::cpu {

namespace {

constexpr int64_t kTile = 16;                   // rows of a tile; 16 f32 / 32 bf16 per row
constexpr int64_t kTileK = 32;                  // inputs per tile
constexpr int64_t kTileElems = kTile * kTileK;  // bf16 elements of one weight tile
constexpr int64_t kBlock = 32;                  // rows and columns of the 2 x 2 tile block

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

#if RINFER_HAVE_AMX_CODE

bool probe_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || ((c >> 27) & 1u) == 0) return false;  // OSXSAVE
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if (((d >> 22) & 1u) == 0 || ((d >> 24) & 1u) == 0) return false;  // AMX-BF16, AMX-TILE
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const uint64_t xcr0 = (uint64_t{hi} << 32) | lo;
  if ((xcr0 & (uint64_t{3} << 17)) != (uint64_t{3} << 17)) return false;  // XTILECFG, XTILEDATA
  // Linux hands out the 8 KB tile state only on request (ARCH_REQ_XCOMP_PERM, XTILEDATA).
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// Rows [r0, r0 + 32) of x rounded to bf16 into a [32, k_pad] buffer, zero beyond n_tokens and
// n_in.
__attribute__((target("avx512f,avx512bf16"))) void x_block_to_bf16(const float* x, int64_t n_tokens,
                                                                   int64_t n_in, int64_t k_pad,
                                                                   int64_t r0, uint16_t* out) {
  for (int64_t r = 0; r < kBlock; ++r) {
    uint16_t* o = out + r * k_pad;
    if (r0 + r >= n_tokens) {
      std::memset(o, 0, static_cast<size_t>(k_pad) * 2);
      continue;
    }
    const float* xr = x + (r0 + r) * n_in;
    int64_t i = 0;
    for (; i + 32 <= n_in; i += 32) {
      const __m512 lo = _mm512_loadu_ps(xr + i);
      const __m512 hi = _mm512_loadu_ps(xr + i + 16);
      _mm512_storeu_si512(o + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    }
    for (; i < n_in; ++i) o[i] = f32_to_bf16(xr[i]);
    for (; i < k_pad; ++i) o[i] = 0;
  }
}

// One 32-row block of tokens (already in bf16, xb [32, k_pad]) times the 32-column weight
// blocks [nb2_begin, nb2_end): four f32 accumulator tiles, two A and two B tiles per step.
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void amx_rows(
    const uint16_t* xb, int64_t k_pad, const uint16_t* wp, int64_t nb2_begin, int64_t nb2_end,
    int64_t r0, int64_t n_tokens, int64_t n_out, const float* bias, float* y) {
  const amx::TileConfig cfg;
  _tile_loadconfig(&cfg);
  const int64_t kb_count = k_pad / kTileK;
  const int64_t a_stride = k_pad * 2;
  alignas(64) float c[4][kTile * kTile];
  const int64_t rows = std::min(kBlock, n_tokens - r0);
  for (int64_t nb2 = nb2_begin; nb2 < nb2_end; ++nb2) {
    const uint16_t* b0 = wp + (2 * nb2) * kb_count * kTileElems;
    const uint16_t* b1 = b0 + kb_count * kTileElems;
    const uint16_t* a0 = xb;
    const uint16_t* a1 = xb + kTile * k_pad;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t kb = 0; kb < kb_count; ++kb) {
      _tile_loadd(4, a0 + kb * kTileK, a_stride);
      _tile_loadd(6, b0 + kb * kTileElems, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, b1 + kb * kTileElems, 64);
      _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(5, a1 + kb * kTileK, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64);
    const int64_t col0 = nb2 * kBlock;
    const int64_t cols = std::min(kBlock, n_out - col0);
    // Epilogue: the valid part of the block, plus the bias, to y.
    const auto m_lo = static_cast<__mmask16>(cols >= kTile ? 0xFFFF : (1u << cols) - 1u);
    const auto m_hi = static_cast<__mmask16>(cols >= kBlock ? 0xFFFF
                                             : cols > kTile ? (1u << (cols - kTile)) - 1u
                                                            : 0u);
    const __m512 b_lo =
        bias != nullptr ? _mm512_maskz_loadu_ps(m_lo, bias + col0) : _mm512_setzero_ps();
    const __m512 b_hi =
        bias != nullptr ? _mm512_maskz_loadu_ps(m_hi, bias + col0 + kTile) : _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
      float* yr = y + (r0 + r) * n_out + col0;
      const float* lo = c[(r / kTile) * 2] + (r % kTile) * kTile;
      const float* hi = c[(r / kTile) * 2 + 1] + (r % kTile) * kTile;
      _mm512_mask_storeu_ps(yr, m_lo, _mm512_add_ps(_mm512_load_ps(lo), b_lo));
      _mm512_mask_storeu_ps(yr + kTile, m_hi, _mm512_add_ps(_mm512_load_ps(hi), b_hi));
    }
  }
  _tile_release();
}

#endif  // RINFER_HAVE_AMX_CODE

size_t tile_offset(int64_t kb_count, int64_t o, int64_t i) {
  const int64_t nb = o / kTile, c = o % kTile, kb = i / kTileK, p = (i % kTileK) / 2, j = i % 2;
  return static_cast<size_t>((nb * kb_count + kb) * kTileElems + p * 2 * kTile + c * 2 + j);
}

Status matmul_bf16_reference(const PackedBf16& w, const float* x, int64_t n_tokens, float* y,
                             const float* bias) {
  const int64_t n_out = w.n_out(), n_in = w.n_in();
  std::vector<double> xr(static_cast<size_t>(n_tokens * n_in));
  for (size_t i = 0; i < xr.size(); ++i) xr[i] = bf16_to_f32(f32_to_bf16(x[i]));
  std::vector<double> row(static_cast<size_t>(n_in));
  for (int64_t o = 0; o < n_out; ++o) {
    for (int64_t i = 0; i < n_in; ++i) row[static_cast<size_t>(i)] = w.at(o, i);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const double* xt = xr.data() + t * n_in;
      double acc = 0.0;
      for (int64_t i = 0; i < n_in; ++i) acc += row[static_cast<size_t>(i)] * xt[i];
      y[t * n_out + o] = static_cast<float>(acc) + (bias != nullptr ? bias[o] : 0.0f);
    }
  }
  return ok_status();
}

}  // namespace

bool amx_bf16_available() {
#if RINFER_HAVE_AMX_CODE
  static const bool ok = probe_amx_bf16();
  return ok;
#else
  return false;
#endif
}

Result<PackedBf16> PackedBf16::pack(const Tensor& w) {
  if (!w.defined() || w.ndim() != 2 || !w.device().is_cpu()) {
    return invalid_argument("matmul_bf16: the weight must be a 2-D CPU tensor, got {}",
                            w.defined() ? w.to_string() : std::string("an undefined tensor"));
  }
  const DTypeTraits& tr = dtype_traits(w.dtype());
  if (w.dim(1) % tr.block_size != 0 || w.strides()[1] != 1) {
    return invalid_argument("matmul_bf16: weight {} rows must be contiguous whole blocks",
                            w.to_string());
  }
  PackedBf16 p;
  p.n_out_ = w.dim(0);
  p.n_in_ = w.dim(1);
  p.n_pad_ = round_up(std::max<int64_t>(p.n_out_, 1), kBlock);
  p.k_pad_ = round_up(std::max<int64_t>(p.n_in_, 1), kTileK);
  RINFER_ASSIGN_OR_RETURN(p.data_, Tensor::empty({p.n_pad_ * p.k_pad_}, DType::kBF16));
  auto* dst = static_cast<uint16_t*>(p.data_.mutable_data());
  std::memset(dst, 0, static_cast<size_t>(p.n_pad_ * p.k_pad_) * 2);
  const auto* base = static_cast<const uint8_t*>(w.data());
  const int64_t row_bytes = w.strides()[0] / tr.block_size * tr.block_bytes;
  const int64_t kb_count = p.k_pad_ / kTileK;
  std::vector<float> row(static_cast<size_t>(p.n_in_));
  for (int64_t o = 0; o < p.n_out_; ++o) {
    RINFER_RETURN_IF_ERROR(dequantize_row(w.dtype(), base + o * row_bytes, row.data(), p.n_in_));
    for (int64_t i = 0; i < p.n_in_; ++i) {
      dst[tile_offset(kb_count, o, i)] = f32_to_bf16(row[static_cast<size_t>(i)]);
    }
  }
  return p;
}

float PackedBf16::at(int64_t o, int64_t i) const {
  return bf16_to_f32(data()[tile_offset(k_pad_ / kTileK, o, i)]);
}

Status matmul_bf16(const OpContext& ctx, const PackedBf16& w, const float* x, int64_t n_tokens,
                   float* y, const float* bias) {
  if (!w.defined()) return invalid_argument("matmul_bf16: the weight is not packed");
  if (n_tokens < 0) return invalid_argument("matmul_bf16: negative n_tokens {}", n_tokens);
  if (n_tokens == 0) return ok_status();
  if (x == nullptr || y == nullptr) {
    return invalid_argument("matmul_bf16: null {} pointer", x == nullptr ? "x" : "y");
  }
  if (ctx.impl == Impl::kReference) return matmul_bf16_reference(w, x, n_tokens, y, bias);
  if (!amx_bf16_available()) {
    return unsupported("matmul_bf16: this CPU (or its OS) does not offer AMX-BF16 tiles");
  }
#if RINFER_HAVE_AMX_CODE
  // Tasks: (32-token block, range of 32-column blocks). Enough tasks for every thread even when
  // the batch is one block of tokens; each task rounds its own tokens to bf16 (a small part of
  // its work: 32 x n_in conversions against 32 x n_in x cols products).
  const int64_t m_blocks = (n_tokens + kBlock - 1) / kBlock;
  const int64_t n_blocks = w.n_pad() / kBlock;
  const int threads = ctx.pool != nullptr ? ctx.pool->size() : 1;
  int64_t n_split = 1;
  while (m_blocks * n_split < 2 * threads && n_blocks / (n_split * 2) >= 2) n_split *= 2;
  const int64_t per_task = (n_blocks + n_split - 1) / n_split;
  const int64_t k_pad = w.k_pad(), n_in = w.n_in(), n_out = w.n_out();
  const uint16_t* wp = w.data();
  auto task = [&](int64_t t0, int64_t t1) {
    thread_local std::vector<uint16_t> xb;
    xb.resize(static_cast<size_t>(kBlock * k_pad));
    int64_t converted = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t mb = t / n_split, ns = t % n_split;
      if (mb != converted) {
        x_block_to_bf16(x, n_tokens, n_in, k_pad, mb * kBlock, xb.data());
        converted = mb;
      }
      const int64_t b0 = ns * per_task, b1 = std::min(n_blocks, b0 + per_task);
      if (b0 < b1) amx_rows(xb.data(), k_pad, wp, b0, b1, mb * kBlock, n_tokens, n_out, bias, y);
    }
  };
  const int64_t n_tasks = m_blocks * n_split;
  if (ctx.pool == nullptr || threads == 1 || n_tasks == 1) {
    task(0, n_tasks);
  } else {
    ctx.pool->parallel_for(0, n_tasks, 1, task);
  }
  return ok_status();
#else
  return unsupported("matmul_bf16: built without AMX code");
#endif
}

}  // namespace rinfer::cpu
