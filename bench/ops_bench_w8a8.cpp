// ops_bench's W8A8 table (cpu::matmul with row scales: int8 codes with a scale per row, int8
// activations per token and 64 columns) against Q8_0 (int8 activations per block of 32) on
// SmolLM2-135M's layer shapes, 1 and 512 tokens, 1 and 2 threads.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/tensor.h"
#include "ops/cpu/ops.h"
#include "ops_bench.h"

namespace ops_bench {

using rinfer::DType;
using rinfer::Tensor;
using rinfer::ThreadPool;
namespace cpu = rinfer::cpu;

void bench_w8a8(std::span<ThreadPool* const> pools, int reps, nlohmann::json& j) {
  struct W8Shape {
    const char* name;
    int64_t n_out, n_in;
  };
  const W8Shape shapes[] = {{"attn_q/o 576->576", 576, 576},
                            {"ffn_gate/up 576->1536", 1536, 576},
                            {"ffn_down 1536->576", 576, 1536}};
  std::printf("\n%-22s %-5s %4s %2s %11s %11s %7s\n", "W8A8 vs Q8_0", "", "tok", "th", "q8_0 us",
              "int8 us", "speedup");
  for (const W8Shape& s : shapes) {
    // Copies so that a decode pass over them exceeds the last-level cache (it streams DRAM).
    const int n_copies =
        static_cast<int>(std::max<int64_t>(1, (int64_t{160} << 20) / (s.n_out * s.n_in)));
    std::vector<std::vector<uint8_t>> q8;
    std::vector<Tensor> wq8, codes, scales;
    for (int c = 0; c < n_copies; ++c) {
      q8.push_back(make_weights(DType::kQ8_0, s.n_out, s.n_in, static_cast<uint32_t>(c + 5)));
      auto w = Tensor::wrap(q8.back().data(), q8.back().size(), {s.n_out, s.n_in}, DType::kQ8_0,
                            rinfer::Device::cpu(), nullptr);
      auto q = Tensor::empty({s.n_out, s.n_in}, DType::kI8);
      auto sc = Tensor::empty({s.n_out}, DType::kF32);
      if (!w.ok() || !q.ok() || !sc.ok()) std::abort();
      for (int64_t i = 0; i < s.n_out * s.n_in; ++i) {
        q->mutable_data_as<int8_t>()[i] = static_cast<int8_t>((i * 37 + 11 + c) % 255 - 127);
      }
      for (int64_t r = 0; r < s.n_out; ++r) sc->mutable_data_as<float>()[r] = 1e-3f;
      wq8.push_back(*w);
      auto packed = cpu::pack_w8a8(*q);
      if (!packed.ok()) std::abort();
      codes.push_back(*packed);
      scales.push_back(*sc);
    }
    for (int64_t nt : {int64_t{1}, int64_t{512}}) {
      std::vector<float> x(static_cast<size_t>(nt * s.n_in));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f);
      std::vector<float> y(static_cast<size_t>(nt * s.n_out));
      for (ThreadPool* p : pools) {
        const cpu::OpContext ctx{cpu::Impl::kFast, p};
        const int r = nt > 1 ? std::max(3, reps / 3) : reps;
        size_t next = 0;  // decode: a different copy each call, as successive layers would be
        const double t_q8 = time_median(
            r,
            [&] {
              const size_t c = nt == 1 ? next++ % wq8.size() : 0;
              if (!cpu::matmul(ctx, wq8[c], x.data(), nt, y.data()).ok()) std::abort();
            },
            0.2);
        const double t_i8 = time_median(
            r,
            [&] {
              const size_t c = nt == 1 ? next++ % codes.size() : 0;
              if (!cpu::matmul(ctx, codes[c], x.data(), nt, y.data(), &scales[c]).ok()) {
                std::abort();
              }
            },
            0.2);
        std::printf("%-22s %-5s %4lld %2d %11.1f %11.1f %6.2fx\n", s.name, "",
                    static_cast<long long>(nt), p->size(), t_q8 * 1e6, t_i8 * 1e6, t_q8 / t_i8);
        j["w8a8"].push_back({{"shape", s.name},
                             {"n_out", s.n_out},
                             {"n_in", s.n_in},
                             {"n_tokens", nt},
                             {"threads", p->size()},
                             {"q8_0_us", t_q8 * 1e6},
                             {"int8_us", t_i8 * 1e6},
                             {"speedup", t_q8 / t_i8}});
      }
    }
  }
}

}  // namespace ops_bench
