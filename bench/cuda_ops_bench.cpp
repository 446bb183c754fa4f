// CUDA kernel benchmark (CUDA builds only): measures the device's two ceilings first (device-to-
// device copy bandwidth, cuBLASLt bf16 GEMM rate), then times the decode matvec per weight
// layout and the prefill GEMM on Llama-3-8B shapes, plus decode/prefill attention, and prints
// each figure next to its limit (bytes / measured bandwidth, FLOPs / measured peak).
//
//   cuda_ops_bench [--out FILE.json] [--reps N]
//   cuda_ops_bench --profile   (a few plain launches of representative kernels, for ncu)
//
// Timing: CUDA events around CUDA-graph replays of a batch of calls (launch gaps shrink as in a
// captured decode step), median of --reps replays. Inputs rotate over enough copies that the
// data read per batch is several times the L2 cache, so L2 does not flatter the numbers; weights
// and activations are random (never zeros).
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/cuda/cublas_lt.h"
#include "core/cuda/device_allocator.h"
#include "core/cuda/stream.h"
#include "ops/cuda/ops_cuda.h"

namespace {

using rinfer::bench::median;

using rinfer::DType;
using rinfer::Status;
using rinfer::cuda::DeviceBuffer;
using rinfer::cuda::DeviceWeight;
using json = nlohmann::json;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "cuda_ops_bench: %s\n", what.c_str());
  std::exit(1);
}

void check(const Status& st, const char* what) {
  if (!st.ok()) die(std::string(what) + ": " + st.to_string());
}
void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

template <typename T>
T take(rinfer::Result<T> r, const char* what) {
  if (!r.ok()) die(std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}

// Captures `batch` (a sequence of launches on `s`) into a graph and returns the median time of
// one replay in microseconds.
double time_graph(cudaStream_t s, int reps, const std::function<void()>& batch) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  batch();  // warm-up outside the graph (module load, cuBLASLt plans)
  check_cuda(cudaStreamSynchronize(s), "warm-up");
  check_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
  batch();
  check_cuda(cudaStreamEndCapture(s, &graph), "end capture");
  check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  auto a = take(rinfer::cuda::Event::create(0), "event");
  auto b = take(rinfer::cuda::Event::create(0), "event");
  std::vector<double> us;
  for (int i = 0; i < reps + 3; ++i) {
    check(a.record(s), "record");
    check_cuda(cudaGraphLaunch(exec, s), "graph launch");
    check(b.record(s), "record");
    check(b.synchronize(), "sync");
    if (i >= 3) us.push_back(1e3 * take(rinfer::cuda::elapsed_ms(a, b), "elapsed"));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return median(us);
}

struct Ctx {
  cudaStream_t s;
  int reps;
  size_t l2_bytes;
  double copy_gbs = 0;     // bytes read + written per second / 1e9
  double peak_tflops = 0;  // cuBLASLt bf16 dense
  rinfer::cuda::CublasLt* lt;
};

// The copy bandwidth (bytes read + written per second): the faster of a 16-byte copy kernel
// and cudaMemcpyAsync device-to-device (timed on the stream, outside a graph, where the driver
// may pick the copy engines), after ~0.2 s of warm-up so the clocks are up.
double measure_copy(Ctx& c, json& out) {
  const size_t bytes = size_t{2} << 30;
  DeviceBuffer src = take(DeviceBuffer::create(bytes, 0, c.s), "alloc");
  DeviceBuffer dst = take(DeviceBuffer::create(bytes, 0, c.s), "alloc");
  check(rinfer::cuda::fill_random(src.data(), DType::kF32, bytes / 4, -1, 1, 1, c.s), "fill");
  for (int i = 0; i < 100; ++i)
    check(rinfer::cuda::copy_kernel(dst.data(), src.data(), bytes, c.s), "copy");
  const double us_kernel = time_graph(c.s, c.reps, [&] {
    check(rinfer::cuda::copy_kernel(dst.data(), src.data(), bytes, c.s), "copy");
  });
  auto a = take(rinfer::cuda::Event::create(0), "event");
  auto b = take(rinfer::cuda::Event::create(0), "event");
  std::vector<double> us;
  for (int i = 0; i < c.reps + 3; ++i) {
    check(a.record(c.s), "record");
    check_cuda(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, c.s),
               "memcpy");
    check(b.record(c.s), "record");
    check(b.synchronize(), "sync");
    if (i >= 3) us.push_back(1e3 * take(rinfer::cuda::elapsed_ms(a, b), "elapsed"));
  }
  const double us_memcpy = median(us);
  const double gbs_kernel = 2.0 * static_cast<double>(bytes) / us_kernel / 1e3;
  const double gbs_memcpy = 2.0 * static_cast<double>(bytes) / us_memcpy / 1e3;
  std::printf("copy 2 GiB: kernel %.0f GB/s, cudaMemcpyAsync %.0f GB/s (read + write)\n",
              gbs_kernel, gbs_memcpy);
  out = {{"copy_kernel_gbs", gbs_kernel}, {"memcpy_d2d_gbs", gbs_memcpy}};
  return std::max(gbs_kernel, gbs_memcpy);
}

