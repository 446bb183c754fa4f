// upload_weight: a CPU weight matrix into the device layout the CUDA kernels read (ops_cuda.h).
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/quant_blocks.h"
#include "core/quantize_8bit.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/ops_cuda.h"

namespace rinfer::cuda {

namespace {

uint64_t round_up(uint64_t n, uint64_t m) { return (n + m - 1) / m * m; }

struct Plan {
  DType layout;
  int64_t ld;            // elements per row of the layout (scalar layouts)
  uint64_t row_bytes;    // quant / element bytes per row
  uint64_t scale_bytes;  // per row (q8_0 / q4_0: 2 per block; q4_1: 4 per block)
};

Result<Plan> plan_for(DType t, int64_t n_in) {
  switch (t) {
    case DType::kF32: {
      const int64_t ld = static_cast<int64_t>(round_up(static_cast<uint64_t>(n_in), 4));
      return Plan{t, ld, static_cast<uint64_t>(ld) * 4, 0};
    }
    case DType::kF16:
    case DType::kBF16: {
      const int64_t ld = static_cast<int64_t>(round_up(static_cast<uint64_t>(n_in), 8));
      return Plan{t, ld, static_cast<uint64_t>(ld) * 2, 0};
    }
    case DType::kQ8_0:
      return Plan{t, n_in, static_cast<uint64_t>(n_in), static_cast<uint64_t>(n_in / 32) * 2};
    case DType::kQ4_0:
      return Plan{t, n_in, static_cast<uint64_t>(n_in / 2), static_cast<uint64_t>(n_in / 32) * 2};
    case DType::kQ4_1:
      return Plan{t, n_in, static_cast<uint64_t>(n_in / 2), static_cast<uint64_t>(n_in / 32) * 4};
    case DType::kQ4_K:
      return Plan{t, n_in, static_cast<uint64_t>(n_in / 256) * sizeof(BlockQ4_K), 0};
    default: break;
  }
  if (!dtype_traits(t).is_float) {
    return unsupported("upload_weight: dtype {} is not a float or quantized weight type",
                       dtype_name(t));
  }
  // Everything else is dequantized to bf16 on the host.
  const int64_t ld = static_cast<int64_t>(round_up(static_cast<uint64_t>(n_in), 8));
  return Plan{DType::kBF16, ld, static_cast<uint64_t>(ld) * 2, 0};
}

// One source row into the layout: quants/elements to `q` (row_bytes), scales to `s`.
Status pack_row(DType src_t, const Plan& plan, const uint8_t* src, int64_t n_in, uint8_t* q,
                uint8_t* s, std::vector<float>& tmp) {
  if (plan.layout != src_t) {  // converted to bf16
    tmp.resize(static_cast<size_t>(n_in));
    RINFER_RETURN_IF_ERROR(dequantize_row(src_t, src, tmp.data(), n_in));
    auto* dst = reinterpret_cast<uint16_t*>(q);
    for (int64_t i = 0; i < n_in; ++i) dst[i] = f32_to_bf16(tmp[static_cast<size_t>(i)]);
    return ok_status();
  }
  const int64_t nb = n_in / 32;
  switch (src_t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ4_K: {
      const DTypeTraits& tr = dtype_traits(src_t);
      std::memcpy(q, src, static_cast<size_t>(n_in / tr.block_size * tr.block_bytes));
      return ok_status();
    }
    case DType::kQ8_0:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = src + b * static_cast<int64_t>(sizeof(BlockQ8_0));
        std::memcpy(s + 2 * b, blk + offsetof(BlockQ8_0, d), 2);
        std::memcpy(q + 32 * b, blk + offsetof(BlockQ8_0, qs), 32);
      }
      return ok_status();
    case DType::kQ4_0:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = src + b * static_cast<int64_t>(sizeof(BlockQ4_0));
        std::memcpy(s + 2 * b, blk + offsetof(BlockQ4_0, d), 2);
        std::memcpy(q + 16 * b, blk + offsetof(BlockQ4_0, qs), 16);
      }
      return ok_status();
    case DType::kQ4_1:
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = src + b * static_cast<int64_t>(sizeof(BlockQ4_1));
        std::memcpy(s + 4 * b, blk + offsetof(BlockQ4_1, d), 2);  // (d, m) as a half2
        std::memcpy(s + 4 * b + 2, blk + offsetof(BlockQ4_1, m), 2);
        std::memcpy(q + 16 * b, blk + offsetof(BlockQ4_1, qs), 16);
      }
      return ok_status();
    default: return internal_error("pack_row: no layout for {}", dtype_name(src_t));
  }
}

