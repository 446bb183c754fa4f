// get_rows: gathers rows of a table (token embeddings) as f32, dequantizing block formats with
// dequantize_row (bit-exact with ggml). One implementation: it is bound by memory and runs once
// per step.

#include "core/error.h"
#include "ops/cpu/ops.h"

namespace rinfer::cpu {

Status get_rows(const Tensor& table, std::span<const int32_t> ids, float* out) {
  if (!table.defined()) return invalid_argument("get_rows: undefined table");
  if (table.ndim() != 2) {
    return invalid_argument("get_rows: table {} must be 2-D [n_rows, n]", table.to_string());
  }
  if (!table.device().is_cpu()) {
    return invalid_argument("get_rows: table {} is not on the CPU", table.to_string());
  }
  if (table.strides()[1] != 1) {
    return invalid_argument("get_rows: table {} rows must be contiguous", table.to_string());
  }
  const int64_t n_rows = table.dim(0), n = table.dim(1);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= n_rows) {
      return out_of_range("get_rows: id {} at position {} is out of range [0, {}) of table {}",
                          ids[i], i, n_rows, table.to_string());
    }
  }
  if (ids.empty() || n == 0) return ok_status();
  if (out == nullptr) return invalid_argument("get_rows: null output pointer");
  const DTypeTraits& tr = dtype_traits(table.dtype());
  const int64_t row_bytes = table.strides()[0] / tr.block_size * tr.block_bytes;
  const auto* base = static_cast<const uint8_t*>(table.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    float* dst = out + static_cast<int64_t>(i) * n;  // [n]
    RINFER_RETURN_IF_ERROR(
        dequantize_row(table.dtype(), base + ids[i] * row_bytes, dst, n).with_context("get_rows"));
  }
  return ok_status();
}

}  // namespace rinfer::cpu