double measure_gemm_peak(Ctx& c) {
  const int64_t n = 8192;
  DeviceBuffer a = take(DeviceBuffer::create(n * n * 2, 0, c.s), "alloc");
  DeviceBuffer b = take(DeviceBuffer::create(n * n * 2, 0, c.s), "alloc");
  DeviceBuffer y = take(DeviceBuffer::create(n * n * 2, 0, c.s), "alloc");
  check(rinfer::cuda::fill_random(a.data(), DType::kBF16, n * n, -1, 1, 2, c.s), "fill");
  check(rinfer::cuda::fill_random(b.data(), DType::kBF16, n * n, -1, 1, 3, c.s), "fill");
  const double us = time_graph(c.s, c.reps, [&] {
    check(rinfer::cuda::gemm_lowp(*c.lt, DType::kBF16, a.data(), n, b.data(), n, n, n, n,
                                  DType::kBF16, y.data(), 0.0f, c.s),
          "gemm");
  });
  return 2.0 * static_cast<double>(n * n * n) / us / 1e6;
}

struct Shape {
  const char* name;
  int64_t n_out, n_in;
};
const Shape kShapes[] = {{"attn_out/q 4096x4096", 4096, 4096},
                         {"ffn_up/gate 14336x4096", 14336, 4096},
                         {"ffn_down 4096x14336", 4096, 14336},
                         {"lm_head 128256x4096", 128256, 4096}};

// Random weights of one shape: the first, then enough copies that a batch of matvecs over them
// reads at least 4x the L2 (each replay then streams its weights from memory).
std::vector<DeviceWeight> weight_copies(Ctx& c, DType t, const Shape& sh) {
  std::vector<DeviceWeight> ws;
  ws.push_back(take(rinfer::cuda::random_device_weight(t, sh.n_out, sh.n_in, 7, 0, c.s), "weight"));
  const uint64_t wbytes = ws[0].bytes;
  const int copies =
      static_cast<int>(std::clamp<uint64_t>((4 * c.l2_bytes + wbytes - 1) / wbytes, 1, 64));
  for (int i = 1; i < copies; ++i) {
    ws.push_back(take(rinfer::cuda::random_device_weight(t, sh.n_out, sh.n_in,
                                                         7 + static_cast<uint64_t>(i), 0, c.s),
                      "weight"));
  }
  return ws;
}

// One matvec row of the JSON: bytes read, time, and the limit (bytes over the copy bandwidth).
json matvec_row(const std::string& dtype, const std::string& kernel, const Shape& sh, double bytes,
                double us, double limit, size_t copies) {
  return {{"dtype", dtype},         {"kernel", kernel},        {"n_out", sh.n_out},
          {"n_in", sh.n_in},        {"bytes", bytes},          {"us", us},
          {"limit_us", limit},      {"gbs", bytes / us / 1e3}, {"fraction_of_copy_bw", limit / us},
          {"weight_copies", copies}};
}

