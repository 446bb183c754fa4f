// How close one set of logits is to a reference: the numbers a precision report or a parity
// check against PyTorch prints. Both inputs are [rows, n_vocab] row-major f32; every sum is
// accumulated in double.
//
//   rel_l2          ||test - ref||_2 / ||ref||_2 over all rows (0 when both are zero,
//                   +inf when only ref is)
//   max_abs         max |test - ref|
//   top1_agreement  fraction of rows whose argmax matches (lowest index on ties)
//   mean_kl/max_kl  KL(p_ref || p_test) of the softmax distributions per row, in nats, mean
//                   and max over rows (log-sum-exp stable; a row's KL is clamped at >= 0 to
//                   absorb rounding)
//
// Non-finite inputs propagate (a NaN logit gives NaN metrics), so they never pass a threshold.
#pragma once

#include <cstdint>

namespace rinfer {

struct LogitComparison {
  int64_t rows = 0;
  double rel_l2 = 0;
  double max_abs = 0;
  double top1_agreement = 0;
  double mean_kl = 0;  // KL(ref || test) of the softmax distributions, nats
  double max_kl = 0;
};

// rows == 0 or n_vocab <= 0 gives an all-zero comparison with rows = 0.
LogitComparison compare_logits(const float* ref, const float* test, int64_t rows, int64_t n_vocab);

}  // namespace rinfer
