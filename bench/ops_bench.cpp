// CPU kernel benchmark: memory bandwidth (the limit of decode), thread-pool round trip, and the
// matmul shapes of SmolLM2-135M (Q4_1 layers, Q8_0 tied output) for 1 and 512 tokens,
// reference vs fast, 1 vs 2 threads; then attention, the small ops, and on CPUs with AMX the
// bf16 matmul and attention of the encoders on all-MiniLM-L6-v2's shapes against the tile
// roof (and the f32 kernels on the same shapes). Prints a table and, with
// --out FILE, writes JSON (git sha, date, machine).
//
//   ops_bench [--out FILE] [--reps N] [--quick] [--w8a8]
//   (--w8a8: only the W8A8 against Q8_0 table, ops_bench_w8a8.cpp)
//
// Decode (1 token) numbers cycle through enough copies of each weight matrix to exceed the
// last-level cache, so they measure DRAM streaming as in a real forward pass.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#define RINFER_BENCH_X86 1
#include <immintrin.h>
#endif

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "ops/cpu/amx_internal.h"
#include "ops/cpu/attention_bf16.h"
#include "ops/cpu/matmul_bf16.h"
#include "ops/cpu/ops.h"
#include "ops_bench.h"

using ops_bench::make_weights;
using ops_bench::time_median;

namespace {

using rinfer::bench::cpu_model;
using rinfer::bench::median;

using rinfer::DType;
using rinfer::Tensor;
using rinfer::ThreadPool;
namespace cpu = rinfer::cpu;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

namespace ops_bench {

// Median seconds of fn() over `reps` runs after one warm-up (at least min_time in total).
double time_median(int reps, const std::function<void()>& fn, double min_time) {
  fn();
  std::vector<double> t;
  const auto start = Clock::now();
  for (int i = 0; i < reps || seconds_since(start) < min_time; ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(seconds_since(t0));
    if (i > 100000) break;
  }
  return median(t);
}

}  // namespace ops_bench

namespace {

struct AlignedBuf {
  explicit AlignedBuf(size_t n) : size(n), p(static_cast<uint8_t*>(std::aligned_alloc(64, n))) {
    std::memset(p, 1, n);
  }
  ~AlignedBuf() { std::free(p); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
  size_t size;
  uint8_t* p;
};

// Sum of n 64-bit words (n a multiple of 64): the read loop of the bandwidth test, with the
// widest loads the machine has.
uint64_t read_words_portable(const uint64_t* w, int64_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int64_t i = 0; i < n; i += 4) {
    s0 += w[i];
    s1 += w[i + 1];
    s2 += w[i + 2];
    s3 += w[i + 3];
  }
  return s0 + s1 + s2 + s3;
}
#ifdef RINFER_BENCH_X86
__attribute__((target("avx512f"))) uint64_t read_words_avx512(const uint64_t* w, int64_t n) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i < n; i += 32) {
    s0 = _mm512_add_epi64(s0, _mm512_load_si512(w + i));
    s1 = _mm512_add_epi64(s1, _mm512_load_si512(w + i + 8));
    s2 = _mm512_add_epi64(s2, _mm512_load_si512(w + i + 16));
    s3 = _mm512_add_epi64(s3, _mm512_load_si512(w + i + 24));
  }
  alignas(64) uint64_t out[8];
  _mm512_store_si512(out, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
  return out[0] + out[3] + out[7];
}
#endif
uint64_t read_words(const uint64_t* w, int64_t n) {
#ifdef RINFER_BENCH_X86
  if (__builtin_cpu_supports("avx512f")) return read_words_avx512(w, n);
#endif
  return read_words_portable(w, n);
}

// STREAM-like read (sum of 64-bit words) and copy over `bytes`, split over the pool's threads.
struct Bandwidth {
  double read_gbs = 0;
  double copy_gbs = 0;  // bytes read + bytes written
};

Bandwidth measure_bandwidth(ThreadPool& pool, size_t bytes, int reps) {
  AlignedBuf a(bytes), b(bytes);
  const int n = pool.size();
  std::vector<uint64_t> sink(static_cast<size_t>(n) * 8);
  const auto words = static_cast<int64_t>(bytes / 8);
  auto read = [&] {
    pool.run(n, [&](int64_t task, int) {
      const auto* w = reinterpret_cast<const uint64_t*>(a.p);
      const int64_t lo = words * task / n / 64 * 64, hi = words * (task + 1) / n / 64 * 64;
      sink[static_cast<size_t>(task) * 8] = read_words(w + lo, hi - lo);
    });
  };
  auto copy = [&] {
    pool.run(n, [&](int64_t task, int) {
      const size_t lo = bytes * static_cast<size_t>(task) / static_cast<size_t>(n);
      const size_t hi = bytes * static_cast<size_t>(task + 1) / static_cast<size_t>(n);
      std::memcpy(b.p + lo, a.p + lo, hi - lo);
    });
  };
  Bandwidth bw;
  bw.read_gbs = static_cast<double>(bytes) / time_median(reps, read) / 1e9;
  bw.copy_gbs = 2.0 * static_cast<double>(bytes) / time_median(reps, copy) / 1e9;
  return bw;
}

}  // namespace