json bench_matvec(Ctx& c) {
  json rows = json::array();
  std::printf("\n== decode matvec y = W x (f32 x, y), %d-rep median of graph replays\n", c.reps);
  std::printf(
      "(dtype/q16: int16 activations + dp2a; the others dequantize to f32 exactly, f8_e4m3 as "
      "weights only: W8A16)\n");
  std::printf("%-9s %-24s %9s %9s %9s %8s %7s\n", "dtype", "shape", "MB", "us", "limit us", "GB/s",
              "of BW");
  for (DType t : {DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K,
                  DType::kF8E4M3}) {
    for (const Shape& sh : kShapes) {
      const std::vector<DeviceWeight> ws = weight_copies(c, t, sh);
      const uint64_t wbytes = ws[0].bytes;
      const int copies = static_cast<int>(ws.size());
      const int batch = std::max(copies, 8);
      DeviceBuffer x = take(DeviceBuffer::create(sh.n_in * 4 * batch, 0, c.s), "alloc");
      DeviceBuffer y = take(DeviceBuffer::create(sh.n_out * 4 * batch, 0, c.s), "alloc");
      check(rinfer::cuda::fill_random(x.data(), DType::kF32, sh.n_in * batch, -1, 1, 9, c.s),
            "fill");
      auto report = [&](const std::string& kernel, double us, double x_bytes) {
        const double bytes =
            static_cast<double>(wbytes) + x_bytes + 4.0 * static_cast<double>(sh.n_out);
        const double limit = bytes / (c.copy_gbs * 1e3);
        const std::string name = std::string(rinfer::dtype_name(t)) + kernel;
        std::printf("%-9s %-24s %9.1f %9.2f %9.2f %8.0f %6.1f%%\n", name.c_str(), sh.name,
                    bytes / 1e6, us, limit, bytes / us / 1e3, 100.0 * limit / us);
        rows.push_back(matvec_row(std::string(rinfer::dtype_name(t)),
                                  kernel.empty() ? "f32" : "q16", sh, bytes, us, limit, ws.size()));
      };
      const double us =
          time_graph(c.s, c.reps,
                     [&] {
                       for (int i = 0; i < batch; ++i) {
                         check(rinfer::cuda::matvec(ws[static_cast<size_t>(i % copies)],
                                                    x.as<float>() + i * sh.n_in, nullptr,
                                                    y.as<float>() + i * sh.n_out, c.s),
                               "matvec");
                       }
                     }) /
          batch;
      report("", us, 4.0 * static_cast<double>(sh.n_in));
      if (rinfer::cuda::matvec_q16_supported(t)) {
        // int16 activations: quantized once per x (shared by the matvecs reading it), timed
        // apart; the matvec reads 2 bytes per x element plus scales and sums.
        const size_t qb = rinfer::cuda::quantized_activation_bytes(sh.n_in);
        DeviceBuffer qbuf = take(DeviceBuffer::create(qb * batch, 0, c.s), "alloc");
        std::vector<rinfer::cuda::QuantizedActivation> qs;
        for (int i = 0; i < batch; ++i) {
          qs.push_back(take(rinfer::cuda::quantized_activation_in(
                                static_cast<uint8_t*>(qbuf.data()) + qb * i, qb, sh.n_in),
                            "qact"));
          check(rinfer::cuda::quantize_activation(x.as<float>() + i * sh.n_in, qs.back(), c.s),
                "quantize");
        }
        const double us_q =
            time_graph(c.s, c.reps,
                       [&] {
                         for (int i = 0; i < batch; ++i) {
                           check(rinfer::cuda::matvec_q16(ws[static_cast<size_t>(i % copies)],
                                                          qs[static_cast<size_t>(i)], nullptr,
                                                          y.as<float>() + i * sh.n_out, c.s),
                                 "matvec_q16");
                         }
                       }) /
            batch;
        report("/q16", us_q, 2.5 * static_cast<double>(sh.n_in));
        const double us_quant =
            time_graph(c.s, c.reps,
                       [&] {
                         for (int i = 0; i < batch; ++i) {
                           check(rinfer::cuda::quantize_activation(x.as<float>() + i * sh.n_in,
                                                                   qs[static_cast<size_t>(i)], c.s),
                                 "quantize");
                         }
                       }) /
            batch;
        rows.back()["quantize_x_us"] = us_quant;
        std::printf("%-9s %-24s (quantize x: %.2f us, once per activation)\n", "", "", us_quant);
      }
    }
  }
  return rows;
}

// FP8 E4M3 W8A8 decode (matvec_f8: tensor-core MMAs) at 1 and 8 rows of activations quantized
// per row, beside the same shapes' bf16 and Q8_0 rows of bench_matvec.
json bench_matvec_f8(Ctx& c) {
  json rows = json::array();
  std::printf(
      "\n== FP8 decode matvec Y[rows, n_out] = Xq W^T (e4m3 weights and activations, "
      "f32 scales per row), %d-rep median of graph replays\n",
      c.reps);
  std::printf("%-9s %-24s %4s %9s %9s %9s %8s %7s\n", "dtype", "shape", "rows", "MB", "us",
              "limit us", "GB/s", "of BW");
  for (const Shape& sh : kShapes) {
    const std::vector<DeviceWeight> ws = weight_copies(c, DType::kF8E4M3, sh);
    const uint64_t wbytes = ws[0].bytes;
    const int copies = static_cast<int>(ws.size());
    const int batch = std::max(copies, 8);
    constexpr int kRows = 8;
    DeviceBuffer x = take(DeviceBuffer::create(sh.n_in * 4 * kRows, 0, c.s), "alloc");
    DeviceBuffer xq = take(DeviceBuffer::create(sh.n_in * kRows, 0, c.s), "alloc");
    DeviceBuffer xs = take(DeviceBuffer::create(4 * kRows, 0, c.s), "alloc");
    DeviceBuffer y = take(DeviceBuffer::create(sh.n_out * 4 * kRows * batch, 0, c.s), "alloc");
    check(rinfer::cuda::fill_random(x.data(), DType::kF32, sh.n_in * kRows, -1, 1, 9, c.s), "fill");
    check(rinfer::cuda::quantize_rows_f8(x.data(), DType::kF32, kRows, sh.n_in, sh.n_in,
                                         xq.as<uint8_t>(), xs.as<float>(), c.s),
          "quantize");
    for (int n_rows : {1, kRows}) {
      const double us =
          time_graph(c.s, c.reps,
                     [&] {
                       for (int i = 0; i < batch; ++i) {
                         check(rinfer::cuda::matvec_f8(
                                   ws[static_cast<size_t>(i % copies)], xq.as<uint8_t>(),
                                   xs.as<float>(), n_rows, nullptr,
                                   y.as<float>() + static_cast<int64_t>(i) * kRows * sh.n_out, c.s),
                               "matvec_f8");
                       }
                     }) /
          batch;
      const double bytes = static_cast<double>(wbytes) +
                           static_cast<double>(n_rows) * (static_cast<double>(sh.n_in) + 4.0 +
                                                          4.0 * static_cast<double>(sh.n_out));
      const double limit = bytes / (c.copy_gbs * 1e3);
      std::printf("%-9s %-24s %4d %9.1f %9.2f %9.2f %8.0f %6.1f%%\n", "f8_e4m3", sh.name, n_rows,
                  bytes / 1e6, us, limit, bytes / us / 1e3, 100.0 * limit / us);
      json row = matvec_row("f8_e4m3", "mma", sh, bytes, us, limit, ws.size());
      row["rows"] = n_rows;
      row["split"] = rinfer::cuda::kern::matvec_f8_split(sh.n_out, sh.n_in);
      rows.push_back(std::move(row));
    }
    const double us_q = time_graph(c.s, c.reps, [&] {
      check(rinfer::cuda::quantize_rows_f8(x.data(), DType::kF32, 1, sh.n_in, sh.n_in,
                                           xq.as<uint8_t>(), xs.as<float>(), c.s),
            "quantize");
    });
    rows.back()["quantize_1_row_us"] = us_q;
    std::printf("%-9s %-24s (quantize 1 row: %.2f us)\n", "", "", us_q);
  }
  return rows;
}

