// The Status API of vision_ops.h: argument checks, then the launchers of vision_launch.h.
#include "ops/cuda/vision_ops.h"

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/error.h"
#include "ops/cuda/vision_launch.h"

namespace rinfer::cuda {
namespace {

Status launched(cudaError_t err, const char* op) {
  if (err == cudaSuccess) return ok_status();
  return cuda_status(err, op);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool fits_int(int64_t v) { return v >= 0 && v <= INT32_MAX; }

Status check_16bit(DType dt, const char* op) {
  if (dt == DType::kBF16 || dt == DType::kF16) return ok_status();
  return invalid_argument("{}: elements {} (bf16 or f16)", op, dtype_name(dt));
}

}  // namespace

Status depthwise_conv2d(DType dt, const Conv2dShape& s, const uint16_t* x, const uint16_t* w,
                        const float* bias, Activation act, uint16_t* y, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_16bit(dt, "depthwise_conv2d"));
  RINFER_RETURN_IF_ERROR(check_conv2d(s));
  if (!s.depthwise() || s.kh != s.kw || s.stride_h != s.stride_w) {
    return invalid_argument(
        "depthwise_conv2d: groups {} of c_in {} and c_out {}, kernel {}x{}, stride {}x{} (a "
        "depthwise convolution with a square kernel and one stride)",
        s.groups, s.c_in, s.c_out, s.kh, s.kw, s.stride_h, s.stride_w);
  }
  if (x == nullptr || w == nullptr || y == nullptr) {
    return invalid_argument("depthwise_conv2d: null x, w or y");
  }
  if (s.c_in % 8 == 0 && !(aligned16(x) && aligned16(w) && aligned16(y))) {
    return invalid_argument("depthwise_conv2d: x, w and y must be 16-byte aligned");
  }
  const int64_t oh = s.out_h(), ow = s.out_w();
  if (!fits_int(s.n * s.h * s.w) || !fits_int(s.n * oh * ow)) {
    return invalid_argument("depthwise_conv2d: {} images of {}x{} are too many pixels", s.n, s.h,
                            s.w);
  }
  const kern::DwConvArgs a{
      static_cast<int>(s.n),        static_cast<int>(s.h),        static_cast<int>(s.w),
      static_cast<int>(s.c_in),     static_cast<int>(oh),         static_cast<int>(ow),
      static_cast<int>(s.kh),       static_cast<int>(s.stride_h), static_cast<int>(s.pad_top),
      static_cast<int>(s.pad_left), static_cast<int>(act),        dt == DType::kF16};
  return launched(kern::launch_depthwise_conv(a, x, w, bias, y, stream), "depthwise_conv2d");
}

Status max_pool2d(DType dt, const uint16_t* x, int64_t n, int64_t h, int64_t w, int64_t c,
                  int64_t k, int64_t stride, int64_t pad, uint16_t* y, cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_16bit(dt, "max_pool2d"));
  if (n < 1 || h < 1 || w < 1 || c < 1 || k < 1 || stride < 1 || pad < 0 || pad >= k) {
    return invalid_argument(
        "max_pool2d: {} images of {}x{}x{}, window {}, stride {}, padding {} (sizes >= 1, "
        "padding < window)",
        n, h, w, c, k, stride, pad);
  }
  const int64_t oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
  if (oh < 1 || ow < 1) return invalid_argument("max_pool2d: empty output {}x{}", oh, ow);
  if (!fits_int(n * h * w) || !fits_int(c) || x == nullptr || y == nullptr) {
    return invalid_argument("max_pool2d: null pointer or too many pixels");
  }
  const kern::PoolArgs a{static_cast<int>(n), static_cast<int>(h),      static_cast<int>(w),
                         static_cast<int>(c), static_cast<int>(oh),     static_cast<int>(ow),
                         static_cast<int>(k), static_cast<int>(stride), static_cast<int>(pad),
                         dt == DType::kF16};
  return launched(kern::launch_max_pool(a, x, y, stream), "max_pool2d");
}

Status global_avg_pool(DType dt, const uint16_t* x, int64_t n, int64_t hw, int64_t c, uint16_t* out,
                       cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_16bit(dt, "global_avg_pool"));
  if (n < 1 || hw < 1 || c < 1 || !fits_int(n) || !fits_int(hw) || !fits_int(c) || x == nullptr ||
      out == nullptr) {
    return invalid_argument("global_avg_pool: {} images of {} pixels of {} channels", n, hw, c);
  }
  return launched(
      kern::launch_global_avg_pool(dt == DType::kF16, static_cast<int>(n), static_cast<int>(hw),
                                   static_cast<int>(c), x, out, stream),
      "global_avg_pool");
}

Status channel_epilogue(DType dt, void* y, int64_t rows, int64_t c, const float* scale,
                        const float* shift, const void* residual, Activation act,
                        cudaStream_t stream) {
  if (dt != DType::kF32) RINFER_RETURN_IF_ERROR(check_16bit(dt, "channel_epilogue"));
  if (rows < 0 || c < 1 || !fits_int(c) || y == nullptr || residual == y) {
    return invalid_argument("channel_epilogue: {} rows of {} (residual must not alias y)", rows, c);
  }
  if (rows == 0) return ok_status();
  return launched(kern::launch_channel_epilogue(dt == DType::kF32    ? 0
                                                : dt == DType::kBF16 ? 1
                                                                     : 2,
                                                y, rows, static_cast<int>(c), scale, shift,
                                                residual, static_cast<int>(act), stream),
                  "channel_epilogue");
}

Status pack_image(DType dt, const float* x, int64_t pixels, int64_t c_out, uint16_t* y,
                  cudaStream_t stream) {
  RINFER_RETURN_IF_ERROR(check_16bit(dt, "pack_image"));
  if (pixels < 0 || c_out < 3 || c_out > 64 || x == nullptr || y == nullptr) {
    return invalid_argument("pack_image: {} pixels to {} channels (3 to 64)", pixels, c_out);
  }
  if (pixels == 0) return ok_status();
  return launched(
      kern::launch_pack_image(dt == DType::kF16, x, pixels, static_cast<int>(c_out), y, stream),
      "pack_image");
}

}  // namespace rinfer::cuda