namespace ops_bench {

// Random weights: random bytes with every block's f16 scale fields set to small sane values.
std::vector<uint8_t> make_weights(DType t, int64_t n_out, int64_t n_in, uint32_t seed) {
  const auto& tr = rinfer::dtype_traits(t);
  const auto bytes = static_cast<size_t>(n_out * (n_in / tr.block_size) * tr.block_bytes);
  std::vector<uint8_t> w(bytes);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : w) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<uint8_t>(s >> 32);
  }
  // Sane scales: d (and the mins / dmin) at each format's offsets; floats for float types.
  struct Field {
    int offset;
    float value;
  };
  std::vector<Field> fields;
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0: fields = {{0, 0.01f}}; break;
    case DType::kQ4_1:
    case DType::kQ5_1: fields = {{0, 0.01f}, {2, -0.08f}}; break;
    case DType::kQ4_K:
    case DType::kQ5_K: fields = {{0, 0.001f}, {2, 0.002f}}; break;
    case DType::kQ2_K: fields = {{80, 0.01f}, {82, 0.005f}}; break;
    case DType::kQ3_K: fields = {{108, 0.002f}}; break;
    case DType::kQ6_K: fields = {{208, 0.0005f}}; break;
    default: break;
  }
  for (size_t b = 0; b < bytes && !fields.empty(); b += static_cast<size_t>(tr.block_bytes)) {
    for (const Field& f : fields) {
      const uint16_t h = rinfer::f32_to_f16(f.value);
      std::memcpy(w.data() + b + static_cast<size_t>(f.offset), &h, 2);
    }
  }
  if (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) {
    for (size_t i = 0; i < bytes / static_cast<size_t>(tr.block_bytes); ++i) {
      const float v = std::sin(static_cast<float>(i) * 0.61f + static_cast<float>(seed));
      if (t == DType::kF32) {
        std::memcpy(w.data() + 4 * i, &v, 4);
      } else {
        const uint16_t h = t == DType::kF16 ? rinfer::f32_to_f16(v) : rinfer::f32_to_bf16(v);
        std::memcpy(w.data() + 2 * i, &h, 2);
      }
    }
  }
  return w;
}

}  // namespace ops_bench

namespace {

#ifdef RINFER_BENCH_X86
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized (their _mm512_undefined_* placeholders).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// Keeps the accumulators alive.
__attribute__((target("avx512f"))) void keep(const __m512 (&acc)[16]) {
  alignas(64) float out[16];
  __m512 sum = acc[0];
  for (int i = 1; i < 16; ++i) sum = _mm512_add_ps(sum, acc[i]);
  _mm512_store_ps(out, sum);
  volatile float sink = out[0];
  (void)sink;
}

// Compute roofs on one core, registers only: the integer micro-kernel's instruction mix
// (vpdpbusd + vcvtdq2ps + vmulps + vfmadd231ps per 64 MACs, 16 independent accumulators) and
// plain f32 FMAs. Returns GFLOP/s (2 per MAC).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), noinline)) double int8_roof(
    long iters) {
  __m512 acc[16];
  __m512i w[4], a[4];
  __m512 s[4], d[4];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    w[i] = _mm512_set1_epi8(static_cast<char>(i + 1));
    a[i] = _mm512_set1_epi8(static_cast<char>(3 - i));
    s[i] = _mm512_set1_ps(0.5f + static_cast<float>(i));
    d[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i + 1));
  }
  const auto t0 = Clock::now();
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        const __m512i is = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[r], a[t]);
        acc[r * 4 + t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(s[r], d[t]), acc[r * 4 + t]);
      }
    }
    for (int t = 0; t < 4; ++t) a[t] = _mm512_add_epi8(a[t], w[t]);  // defeat hoisting
  }
  const double sec = seconds_since(t0);
  keep(acc);
  return static_cast<double>(iters) * 16 * 64 * 2 / sec / 1e9;
}