json bench_gemm(Ctx& c) {
  json rows = json::array();
  std::printf("\n== prefill GEMM y[M, N] = x[M, K] W^T, bf16 x, f32 accumulate, bf16 y\n");
  std::printf("%-6s %-24s %6s %10s %10s %10s %10s %7s\n", "dtype", "shape", "M", "dequant us",
              "total us", "limit us", "TFLOP/s", "of peak");
  for (DType t : {DType::kBF16, DType::kQ4_K, DType::kQ8_0}) {
    for (const Shape& sh : kShapes) {
      for (int64_t m : {int64_t{512}, int64_t{2048}}) {
        DeviceWeight w0 =
            take(rinfer::cuda::random_device_weight(t, sh.n_out, sh.n_in, 21, 0, c.s), "weight");
        const int copies = static_cast<int>(
            std::clamp<uint64_t>((4 * c.l2_bytes + w0.bytes - 1) / w0.bytes, 1, 4));
        std::vector<DeviceWeight> ws;
        ws.push_back(std::move(w0));
        for (int i = 1; i < copies; ++i) {
          ws.push_back(take(
              rinfer::cuda::random_device_weight(t, sh.n_out, sh.n_in, 21 + i, 0, c.s), "weight"));
        }
        DeviceBuffer x = take(DeviceBuffer::create(m * sh.n_in * 2, 0, c.s), "alloc");
        DeviceBuffer y = take(DeviceBuffer::create(m * sh.n_out * 2, 0, c.s), "alloc");
        const size_t wsb = rinfer::cuda::gemm_workspace_bytes(ws[0]);
        DeviceBuffer wsp = take(DeviceBuffer::create(wsb + 256, 0, c.s), "alloc");
        check(rinfer::cuda::fill_random(x.data(), DType::kBF16, m * sh.n_in, -1, 1, 5, c.s),
              "fill");
        const double us =
            time_graph(c.s, c.reps,
                       [&] {
                         for (int i = 0; i < copies; ++i) {
                           check(rinfer::cuda::gemm(*c.lt, ws[static_cast<size_t>(i)],
                                                    x.as<uint16_t>(), m, DType::kBF16, y.data(),
                                                    0.0f, wsp.data(), wsp.bytes(), c.s),
                                 "gemm");
                         }
                       }) /
            copies;
        double dq_us = 0.0;
        if (t != DType::kBF16) {
          const int64_t ld = (sh.n_in + 7) / 8 * 8;
          dq_us = time_graph(c.s, c.reps,
                             [&] {
                               for (int i = 0; i < copies; ++i) {
                                 check(rinfer::cuda::dequantize_to_bf16(
                                           ws[static_cast<size_t>(i)], wsp.as<uint16_t>(), ld, c.s),
                                       "dequant");
                               }
                             }) /
                  copies;
        }
        const double flops = 2.0 * static_cast<double>(m * sh.n_out * sh.n_in);
        const double limit = flops / (c.peak_tflops * 1e6);
        std::printf("%-6s %-24s %6ld %10.1f %10.1f %10.1f %10.1f %6.1f%%\n",
                    std::string(rinfer::dtype_name(t)).c_str(), sh.name, static_cast<long>(m),
                    dq_us, us, limit, flops / us / 1e6, 100.0 * limit / us);
        rows.push_back({{"dtype", rinfer::dtype_name(t)},
                        {"m", m},
                        {"n_out", sh.n_out},
                        {"n_in", sh.n_in},
                        {"flops", flops},
                        {"us", us},
                        {"dequant_us", dq_us},
                        {"limit_us", limit},
                        {"tflops", flops / us / 1e6},
                        {"fraction_of_peak", limit / us}});
      }
    }
  }
  return rows;
}

