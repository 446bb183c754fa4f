// Activation quantizer of the fast matmul: one f32 row to int8 in blocks of 32 with an f32
// scale per block, plus the per-lane scales and the group sums the integer kernels need
// (layout in matmul_internal.h). Rounding: d = amax / 127, q = round-to-nearest-even(x / d)
// computed as x * (1 / d), exactly as the scalar reference does, so both give identical bytes.
// A block with NaN or inf gets zero quants and NaN scales (the result of the matmul is NaN).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/quantize_act.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include <cmath>
#include <cstring>
#include <limits>

#include "ops/cpu/matmul_internal.h"

#ifndef RINFER_OPS_CPU_QUANTIZE_ACT_ONCE
#define RINFER_OPS_CPU_QUANTIZE_ACT_ONCE  // this file is compiled once per SIMD target
namespace rinfer::cpu::internal {
// qs4 of one row from its qs (layout in matmul_internal.h); the padding is zero.
inline void regroup_qs4(const int8_t* qs, int64_t k, int64_t k4, int8_t* qs4) {
  std::memset(qs4, 0, static_cast<size_t>(k4));
  for (int64_t b = 0; b < k / 32; ++b) {
    int8_t* g = qs4 + (b / 4) * 128 + (b % 4) * 16;
    std::memcpy(g, qs + b * 32, 16);
    std::memcpy(g + 64, qs + b * 32 + 16, 16);
  }
}
// Block b of a row holds NaN or inf: it has no int8 form (converting NaN to an integer is
// undefined). Its quants are 0 and its scales NaN, so every dot product that reads it is NaN,
// as the f32 matmul would give, instead of garbage.
inline void non_finite_block(int64_t b, int8_t* qs, float* dexp, float* d32, float* s32,
                             float* s16) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memset(qs + b * 32, 0, 32);
  d32[b] = s32[b] = s16[2 * b] = s16[2 * b + 1] = nan;
  for (int j = 0; j < 8; ++j) dexp[b * 8 + j] = nan;
}
}  // namespace rinfer::cpu::internal
#endif

HWY_BEFORE_NAMESPACE();
namespace rinfer::cpu::internal::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One token row. Works for any vector width up to 16 floats (a group of 16 is 16 / N vectors).
void QuantizeActRow(const float* HWY_RESTRICT x, const QActs& a, int64_t t) {
  const QActsLayout& l = a.layout;
  int8_t* HWY_RESTRICT qs = a.qs + t * l.kp;           // [kp]
  float* HWY_RESTRICT dexp = a.dexp + t * (l.kp / 4);  // [kp / 4]
  float* HWY_RESTRICT d32 = a.d32 + t * l.g32;         // [g32]
  float* HWY_RESTRICT s32 = a.s32 + t * l.g32;         // [g32]
  float* HWY_RESTRICT s16 = a.s16 + t * l.g16;         // [g16]
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const size_t n = hn::Lanes(df);
  const int64_t per16 = static_cast<int64_t>(16 / n);
  const int64_t nb = l.k / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * 32;
    auto vmax = hn::Zero(df);
    auto finite = hn::FirstN(df, n);  // all lanes
    for (size_t i = 0; i < 32; i += n) {
      const auto v = hn::LoadU(df, xb + i);
      vmax = hn::Max(vmax, hn::Abs(v));
      finite = hn::And(finite, hn::IsFinite(v));
    }
    if (!hn::AllTrue(df, finite)) {
      non_finite_block(b, qs, dexp, d32, s32, s16);
      continue;
    }
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const auto vid = hn::Set(df, id);
    int32_t sums[2];
    for (int64_t g = 0; g < 2; ++g) {
      auto vsum = hn::Zero(di);
      for (int64_t j = 0; j < per16; ++j) {
        const int64_t off = g * 16 + j * static_cast<int64_t>(n);
        const auto q = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + off), vid));
        vsum = hn::Add(vsum, q);
        hn::StoreU(hn::DemoteTo(d8, q), d8, qs + b * 32 + off);
      }
      sums[g] = hn::GetLane(hn::SumOfLanes(di, vsum));
    }
    d32[b] = d;
    s32[b] = d * static_cast<float>(sums[0] + sums[1]);
    s16[2 * b] = d * static_cast<float>(sums[0]);
    s16[2 * b + 1] = d * static_cast<float>(sums[1]);
    for (int j = 0; j < 8; ++j) dexp[b * 8 + j] = d;
  }
  // Zero padding up to kp and the padded group counts.
  std::memset(qs + nb * 32, 0, static_cast<size_t>(l.kp - nb * 32));
  std::memset(dexp + nb * 8, 0, static_cast<size_t>(l.kp / 4 - nb * 8) * sizeof(float));
  std::memset(d32 + nb, 0, static_cast<size_t>(l.g32 - nb) * sizeof(float));
  std::memset(s32 + nb, 0, static_cast<size_t>(l.g32 - nb) * sizeof(float));
  std::memset(s16 + 2 * nb, 0, static_cast<size_t>(l.g16 - 2 * nb) * sizeof(float));
  regroup_qs4(qs, l.k, l.k4, a.qs4 + t * l.k4);
}

}  // namespace rinfer::cpu::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu::internal {