// Device memory for a weight of layout `plan`: quants/elements first, scales 256-byte aligned
// after them.
Result<DeviceWeight> allocate_layout(const Plan& plan, DType source, int64_t n_out, int64_t n_in,
                                     int device, cudaStream_t stream, DeviceAllocator* allocator) {
  const uint64_t data_bytes = plan.row_bytes * static_cast<uint64_t>(n_out);
  const uint64_t scales_off = round_up(data_bytes, kDeviceAlignment);
  const uint64_t scale_bytes = plan.scale_bytes * static_cast<uint64_t>(n_out);
  const uint64_t total = scales_off + scale_bytes;
  DeviceWeight dw;
  dw.dtype = plan.layout;
  dw.source_dtype = source;
  dw.n_out = n_out;
  dw.n_in = n_in;
  dw.ld = plan.ld;
  dw.bytes = data_bytes + scale_bytes;
  dw.device = device;
  RINFER_ASSIGN_OR_RETURN(
      dw.storage, DeviceBuffer::create(static_cast<size_t>(total), device, stream, allocator));
  auto* base = static_cast<uint8_t*>(dw.storage.data());
  dw.data = base;
  dw.scales = scale_bytes > 0 ? base + scales_off : nullptr;
  return dw;
}

}  // namespace

Result<DeviceWeight> upload_weight(const Tensor& w, int device, cudaStream_t stream,
                                   DeviceAllocator* allocator) {
  if (!w.defined()) return invalid_argument("upload_weight: undefined tensor");
  if (!w.device().is_cpu()) {
    return invalid_argument("upload_weight: {} is not a CPU tensor", w.to_string());
  }
  if (w.ndim() != 2) {
    return invalid_argument("upload_weight: {} must be 2-D [n_out, n_in]", w.to_string());
  }
  if (w.strides()[1] != 1) {
    return invalid_argument("upload_weight: rows of {} must be contiguous", w.to_string());
  }
  const DType t = w.dtype();
  const int64_t n_out = w.dim(0), n_in = w.dim(1);
  if (n_out <= 0 || n_in <= 0) return invalid_argument("upload_weight: empty {}", w.to_string());
  if ((t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1) && n_in % 32 != 0) {
    return invalid_argument("upload_weight: {} rows must be whole blocks", w.to_string());
  }
  RINFER_ASSIGN_OR_RETURN(const Plan plan, plan_for(t, n_in));
  const DTypeTraits& tr = dtype_traits(t);
  const int64_t src_row_bytes = w.strides()[0] / tr.block_size * tr.block_bytes;

  RINFER_ASSIGN_OR_RETURN(DeviceWeight dw,
                          allocate_layout(plan, t, n_out, n_in, device, stream, allocator));
  const uint64_t data_bytes = plan.row_bytes * static_cast<uint64_t>(n_out);
  const uint64_t scales_off = round_up(data_bytes, kDeviceAlignment);
  const uint64_t total = dw.storage.bytes();
  auto* base = static_cast<uint8_t*>(dw.storage.data());
  RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(device));
  const auto* src = static_cast<const uint8_t*>(w.data());
  const bool as_is = plan.layout == t && plan.scale_bytes == 0 &&
                     static_cast<uint64_t>(src_row_bytes) == plan.row_bytes;
  if (as_is) {
    // The source rows are the layout already (q4_k, or scalar rows with no padding).
    RINFER_CUDA_RETURN(cudaMemcpyAsync(base, src, data_bytes, cudaMemcpyHostToDevice, stream));
  } else {
    std::vector<uint8_t> staging(static_cast<size_t>(total), 0);  // zero pad
    std::vector<float> tmp;
    for (int64_t r = 0; r < n_out; ++r) {
      RINFER_RETURN_IF_ERROR(
          pack_row(t, plan, src + r * src_row_bytes, n_in,
                   staging.data() + r * static_cast<int64_t>(plan.row_bytes),
                   staging.data() + scales_off + r * static_cast<int64_t>(plan.scale_bytes), tmp)
              .with_context(fmt::format("upload_weight {}", w.to_string())));
    }
    RINFER_CUDA_RETURN(
        cudaMemcpyAsync(base, staging.data(), total, cudaMemcpyHostToDevice, stream));
    // The staging buffer goes out of scope: wait for the copy.
    RINFER_CUDA_RETURN(cudaStreamSynchronize(stream));
    return dw;
  }
  RINFER_CUDA_RETURN(cudaStreamSynchronize(stream));
  return dw;
}

namespace {

// The f8_e4m3 layout: a code per element, an f32 scale per row.
Status check_f8_shape(int64_t n_out, int64_t n_in, const char* op) {
  if (n_out <= 0 || n_in <= 0 || n_in % 64 != 0) {
    return invalid_argument("{}: f8_e4m3 rows of {} elements (a positive multiple of 64 is needed)",
                            op, n_in);
  }
  return ok_status();
}
Plan f8_plan(int64_t n_in) { return Plan{DType::kF8E4M3, n_in, static_cast<uint64_t>(n_in), 4}; }

}  // namespace