__attribute__((target("avx512f"), noinline)) double f32_roof(long iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
  const auto t0 = Clock::now();
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  const double sec = seconds_since(t0);
  keep(acc);
  return static_cast<double>(iters) * 16 * 16 * 2 / sec / 1e9;
}

// The AMX bf16 roof on one core: four independent 16 x 16 accumulators fed from four resident
// operand tiles, 4 x 16 x 16 x 32 x 2 FLOPs per iteration.
__attribute__((target("amx-tile,amx-bf16"), noinline)) double amx_roof(long iters) {
  alignas(64) static thread_local uint16_t operand[4][512] = {};
  alignas(64) float c[256];
  const cpu::amx::TileConfig cfg;
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand[0], 64);
  _tile_loadd(5, operand[1], 64);
  _tile_loadd(6, operand[2], 64);
  _tile_loadd(7, operand[3], 64);
  const auto t0 = Clock::now();
  for (long it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  const double sec = seconds_since(t0);
  _tile_stored(0, c, 64);
  _tile_release();
  volatile float sink = c[0];
  (void)sink;
  return static_cast<double>(iters) * 4 * 16 * 16 * 32 * 2 / sec / 1e9;
}
#pragma GCC diagnostic pop
#endif

// Runs roof(iters) on every thread of the pool at once; returns the summed GFLOP/s.
double roof_on_pool(ThreadPool& pool, double (*roof)(long), long iters) {
  std::vector<double> g(static_cast<size_t>(pool.size()));
  pool.run(pool.size(), [&](int64_t task, int) { g[static_cast<size_t>(task)] = roof(iters); });
  double sum = 0;
  for (double v : g) sum += v;
  return sum;
}

struct Shape {
  const char* name;
  int64_t n_out, n_in;
  DType dtype;
  int per_layer;  // times per layer (0: once per model)
};

}  // namespace

int main(int argc, char** argv) {
  std::string out_path;
  int reps = 15;
  bool quick = false;
  bool w8a8_only = false;  // only the W8A8 section
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--w8a8") {
      w8a8_only = true;
    } else {
      std::fprintf(stderr, "usage: ops_bench [--out FILE] [--reps N] [--quick] [--w8a8]\n");
      return 2;
    }
  }
  nlohmann::json j;
  j["git_sha"] = rinfer::bench::git_sha(RINFER_SOURCE_DIR);
  j["git_dirty"] = rinfer::bench::git_dirty(RINFER_SOURCE_DIR, "src");
  {
    char date[64];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    j["date"] = date;
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  j["machine"] = {{"hostname", host},
                  {"cpu", cpu_model()},
                  {"hardware_threads", ThreadPool::hardware_threads()},
                  {"simd_target", std::string(cpu::simd_target_name())}};
  std::printf("machine: %s, %d threads, SIMD target %s\n", cpu_model().c_str(),
              ThreadPool::hardware_threads(), std::string(cpu::simd_target_name()).c_str());

  ThreadPool pool1(1), pool2(2);
  ThreadPool* pools[] = {&pool1, &pool2};
  const auto write_out = [&]() -> int {
    if (out_path.empty()) return 0;
    std::ofstream f(out_path);
    f << j.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", out_path.c_str());
      return 1;
    }
    std::printf("\nwrote %s\n", out_path.c_str());
    return 0;
  };
  if (w8a8_only) {
    ops_bench::bench_w8a8(pools, reps, j);
    return write_out();
  }

  // 1. Memory bandwidth and pool round trip.
  const size_t bw_bytes = quick ? (size_t{128} << 20) : (size_t{512} << 20);
  double read_bw[3] = {0, 0, 0};
  std::printf("\n%-34s %10s %10s\n", "memory bandwidth (GB/s)", "read", "copy");
  for (ThreadPool* p : pools) {
    const Bandwidth bw = measure_bandwidth(*p, bw_bytes, quick ? 5 : 11);
    read_bw[p->size()] = bw.read_gbs;
    std::printf("%-34s %10.1f %10.1f\n", (std::to_string(p->size()) + " thread(s)").c_str(),
                bw.read_gbs, bw.copy_gbs);
    j["bandwidth"].push_back({{"threads", p->size()},
                              {"read_gbs", bw.read_gbs},
                              {"copy_gbs", bw.copy_gbs},
                              {"bytes", bw_bytes}});
  }
  {
    const double rt =
        time_median(2001, [&] { pool2.parallel_for(0, 576, 16, [](int64_t, int64_t) {}); });
    std::printf("%-34s %10.2f us\n", "empty parallel_for, 2 threads", rt * 1e6);
    j["pool_round_trip_us"] = rt * 1e6;
  }

  // Compute roofs (best of 3), the limit of the 512-token rows.
  double int8_peak[3] = {0, 0, 0}, f32_peak[3] = {0, 0, 0};