// One head configuration: decode over each n_kv of `decode_kv` (n_kv read from device memory
// under the upper bound n_ctx = n_kv, as a graph-captured step runs) and prefill of each n of
// `prefill_n`, bf16 cache; window > 0 makes the layers sliding-window (and the decode cache a
// ring of `window` rows).
void bench_attention_heads(Ctx& c, json& rows, const char* model, int64_t n_head, int64_t n_head_kv,
                           int64_t d, int64_t window, std::initializer_list<int64_t> decode_kv,
                           std::initializer_list<int64_t> prefill_n) {
  std::printf("\n== attention, %s heads (%ld q / %ld kv, head_dim %ld), window %ld, bf16 KV\n",
              model, static_cast<long>(n_head), static_cast<long>(n_head_kv), static_cast<long>(d),
              static_cast<long>(window));
  std::printf("%-8s %8s %8s %10s %10s %10s %7s\n", "kind", "tokens", "n_kv", "us", "limit us",
              "rate", "of lim");
  for (int64_t n_kv : decode_kv) {
    const int64_t rows_kv = window > 0 ? std::min(window, n_kv) : n_kv;  // cache rows read
    rinfer::cuda::AttentionParams p;
    p.n_tokens = 1;
    p.n_kv = n_kv;
    p.n_head = n_head;
    p.kv = {DType::kBF16, n_head_kv, d, n_head_kv * d, window > 0 ? window : 0};
    p.scale = 1.0f / std::sqrt(static_cast<float>(d));
    p.window = window;
    const int64_t cache = (window > 0 ? window : n_kv) * n_head_kv * d;
    const int copies = static_cast<int>(
        std::clamp<int64_t>(static_cast<int64_t>(4 * c.l2_bytes) / (4 * cache) + 1, 1, 64));
    DeviceBuffer kv = take(DeviceBuffer::create(2 * cache * 2 * copies, 0, c.s), "alloc");
    check(rinfer::cuda::fill_random(kv.data(), DType::kBF16, 2 * cache * copies, -1, 1, 3, c.s),
          "fill");
    DeviceBuffer q = take(DeviceBuffer::create(n_head * d * 4, 0, c.s), "alloc");
    DeviceBuffer o = take(DeviceBuffer::create(n_head * d * 4, 0, c.s), "alloc");
    check(rinfer::cuda::fill_random(q.data(), DType::kF32, n_head * d, -1, 1, 4, c.s), "fill");
    const int32_t n_kv32 = static_cast<int32_t>(n_kv);
    DeviceBuffer dn = take(DeviceBuffer::create(256, 0, c.s), "alloc");
    check_cuda(cudaMemcpyAsync(dn.data(), &n_kv32, 4, cudaMemcpyHostToDevice, c.s), "copy");
    check_cuda(cudaStreamSynchronize(c.s), "sync");
    p.n_kv_device = dn.as<int32_t>();
    const size_t wsb = rinfer::cuda::attention_decode_workspace_bytes(p);
    DeviceBuffer ws = take(DeviceBuffer::create(wsb + 256, 0, c.s), "alloc");
    const double us = time_graph(c.s, c.reps,
                                 [&] {
                                   for (int i = 0; i < copies; ++i) {
                                     const auto* kb = kv.as<uint16_t>() + 2 * cache * i;
                                     check(rinfer::cuda::attention_decode(
                                               p, q.as<float>(), kb, kb + cache, o.as<float>(),
                                               ws.data(), ws.bytes(), c.s),
                                           "decode");
                                   }
                                 }) /
                      copies;
    const double bytes = 4.0 * static_cast<double>(rows_kv * n_head_kv * d);
    const double limit = bytes / (c.copy_gbs * 1e3);
    std::printf("%-8s %8d %8ld %10.2f %10.2f %7.0f GB/s %5.1f%%\n", "decode", 1,
                static_cast<long>(n_kv), us, limit, bytes / us / 1e3, 100.0 * limit / us);
    rows.push_back({{"model", model},
                    {"kind", "decode"},
                    {"head_dim", d},
                    {"window", window},
                    {"n_tokens", 1},
                    {"n_kv", n_kv},
                    {"bytes", bytes},
                    {"us", us},
                    {"limit_us", limit},
                    {"fraction", limit / us}});
  }
  for (int64_t n : prefill_n) {
    rinfer::cuda::AttentionParams p;
    p.n_tokens = n;
    p.n_kv = n;
    p.n_head = n_head;
    p.kv = {DType::kBF16, n_head_kv, d, n_head_kv * d};
    p.scale = 1.0f / std::sqrt(static_cast<float>(d));
    p.window = window;
    const int64_t cache = n * n_head_kv * d;
    DeviceBuffer kv = take(DeviceBuffer::create(2 * cache * 2, 0, c.s), "alloc");
    DeviceBuffer q = take(DeviceBuffer::create(n * n_head * d * 4, 0, c.s), "alloc");
    DeviceBuffer o = take(DeviceBuffer::create(n * n_head * d * 2, 0, c.s), "alloc");
    check(rinfer::cuda::fill_random(kv.data(), DType::kBF16, 2 * cache, -1, 1, 3, c.s), "fill");
    check(rinfer::cuda::fill_random(q.data(), DType::kF32, n * n_head * d, -1, 1, 4, c.s), "fill");
    const double us = time_graph(c.s, c.reps, [&] {
      check(rinfer::cuda::attention_prefill(p, q.as<float>(), kv.data(), kv.as<uint16_t>() + cache,
                                            DType::kBF16, o.data(), nullptr, 0, c.s),
            "prefill");
    });
    // Token t attends to min(t + 1, window) positions; QK^T and PV are 2 * d FLOPs each per pair.
    double pairs = 0.0;
    for (int64_t t = 0; t < n; ++t) {
      pairs += static_cast<double>(window > 0 ? std::min(t + 1, window) : t + 1);
    }
    const double flops = 4.0 * static_cast<double>(d) * pairs * static_cast<double>(n_head);
    const double limit = flops / (c.peak_tflops * 1e6);
    std::printf("%-8s %8ld %8ld %10.2f %10.2f %5.0f TFLOP/s %5.1f%%\n", "prefill",
                static_cast<long>(n), static_cast<long>(n), us, limit, flops / us / 1e6,
                100.0 * limit / us);
    rows.push_back({{"model", model},
                    {"kind", "prefill"},
                    {"head_dim", d},
                    {"window", window},
                    {"n_tokens", n},
                    {"n_kv", n},
                    {"flops", flops},
                    {"us", us},
                    {"limit_us", limit},
                    {"fraction", limit / us}});
  }
}

