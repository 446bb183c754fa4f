// conv2d: NHWC convolution with OHWI weights and a fused epilogue (vision_ops.h). The reference
// is direct loops in double; the fast path maps ungrouped convolutions onto the matmul (pixel rows
// x weight rows), through im2col in chunks of output rows when the kernel is not 1x1, and hands
// depthwise ones to depthwise_conv2d.cpp.
#include <algorithm>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "ops/cpu/conv_internal.h"
#include "ops/cpu/gemm_packed_f32.h"

namespace rinfer::cpu {
namespace {

// Rows of im2col per chunk: about 256 KiB of patches, so a chunk's patches, its output and the
// epilogue stay in the L2.
int64_t chunk_rows(int64_t k) { return std::clamp<int64_t>((int64_t{64} << 10) / k, 16, 2048); }

void conv_reference(const Conv2dShape& s, const float* x, const float* w, const ConvEpilogue& ep,
                    float* y) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  const int64_t cin_g = s.c_in / s.groups, cout_g = s.c_out / s.groups;
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t orow = (b * oh + oy) * ow + ox;
        for (int64_t co = 0; co < s.c_out; ++co) {
          const int64_t g = co / cout_g;
          double acc = ep.bias != nullptr ? double(ep.bias[co]) : 0.0;
          for (int64_t ky = 0; ky < s.kh; ++ky) {
            const int64_t iy = oy * s.stride_h - s.pad_top + ky;
            if (iy < 0 || iy >= s.h) continue;
            for (int64_t kx = 0; kx < s.kw; ++kx) {
              const int64_t ix = ox * s.stride_w - s.pad_left + kx;
              if (ix < 0 || ix >= s.w) continue;
              const float* xp = x + ((b * s.h + iy) * s.w + ix) * s.c_in + g * cin_g;
              const float* wp = w + ((co * s.kh + ky) * s.kw + kx) * cin_g;
              for (int64_t ci = 0; ci < cin_g; ++ci) acc += double(xp[ci]) * double(wp[ci]);
            }
          }
          if (ep.residual != nullptr) acc += double(ep.residual[orow * s.c_out + co]);
          y[orow * s.c_out + co] = static_cast<float>(activation_ref(acc, ep.act));
        }
      }
    }
  }
}

// Patches of output rows [r0, r1) (over all images): patch[r - r0] = the kh x kw x c_in inputs
// that output pixel r sees, zero outside the image. [r1 - r0, kh * kw * c_in]
void im2col(const Conv2dShape& s, const float* x, int64_t r0, int64_t r1, float* patch) {
  const int64_t oh = s.out_h(), ow = s.out_w();
  const int64_t k = s.kh * s.kw * s.c_in;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t b = r / (oh * ow), oy = (r / ow) % oh, ox = r % ow;
    float* dst = patch + (r - r0) * k;
    for (int64_t ky = 0; ky < s.kh; ++ky) {
      const int64_t iy = oy * s.stride_h - s.pad_top + ky;
      for (int64_t kx = 0; kx < s.kw; ++kx) {
        const int64_t ix = ox * s.stride_w - s.pad_left + kx;
        float* d = dst + (ky * s.kw + kx) * s.c_in;
        if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) {
          std::fill(d, d + s.c_in, 0.0f);
        } else {
          const float* src = x + ((b * s.h + iy) * s.w + ix) * s.c_in;
          std::copy(src, src + s.c_in, d);
        }
      }
    }
  }
}

