#include "core/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/quant_blocks.h"
#include "core/thread_pool.h"

namespace rinfer {

namespace {

void quantize_f16(const float* x, uint8_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_f16(x[i]);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

void quantize_bf16(const float* x, uint8_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(x[i]);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

// ggml's quantize_row_q8_0_ref.
void quantize_q8_0(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 blk{};
    blk.d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) blk.qs[j] = static_cast<int8_t>(std::roundf(xb[j] * id));
    std::memcpy(y + b * sizeof(BlockQ8_0), &blk, sizeof(blk));
  }
}

// ggml's quantize_row_q4_0_ref.
void quantize_q4_0(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float* xb = x + b * kQK4_0;
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 blk{};
    blk.d = f32_to_f16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const float x0 = xb[j] * id;
      const float x1 = xb[kQK4_0 / 2 + j] * id;
      const int q0 = std::min(15, static_cast<int>(x0 + 8.5f));
      const int q1 = std::min(15, static_cast<int>(x1 + 8.5f));
      blk.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    std::memcpy(y + b * sizeof(BlockQ4_0), &blk, sizeof(blk));
  }
}

// ggml's quantize_row_q4_1_ref.
void quantize_q4_1(const float* x, uint8_t* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK4_1; ++b) {
    const float* xb = x + b * kQK4_1;
    float min = std::numeric_limits<float>::max();
    float max = -std::numeric_limits<float>::max();
    for (int j = 0; j < kQK4_1; ++j) {
      if (xb[j] < min) min = xb[j];
      if (xb[j] > max) max = xb[j];
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1 blk{};
    blk.d = f32_to_f16(d);
    blk.m = f32_to_f16(min);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const float x0 = (xb[j] - min) * id;
      const float x1 = (xb[kQK4_1 / 2 + j] - min) * id;
      const int q0 = std::min(15, static_cast<int>(x0 + 0.5f));
      const int q1 = std::min(15, static_cast<int>(x1 + 0.5f));
      blk.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    std::memcpy(y + b * sizeof(BlockQ4_1), &blk, sizeof(blk));
  }
}

using RowFn = void (*)(const float*, uint8_t*, int64_t);

RowFn row_fn(DType t) {
  switch (t) {
    case DType::kF16: return quantize_f16;
    case DType::kBF16: return quantize_bf16;
    case DType::kQ8_0: return quantize_q8_0;
    case DType::kQ4_0: return quantize_q4_0;
    case DType::kQ4_1: return quantize_q4_1;
    default: return nullptr;
  }
}

Status check_row(DType t, int64_t n) {
  if (row_fn(t) == nullptr) {
    return invalid_argument("quantize: cannot write {} (supported: f16, bf16, q8_0, q4_0, q4_1)",
                            dtype_name(t));
  }
  const int64_t bs = dtype_traits(t).block_size;
  if (n < 0 || n % bs != 0) {
    return invalid_argument(
        "quantize to {}: a row of {} values is not a multiple of the block size {}", dtype_name(t),
        n, bs);
  }
  return ok_status();
}

}  // namespace

bool can_quantize_to(DType t) { return row_fn(t) != nullptr; }

Status quantize_row(DType t, const float* src, void* dst, int64_t n) {
  RINFER_RETURN_IF_ERROR(check_row(t, n));
  row_fn(t)(src, static_cast<uint8_t*>(dst), n);
  return ok_status();
}

Status quantize_rows(DType t, const float* src, void* dst, int64_t rows, int64_t n_per_row,
                     ThreadPool* pool) {
  RINFER_RETURN_IF_ERROR(check_row(t, n_per_row));
  if (rows < 0) return invalid_argument("quantize to {}: {} rows", dtype_name(t), rows);
  auto row_bytes = dtype_row_bytes(t, static_cast<uint64_t>(n_per_row));
  if (!row_bytes.ok()) return row_bytes.status();
  const RowFn fn = row_fn(t);
  auto* out = static_cast<uint8_t*>(dst);
  const uint64_t rb = *row_bytes;
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      fn(src + r * n_per_row, out + static_cast<uint64_t>(r) * rb, n_per_row);
    }
  };
  if (pool != nullptr && pool->size() > 1 && rows > 1) {
    const int64_t grain =
        std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, n_per_row));
    pool->parallel_for(0, rows, grain, body);
  } else {
    body(0, rows);
  }
  return ok_status();
}

Result<Tensor> convert_weight(const Tensor& w, DType to, ThreadPool* pool) {
  if (!w.defined()) return invalid_argument("convert_weight: undefined tensor");
  if (!w.device().is_cpu()) {
    return invalid_argument("convert_weight: {} is not on the CPU", w.to_string());
  }
  if (w.ndim() < 1) return invalid_argument("convert_weight: {} has no dims", w.to_string());
  const int64_t n = w.dim(-1);
  RINFER_RETURN_IF_ERROR(check_row(to, n).with_context("convert_weight " + w.to_string()));
  auto f = w.to_f32();
  if (!f.ok()) return f.status().with_context("convert_weight " + w.to_string());
  auto out = Tensor::empty(w.shape(), to);
  if (!out.ok()) return out.status();
  const int64_t rows = n > 0 ? w.numel() / n : 0;
  RINFER_RETURN_IF_ERROR(
      quantize_rows(to, f->data_as<float>(), out->mutable_data(), rows, n, pool));
  return std::move(out).value();
}

}  // namespace rinfer