#ifdef RINFER_BENCH_X86
  if (__builtin_cpu_supports("avx512vnni")) {
    std::printf("%-34s %10s %10s\n", "compute roof (GFLOP/s)", "int8 mix", "f32 FMA");
    for (ThreadPool* p : pools) {
      for (int rep = 0; rep < 3; ++rep) {
        int8_peak[p->size()] = std::max(int8_peak[p->size()], roof_on_pool(*p, int8_roof, 2000000));
        f32_peak[p->size()] = std::max(f32_peak[p->size()], roof_on_pool(*p, f32_roof, 4000000));
      }
      std::printf("%-34s %10.0f %10.0f\n", (std::to_string(p->size()) + " thread(s)").c_str(),
                  int8_peak[p->size()], f32_peak[p->size()]);
      j["compute_roof"].push_back({{"threads", p->size()},
                                   {"int8_mix_gflops", int8_peak[p->size()]},
                                   {"f32_fma_gflops", f32_peak[p->size()]}});
    }
  }
#endif

  // 2. Matmul shapes of SmolLM2-135M.
  const Shape shapes[] = {{"attn_q/o 576->576", 576, 576, DType::kQ4_1, 2},
                          {"attn_k/v 576->192", 192, 576, DType::kQ4_1, 2},
                          {"ffn_gate/up 576->1536", 1536, 576, DType::kQ4_1, 2},
                          {"ffn_down 1536->576", 576, 1536, DType::kQ4_1, 1},
                          {"output 576->49152", 49152, 576, DType::kQ8_0, 0}};
  std::printf("\n%-22s %-5s %4s %-4s %2s %11s %8s %7s %9s %7s\n", "matmul", "dtype", "tok", "impl",
              "th", "us/call", "GB/s", "%BW", "GFLOP/s", "%roof");
  double decode_s[3] = {0, 0, 0}, prefill_s[3] = {0, 0, 0};
  for (const Shape& s : shapes) {
    const auto& tr = rinfer::dtype_traits(s.dtype);
    const int64_t wbytes = s.n_out * s.n_in / tr.block_size * tr.block_bytes;
    // Copies so that one pass over them exceeds the last-level cache (decode streams DRAM).
    const int n_copies = static_cast<int>(std::max<int64_t>(1, (int64_t{160} << 20) / wbytes));
    std::vector<std::vector<uint8_t>> store;
    std::vector<Tensor> ws;
    for (int c = 0; c < n_copies; ++c) {
      store.push_back(make_weights(s.dtype, s.n_out, s.n_in, static_cast<uint32_t>(c + 1)));
      auto t = Tensor::wrap(store.back().data(), store.back().size(), {s.n_out, s.n_in}, s.dtype,
                            rinfer::Device::cpu(), nullptr);
      if (!t.ok()) {
        std::fprintf(stderr, "%s\n", t.status().to_string().c_str());
        return 1;
      }
      ws.push_back(*t);
    }
    for (int64_t n_tokens : {int64_t{1}, int64_t{512}}) {
      std::vector<float> x(static_cast<size_t>(n_tokens * s.n_in));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f);
      std::vector<float> y(static_cast<size_t>(n_tokens * s.n_out));
      for (cpu::Impl impl : {cpu::Impl::kReference, cpu::Impl::kFast}) {
        for (ThreadPool* p : pools) {
          const bool ref = impl == cpu::Impl::kReference;
          if (ref && p->size() > 1) continue;  // the reference is single-threaded
          if (ref && n_tokens > 1 && (quick || s.n_out > 2000)) continue;  // minutes
          const cpu::OpContext ctx{impl, p};
          size_t next = 0;
          const int r =
              ref ? (n_tokens > 1 ? 1 : 3) : (n_tokens > 1 ? std::max(3, reps / 3) : reps);
          const double sec = time_median(
              r,
              [&] {
                // Decode: a different copy each call, as successive layers would be.
                const Tensor& w = ws[n_tokens == 1 ? next++ % ws.size() : 0];
                const auto st = cpu::matmul(ctx, w, x.data(), n_tokens, y.data());
                if (!st.ok()) std::abort();
              },
              ref ? 0.0 : 0.2);
          const double gbs = static_cast<double>(wbytes) / sec / 1e9;
          const double gflops = 2.0 * static_cast<double>(s.n_out * s.n_in * n_tokens) / sec / 1e9;
          const double pct = 100.0 * gbs / read_bw[p->size()];
          const double roof = tr.is_quantized ? int8_peak[p->size()] : f32_peak[p->size()];
          const double pct_roof = roof > 0 ? 100.0 * gflops / roof : 0.0;
          std::printf("%-22s %-5s %4lld %-4s %2d %11.1f %8.1f %6.0f%% %9.1f %6.0f%%\n", s.name,
                      std::string(tr.name).c_str(), static_cast<long long>(n_tokens),
                      ref ? "ref" : "fast", p->size(), sec * 1e6, gbs, pct, gflops, pct_roof);
          j["matmul"].push_back({{"shape", s.name},
                                 {"dtype", tr.name},
                                 {"n_out", s.n_out},
                                 {"n_in", s.n_in},
                                 {"n_tokens", n_tokens},
                                 {"impl", ref ? "reference" : "fast"},
                                 {"threads", p->size()},
                                 {"us_per_call", sec * 1e6},
                                 {"weight_gbs", gbs},
                                 {"pct_of_read_bw", pct},
                                 {"gflops", gflops},
                                 {"pct_of_compute_roof", pct_roof}});
          if (!ref) {
            const int mult = s.per_layer == 0 ? 1 : 30 * s.per_layer;
            if (n_tokens == 1) decode_s[p->size()] += mult * sec;
            // Prefill computes the logits of the last token only (one matvec of the output).
            if (n_tokens > 1 && s.per_layer > 0) prefill_s[p->size()] += mult * sec;
            if (n_tokens == 1 && s.per_layer == 0) prefill_s[p->size()] += sec;
          }
        }
      }
    }
  }
  std::printf("\nSmolLM2-135M matmuls only (30 layers x 7 + output):\n");
  for (int th : {1, 2}) {
    std::printf(
        "  %d thread(s): decode %.2f ms/token (%.0f tok/s), prefill 512 %.1f ms (%.0f tok/s)\n", th,
        decode_s[th] * 1e3, 1.0 / decode_s[th], prefill_s[th] * 1e3, 512.0 / prefill_s[th]);
    j["smollm2_matmul_estimate"].push_back({{"threads", th},
                                            {"decode_ms_per_token", decode_s[th] * 1e3},
                                            {"prefill512_ms", prefill_s[th] * 1e3}});
  }

  // Accuracy of the fast paths: relative L2 error vs the reference on [256, 1536] weights and
  // 8 tokens of activations uniform in [-1, 1).
  std::printf("\n%-8s %14s %14s\n", "accuracy", "int8 acts", "f32 acts");
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                  DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF16,
                  DType::kBF16, DType::kF32}) {
    const int64_t n_out = 256, n_in = 1536, nt = 8;
    auto bytes = make_weights(t, n_out, n_in, 77);
    auto w =
        Tensor::wrap(bytes.data(), bytes.size(), {n_out, n_in}, t, rinfer::Device::cpu(), nullptr);
    if (!w.ok()) return 1;
    std::vector<float> x(static_cast<size_t>(nt * n_in));
    uint64_t st = 12345;
    for (auto& v : x) {
      st = st * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<float>(static_cast<double>(st >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    std::vector<float> yr(static_cast<size_t>(nt * n_out)), yq(yr.size()), yf(yr.size());
    if (!cpu::matmul({cpu::Impl::kReference}, *w, x.data(), nt, yr.data()).ok() ||
        !cpu::matmul({cpu::Impl::kFast, &pool2, true}, *w, x.data(), nt, yq.data()).ok() ||
        !cpu::matmul({cpu::Impl::kFast, &pool2, false}, *w, x.data(), nt, yf.data()).ok()) {
      return 1;
    }
    auto rel = [&](const std::vector<float>& a) {
      double num = 0, den = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        num += (static_cast<double>(a[i]) - yr[i]) * (static_cast<double>(a[i]) - yr[i]);
        den += static_cast<double>(yr[i]) * yr[i];
      }
      return std::sqrt(num / den);
    };
    const double eq = rel(yq), ef = rel(yf);
    std::printf("%-8s %14.2e %14.2e\n", std::string(rinfer::dtype_name(t)).c_str(), eq, ef);
    j["accuracy"].push_back(
        {{"dtype", rinfer::dtype_name(t)}, {"rel_l2_int8_acts", eq}, {"rel_l2_f32_acts", ef}});
  }

  // 3. Attention (SmolLM2: 9 heads, 3 KV heads, head_dim 64).
  std::printf("\n%-34s %-4s %2s %11s %9s\n", "attention 9/3 heads, d 64", "impl", "th", "us/call",
              "GFLOP/s");
  const struct { int64_t n_tokens, n_kv; } att[] = {{1, 128}, {1, 1024}, {512, 512}};
  for (const auto& a : att) {
    cpu::AttentionShape s;
    s.n_tokens = a.n_tokens;
    s.n_kv = a.n_kv;
    s.n_head = 9;
    s.n_head_kv = 3;
    s.head_dim = 64;
    s.kv_row_stride = 3 * 64;
    s.scale = 0.125f;
    std::vector<float> q(static_cast<size_t>(s.n_tokens * 9 * 64)),
        k(static_cast<size_t>(s.n_kv * 192)), v(k.size()), o(q.size());
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(static_cast<float>(i));
    for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(static_cast<float>(i) * 0.7f);
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(i) * 1.3f);
    // Causal pairs x (QK + PV) x 2 flops x head_dim.
    double pairs = 0;
    for (int64_t t = 0; t < s.n_tokens; ++t)
      pairs += static_cast<double>(s.n_kv - s.n_tokens + t + 1);
    const double flops = pairs * 9 * 64 * 4;
    for (cpu::Impl impl : {cpu::Impl::kReference, cpu::Impl::kFast}) {
      for (ThreadPool* p : pools) {
        const bool ref = impl == cpu::Impl::kReference;
        if (ref && p->size() > 1) continue;
        const double sec = time_median(ref ? 3 : reps, [&] {
          if (!cpu::attention({impl, p}, s, q.data(), k.data(), v.data(), o.data()).ok())
            std::abort();
        });
        const std::string name =
            "tokens " + std::to_string(s.n_tokens) + ", n_kv " + std::to_string(s.n_kv);
        std::printf("%-34s %-4s %2d %11.1f %9.1f\n", name.c_str(), ref ? "ref" : "fast", p->size(),
                    sec * 1e6, flops / sec / 1e9);
        j["attention"].push_back({{"n_tokens", s.n_tokens},
                                  {"n_kv", s.n_kv},
                                  {"impl", ref ? "reference" : "fast"},
                                  {"threads", p->size()},
                                  {"us_per_call", sec * 1e6},
                                  {"gflops", flops / sec / 1e9}});
      }
    }
  }

  // 4. Small ops at prefill size (512 x 576 / 512 x 1536).
  std::printf("\n%-34s %-4s %2s %11s\n", "small ops (512 tokens)", "impl", "th", "us/call");
  {
    const int64_t n = 512 * 576, nf = 512 * 1536;
    std::vector<float> a(static_cast<size_t>(nf)), b(a.size()), c(a.size()), w(576);
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = std::sin(static_cast<float>(i));
      b[i] = std::cos(static_cast<float>(i));
    }
    std::fill(w.begin(), w.end(), 1.1f);
    std::vector<int32_t> pos(512);
    for (int i = 0; i < 512; ++i) pos[static_cast<size_t>(i)] = i;
    cpu::RopeParams rp;
    rp.n_rot = 64;
    const std::pair<const char*, std::function<void(const cpu::OpContext&)>> ops[] = {
        {"rms_norm [512, 576]",
         [&](const cpu::OpContext& ctx) {
           cpu::rms_norm(ctx, a.data(), w.data(), 512, 576, 1e-5f, c.data());
         }},
        {"rope [512, 9, 64]",
         [&](const cpu::OpContext& ctx) { cpu::rope(ctx, c.data(), 512, 9, 64, pos, rp); }},
        {"swiglu [512 x 1536]",
         [&](const cpu::OpContext& ctx) { cpu::swiglu(ctx, a.data(), b.data(), nf, c.data()); }},
        {"add [512 x 576]",
         [&](const cpu::OpContext& ctx) { cpu::add(ctx, a.data(), b.data(), n, c.data()); }},
    };
    for (const auto& [name, fn] : ops) {
      for (cpu::Impl impl : {cpu::Impl::kReference, cpu::Impl::kFast}) {
        for (ThreadPool* p : pools) {
          const bool ref = impl == cpu::Impl::kReference;
          if (ref && p->size() > 1) continue;
          const cpu::OpContext ctx{impl, p};
          const double sec = time_median(reps, [&] { fn(ctx); });
          std::printf("%-34s %-4s %2d %11.1f\n", name, ref ? "ref" : "fast", p->size(), sec * 1e6);
          j["small_ops"].push_back({{"op", name},
                                    {"impl", ref ? "reference" : "fast"},
                                    {"threads", p->size()},
                                    {"us_per_call", sec * 1e6}});
        }
      }
    }
  }

  // 5. The encoders' AMX bf16 kernels on all-MiniLM-L6-v2's shapes (1,024 tokens), against
  // the tile roof and the f32 kernels on the same shapes.
