// gemm_packed_f32: y = act(x W^T + bias + res) with W packed in panels of 32 outputs. The tile
// is T tokens x 32 outputs of accumulators (32 / lanes vectors per token: 2 on AVX-512 with T =
// 6, 4 on AVX2 with T = 3); per k-step the panel's 32 weights are loaded once and each token's
// activation broadcast, so a k-step costs T * 32 / lanes FMAs for 32 / lanes + T loads; long k
// ranges go in blocks of 256 steps (partial sums kept in y) so a panel block stays in L1. The
// epilogue runs on the accumulators of the last block. Work items (a run of tokens x a run of
// panels) go over the pool.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/gemm_packed_f32.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "ops/cpu/activation-inl.h"
// clang-format on

#include "ops/cpu/gemm_packed_f32.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cpu/conv_internal.h"

HWY_BEFORE_NAMESPACE();
namespace rinfer::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kP = PackedF32::kPanel;

// Tokens per tile on this target: as many as the registers hold beside one k-step's weights.
template <class D>
constexpr int TileTokens(D d) {
  return hn::MaxLanes(d) >= 16 ? 6 : hn::MaxLanes(d) >= 8 ? 3 : 1;
}

// Which part of the k range a tile call covers: the first starts from zero (else from the
// partial sums in y), the last applies the epilogue (else it stores partial sums).
struct KRange {
  int64_t k0, k1;
  bool first, last;
};

// T tokens of x (rows of ldx) times k-steps [k0, k1) of panel wp [k][32] into y's columns
// [o0, o0 + n_cols), the panel's first kUsed vectors only (half a panel when n_cols <= 16).
template <int T, size_t kUsed>
HWY_INLINE void Tile(const float* HWY_RESTRICT wp, const KRange& kr, const float* HWY_RESTRICT x,
                     int64_t ldx, const ConvEpilogue& ep, int64_t n_out, int64_t t0, int64_t o0,
                     int64_t n_cols, float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> d;
  constexpr size_t kN = hn::MaxLanes(d);
  using V = hn::Vec<decltype(d)>;
  // The loops over tokens and vectors are unrolled so the accumulators live in registers.
  V acc[T][kUsed];
  HWY_UNROLL(32)
  for (int t = 0; t < T; ++t) {
    HWY_UNROLL(32)
    for (size_t j = 0; j < kUsed; ++j) acc[t][j] = hn::Zero(d);
  }
  if (!kr.first) {  // continue from the partial sums of the k-steps before
    for (int t = 0; t < T; ++t) {
      const float* yr = y + (t0 + t) * n_out + o0;
      for (size_t j = 0; j < kUsed; ++j) {
        const auto c0 = static_cast<int64_t>(j * kN);
        if (c0 + static_cast<int64_t>(kN) <= n_cols) {
          acc[t][j] = hn::LoadU(d, yr + c0);
        } else if (c0 < n_cols) {
          HWY_ALIGN float buf[kN] = {};
          std::copy(yr + c0, yr + n_cols, buf);
          acc[t][j] = hn::Load(d, buf);
        }
      }
    }
  }
  const float* xr[T];
  HWY_UNROLL(32)
  for (int t = 0; t < T; ++t) xr[t] = x + (t0 + t) * ldx;
  for (int64_t i = kr.k0; i < kr.k1; ++i) {
    V w[kUsed];
    HWY_UNROLL(32)
    for (size_t j = 0; j < kUsed; ++j) w[j] = hn::LoadU(d, wp + i * kP + j * kN);
    HWY_UNROLL(32)
    for (int t = 0; t < T; ++t) {
      const V xb = hn::Set(d, xr[t][i]);
      HWY_UNROLL(32)
      for (size_t j = 0; j < kUsed; ++j) acc[t][j] = hn::MulAdd(xb, w[j], acc[t][j]);
    }
  }
  if (!kr.last) {  // partial sums, no epilogue
    for (int t = 0; t < T; ++t) {
      float* yr = y + (t0 + t) * n_out + o0;
      for (size_t j = 0; j < kUsed; ++j) {
        const auto c0 = static_cast<int64_t>(j * kN);
        if (c0 + static_cast<int64_t>(kN) <= n_cols) {
          hn::StoreU(acc[t][j], d, yr + c0);
        } else if (c0 < n_cols) {
          HWY_ALIGN float buf[kN];
          hn::Store(acc[t][j], d, buf);
          std::copy(buf, buf + (n_cols - c0), yr + c0);
        }
      }
    }
    return;
  }
  for (int t = 0; t < T; ++t) {
    float* yr = y + (t0 + t) * n_out + o0;  // [n_cols]
    const float* rr = ep.residual != nullptr ? ep.residual + (t0 + t) * n_out + o0 : nullptr;
    for (size_t j = 0; j < kUsed; ++j) {
      const auto c0 = static_cast<int64_t>(j * kN);
      if (c0 >= n_cols) break;
      if (c0 + static_cast<int64_t>(kN) <= n_cols) {
        V z = acc[t][j];
        if (ep.bias != nullptr) z = hn::Add(z, hn::LoadU(d, ep.bias + o0 + c0));
        if (rr != nullptr) z = hn::Add(z, hn::LoadU(d, rr + c0));
        hn::StoreU(ActVecAny(d, z, ep.act), d, yr + c0);
        continue;
      }
      // The last, partial vector of the last panel: through a buffer, the columns past n_out
      // dropped.
      HWY_ALIGN float buf[kN];
      const int64_t m = n_cols - c0;
      hn::Store(acc[t][j], d, buf);
      for (int64_t c = 0; c < m; ++c) {
        buf[c] += (ep.bias != nullptr ? ep.bias[o0 + c0 + c] : 0.0f) +
                  (rr != nullptr ? rr[c0 + c] : 0.0f);
      }
      hn::Store(ActVecAny(d, hn::Load(d, buf), ep.act), d, buf);
      std::copy(buf, buf + m, yr + c0);
    }
  }
}

