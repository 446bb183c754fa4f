// matmul: y[n_tokens, n_out] = x[n_tokens, n_in] * W^T. The scalar reference, and the fast
// driver that picks a kernel, splits the output rows over the thread pool and owns the
// per-thread scratch buffers. Kernels live in matmul_hwy.cpp (tiles), matmul_unpack.cpp
// (weight unpacking), quant_dot_direct.cpp (matrix-vector straight from GGUF blocks) and
// quantize_act.cpp (activation quantization).

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "ops/cpu/matmul_internal.h"
#include "ops/cpu/ops.h"

namespace rinfer::cpu {

// W8A8 over int8 matrices with row scales sharing x (matmul_i8.cpp): x quantized once, the rows
// of every matrix split over the pool together; arguments checked by the caller.
Status matmul_i8_fast(const OpContext& ctx, std::span<const Tensor* const> ws,
                      std::span<const Tensor* const> scales, const float* x, int64_t n_tokens,
                      std::span<float* const> ys);

namespace {

using internal::QActs;
using internal::QActsLayout;
using internal::round_up;
using internal::WTile;

thread_local internal::Scratch t_acts;  // activations of the call (caller thread)
thread_local internal::Scratch t_tile;  // the weight tile of the current row chunk (each thread)

Status check_matmul_args(const Tensor& w, const float* x, int64_t n_tokens, const float* y) {
  if (!w.defined()) return invalid_argument("matmul: undefined weight tensor");
  if (w.ndim() != 2) {
    return invalid_argument("matmul: weight {} must be 2-D [n_out, n_in]", w.to_string());
  }
  if (!w.device().is_cpu())
    return invalid_argument("matmul: weight {} is not on the CPU", w.to_string());
  if (w.strides()[1] != 1) {
    return invalid_argument("matmul: weight {} rows must be contiguous", w.to_string());
  }
  if (n_tokens < 0) return invalid_argument("matmul: negative n_tokens {}", n_tokens);
  if (n_tokens > 0 && w.dim(0) > 0 && w.dim(1) > 0 && (x == nullptr || y == nullptr)) {
    return invalid_argument("matmul: null {} pointer", x == nullptr ? "x" : "y");
  }
  return ok_status();
}

// row_scale: [n_out] contiguous f32 CPU values beside W8A8 panels (pack_w8a8) of n_out rows.
Status check_row_scale(const Tensor& w, const Tensor* scale) {
  if (w.dtype() != DType::kU8 || w.dim(1) % internal::kW8A8Panel != 0) {
    return invalid_argument(
        "matmul: row scales go with W8A8 weights (pack_w8a8: u8 panels of 16 rows), not {}",
        w.to_string());
  }
  if (scale == nullptr || !scale->defined()) {
    return invalid_argument("matmul: W8A8 weight {} needs its per-row scales", w.to_string());
  }
  const int64_t n_out = scale->numel();
  if (scale->dtype() != DType::kF32 || !scale->is_contiguous() || !scale->device().is_cpu() ||
      (n_out + internal::kW8A8Panel - 1) / internal::kW8A8Panel != w.dim(0) || n_out == 0) {
    return invalid_argument(
        "matmul: the row scales of {} must be contiguous f32 CPU values, one per row of its {} "
        "panels of 16, not {}",
        w.to_string(), w.dim(0), scale->to_string());
  }
  return ok_status();
}

// The reference over W8A8 panels: value = (byte - 128) * scale[o], sums in double.
Status matmul_reference_w8a8(const Tensor& w, const Tensor& scale, const float* x, int64_t n_tokens,
                             float* y) {
  const int64_t n_out = scale.numel(), k = w.dim(1) / internal::kW8A8Panel;
  const uint8_t* base = w.data_as<uint8_t>();
  const float* sc = scale.data_as<float>();
  for (int64_t o = 0; o < n_out; ++o) {
    const uint8_t* panel = base + (o / internal::kW8A8Panel) * w.dim(1);
    const int64_t j = o % internal::kW8A8Panel;
    for (int64_t t = 0; t < n_tokens; ++t) {
      double acc = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const float v =
            static_cast<float>(static_cast<int>(panel[(i / 4) * 64 + j * 4 + i % 4]) - 128) * sc[o];
        acc += static_cast<double>(v) * static_cast<double>(x[t * k + i]);
      }
      y[t * n_out + o] = static_cast<float>(acc);
    }
  }
  return ok_status();
}

int64_t row_bytes_of(const Tensor& w) {
  const DTypeTraits& tr = dtype_traits(w.dtype());
  return w.strides()[0] / tr.block_size * tr.block_bytes;
}

Status matmul_reference(const Tensor& w, const float* x, int64_t n_tokens, float* y) {
  const int64_t n_out = w.dim(0), n_in = w.dim(1);
  const auto* base = static_cast<const uint8_t*>(w.data());
  const int64_t rb = row_bytes_of(w);
  std::vector<float> row(static_cast<size_t>(n_in));  // [n_in]
  for (int64_t o = 0; o < n_out; ++o) {
    RINFER_RETURN_IF_ERROR(dequantize_row(w.dtype(), base + o * rb, row.data(), n_in));
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * n_in;  // [n_in]
      double acc = 0.0;
      for (int64_t i = 0; i < n_in; ++i) {
        acc += static_cast<double>(row[static_cast<size_t>(i)]) * static_cast<double>(xt[i]);
      }
      y[t * n_out + o] = static_cast<float>(acc);
    }
  }
  return ok_status();
}

