// Resizing, cropping and normalization as PIL and torchvision do them, to the bit.
//
// resize_bilinear follows the algorithm of PIL's Resample.c (Image.resize with BILINEAR): a
// separable convolution with a triangle filter whose support widens by the downscale factor
// (antialiasing), coefficients normalized per output pixel and then turned into fixed point with
// 22 fractional bits, sums rounded by a half added up front and clamped to 8 bits. The first
// pass's 8-bit result feeds the second, so the order matters: Pillow 13 runs the vertical pass
// first when the height shrinks by more than twice what the width shrinks by (in pixels), the
// horizontal pass first otherwise (on the rows the vertical pass needs); Pillow 12 and older
// always ran the horizontal pass first. The rule was read from Pillow 13.0.0's compiled
// ImagingResampleInner and checked on ~600 random size pairs; tests/image/image_test.cpp covers
// both orders and the boundary.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "image/image.h"

namespace rinfer {
namespace {

// PIL's PRECISION_BITS: 32 bits less 8 for the result and 2 for overflow.
constexpr int kPrecisionBits = 32 - 8 - 2;

// One output position's taps: input indices [first, first + count) with fixed-point weights.
struct Taps {
  int first = 0;
  int count = 0;
};

struct Filter {
  int max_taps = 0;
  std::vector<Taps> taps;        // [out_size]
  std::vector<int32_t> weights;  // [out_size, max_taps]
};

double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// The taps for resampling in_size samples to out_size (PIL's precompute_coeffs over the whole
// input, then normalize_coeffs_8bpc).
Filter make_filter(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;  // the triangle's support is 1
  const double inv_filter_scale = 1.0 / filter_scale;
  Filter f;
  f.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  f.taps.resize(static_cast<size_t>(out_size));
  f.weights.assign(static_cast<size_t>(out_size) * static_cast<size_t>(f.max_taps), 0);
  std::vector<double> w(static_cast<size_t>(f.max_taps));
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    // Truncation of a value + 0.5, as PIL rounds the window ends.
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    const int count = hi - lo;
    double total = 0.0;
    for (int i = 0; i < count; ++i) {
      w[static_cast<size_t>(i)] = triangle((i + lo - center + 0.5) * inv_filter_scale);
      total += w[static_cast<size_t>(i)];
    }
    int32_t* fixed = &f.weights[static_cast<size_t>(o) * static_cast<size_t>(f.max_taps)];
    for (int i = 0; i < count; ++i) {
      double v = w[static_cast<size_t>(i)];
      if (total != 0.0) v /= total;
      const double s = v * (1 << kPrecisionBits);
      fixed[i] = static_cast<int32_t>(v < 0 ? -0.5 + s : 0.5 + s);
    }
    f.taps[static_cast<size_t>(o)] = {lo, count};
  }
  return f;
}

uint8_t clip8(int64_t acc) {
  const int64_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

// Rows [row0, row0 + rows) of `in` ([in_h, in_w, 3]) resampled horizontally to out_w:
// [rows, out_w, 3].
std::vector<uint8_t> resample_rows(const uint8_t* in, int in_w, int row0, int rows, int out_w,
                                   const Filter& f) {
  std::vector<uint8_t> out(static_cast<size_t>(rows) * static_cast<size_t>(out_w) * 3);
  for (int y = 0; y < rows; ++y) {
    const uint8_t* src = in + static_cast<size_t>(row0 + y) * static_cast<size_t>(in_w) * 3;
    uint8_t* dst = out.data() + static_cast<size_t>(y) * static_cast<size_t>(out_w) * 3;
    for (int x = 0; x < out_w; ++x) {
      const Taps t = f.taps[static_cast<size_t>(x)];
      const int32_t* k = &f.weights[static_cast<size_t>(x) * static_cast<size_t>(f.max_taps)];
      int64_t acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1),
                        1 << (kPrecisionBits - 1)};
      for (int i = 0; i < t.count; ++i) {
        const uint8_t* p = src + static_cast<size_t>(t.first + i) * 3;
        for (int c = 0; c < 3; ++c) acc[c] += int64_t{p[c]} * k[i];
      }
      for (int c = 0; c < 3; ++c)
        dst[static_cast<size_t>(x) * 3 + static_cast<size_t>(c)] = clip8(acc[c]);
    }
  }
  return out;
}

// `in` ([in_h, w, 3]) resampled vertically to out_h rows, with the taps' rows shifted up by
// `row0` (the first row `in` holds): [out_h, w, 3].
std::vector<uint8_t> resample_columns(const uint8_t* in, int w, int row0, int out_h,
                                      const Filter& f) {
  const size_t stride = static_cast<size_t>(w) * 3;
  std::vector<uint8_t> out(static_cast<size_t>(out_h) * stride);
  for (int y = 0; y < out_h; ++y) {
    const Taps t = f.taps[static_cast<size_t>(y)];
    const int32_t* k = &f.weights[static_cast<size_t>(y) * static_cast<size_t>(f.max_taps)];
    uint8_t* dst = out.data() + static_cast<size_t>(y) * stride;
    for (size_t x = 0; x < stride; ++x) {
      int64_t acc = 1 << (kPrecisionBits - 1);
      for (int i = 0; i < t.count; ++i) {
        acc += int64_t{in[static_cast<size_t>(t.first - row0 + i) * stride + x]} * k[i];
      }
      dst[x] = clip8(acc);
    }
  }
  return out;
}