#ifdef RINFER_BENCH_X86
  if (cpu::amx_bf16_available()) {
    double amx_peak[3] = {0, 0, 0};
    for (int rep = 0; rep < 3; ++rep) {
      for (ThreadPool* p : pools) {
        amx_peak[p->size()] = std::max(amx_peak[p->size()], roof_on_pool(*p, amx_roof, 200000));
      }
    }
    std::printf("\n%-34s %10.1f (1 thread) %10.1f (2 threads)\n", "AMX bf16 roof (GFLOP/s)",
                amx_peak[1], amx_peak[2]);
    j["amx_bf16_roof"] = {{"gflops_1_thread", amx_peak[1]}, {"gflops_2_threads", amx_peak[2]}};
    std::printf("%-22s %-9s %2s %11s %9s %7s\n", "encoder matmul", "kernel", "th", "us/call",
                "GFLOP/s", "%roof");
    const int64_t nt = 1024;
    const struct {
      const char* name;
      int64_t n_out, n_in;
    } enc[] = {{"q|k|v|o [384, 384]", 384, 384},
               {"ffn up [1536, 384]", 1536, 384},
               {"ffn down [384, 1536]", 384, 1536}};
    for (const auto& e : enc) {
      const auto bytes = make_weights(DType::kF32, e.n_out, e.n_in, 7);
      auto w = Tensor::wrap(bytes.data(), bytes.size(), {e.n_out, e.n_in}, DType::kF32,
                            rinfer::Device::cpu(), nullptr);
      if (!w.ok()) std::abort();
      auto packed = cpu::PackedBf16::pack(*w);
      if (!packed.ok()) std::abort();
      std::vector<float> x(static_cast<size_t>(nt * e.n_in)), y(static_cast<size_t>(nt * e.n_out));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f);
      const double flops = 2.0 * static_cast<double>(nt * e.n_out * e.n_in);
      for (ThreadPool* p : pools) {
        for (bool amx : {true, false}) {
          const cpu::OpContext ctx{cpu::Impl::kFast, p, false};
          const double sec = time_median(reps, [&] {
            const rinfer::Status st = amx ? cpu::matmul_bf16(ctx, *packed, x.data(), nt, y.data())
                                          : cpu::matmul(ctx, *w, x.data(), nt, y.data());
            if (!st.ok()) std::abort();
          });
          const double gf = flops / sec / 1e9;
          const double roof = amx ? amx_peak[p->size()] : f32_peak[p->size()];
          std::printf("%-22s %-9s %2d %11.1f %9.1f %6.1f%%\n", e.name, amx ? "amx bf16" : "f32",
                      p->size(), sec * 1e6, gf, roof > 0 ? 100.0 * gf / roof : 0.0);
          j["encoder_matmul"].push_back(
              {{"shape", e.name},
               {"tokens", nt},
               {"kernel", amx ? "amx_bf16" : "f32"},
               {"threads", p->size()},
               {"us_per_call", sec * 1e6},
               {"gflops", gf},
               {"pct_of_compute_roof", roof > 0 ? 100.0 * gf / roof : 0.0}});
        }
      }
    }
    // Bidirectional attention, 12 heads of 32: 32 sequences of 40 tokens, 4 of 256.
    const struct { int64_t n_seq, len; } sa[] = {{32, 40}, {4, 256}};
    for (const auto& a : sa) {
      const int64_t rows = a.n_seq * a.len, e = 384;
      std::vector<float> q(static_cast<size_t>(rows * e)), o(q.size());
      for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(static_cast<float>(i) * 0.11f);
      std::vector<int32_t> table(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) table[static_cast<size_t>(r)] = static_cast<int32_t>(r);
      std::vector<cpu::AttentionSeq> seqs;
      for (int64_t sq = 0; sq < a.n_seq; ++sq) {
        seqs.push_back({sq * a.len, a.len, a.len, table.data() + sq * a.len});
      }
      cpu::PagedAttentionShape ps;
      ps.n_head = 12;
      ps.n_head_kv = 12;
      ps.head_dim = 32;
      ps.kv_row_stride = e;
      ps.block_size = 1;
      ps.n_blocks = rows;
      ps.scale = 1.0f / std::sqrt(32.0f);
      ps.causal = false;
      const cpu::EncoderAttentionShape es{12, 32, e, ps.scale};
      const double flops = 4.0 * static_cast<double>(a.n_seq * a.len * a.len * e);
      const std::string name = std::to_string(a.n_seq) + " x " + std::to_string(a.len) + " tokens";
      for (ThreadPool* p : pools) {
        for (bool amx : {true, false}) {
          const cpu::OpContext ctx{cpu::Impl::kFast, p, false};
          const double sec = time_median(reps, [&] {
            const rinfer::Status st =
                amx ? cpu::attention_bf16(ctx, es, seqs, q.data(), q.data(), q.data(), o.data())
                    : cpu::paged_attention(ctx, ps, seqs, q.data(), q.data(), q.data(), o.data());
            if (!st.ok()) std::abort();
          });
          const double gf = flops / sec / 1e9;
          const double roof = amx ? amx_peak[p->size()] : f32_peak[p->size()];
          std::printf("%-22s %-9s %2d %11.1f %9.1f %6.1f%%\n", ("attn " + name).c_str(),
                      amx ? "amx bf16" : "f32", p->size(), sec * 1e6, gf,
                      roof > 0 ? 100.0 * gf / roof : 0.0);
          j["encoder_attention"].push_back(
              {{"shape", name},
               {"kernel", amx ? "amx_bf16" : "f32"},
               {"threads", p->size()},
               {"us_per_call", sec * 1e6},
               {"gflops", gf},
               {"pct_of_compute_roof", roof > 0 ? 100.0 * gf / roof : 0.0}});
        }
      }
    }
  }
#endif

  ops_bench::bench_w8a8(pools, reps, j);
  return write_out();
}