// Runs fn(chunk_begin, chunk_end) over [0, n) on the pool (or inline).
template <typename Fn>
void run_chunks(ThreadPool* pool, int64_t n, int64_t grain, const Fn& fn) {
  if (pool == nullptr || pool->size() == 1 || n <= grain) {
    fn(int64_t{0}, n);
    return;
  }
  pool->parallel_for(0, n, grain, fn);
}

// A pool round trip costs ~4 us while the worker is awake, but 35-50 us once its core has gone
// idle (waking a halted vCPU), i.e. as long as one core needs to stream 1-1.5 MB of weights.
// Matrix-vector products below 4 MB stay on the caller (SmolLM2 decode: only the 30 MB output
// matrix is split; splitting its 0.5 MB FFN matrices cost 30% of the decode speed).
constexpr int64_t kMinParallelWeightBytes = 4 << 20;

ThreadPool* pool_for(const OpContext& ctx, const Tensor& w, int64_t n_tokens) {
  const int64_t bytes = w.dim(0) * row_bytes_of(w);
  return n_tokens >= 4 || bytes * n_tokens >= kMinParallelWeightBytes ? ctx.pool : nullptr;
}

// Rows per unpacked chunk: keep the tile within about half of L1.
int64_t chunk_rows_for(int64_t bytes_per_row) {
  const int64_t rows = (24 * 1024) / std::max<int64_t>(bytes_per_row, 1);
  return std::clamp<int64_t>(rows / 4 * 4, 4, 32);
}

Status int8_tiles(const OpContext& ctx, const Tensor& w, const QActs& acts, float* y);

Status matmul_int8(const OpContext& ctx, const Tensor& w, const float* x, int64_t n_tokens,
                   float* y) {
  const DType dt = w.dtype();
  const int64_t n_out = w.dim(0), k = w.dim(1);
  const auto* base = static_cast<const uint8_t*>(w.data());
  const int64_t rb = row_bytes_of(w);
  const QActsLayout layout(k);
  void* amem = t_acts.get(internal::qacts_bytes(layout, n_tokens));
  if (amem == nullptr) return out_of_memory("matmul: activation scratch of {} tokens", n_tokens);
  const QActs acts = internal::qacts_view(layout, n_tokens, amem);
  run_chunks(ctx.pool, n_tokens, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) internal::quantize_act_row(x + t * k, acts, t);
  });

  // Rows computed as if alone: the direct matrix-vector kernel, which reads each group of weight
  // blocks once for up to 4 of them and gives each the bits it would give alone.
  const int64_t n_single =
      internal::has_direct_matvec(dt)
          ? std::max<int64_t>(n_tokens == 1 ? 1 : 0, std::min(ctx.single_rows, n_tokens))
          : 0;
  if (n_single > 0) {
    const QActs single = internal::qacts_rows(acts, 0, n_single);
    run_chunks(pool_for(ctx, w, n_single), n_out, 64, [&](int64_t r0, int64_t r1) {
      internal::int8_matvec_direct(dt, base + r0 * rb, rb, r1 - r0, k, single, y + r0, n_out);
    });
    if (n_single == n_tokens) return ok_status();
  }
  return int8_tiles(ctx, w, internal::qacts_rows(acts, n_single, n_tokens - n_single),
                    y + n_single * n_out);
}

