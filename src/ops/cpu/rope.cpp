// rope: rotary position embedding, in place on x[n_tokens, n_heads, head_dim].
// Pair i (0 <= i < n_rot / 2) of a head at position p rotates by
//   theta = p * freq_scale * freq_base^(-2i / n_rot),
// evaluated in double (so long contexts keep full precision). Normal mode rotates elements
// (2i, 2i+1), NeoX mode (i, i + n_rot/2); dims >= n_rot pass through.
// Reference: cos / sin and the rotation in double, per (token, head, pair).
// Fast: cos / sin once per (token, pair) shared by all heads (advanced by angle addition in
// double between consecutive positions), rotation in f32 (relative error ~1e-7); tokens spread
// over the pool when there are many.

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/ops.h"

namespace rinfer::cpu {

namespace {

double inv_freq(const RopeParams& p, int64_t i) {
  return std::pow(static_cast<double>(p.freq_base),
                  -2.0 * static_cast<double>(i) / static_cast<double>(p.n_rot));
}

// Element indices of pair i.
inline void pair_index(RopeMode mode, int64_t n_rot, int64_t i, int64_t* a, int64_t* b) {
  if (mode == RopeMode::kNormal) {
    *a = 2 * i;
    *b = 2 * i + 1;
  } else {
    *a = i;
    *b = i + n_rot / 2;
  }
}

void rope_reference(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                    std::span<const int32_t> positions, const RopeParams& p) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const double pos = static_cast<double>(positions[static_cast<size_t>(t)]);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xh = x + (t * n_heads + h) * head_dim;  // [head_dim]
      for (int64_t i = 0; i < p.n_rot / 2; ++i) {
        const double theta = pos * static_cast<double>(p.freq_scale) * inv_freq(p, i);
        const double c = std::cos(theta), s = std::sin(theta);
        int64_t a = 0, b = 0;
        pair_index(p.mode, p.n_rot, i, &a, &b);
        const double x0 = xh[a], x1 = xh[b];
        xh[a] = static_cast<float>(x0 * c - x1 * s);
        xh[b] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

void rope_fast_tokens(float* x, int64_t t0, int64_t t1, int64_t n_heads, int64_t head_dim,
                      std::span<const int32_t> positions, const RopeParams& p,
                      const std::vector<double>& freqs) {
  const int64_t half = p.n_rot / 2;
  std::vector<float> cs(static_cast<size_t>(2 * half));   // [half] cos, then [half] sin
  std::vector<double> cd(static_cast<size_t>(4 * half));  // [half] cos, sin, cos step, sin step
  float* cosv = cs.data();
  float* sinv = cs.data() + half;
  double* c = cd.data();
  double* sn = c + half;
  double* cstep = sn + half;
  double* sstep = cstep + half;
  for (int64_t i = 0; i < half; ++i) {
    cstep[i] = std::cos(freqs[static_cast<size_t>(i)]);
    sstep[i] = std::sin(freqs[static_cast<size_t>(i)]);
  }
  for (int64_t t = t0; t < t1; ++t) {
    const int32_t pos = positions[static_cast<size_t>(t)];
    // Consecutive positions advance the angles by one step (angle addition in double, exact to
    // ~1e-15 over a block); anything else, and every 64 tokens, recomputes them.
    if (t > t0 && pos == positions[static_cast<size_t>(t - 1)] + 1 && (t - t0) % 64 != 0) {
      for (int64_t i = 0; i < half; ++i) {
        const double cn = c[i] * cstep[i] - sn[i] * sstep[i];
        sn[i] = sn[i] * cstep[i] + c[i] * sstep[i];
        c[i] = cn;
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const double theta = static_cast<double>(pos) * freqs[static_cast<size_t>(i)];
        c[i] = std::cos(theta);
        sn[i] = std::sin(theta);
      }
    }
    for (int64_t i = 0; i < half; ++i) {
      cosv[i] = static_cast<float>(c[i]);
      sinv[i] = static_cast<float>(sn[i]);
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xh = x + (t * n_heads + h) * head_dim;  // [head_dim]
      if (p.mode == RopeMode::kNeox) {
        float* xa = xh;
        float* xb = xh + half;
        for (int64_t i = 0; i < half; ++i) {  // vectorized by the compiler
          const float x0 = xa[i], x1 = xb[i];
          xa[i] = x0 * cosv[i] - x1 * sinv[i];
          xb[i] = x0 * sinv[i] + x1 * cosv[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = xh[2 * i], x1 = xh[2 * i + 1];
          xh[2 * i] = x0 * cosv[i] - x1 * sinv[i];
          xh[2 * i + 1] = x0 * sinv[i] + x1 * cosv[i];
        }
      }
    }
  }
}

}  // namespace

void rope(const OpContext& ctx, float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
          std::span<const int32_t> positions, const RopeParams& params) {
  // Out-of-contract arguments are clamped rather than read out of bounds: at most
  // positions.size() tokens, an even n_rot of at most head_dim.
  n_tokens = std::min(n_tokens, static_cast<int64_t>(positions.size()));
  RopeParams p = params;
  p.n_rot = std::min(p.n_rot, head_dim) / 2 * 2;
  if (n_tokens <= 0 || n_heads <= 0 || p.n_rot <= 0) return;
  if (ctx.impl == Impl::kReference) {
    rope_reference(x, n_tokens, n_heads, head_dim, positions, p);
    return;
  }
  std::vector<double> freqs(static_cast<size_t>(p.n_rot / 2));  // [n_rot / 2]
  for (int64_t i = 0; i < p.n_rot / 2; ++i) {
    freqs[static_cast<size_t>(i)] = static_cast<double>(p.freq_scale) * inv_freq(p, i);
  }
  const auto fn = [&](int64_t t0, int64_t t1) {
    rope_fast_tokens(x, t0, t1, n_heads, head_dim, positions, p, freqs);
  };
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && n_tokens >= 64) {
    ctx.pool->parallel_for(0, n_tokens, 8, fn);
  } else {
    fn(0, n_tokens);
  }
}

}  // namespace rinfer::cpu
