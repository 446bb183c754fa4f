// The fast depthwise convolution (groups == c_in == c_out, NHWC): each output pixel's channels
// are f32 vectors, accumulated over the kernel taps that fall inside the image with the taps'
// weights laid out [kh * kw, c] (transposed from OHWI once per call); the epilogue runs on each
// output row while it is in L1. Output rows (image, y) are split over the pool.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/depthwise_conv2d.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

#include <algorithm>
#include <vector>

#include "ops/cpu/conv_internal.h"

HWY_BEFORE_NAMESPACE();
namespace rinfer::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Output row oy of image b: y[b, oy, :, :] (no epilogue but the bias).
void DepthwiseRow(const Conv2dShape& s, const float* x, const float* wt, const float* bias,
                  int64_t b, int64_t oy, float* yrow) {
  const hn::ScalableTag<float> df;
  const auto nl = static_cast<int64_t>(hn::Lanes(df));
  const int64_t c = s.c_in, ow = s.out_w();
  const int64_t y0 = oy * s.stride_h - s.pad_top;
  const int64_t ky0 = std::max<int64_t>(0, -y0), ky1 = std::min<int64_t>(s.kh, s.h - y0);
  for (int64_t ox = 0; ox < ow; ++ox) {
    const int64_t x0 = ox * s.stride_w - s.pad_left;
    const int64_t kx0 = std::max<int64_t>(0, -x0), kx1 = std::min<int64_t>(s.kw, s.w - x0);
    float* out = yrow + ox * c;  // [c]
    int64_t ch = 0;
    for (; ch + nl <= c; ch += nl) {
      auto acc = bias != nullptr ? hn::LoadU(df, bias + ch) : hn::Zero(df);
      for (int64_t ky = ky0; ky < ky1; ++ky) {
        const float* xr = x + ((b * s.h + y0 + ky) * s.w + x0) * c + ch;
        const float* wr = wt + ky * s.kw * c + ch;
        for (int64_t kx = kx0; kx < kx1; ++kx) {
          acc = hn::MulAdd(hn::LoadU(df, xr + kx * c), hn::LoadU(df, wr + kx * c), acc);
        }
      }
      hn::StoreU(acc, df, out + ch);
    }
    for (; ch < c; ++ch) {  // the tail channels, scalar in the same order
      float acc = bias != nullptr ? bias[ch] : 0.0f;
      for (int64_t ky = ky0; ky < ky1; ++ky) {
        const float* xr = x + ((b * s.h + y0 + ky) * s.w + x0) * c + ch;
        const float* wr = wt + ky * s.kw * c + ch;
        for (int64_t kx = kx0; kx < kx1; ++kx) acc = std::fma(xr[kx * c], wr[kx * c], acc);
      }
      out[ch] = acc;
    }
  }
}

}  // namespace rinfer::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rinfer::cpu {

HWY_EXPORT(DepthwiseRow);

void depthwise_conv2d_fast(const OpContext& ctx, const Conv2dShape& s, const float* x,
                           const float* w, const ConvEpilogue& ep, float* y) {
  const int64_t c = s.c_in, taps = s.kh * s.kw;
  std::vector<float> wt(static_cast<size_t>(taps * c));  // [kh * kw, c]
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t t = 0; t < taps; ++t) wt[t * c + ch] = w[ch * taps + t];
  }
  const int64_t oh = s.out_h(), ow = s.out_w();
  const auto fn = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / oh, oy = r % oh;
      float* yrow = y + r * ow * c;  // [ow, c]
      HWY_DYNAMIC_DISPATCH(DepthwiseRow)(s, x, wt.data(), ep.bias, b, oy, yrow);
      conv_epilogue_rows(yrow, nullptr, ep.residual != nullptr ? ep.residual + r * ow * c : nullptr,
                         ow, c, ep.act);
    }
  };
  const int64_t rows = s.n * oh;
  if (ctx.pool != nullptr && ctx.pool->size() > 1 && rows * ow * c * taps >= (int64_t{1} << 15)) {
    ctx.pool->parallel_for(0, rows, 1, fn);
  } else {
    fn(0, rows);
  }
}

}  // namespace rinfer::cpu
#endif  // HWY_ONCE