// The tiled integer kernel over every row of `acts`: weight rows unpacked a chunk at a time.
Status int8_tiles(const OpContext& ctx, const Tensor& w, const QActs& acts, float* y) {
  const DType dt = w.dtype();
  const int64_t n_out = w.dim(0), k = w.dim(1), n_tokens = acts.n;
  const auto* base = static_cast<const uint8_t*>(w.data());
  const int64_t rb = row_bytes_of(w);
  const QActsLayout& layout = acts.layout;
  ThreadPool* pool = pool_for(ctx, w, n_tokens);

  const int64_t gs = internal::int8_group(dt);
  const int64_t kp = layout.kp;
  const int64_t g = gs == 16 ? layout.g16 : layout.g32;
  const int64_t tile_row_bytes = kp + kp + g * 4;  // q + sexp + m
  const int64_t chunk = chunk_rows_for(tile_row_bytes);
  const int64_t n_chunks = (n_out + chunk - 1) / chunk;
  std::atomic<bool> oom{false};
  run_chunks(pool, n_chunks, 1, [&](int64_t c0, int64_t c1) {
    auto* mem = static_cast<uint8_t*>(t_tile.get(static_cast<size_t>(chunk * tile_row_bytes)));
    if (mem == nullptr) {
      oom = true;
      return;
    }
    WTile tile;
    tile.kp = kp;
    tile.g = g;
    tile.q = mem;                                             // [chunk, kp]
    tile.sexp = reinterpret_cast<float*>(mem + chunk * kp);   // [chunk, kp / 4]
    tile.m = reinterpret_cast<float*>(mem + 2 * chunk * kp);  // [chunk, g]
    tile.wide = dt == DType::kQ8_0;
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t row0 = c * chunk;
      const int64_t rows = std::min(chunk, n_out - row0);
      internal::unpack_rows(dt, base + row0 * rb, rb, rows, k, tile);
      const int64_t rows4 = round_up(rows, 4);
      if (rows4 != rows) {  // zero the padding rows the last micro-kernel call reads
        std::memset(tile.q + rows * kp, 0, static_cast<size_t>((rows4 - rows) * kp));
        std::memset(tile.sexp + rows * (kp / 4), 0, static_cast<size_t>((rows4 - rows) * kp));
        std::memset(tile.m + rows * g, 0, static_cast<size_t>((rows4 - rows) * g * 4));
      }
      internal::int8_chunk(tile, rows, acts, gs, y, n_out, row0);
    }
  });
  if (oom) return out_of_memory("matmul: weight tile scratch");
  return ok_status();
}

Status matmul_f32(const OpContext& ctx, const Tensor& w, const float* x, int64_t n_tokens,
                  float* y) {
  const DType dt = w.dtype();
  const int64_t n_out = w.dim(0), k = w.dim(1);
  const auto* base = static_cast<const uint8_t*>(w.data());
  const int64_t rb = row_bytes_of(w);
  const int64_t kp = round_up(k, internal::kKPad);
  auto* xp = static_cast<float*>(t_acts.get(static_cast<size_t>(n_tokens * kp) * sizeof(float)));
  if (xp == nullptr) return out_of_memory("matmul: activation scratch of {} tokens", n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) {  // [n_tokens, kp], zero padded
    std::memcpy(xp + t * kp, x + t * k, static_cast<size_t>(k) * sizeof(float));
    std::memset(xp + t * kp + k, 0, static_cast<size_t>(kp - k) * sizeof(float));
  }
  const int64_t chunk = chunk_rows_for(kp * 4);
  const int64_t n_chunks = (n_out + chunk - 1) / chunk;
  std::atomic<bool> failed{false}, oom{false};
  run_chunks(pool_for(ctx, w, n_tokens), n_chunks, 1, [&](int64_t c0, int64_t c1) {
    auto* tile = static_cast<float*>(t_tile.get(static_cast<size_t>(chunk * kp) * sizeof(float)));
    if (tile == nullptr) {
      oom = true;
      return;
    }
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t row0 = c * chunk;
      const int64_t rows = std::min(chunk, n_out - row0);
      if (!internal::rows_to_f32(dt, base + row0 * rb, rb, rows, k, tile, kp)) {
        failed = true;
        return;
      }
      const int64_t rows4 = round_up(rows, 4);
      std::memset(tile + rows * kp, 0, static_cast<size_t>((rows4 - rows) * kp) * sizeof(float));
      internal::f32_chunk(tile, kp, rows, xp, n_tokens, y, n_out, row0);
    }
  });
  if (oom) return out_of_memory("matmul: weight tile scratch");
  if (failed) return internal_error("matmul: dequantizing {} rows failed", dtype_name(dt));
  return ok_status();
}