HWY_EXPORT(QuantizeActRow);

void quantize_act_row(const float* x, const QActs& a, int64_t t) {
  HWY_DYNAMIC_DISPATCH(QuantizeActRow)(x, a, t);
}

void quantize_act_row_ref(const float* x, const QActs& a, int64_t t) {
  const QActsLayout& l = a.layout;
  int8_t* qs = a.qs + t * l.kp;
  float* dexp = a.dexp + t * (l.kp / 4);
  float* d32 = a.d32 + t * l.g32;
  float* s32 = a.s32 + t * l.g32;
  float* s16 = a.s16 + t * l.g16;
  std::memset(qs, 0, static_cast<size_t>(l.kp));
  std::memset(dexp, 0, static_cast<size_t>(l.kp / 4) * sizeof(float));
  std::memset(d32, 0, static_cast<size_t>(l.g32) * sizeof(float));
  std::memset(s32, 0, static_cast<size_t>(l.g32) * sizeof(float));
  std::memset(s16, 0, static_cast<size_t>(l.g16) * sizeof(float));
  for (int64_t b = 0; b < l.k / 32; ++b) {
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      amax = std::max(amax, std::fabs(x[b * 32 + i]));
      finite = finite && std::isfinite(x[b * 32 + i]);
    }
    if (!finite) {
      non_finite_block(b, qs, dexp, d32, s32, s16);
      continue;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sums[2] = {0, 0};
    for (int i = 0; i < 32; ++i) {
      const auto q = static_cast<int32_t>(std::nearbyint(x[b * 32 + i] * id));
      qs[b * 32 + i] = static_cast<int8_t>(q);
      sums[i / 16] += q;
    }
    d32[b] = d;
    s32[b] = d * static_cast<float>(sums[0] + sums[1]);
    s16[2 * b] = d * static_cast<float>(sums[0]);
    s16[2 * b + 1] = d * static_cast<float>(sums[1]);
    for (int j = 0; j < 8; ++j) dexp[b * 8 + j] = d;
  }
  regroup_qs4(qs, l.k, l.k4, a.qs4 + t * l.k4);
}

size_t qacts_bytes(const QActsLayout& l, int64_t n) {
  auto al = [](int64_t bytes) { return static_cast<size_t>(round_up(bytes, 64)); };
  return al(n * l.kp) + al(n * l.kp) /* dexp: kp/4 floats */ + 2 * al(n * l.g32 * 4) +
         al(n * l.g16 * 4) + al(n * l.k4);
}

QActs qacts_view(const QActsLayout& l, int64_t n, void* mem) {
  auto al = [](int64_t bytes) { return round_up(bytes, 64); };
  auto* p = static_cast<uint8_t*>(mem);
  QActs a;
  a.layout = l;
  a.n = n;
  a.qs = reinterpret_cast<int8_t*>(p);
  p += al(n * l.kp);
  a.dexp = reinterpret_cast<float*>(p);
  p += al(n * l.kp);
  a.d32 = reinterpret_cast<float*>(p);
  p += al(n * l.g32 * 4);
  a.s32 = reinterpret_cast<float*>(p);
  p += al(n * l.g32 * 4);
  a.s16 = reinterpret_cast<float*>(p);
  p += al(n * l.g16 * 4);
  a.qs4 = reinterpret_cast<int8_t*>(p);
  return a;
}

QActs qacts_rows(const QActs& a, int64_t t0, int64_t n) {
  const QActsLayout& l = a.layout;
  QActs r = a;
  r.n = n;
  r.qs = a.qs + t0 * l.kp;
  r.dexp = a.dexp + t0 * (l.kp / 4);
  r.d32 = a.d32 + t0 * l.g32;
  r.s32 = a.s32 + t0 * l.g32;
  r.s16 = a.s16 + t0 * l.g16;
  r.qs4 = a.qs4 + t0 * l.k4;
  return r;
}

}  // namespace rinfer::cpu::internal
#endif  // HWY_ONCE