// With packed weights: one GEMM over every pixel row (1x1), or im2col chunks of rows each
// through the GEMM (the GEMM splits each call over the pool; the epilogue is inside it).
Status conv_packed(const OpContext& ctx, const Conv2dShape& s, const float* x, const PackedF32& pw,
                   const ConvEpilogue& ep, float* y, bool direct) {
  const int64_t rows = s.n * s.out_h() * s.out_w();
  const int64_t k = s.kh * s.kw * s.c_in;
  if (pw.n_out() != s.c_out || pw.k() != k) {
    return invalid_argument("conv2d: packed weights [{}, {}] for a [{}, {}] convolution",
                            pw.n_out(), pw.k(), s.c_out, k);
  }
  if (direct) return gemm_packed_f32(ctx, pw, x, s.c_in, rows, ep, y);
  // Chunks of about 1 MiB of patches.
  const int64_t chunk = std::clamp<int64_t>((int64_t{256} << 10) / k, 64, 8192);
  std::vector<float> patch(static_cast<size_t>(std::min(chunk, rows) * k));  // [chunk, k]
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t r1 = std::min(rows, r0 + chunk);
    im2col(s, x, r0, r1, patch.data());
    ConvEpilogue e = ep;
    if (e.residual != nullptr) e.residual += r0 * s.c_out;
    RINFER_RETURN_IF_ERROR(gemm_packed_f32(ctx, pw, patch.data(), k, r1 - r0, e, y + r0 * s.c_out));
  }
  return Status();
}

Status conv_gemm(const OpContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                 const ConvEpilogue& ep, float* y, const PackedF32* packed) {
  const int64_t rows = s.n * s.out_h() * s.out_w();
  const int64_t k = s.kh * s.kw * s.c_in;
  const bool direct = s.kh == 1 && s.kw == 1 && s.stride_h == 1 && s.stride_w == 1 &&
                      s.pad_top == 0 && s.pad_left == 0 && s.pad_bottom == 0 && s.pad_right == 0;
  if (packed != nullptr) return conv_packed(ctx, s, x, *packed, ep, y, direct);
  RINFER_ASSIGN_OR_RETURN(Tensor wt,
                          Tensor::wrap(w, static_cast<uint64_t>(s.c_out * k) * sizeof(float),
                                       Dims{s.c_out, k}, DType::kF32, Device::cpu(), nullptr));
  const int64_t chunk = chunk_rows(k);
  const int64_t n_chunks = (rows + chunk - 1) / chunk;
  // Chunks [c0, c1) on one thread each when there are enough to share; else one chunk at a time
  // with the matmul itself over the pool.
  const int threads = ctx.pool != nullptr ? ctx.pool->size() : 1;
  const bool by_chunk = threads > 1 && n_chunks >= 2 * threads;
  OpContext inner = ctx;
  if (by_chunk) inner.pool = nullptr;
  Status first_error;
  std::mutex mu;
  const auto run = [&](int64_t c0, int64_t c1) {
    std::vector<float> patch(direct ? 0 : static_cast<size_t>(chunk * k));  // [chunk, k]
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r0 = c * chunk, r1 = std::min(rows, r0 + chunk);
      const float* a = x + r0 * s.c_in;
      if (!direct) {
        im2col(s, x, r0, r1, patch.data());
        a = patch.data();
      }
      float* yc = y + r0 * s.c_out;  // [r1 - r0, c_out]
      Status st = matmul(inner, wt, a, r1 - r0, yc);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = std::move(st);
        return;
      }
      conv_epilogue_rows(yc, ep.bias, ep.residual != nullptr ? ep.residual + r0 * s.c_out : nullptr,
                         r1 - r0, s.c_out, ep.act);
    }
  };
  if (by_chunk) {
    ctx.pool->parallel_for(0, n_chunks, 1, run);
  } else {
    run(0, n_chunks);
  }
  return first_error;
}

}  // namespace

Status conv2d(const OpContext& ctx, const Conv2dShape& s, const float* x, const float* w,
              const ConvEpilogue& ep, float* y, const PackedF32* packed) {
  RINFER_RETURN_IF_ERROR(check_conv2d(s));
  if (x == nullptr || w == nullptr || y == nullptr) {
    return invalid_argument("conv2d: null input, weight or output");
  }
  if (ctx.impl == Impl::kReference || (s.groups > 1 && !s.depthwise())) {
    conv_reference(s, x, w, ep, y);
    return Status();
  }
  if (s.depthwise()) {
    depthwise_conv2d_fast(ctx, s, x, w, ep, y);
    return Status();
  }
  return conv_gemm(ctx, s, x, w, ep, y, packed);
}

}  // namespace rinfer::cpu