// Paged attention (the serving runner's) over batches of many sequences on shuffled 16-position
// blocks, Llama-3-8B heads, with both KV tiles: decode batches (bytes of K and V over the copy
// bandwidth) and prefill batches (FLOPs over the GEMM peak).
void bench_paged_attention(Ctx& c, json& rows) {
  struct Batch {
    const char* kind;
    int64_t n_seq, n_new, n_kv;
  };
  const Batch batches[] = {{"decode", 256, 1, 192},    {"decode", 64, 1, 1000},
                           {"decode", 16, 1, 4000},    {"decode", 4, 1, 16000},
                           {"prefill", 4, 2048, 2048}, {"prefill", 1, 2048, 2048},
                           {"chunk", 8, 512, 2048}};
  const int64_t n_head = 32, n_head_kv = 8, d = 128, bs = 16, kv_dim = n_head_kv * d;
  std::printf(
      "\n== paged attention, Llama-3-8B heads (32 q / 8 kv, head_dim 128), bf16 KV in "
      "blocks of %ld\n",
      static_cast<long>(bs));
  std::printf("%-8s %5s %6s %6s %5s %4s %10s %10s %16s %7s\n", "kind", "seqs", "new", "n_kv", "cfg",
              "rows", "us", "limit us", "rate", "of lim");
  for (const Batch& b : batches) {
    const int64_t per_seq = (b.n_kv + bs - 1) / bs, n_blocks = b.n_seq * per_seq;
    std::vector<int32_t> tables(static_cast<size_t>(n_blocks));
    for (int64_t i = 0; i < n_blocks; ++i) {  // a fixed scatter of the blocks
      tables[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % n_blocks);
    }
    std::vector<int32_t> qstart{0}, kv_len;
    for (int64_t s = 0; s < b.n_seq; ++s) {
      qstart.push_back(qstart.back() + static_cast<int32_t>(b.n_new));
      kv_len.push_back(static_cast<int32_t>(b.n_kv));
    }
    const int64_t nt = qstart.back();
    const int64_t arena = n_blocks * bs * kv_dim;
    DeviceBuffer kv =
        take(DeviceBuffer::create(static_cast<size_t>(2 * arena * 2), 0, c.s), "alloc");
    DeviceBuffer q =
        take(DeviceBuffer::create(static_cast<size_t>(nt * n_head * d * 4), 0, c.s), "alloc");
    DeviceBuffer o =
        take(DeviceBuffer::create(static_cast<size_t>(nt * n_head * d * 2), 0, c.s), "alloc");
    check(rinfer::cuda::fill_random(kv.data(), DType::kBF16, 2 * arena, -1, 1, 3, c.s), "fill");
    check(rinfer::cuda::fill_random(q.data(), DType::kF32, nt * n_head * d, -1, 1, 4, c.s), "fill");
    // The configurations: 64 positions x 2 stages, 32 x 3, 32 x 4 at 64 rows a block; and the
    // first at 128 rows where the batch takes them (the runner's choice: paged_attention_rows).
    const int32_t runner_rows =
        rinfer::cuda::paged_attention_rows(qstart, n_head, n_head_kv, d, DType::kBF16);
    std::vector<std::pair<int, int32_t>> cfgs = {{0, 64}, {1, 64}, {2, 64}};
    if (runner_rows == 128) cfgs.insert(cfgs.begin(), {0, 128});
    for (auto [tile, n_rows] : cfgs) {
      std::vector<int32_t> work;
      rinfer::cuda::paged_attention_work(qstart, kv_len, n_head, n_head_kv, work, n_rows);
      std::vector<int32_t> ints = qstart;
      ints.insert(ints.end(), kv_len.begin(), kv_len.end());
      ints.insert(ints.end(), tables.begin(), tables.end());
      ints.resize((ints.size() + 3) / 4 * 4, 0);  // the work items' pairs 8-byte aligned
      const size_t work_at = ints.size();
      ints.insert(ints.end(), work.begin(), work.end());
      DeviceBuffer di = take(DeviceBuffer::create(ints.size() * 4, 0, c.s), "alloc");
      check_cuda(
          cudaMemcpyAsync(di.data(), ints.data(), ints.size() * 4, cudaMemcpyHostToDevice, c.s),
          "copy");
      check_cuda(cudaStreamSynchronize(c.s), "sync");
      const int32_t* base = di.as<int32_t>();
      rinfer::cuda::set_paged_attention_config(tile);
      rinfer::cuda::PagedAttentionParams p;
      p.n_tokens = nt;
      p.n_head = n_head;
      p.n_head_kv = n_head_kv;
      p.head_dim = d;
      p.q_stride = n_head * d;
      p.out_stride = n_head * d;
      p.block_size = static_cast<int32_t>(bs);
      p.table_stride = static_cast<int32_t>(per_seq);
      p.scale = 1.0f / std::sqrt(static_cast<float>(d));
      p.n_work = static_cast<int32_t>(work.size() / 2);
      p.n_splits = rinfer::cuda::paged_attention_splits(p.n_work, n_head_kv, b.n_kv, d, 16);
      p.query_start = base;
      p.kv_len = base + qstart.size();
      p.tables = p.kv_len + kv_len.size();
      p.work = base + work_at;
      p.rows = n_rows;
      const size_t wsb = rinfer::cuda::paged_attention_workspace_bytes(nt, n_head, d, p.n_splits);
      DeviceBuffer ws = take(DeviceBuffer::create(wsb + 256, 0, c.s), "alloc");
      const double us = time_graph(c.s, c.reps, [&] {
        check(rinfer::cuda::paged_attention(p, kv.data(), kv.as<uint16_t>() + arena, q.as<float>(),
                                            o.as<uint16_t>(), ws.data(), ws.bytes(), c.s),
              "paged attention");
      });
      const bool decode = b.n_new == 1;
      const double bytes = 4.0 * static_cast<double>(b.n_seq * b.n_kv * kv_dim);
      // Causal pairs of each sequence's new tokens (its last n_new positions).
      double pairs = 0.0;
      for (int64_t t = 0; t < b.n_new; ++t) pairs += static_cast<double>(b.n_kv - b.n_new + t + 1);
      const double flops = 4.0 * static_cast<double>(d * n_head * b.n_seq) * pairs;
      const double limit = decode ? bytes / (c.copy_gbs * 1e3) : flops / (c.peak_tflops * 1e6);
      std::printf("%-8s %5ld %6ld %6ld %5d %4d %10.2f %10.2f %9.0f %s %5.1f%%\n", b.kind,
                  static_cast<long>(b.n_seq), static_cast<long>(b.n_new), static_cast<long>(b.n_kv),
                  tile, n_rows, us, limit, decode ? bytes / us / 1e3 : flops / us / 1e6,
                  decode ? "GB/s   " : "TFLOP/s", 100.0 * limit / us);
      rows.push_back({{"model", "Llama-3-8B"},
                      {"kind", std::string("paged_") + b.kind},
                      {"n_seq", b.n_seq},
                      {"n_new", b.n_new},
                      {"n_kv", b.n_kv},
                      {"tile", tile},
                      {"rows", n_rows},
                      {"splits", p.n_splits},
                      {"us", us},
                      {"limit_us", limit},
                      {"fraction", limit / us}});
    }
    rinfer::cuda::set_paged_attention_config(0);
  }
}

