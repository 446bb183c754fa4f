// The shared op parameters' helpers (op_params.h).
#include "ops/params/op_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "core/error.h"

namespace rinfer {

std::string_view activation_name(Activation a) {
  switch (a) {
    case Activation::kNone: return "none";
    case Activation::kRelu: return "relu";
    case Activation::kRelu6: return "relu6";
    case Activation::kSilu: return "silu";
  }
  return "?";
}

void set_padding(Conv2dShape& s, int64_t p) {
  s.pad_top = s.pad_left = s.pad_bottom = s.pad_right = p;
}

void set_same_padding(Conv2dShape& s) {
  const auto axis = [](int64_t in, int64_t k, int64_t stride, int64_t& lo, int64_t& hi) {
    const int64_t out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>((out - 1) * stride + k - in, 0);
    lo = total / 2;
    hi = total - lo;
  };
  axis(s.h, s.kh, s.stride_h, s.pad_top, s.pad_bottom);
  axis(s.w, s.kw, s.stride_w, s.pad_left, s.pad_right);
}

Status check_conv2d(const Conv2dShape& s) {
  const auto bad = [](const std::string& what) { return invalid_argument("conv2d: {}", what); };
  if (s.n < 1 || s.h < 1 || s.w < 1 || s.c_in < 1 || s.c_out < 1) {
    return bad(fmt::format("sizes must be >= 1 (n {}, h {}, w {}, c_in {}, c_out {})", s.n, s.h,
                           s.w, s.c_in, s.c_out));
  }
  if (s.kh < 1 || s.kw < 1 || s.stride_h < 1 || s.stride_w < 1) {
    return bad(fmt::format("kernel {}x{} and stride {}x{} must be >= 1", s.kh, s.kw, s.stride_h,
                           s.stride_w));
  }
  if (s.groups < 1 || s.c_in % s.groups != 0 || s.c_out % s.groups != 0) {
    return bad(
        fmt::format("groups {} must divide c_in {} and c_out {}", s.groups, s.c_in, s.c_out));
  }
  for (const auto& [name, p, k] :
       {std::tuple{"pad_top", s.pad_top, s.kh}, std::tuple{"pad_bottom", s.pad_bottom, s.kh},
        std::tuple{"pad_left", s.pad_left, s.kw}, std::tuple{"pad_right", s.pad_right, s.kw}}) {
    if (p < 0 || p >= k) return bad(fmt::format("{} {} must be in [0, kernel {})", name, p, k));
  }
  if (s.h + s.pad_top + s.pad_bottom < s.kh || s.w + s.pad_left + s.pad_right < s.kw) {
    return bad(fmt::format("the {}x{} kernel is larger than the padded {}x{} input", s.kh, s.kw,
                           s.h + s.pad_top + s.pad_bottom, s.w + s.pad_left + s.pad_right));
  }
  return Status();
}

}  // namespace rinfer