// Python's round() of d / 2 for d >= 0: halves go to the even neighbour.
int round_half_even_half(int d) {
  const int q = d / 2;
  if (d % 2 == 0) return q;
  return q % 2 == 0 ? q : q + 1;
}

}  // namespace

Image resize_bilinear(const Image& in, int out_w, int out_h) {
  if (in.width <= 0 || in.height <= 0 || out_w <= 0 || out_h <= 0) return Image{};
  if (out_w == in.width && out_h == in.height) return in;
  const Filter fv = make_filter(in.height, out_h);
  Image out;
  out.width = out_w;
  out.height = out_h;
  if (out_w == in.width) {
    out.rgb = resample_columns(in.rgb.data(), in.width, 0, out_h, fv);
    return out;
  }
  const Filter fh = make_filter(in.width, out_w);
  if (out_h != in.height && in.height - out_h > 0 &&
      in.height - out_h > 2 * (in.width - out_w)) {  // vertical first
    const std::vector<uint8_t> tmp =
        resample_columns(in.rgb.data(), in.width, 0, out_h, fv);  // [out_h, in.width, 3]
    out.rgb = resample_rows(tmp.data(), in.width, 0, out_h, out_w, fh);
    return out;
  }
  // Horizontal first, on only the rows the vertical pass reads.
  const int row0 = fv.taps.front().first;
  const int row1 = fv.taps.back().first + fv.taps.back().count;
  std::vector<uint8_t> tmp = resample_rows(in.rgb.data(), in.width, row0, row1 - row0, out_w, fh);
  if (out_h == in.height) {
    out.rgb = std::move(tmp);
    return out;
  }
  out.rgb = resample_columns(tmp.data(), out_w, row0, out_h, fv);
  return out;
}

Image resize_shorter(const Image& in, int size) {
  if (in.width <= 0 || in.height <= 0 || size <= 0) return Image{};
  const bool wide = in.width > in.height;  // torchvision: short = w when w <= h
  const int64_t shorter = wide ? in.height : in.width;
  const int64_t longer = wide ? in.width : in.height;
  // int(size * long / short): an exact integer product, one correctly rounded division, then
  // truncation, as Python computes it.
  const int new_long =
      static_cast<int>(static_cast<double>(int64_t{size} * longer) / static_cast<double>(shorter));
  return wide ? resize_bilinear(in, new_long, size) : resize_bilinear(in, size, new_long);
}

Image center_crop(const Image& in, int out_w, int out_h) {
  if (out_w <= 0 || out_h <= 0) return Image{};
  // torchvision pads a too-small side with zeros (floor half before), then crops at
  // round((size - crop) / 2) of the padded image.
  const int pad_left = out_w > in.width ? (out_w - in.width) / 2 : 0;
  const int pad_top = out_h > in.height ? (out_h - in.height) / 2 : 0;
  const int padded_w = std::max(in.width, out_w);
  const int padded_h = std::max(in.height, out_h);
  const int left = round_half_even_half(padded_w - out_w) - pad_left;
  const int top = round_half_even_half(padded_h - out_h) - pad_top;
  Image out;
  out.width = out_w;
  out.height = out_h;
  out.rgb.assign(static_cast<size_t>(out_w) * static_cast<size_t>(out_h) * 3, 0);
  for (int y = 0; y < out_h; ++y) {
    const int sy = y + top;
    if (sy < 0 || sy >= in.height) continue;
    const int x0 = std::max(0, -left);
    const int x1 = std::min(out_w, in.width - left);
    if (x1 <= x0) continue;
    const uint8_t* src = in.rgb.data() + (static_cast<size_t>(sy) * static_cast<size_t>(in.width) +
                                          static_cast<size_t>(x0 + left)) *
                                             3;
    uint8_t* dst =
        out.rgb.data() +
        (static_cast<size_t>(y) * static_cast<size_t>(out_w) + static_cast<size_t>(x0)) * 3;
    std::copy(src, src + static_cast<size_t>(x1 - x0) * 3, dst);
  }
  return out;
}

void normalize_chw(const Image& in, const float mean[3], const float stdev[3], float* out) {
  // torchvision: ToTensor divides by 255 in float32, Normalize subtracts and divides.
  const size_t plane = static_cast<size_t>(in.width) * static_cast<size_t>(in.height);
  for (size_t c = 0; c < 3; ++c) {
    float* dst = out + c * plane;  // [height, width] of channel c
    for (size_t i = 0; i < plane; ++i) {
      const float v = static_cast<float>(in.rgb[i * 3 + c]) / 255.0f;
      dst[i] = (v - mean[c]) / stdev[c];
    }
  }
}

}  // namespace rinfer