json bench_attention(Ctx& c) {
  json rows = json::array();
  bench_paged_attention(c, rows);
  bench_attention_heads(c, rows, "Llama-3-8B", 32, 8, 128, 0, {4096, 32768}, {512, 2048});
  // Gemma 3 270M: global layers (full causal) and local layers (512-position window).
  bench_attention_heads(c, rows, "Gemma-3-270M", 4, 1, 256, 0, {4096, 32768}, {512, 2048});
  bench_attention_heads(c, rows, "Gemma-3-270M", 4, 1, 256, 512, {4096, 32768}, {2048});
  return rows;
}

// --profile: a few plain launches of representative kernels (no graphs, no timing), for
// `ncu --kernel-name regex:...` to read hardware counters on.
void profile_run(Ctx& c) {
  const int64_t n_out = 14336, n_in = 4096;
  DeviceBuffer x = take(DeviceBuffer::create(n_in * 4, 0, c.s), "alloc");
  DeviceBuffer y = take(DeviceBuffer::create(n_out * 4, 0, c.s), "alloc");
  check(rinfer::cuda::fill_random(x.data(), DType::kF32, n_in, -1, 1, 9, c.s), "fill");
  const size_t qb = rinfer::cuda::quantized_activation_bytes(n_in);
  DeviceBuffer qbuf = take(DeviceBuffer::create(qb, 0, c.s), "alloc");
  auto qa = take(rinfer::cuda::quantized_activation_in(qbuf.data(), qb, n_in), "qact");
  check(rinfer::cuda::quantize_activation(x.as<float>(), qa, c.s), "quantize");
  for (DType t : {DType::kBF16, DType::kQ4_0, DType::kQ4_K}) {
    DeviceWeight w = take(rinfer::cuda::random_device_weight(t, n_out, n_in, 3, 0, c.s), "w");
    for (int i = 0; i < 3; ++i) {
      check(rinfer::cuda::matvec(w, x.as<float>(), nullptr, y.as<float>(), c.s), "matvec");
      if (rinfer::cuda::matvec_q16_supported(t)) {
        check(rinfer::cuda::matvec_q16(w, qa, nullptr, y.as<float>(), c.s), "matvec_q16");
      }
    }
  }
  rinfer::cuda::AttentionParams p;
  p.n_tokens = 1;
  p.n_kv = 32768;
  p.n_head = 32;
  p.kv = {DType::kBF16, 8, 128, 8 * 128};
  p.scale = 0.088f;
  const int64_t cache = p.n_kv * 8 * 128;
  DeviceBuffer kv = take(DeviceBuffer::create(2 * cache * 2, 0, c.s), "alloc");
  check(rinfer::cuda::fill_random(kv.data(), DType::kBF16, 2 * cache, -1, 1, 3, c.s), "fill");
  DeviceBuffer q = take(DeviceBuffer::create(32 * 128 * 4, 0, c.s), "alloc");
  DeviceBuffer o = take(DeviceBuffer::create(32 * 128 * 4, 0, c.s), "alloc");
  check(rinfer::cuda::fill_random(q.data(), DType::kF32, 32 * 128, -1, 1, 4, c.s), "fill");
  const size_t wsb = rinfer::cuda::attention_decode_workspace_bytes(p);
  DeviceBuffer ws = take(DeviceBuffer::create(wsb + 256, 0, c.s), "alloc");
  for (int i = 0; i < 3; ++i) {
    check(rinfer::cuda::attention_decode(p, q.as<float>(), kv.data(), kv.as<uint16_t>() + cache,
                                         o.as<float>(), ws.data(), ws.bytes(), c.s),
          "decode");
  }
  check_cuda(cudaStreamSynchronize(c.s), "sync");
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  int reps = 30;
  bool profile = false;
  std::string only;  // one section: matvec, matvec_f8, gemm or attention
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--profile") {
      profile = true;
    } else if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(3, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr,
                   "usage: cuda_ops_bench [--out FILE.json] [--reps N] [--only "
                   "matvec|matvec_f8|gemm|attention] "
                   "[--profile]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "no usable CUDA device");
  auto stream = take(rinfer::cuda::Stream::create(0), "stream");
  auto lt = take(rinfer::cuda::CublasLt::create(0), "cublasLt");
  Ctx c{stream.get(), reps, static_cast<size_t>(prop.l2CacheSize), 0, 0, &lt};
  if (profile) {
    profile_run(c);
    return 0;
  }
  std::printf("device: %s, %d SMs, %.1f GiB, L2 %.0f MiB\n", prop.name, prop.multiProcessorCount,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30),
              static_cast<double>(prop.l2CacheSize) / (1 << 20));
  json copy_detail;
  c.copy_gbs = measure_copy(c, copy_detail);
  c.peak_tflops = measure_gemm_peak(c);
  std::printf("measured limits: copy %.0f GB/s (read + write), cuBLASLt bf16 8192^3 %.0f TFLOP/s\n",
              c.copy_gbs, c.peak_tflops);
  json j;
  const char* sha = std::getenv("RINFER_GIT_SHA");
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  j["git_sha"] = sha != nullptr ? sha : "unknown";
  j["date"] = utc_now();
  j["machine"] = host;
  j["device"] = {{"name", prop.name},
                 {"sms", prop.multiProcessorCount},
                 {"memory_bytes", prop.totalGlobalMem},
                 {"l2_bytes", prop.l2CacheSize},
                 {"cc", std::to_string(prop.major) + "." + std::to_string(prop.minor)}};
  j["reps"] = reps;
  j["limits"] = {
      {"copy_gbs", c.copy_gbs}, {"gemm_bf16_tflops", c.peak_tflops}, {"copy_detail", copy_detail}};
  if (only.empty() || only == "matvec") j["matvec"] = bench_matvec(c);
  if (only.empty() || only == "matvec_f8") j["matvec_f8"] = bench_matvec_f8(c);
  if (only.empty() || only == "gemm") j["gemm"] = bench_gemm(c);
  if (only.empty() || only == "attention") j["attention"] = bench_attention(c);
  if (!out_path.empty()) {
    std::ofstream f(out_path);
    f << j.dump(2) << "\n";
    if (!f) die("cannot write " + out_path);
    std::printf("\nwrote %s\n", out_path.c_str());
  }
  return 0;
}
