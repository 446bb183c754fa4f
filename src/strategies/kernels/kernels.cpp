// strategies.kernels: the kernel set of each device. `impl`: the CPU's, fast (SIMD, tiled,
// integer dot products) or the scalar reference (f64 accumulation); hook LoadOptions::cpu.ops.
// impl. `cuda`: the CUDA kernels' typed switches (ops/params/kernel_config.h), hook
// LoadOptions::cuda.kernels, applied by the CUDA runners at creation; ignored on the CPU.
#include <fmt/format.h>

#include "core/error.h"
#include "strategies/modules.h"

namespace rinfer {

namespace {

constexpr std::string_view kCudaKeys[] = {"matvec_split", "matvec_stream", "matvec_stream_kb",
                                          "producer_l2",  "attention_mma", "pdl",
                                          "split_norm",   "runner_matvec", "batch_matvec_rows"};

Status parse_cuda(const YamlMap& m, cuda::KernelConfig& k, StrategyConfig* s) {
  RINFER_RETURN_IF_ERROR(
      m.check_keys(std::vector<std::string_view>(std::begin(kCudaKeys), std::end(kCudaKeys))));
  RINFER_ASSIGN_OR_RETURN(auto split, m.get_enum("matvec_split", {"auto", "1", "2", "4"}));
  if (split) k.matvec_split = *split == 0 ? 0 : 1 << (*split - 1);
  RINFER_ASSIGN_OR_RETURN(auto stream, m.get_enum("matvec_stream", {"auto", "always", "never"}));
  if (stream) k.matvec_stream = static_cast<cuda::MatvecKernel>(*stream);
  RINFER_ASSIGN_OR_RETURN(
      auto kb, m.get_int("matvec_stream_kb", cuda::kMinMatvecStreamKb, cuda::kMaxMatvecStreamKb));
  if (kb) k.matvec_stream_kb = static_cast<int>(*kb);
  RINFER_ASSIGN_OR_RETURN(auto l2, m.get_enum("producer_l2", {"auto", "off", "narrow", "all"}));
  if (l2) k.producer_l2 = static_cast<cuda::ProducerL2>(*l2);
  RINFER_ASSIGN_OR_RETURN(auto mma, m.get_bool("attention_mma"));
  if (mma) k.attention_mma = *mma;
  RINFER_ASSIGN_OR_RETURN(auto pdl, m.get_bool("pdl"));
  if (pdl) k.pdl = *pdl;
  RINFER_ASSIGN_OR_RETURN(auto sn, m.get_bool("split_norm"));
  if (sn) k.split_norm = *sn;
  RINFER_ASSIGN_OR_RETURN(auto rm, m.get_bool("runner_matvec"));
  if (rm) k.runner_matvec = *rm;
  RINFER_ASSIGN_OR_RETURN(auto bm, m.get_int("batch_matvec_rows", 0, cuda::kMaxBatchMatvecRows));
  if (bm) k.batch_matvec_rows = static_cast<int>(*bm);
  if (s != nullptr) {
    for (std::string_view key : kCudaKeys) note_origin(m, key, *s);
  }
  return ok_status();
}

Status parse(const YamlMap& m, StrategyConfig& s) {
  RINFER_RETURN_IF_ERROR(m.check_keys({"impl", "cuda"}));
  RINFER_ASSIGN_OR_RETURN(auto impl, m.get_enum("impl", {"reference", "fast"}));
  if (impl) s.kernels = *impl == 0 ? cpu::Impl::kReference : cpu::Impl::kFast;
  note_origin(m, "impl", s);
  RINFER_ASSIGN_OR_RETURN(auto cuda_map, m.get_map("cuda"));
  if (cuda_map) RINFER_RETURN_IF_ERROR(parse_cuda(*cuda_map, s.cuda_kernels, &s));
  return ok_status();
}

Status validate(const StrategyConfig& s, const Device& device) {
  if (device.is_cuda() && s.kernels == cpu::Impl::kReference) {
    return key_conflict(s.origins, "strategies.kernels.impl", "device",
                        fmt::format("reference selects the scalar CPU kernels; device {} runs the "
                                    "CUDA kernels (there is one set): use fast or remove the key",
                                    device.to_string()));
  }
  return ok_status();
}

const char* split_name(int split) {
  return split == 1 ? "1" : split == 2 ? "2" : split == 4 ? "4" : "auto";
}
constexpr const char* kStreamNames[] = {"auto", "always", "never"};
constexpr const char* kL2Names[] = {"auto", "off", "narrow", "all"};

// On the CPU the kernel set; on CUDA the switches that differ from the defaults ("" if none).
std::string describe(const StrategyConfig& s, const Device& device) {
  if (device.is_cpu()) {
    return fmt::format("kernels {}", s.kernels == cpu::Impl::kFast ? "fast" : "reference");
  }
  const cuda::KernelConfig& k = s.cuda_kernels;
  const cuda::KernelConfig d;
  std::string out;
  auto add = [&out](std::string part) { out += (out.empty() ? "kernels " : ", ") + part; };
  if (k.matvec_split != d.matvec_split)
    add(fmt::format("matvec_split {}", split_name(k.matvec_split)));
  if (k.matvec_stream != d.matvec_stream) {
    add(fmt::format("matvec_stream {}", kStreamNames[static_cast<int>(k.matvec_stream)]));
  }
  if (k.matvec_stream_kb != d.matvec_stream_kb) {
    add(fmt::format("matvec_stream_kb {}", k.matvec_stream_kb));
  }
  if (k.producer_l2 != d.producer_l2) {
    add(fmt::format("producer_l2 {}", kL2Names[static_cast<int>(k.producer_l2)]));
  }
  if (k.attention_mma != d.attention_mma)
    add(fmt::format("attention_mma {}", on_off(k.attention_mma)));
  if (k.pdl != d.pdl) add(fmt::format("pdl {}", on_off(k.pdl)));
  if (k.split_norm != d.split_norm) add(fmt::format("split_norm {}", on_off(k.split_norm)));
  if (k.runner_matvec != d.runner_matvec) {
    add(fmt::format("runner_matvec {}", on_off(k.runner_matvec)));
  }
  if (k.batch_matvec_rows != d.batch_matvec_rows) {
    add(fmt::format("batch_matvec_rows {}", k.batch_matvec_rows));
  }
  return out;
}

}  // namespace

Status parse_cuda_kernels(const YamlMap& m, cuda::KernelConfig& k) {
  return parse_cuda(m, k, nullptr);
}

std::string describe_cuda_kernels(const cuda::KernelConfig& k) {
  return fmt::format(
      "{{matvec_split: {}, matvec_stream: {}, matvec_stream_kb: {}, producer_l2: {}, "
      "attention_mma: {}, pdl: {}, split_norm: {}, runner_matvec: {}, "
      "batch_matvec_rows: {}}}",
      split_name(k.matvec_split), kStreamNames[static_cast<int>(k.matvec_stream)],
      k.matvec_stream_kb, kL2Names[static_cast<int>(k.producer_l2)], k.attention_mma, k.pdl,
      k.split_norm, k.runner_matvec, k.batch_matvec_rows);
}

const StrategyInfo& kernels_strategy() {
  static const StrategyInfo info{
      "kernels",
      "each device's kernel set: CPU SIMD or the scalar reference; the CUDA kernels' switches",
      {{"impl", "reference|fast", "fast",
        "cpu: fast = Highway SIMD, tiled prefill, integer dot products; reference = scalar, f64 "
        "sums"},
       {"cuda.matvec_split", "auto|1|2|4", "auto",
        "cuda decode matvecs' split-K: auto by shape and SM count, or forced"},
       {"cuda.matvec_stream", "auto|always|never", "auto",
        "cuda Q8_0/Q4_0 decode matvec: weights streamed through shared memory (auto: large "
        "matrices) or the register kernel (never)"},
       {"cuda.matvec_stream_kb", "int in [16, 220]", "96",
        "cuda streaming matvec's shared-memory ring a block, in KB"},
       {"cuda.producer_l2", "auto|off|narrow|all", "auto",
        "cuda residual+norm matvecs' L2 prefetch of their second half (auto: Q8_0 rows <= 8192)"},
       {"cuda.attention_mma", "bool", "true",
        "cuda fused decode attention on the tensor cores (bf16 cache, head_dim 64/128); false: "
        "the scalar f32 split"},
       {"cuda.pdl", "bool", "true",
        "cuda programmatic dependent launch of the decode kernels (sm_90+)"},
       {"cuda.split_norm", "bool", "true",
        "cuda decode RMSNorm as partial sums in the producing matvec; false: norm kernels"},
       {"cuda.runner_matvec", "bool", "true",
        "cuda engine core's one-sequence decode steps through the decode matvecs; false: the "
        "batched steps' GEMMs"},
       {"cuda.batch_matvec_rows", "int in [0, 8]", "8",
        "cuda engine core's steps of at most this many tokens over quantized weights through "
        "the small-batch matvec (weights read once, dequantized in registers); 0: the GEMMs"}},
      "{impl: reference}",
      "LoadOptions::cpu.ops.impl, LoadOptions::cuda.kernels",
      "cpu, cuda",
      "docs/strategies/kernels.md",
      parse,
      validate,
      describe};
  return info;
}

}  // namespace rinfer