Result<DeviceWeight> upload_weight_f8(const Tensor& w, int device, cudaStream_t stream,
                                      DeviceAllocator* allocator) {
  if (!w.defined() || !w.device().is_cpu() || w.ndim() != 2 || w.strides()[1] != 1) {
    return invalid_argument("upload_weight_f8: {} must be a 2-D CPU tensor with contiguous rows",
                            w.defined() ? w.to_string() : std::string("an undefined tensor"));
  }
  const DType t = w.dtype();
  const int64_t n_out = w.dim(0), n_in = w.dim(1);
  RINFER_RETURN_IF_ERROR(check_f8_shape(n_out, n_in, "upload_weight_f8"));
  const DTypeTraits& tr = dtype_traits(t);
  if (!tr.is_float && !is_quantized(t)) {
    return unsupported("upload_weight_f8: dtype {} is not a float or quantized weight type",
                       dtype_name(t));
  }
  const int64_t src_row_bytes = w.strides()[0] / tr.block_size * tr.block_bytes;
  const Plan plan = f8_plan(n_in);
  RINFER_ASSIGN_OR_RETURN(DeviceWeight dw,
                          allocate_layout(plan, t, n_out, n_in, device, stream, allocator));
  const uint64_t data_bytes = plan.row_bytes * static_cast<uint64_t>(n_out);
  const uint64_t scales_off = round_up(data_bytes, kDeviceAlignment);
  std::vector<uint8_t> staging(static_cast<size_t>(dw.storage.bytes()), 0);
  std::vector<float> row(static_cast<size_t>(n_in));
  const auto* src = static_cast<const uint8_t*>(w.data());
  for (int64_t r = 0; r < n_out; ++r) {
    RINFER_RETURN_IF_ERROR(dequantize_row(t, src + r * src_row_bytes, row.data(), n_in));
    float scale = 0.0f;
    quantize_rows_f8e4m3(row.data(), 1, n_in, staging.data() + r * n_in, &scale);
    if (!std::isfinite(scale)) {
      return invalid_argument("upload_weight_f8: row {} of {} holds a non-finite value", r,
                              w.to_string());
    }
    std::memcpy(staging.data() + scales_off + static_cast<uint64_t>(r) * 4, &scale, 4);
  }
  RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(device));
  RINFER_CUDA_RETURN(cudaMemcpyAsync(dw.storage.data(), staging.data(), staging.size(),
                                     cudaMemcpyHostToDevice, stream));
  RINFER_CUDA_RETURN(cudaStreamSynchronize(stream));  // the staging buffer goes
  return dw;
}

Result<DeviceWeight> upload_weight_f8_codes(const Tensor& w, const Tensor& scales, int device,
                                            cudaStream_t stream, DeviceAllocator* allocator) {
  if (!w.defined() || !w.device().is_cpu() || w.ndim() != 2 || !w.is_contiguous() ||
      w.dtype() != DType::kF8E4M3) {
    return invalid_argument(
        "upload_weight_f8_codes: {} must be a contiguous 2-D f8_e4m3 CPU tensor",
        w.defined() ? w.to_string() : std::string("an undefined tensor"));
  }
  const int64_t n_out = w.dim(0), n_in = w.dim(1);
  if (!scales.defined() || !scales.device().is_cpu() || scales.dtype() != DType::kF32 ||
      !scales.is_contiguous() || scales.numel() != n_out) {
    return invalid_argument(
        "upload_weight_f8_codes: the scales of {} must be {} contiguous f32 "
        "values on the CPU, not {}",
        w.to_string(), n_out, scales.defined() ? scales.to_string() : std::string("undefined"));
  }
  RINFER_RETURN_IF_ERROR(check_f8_shape(n_out, n_in, "upload_weight_f8_codes"));
  const auto* codes = w.data_as<uint8_t>();
  for (int64_t i = 0; i < n_out * n_in; ++i) {
    if ((codes[i] & 0x7f) == 0x7f) {
      return invalid_argument("upload_weight_f8_codes: row {} of {} holds the f8_e4m3 NaN code",
                              i / n_in, w.to_string());
    }
  }
  const Plan plan = f8_plan(n_in);
  RINFER_ASSIGN_OR_RETURN(DeviceWeight dw, allocate_layout(plan, DType::kF8E4M3, n_out, n_in,
                                                           device, stream, allocator));
  RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(device));
  RINFER_CUDA_RETURN(
      cudaMemcpyAsync(dw.storage.data(), codes, w.nbytes(), cudaMemcpyHostToDevice, stream));
  RINFER_CUDA_RETURN(cudaMemcpyAsync(const_cast<void*>(dw.scales), scales.data(),
                                     static_cast<size_t>(n_out) * 4, cudaMemcpyHostToDevice,
                                     stream));
  RINFER_CUDA_RETURN(cudaStreamSynchronize(stream));
  return dw;
}