// Decode with several matrices sharing x (all with direct kernels): one quantization, one
// pool round trip over the concatenated rows.
Status matmul_multi_direct(const OpContext& ctx, std::span<const Tensor* const> ws, const float* x,
                           std::span<float* const> ys) {
  const int64_t k = ws[0]->dim(1);
  const QActsLayout layout(k);
  void* amem = t_acts.get(internal::qacts_bytes(layout, 1));
  if (amem == nullptr) return out_of_memory("matmul: activation scratch");
  const QActs acts = internal::qacts_view(layout, 1, amem);
  internal::quantize_act_row(x, acts, 0);
  std::vector<int64_t> first(ws.size() + 1, 0);  // [n_matrices + 1] first row of each matrix
  int64_t bytes = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    first[i + 1] = first[i] + ws[i]->dim(0);
    bytes += ws[i]->dim(0) * row_bytes_of(*ws[i]);
  }
  ThreadPool* pool = bytes >= kMinParallelWeightBytes ? ctx.pool : nullptr;
  run_chunks(pool, first.back(), 64, [&](int64_t r0, int64_t r1) {
    for (size_t i = 0; i < ws.size(); ++i) {
      const int64_t lo = std::max(r0, first[i]), hi = std::min(r1, first[i + 1]);
      if (lo >= hi) continue;
      const Tensor& w = *ws[i];
      const int64_t rb = row_bytes_of(w);
      const auto* base = static_cast<const uint8_t*>(w.data());
      internal::int8_matvec_direct(w.dtype(), base + (lo - first[i]) * rb, rb, hi - lo, k, acts,
                                   ys[i] + (lo - first[i]));
    }
  });
  return ok_status();
}

}  // namespace

Status matmul_multi(const OpContext& ctx, std::span<const Tensor* const> ws, const float* x,
                    int64_t n_tokens, std::span<float* const> ys,
                    std::span<const Tensor* const> row_scales) {
  if (ws.size() != ys.size()) {
    return invalid_argument("matmul_multi: {} weights but {} outputs", ws.size(), ys.size());
  }
  if (ws.empty()) return ok_status();
  if (!row_scales.empty() && row_scales.size() != ws.size()) {
    return invalid_argument("matmul_multi: {} weights but {} row scales", ws.size(),
                            row_scales.size());
  }
  auto scale_of = [&](size_t i) { return row_scales.empty() ? nullptr : row_scales[i]; };
  bool direct = ctx.impl == Impl::kFast && ctx.quantize_activations && n_tokens == 1;
  bool all_i8 = ctx.impl == Impl::kFast && ctx.quantize_activations;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (ws[i] == nullptr) return invalid_argument("matmul_multi: null weight {}", i);
    RINFER_RETURN_IF_ERROR(check_matmul_args(*ws[i], x, n_tokens, ys[i])
                               .with_context(fmt::format("matmul_multi: weight {}", i)));
    if (ws[i]->dim(1) != ws[0]->dim(1)) {
      return invalid_argument("matmul_multi: weight {} has n_in {}, weight 0 has {}", i,
                              ws[i]->dim(1), ws[0]->dim(1));
    }
    direct = direct && ws[i]->dim(0) > 0 && ws[i]->dim(1) > 0 &&
             internal::has_direct_matvec(ws[i]->dtype()) && scale_of(i) == nullptr;
    all_i8 = all_i8 && scale_of(i) != nullptr;
    if (scale_of(i) != nullptr) RINFER_RETURN_IF_ERROR(check_row_scale(*ws[i], scale_of(i)));
  }
  if (direct) return matmul_multi_direct(ctx, ws, x, ys);
  if (all_i8) return matmul_i8_fast(ctx, ws, row_scales, x, n_tokens, ys);
  for (size_t i = 0; i < ws.size(); ++i)
    RINFER_RETURN_IF_ERROR(matmul(ctx, *ws[i], x, n_tokens, ys[i], scale_of(i)));
  return ok_status();
}

std::string_view simd_target_name() { return internal::simd_target(); }

Status matmul(const OpContext& ctx, const Tensor& w, const float* x, int64_t n_tokens, float* y,
              const Tensor* row_scale) {
  RINFER_RETURN_IF_ERROR(check_matmul_args(w, x, n_tokens, y));
  if (row_scale != nullptr) {
    RINFER_RETURN_IF_ERROR(check_row_scale(w, row_scale));
    if (n_tokens == 0) return ok_status();
    if (ctx.impl == Impl::kReference || !ctx.quantize_activations) {
      return matmul_reference_w8a8(w, *row_scale, x, n_tokens, y);
    }
    const Tensor* ws[] = {&w};
    const Tensor* sc[] = {row_scale};
    float* ys[] = {y};
    return matmul_i8_fast(ctx, ws, sc, x, n_tokens, ys);
  }
  if (n_tokens == 0 || w.dim(0) == 0) return ok_status();
  if (w.dim(1) == 0) {
    std::fill(y, y + n_tokens * w.dim(0), 0.0f);
    return ok_status();
  }
  if (ctx.impl == Impl::kReference) return matmul_reference(w, x, n_tokens, y);
  if (ctx.quantize_activations && internal::has_int8_path(w.dtype())) {
    return matmul_int8(ctx, w, x, n_tokens, y);
  }
  return matmul_f32(ctx, w, x, n_tokens, y);
}

}  // namespace rinfer::cpu