// Tokens [t0, t1) x panels [p0, p1), the k range in blocks of kKc steps so a block of a panel
// (kKc x 32 floats) stays in L1 while every token tile of the run reads it.
constexpr int64_t kKc = 256;

void Block(const PackedF32& w, const float* x, int64_t ldx, const ConvEpilogue& ep, int64_t t0,
           int64_t t1, int64_t p0, int64_t p1, float* y) {
  const hn::ScalableTag<float> d;
  constexpr int T = TileTokens(d);
  const int64_t n_out = w.n_out(), k = w.k();
  const int64_t kc = k <= kKc * 3 / 2 ? k : kKc;
  for (int64_t p = p0; p < p1; ++p) {
    const float* wp = w.panel(p);
    const int64_t o0 = p * kP, n_cols = std::min(kP, n_out - o0);
    constexpr size_t kV = kP / hn::MaxLanes(d);
    constexpr size_t kHalf = kV > 1 ? kV / 2 : 1;
    for (int64_t k0 = 0; k0 < k; k0 += kc) {
      const KRange kr{k0, std::min(k, k0 + kc), k0 == 0, k0 + kc >= k};
      int64_t t = t0;
      if (n_cols <= kP / 2 && kV > 1) {
        for (; t + T <= t1; t += T) Tile<T, kHalf>(wp, kr, x, ldx, ep, n_out, t, o0, n_cols, y);
        for (; t < t1; ++t) Tile<1, kHalf>(wp, kr, x, ldx, ep, n_out, t, o0, n_cols, y);
      } else {
        for (; t + T <= t1; t += T) Tile<T, kV>(wp, kr, x, ldx, ep, n_out, t, o0, n_cols, y);
        for (; t < t1; ++t) Tile<1, kV>(wp, kr, x, ldx, ep, n_out, t, o0, n_cols, y);
      }
    }
  }
}

int TokensPerTile() { return TileTokens(hn::ScalableTag<float>()); }

}  // namespace rinfer::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu {

HWY_EXPORT(Block);
HWY_EXPORT(TokensPerTile);

PackedF32 PackedF32::pack(const float* w, int64_t n_out, int64_t k) {
  PackedF32 p;
  p.n_out_ = n_out;
  p.k_ = k;
  const int64_t panels = (n_out + kPanel - 1) / kPanel;
  p.data_.assign(static_cast<size_t>(panels * k * kPanel), 0.0f);
  for (int64_t o = 0; o < n_out; ++o) {
    float* dst = p.data_.data() + (o / kPanel) * k * kPanel + o % kPanel;
    for (int64_t i = 0; i < k; ++i) dst[i * kPanel] = w[o * k + i];
  }
  return p;
}

Status gemm_packed_f32(const OpContext& ctx, const PackedF32& w, const float* x, int64_t ldx,
                       int64_t n_tokens, const ConvEpilogue& ep, float* y) {
  const int64_t n_out = w.n_out(), k = w.k();
  if (!w.defined() || ldx < k || n_tokens < 0 || (n_tokens > 0 && (x == nullptr || y == nullptr))) {
    return invalid_argument("gemm_packed_f32: {} tokens of stride {} for a [{}, {}] weight",
                            n_tokens, ldx, n_out, k);
  }
  if (n_tokens == 0) return Status();
  if (ctx.impl == Impl::kReference) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t o = 0; o < n_out; ++o) {
        double acc = ep.bias != nullptr ? double(ep.bias[o]) : 0.0;
        for (int64_t i = 0; i < k; ++i) acc += double(x[t * ldx + i]) * double(w.at(o, i));
        if (ep.residual != nullptr) acc += double(ep.residual[t * n_out + o]);
        y[t * n_out + o] = static_cast<float>(activation_ref(acc, ep.act));
      }
    }
    return Status();
  }
  // Work items: runs of tokens (whole tiles) x runs of panels, each about 4 MFLOP, so a
  // thread's activations and panels stay in its L2 and small layers still split.
  const int64_t panels = (n_out + PackedF32::kPanel - 1) / PackedF32::kPanel;
  const int64_t tile = HWY_DYNAMIC_DISPATCH(TokensPerTile)();
  const int64_t pp = std::clamp<int64_t>((int64_t{1} << 16) / std::max<int64_t>(k, 1), 1, panels);
  const int64_t tt = std::max<int64_t>(
      tile, ((int64_t{1} << 21) / (2 * k * pp * PackedF32::kPanel)) / tile * tile);
  const int64_t n_tb = (n_tokens + tt - 1) / tt, n_pb = (panels + pp - 1) / pp;
  const auto run = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t tb = i / n_pb, pb = i % n_pb;
      HWY_DYNAMIC_DISPATCH(Block)
      (w, x, ldx, ep, tb * tt, std::min(n_tokens, (tb + 1) * tt), pb * pp,
       std::min(panels, (pb + 1) * pp), y);
    }
  };
  const int64_t items = n_tb * n_pb;
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && items > 1) {
    ctx.pool->parallel_for(0, items, 1, run);
  } else {
    run(0, items);
  }
  return Status();
}

}  // namespace rinfer::cpu
#endif  // HWY_ONCE
