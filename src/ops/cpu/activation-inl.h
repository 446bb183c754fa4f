// The activations on Highway vectors, shared by the SIMD kernels that apply them (the
// convolution epilogue, the packed GEMM). Included once per target (Highway's -inl.h toggle).
#if defined(RINFER_OPS_CPU_ACTIVATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RINFER_OPS_CPU_ACTIVATION_INL_H_
#undef RINFER_OPS_CPU_ACTIVATION_INL_H_
#else
#define RINFER_OPS_CPU_ACTIVATION_INL_H_
#endif

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "ops/cpu/vision_ops.h"

HWY_BEFORE_NAMESPACE();
namespace rinfer::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <Activation A, class D, class V>
HWY_INLINE V ActVec(D d, V z) {
  if constexpr (A == Activation::kRelu) return hn::Max(z, hn::Zero(d));
  if constexpr (A == Activation::kRelu6) return hn::Min(hn::Max(z, hn::Zero(d)), hn::Set(d, 6.0f));
  if constexpr (A == Activation::kSilu) {
    // exp(-z) overflows to inf below z = -88, which gives z / inf = -0: the right limit.
    const auto e = hn::Exp(d, hn::Neg(z));
    return hn::Div(z, hn::Add(hn::Set(d, 1.0f), e));
  }
  return z;
}

// The same with the activation chosen at run time (a predictable branch per vector).
template <class D, class V>
HWY_INLINE V ActVecAny(D d, V z, Activation a) {
  switch (a) {
    case Activation::kRelu: return ActVec<Activation::kRelu>(d, z);
    case Activation::kRelu6: return ActVec<Activation::kRelu6>(d, z);
    case Activation::kSilu: return ActVec<Activation::kSilu>(d, z);
    case Activation::kNone: break;
  }
  return z;
}

}  // namespace rinfer::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // RINFER_OPS_CPU_ACTIVATION_INL_H_
