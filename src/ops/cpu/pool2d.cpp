// Pooling over NHWC images: the global average (the classifiers' head) and max pooling of k x k
// windows (ResNet's stem). Both are exact in the reference (double sums, exact max); the fast
// global average sums in f32 over the pixels per channel, which the compiler vectorizes across
// channels.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/cpu/vision_ops.h"

namespace rinfer::cpu {

void global_avg_pool(const OpContext& ctx, const float* x, int64_t n, int64_t h, int64_t w,
                     int64_t c, float* out) {
  const int64_t hw = h * w;
  if (n <= 0 || c <= 0 || hw <= 0) return;
  for (int64_t b = 0; b < n; ++b) {
    const float* xb = x + b * hw * c;  // [hw, c]
    float* ob = out + b * c;           // [c]
    if (ctx.impl == Impl::kReference) {
      for (int64_t i = 0; i < c; ++i) {
        double acc = 0.0;
        for (int64_t p = 0; p < hw; ++p) acc += double(xb[p * c + i]);
        ob[i] = static_cast<float>(acc / double(hw));
      }
      continue;
    }
    std::vector<float> acc(static_cast<size_t>(c), 0.0f);
    for (int64_t p = 0; p < hw; ++p) {
      const float* xp = xb + p * c;
      for (int64_t i = 0; i < c; ++i) acc[i] += xp[i];
    }
    const float inv = 1.0f / static_cast<float>(hw);
    for (int64_t i = 0; i < c; ++i) ob[i] = acc[i] * inv;
  }
}

Status max_pool2d(const OpContext& ctx, const float* x, int64_t n, int64_t h, int64_t w, int64_t c,
                  int64_t k, int64_t stride, int64_t pad, float* out) {
  if (k < 1 || stride < 1 || pad < 0 || pad >= k) {
    return invalid_argument(
        "max_pool2d: kernel {} stride {} pad {} (need k, stride >= 1, 0 <= "
        "pad < k)",
        k, stride, pad);
  }
  const int64_t oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
  if (n < 1 || c < 1 || h + 2 * pad < k || w + 2 * pad < k || oh < 1 || ow < 1) {
    return invalid_argument("max_pool2d: a {}x{} window does not fit a {}x{}x{} input (pad {})", k,
                            k, h, w, c, pad);
  }
  const auto fn = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {  // output row (image, y)
      const int64_t b = r / oh, oy = r % oh;
      const int64_t y0 = std::max<int64_t>(0, oy * stride - pad);
      const int64_t y1 = std::min<int64_t>(h, oy * stride - pad + k);
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t x0 = std::max<int64_t>(0, ox * stride - pad);
        const int64_t x1 = std::min<int64_t>(w, ox * stride - pad + k);
        float* o = out + ((b * oh + oy) * ow + ox) * c;
        std::fill(o, o + c, -std::numeric_limits<float>::infinity());
        for (int64_t iy = y0; iy < y1; ++iy) {
          for (int64_t ix = x0; ix < x1; ++ix) {
            const float* xp = x + ((b * h + iy) * w + ix) * c;
            for (int64_t i = 0; i < c; ++i) o[i] = std::max(o[i], xp[i]);
          }
        }
      }
    }
  };
  if (ctx.impl == Impl::kFast && ctx.pool != nullptr && ctx.pool->size() > 1 &&
      n * oh * ow * c >= (int64_t{1} << 15)) {
    ctx.pool->parallel_for(0, n * oh, 1, fn);
  } else {
    fn(0, n * oh);
  }
  return Status();
}

}  // namespace rinfer::cpu