namespace {

int fill_kind(DType t) { return t == DType::kF32 ? 0 : (t == DType::kF16 ? 1 : 2); }

}  // namespace

Status fill_random(void* p, DType t, int64_t n, float lo, float hi, uint64_t seed,
                   cudaStream_t stream) {
  if (t != DType::kF32 && t != DType::kF16 && t != DType::kBF16) {
    return invalid_argument("fill_random: dtype {} (f32, f16 or bf16)", dtype_name(t));
  }
  if (n < 0 || (n > 0 && p == nullptr)) return invalid_argument("fill_random: bad buffer");
  if (n == 0) return ok_status();
  return cuda_status(kern::launch_fill_uniform(p, fill_kind(t), n, lo, hi, seed, stream),
                     "fill_random launch");
}

Status copy_kernel(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  const auto a = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes;
  if (dst == nullptr || src == nullptr || a % 16 != 0) {
    return invalid_argument("copy_kernel: pointers and size ({}) must be 16-byte aligned", bytes);
  }
  return cuda_status(kern::launch_copy16(dst, src, static_cast<int64_t>(bytes / 16), stream),
                     "copy_kernel launch");
}

Result<DeviceWeight> random_device_weight(DType t, int64_t n_out, int64_t n_in, uint64_t seed,
                                          int device, cudaStream_t stream,
                                          DeviceAllocator* allocator) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ4_K: break;
    case DType::kF8E4M3: {
      RINFER_RETURN_IF_ERROR(check_f8_shape(n_out, n_in, "random_device_weight"));
      RINFER_ASSIGN_OR_RETURN(DeviceWeight dw, allocate_layout(f8_plan(n_in), t, n_out, n_in,
                                                               device, stream, allocator));
      RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(device));
      RINFER_CUDA_RETURN(kern::launch_fill_f8(dw.storage.data(), n_out * n_in, seed, stream));
      // Per-row scales near 1e-4: random codes have an RMS near 84, so the weights' RMS is near
      // that of the 16-bit random weights over 4096 inputs (uniform [-1, 1) / 64).
      RINFER_CUDA_RETURN(kern::launch_fill_uniform(const_cast<void*>(dw.scales), 0, n_out, 5.0e-5f,
                                                   1.5e-4f, seed + 1, stream));
      return dw;
    }
    default: return unsupported("random_device_weight: {} is not a device layout", dtype_name(t));
  }
  const int64_t block = dtype_traits(t).block_size;
  if (n_out <= 0 || n_in <= 0 || n_in % block != 0) {
    return invalid_argument("random_device_weight: bad shape [{}, {}] for {}", n_out, n_in,
                            dtype_name(t));
  }
  RINFER_ASSIGN_OR_RETURN(const Plan plan, plan_for(t, n_in));
  RINFER_ASSIGN_OR_RETURN(DeviceWeight dw,
                          allocate_layout(plan, t, n_out, n_in, device, stream, allocator));
  RINFER_ASSIGN_OR_RETURN(DeviceGuard g, DeviceGuard::set(device));
  void* data = dw.storage.data();
  if (!is_quantized(t)) {
    // Padding columns get values too: they multiply x's masked zeros.
    RINFER_RETURN_IF_ERROR(fill_random(data, t, n_out * dw.ld, -1.0f, 1.0f, seed, stream));
    return dw;
  }
  const int64_t data_bytes = n_out * static_cast<int64_t>(plan.row_bytes);
  RINFER_CUDA_RETURN(kern::launch_fill_bytes(data, data_bytes, seed, stream));
  if (t == DType::kQ4_K) {
    RINFER_CUDA_RETURN(kern::launch_q4k_headers(data, data_bytes / 144, seed + 1, stream));
  } else {
    // f16 scales (q4_1: (d, m) pairs, i.e. twice as many halves). Q8_0's quants span 16 times
    // Q4's, so its scales are a 16th of theirs: the values of every format span the same range
    // (with Q4's scales a random Q8_0 network amplifies the GEMM's bf16 rounding of its weights
    // into different logits).
    const int64_t n_halves = n_out * static_cast<int64_t>(plan.scale_bytes) / 2;
    const float k = t == DType::kQ8_0 ? 1.0f / 16.0f : 1.0f;
    RINFER_CUDA_RETURN(kern::launch_fill_uniform(const_cast<void*>(dw.scales), 1, n_halves,
                                                 0.002f * k, 0.03f * k, seed + 1, stream));
  }
  return dw;
}

}  // namespace rinfer::cuda
