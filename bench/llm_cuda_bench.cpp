// LLM inference on the GPU at real shapes: decode tokens/s at batch 1 and prefill tokens/s at
// 512 and 2048 tokens, for the Llama-3-8B shape (hidden 4096, FFN 14336, 32 layers, 32 heads,
// 8 KV heads, 32k vocabulary) and the SmolLM2-135M shape, with random weights made on the
// device in each format, and every CUDA strategy switched off one at a time (the table of
// issue 6: CUDA graphs, fusions, caching allocator, KV cache, weight format).
//
// Each figure stands beside its limit: decode = weight bytes read per token over the measured
// copy bandwidth (at 4k positions, the K/V rows read too); prefill = matmul + attention FLOPs
// over the measured bf16 GEMM peak.
//
//   llm_cuda_bench [--shape llama3-8b|smollm2|all] [--reps N] [--decode-tokens N]
//                  [--quick] [--format a,b,...] [--host-sampling] [--out FILE.json]
//       every row through the engine core at one seat (as `rinfer run` and `rinfer bench`):
//       decode with device sampling (strategies.device_sampling), greedy tokens chosen on the
//       device, the steps of a request alone queued ahead of the host; the "host sampling" row
//       copies the logits to the host every step instead. --host-sampling: a "host sampling"
//       row after each format's (A/B in one process). --format: only those formats' rows, in
//       that order, without the switch-off rows (a format as a one-model process runs it: up to
//       ac4b08d a q4_0 model made after others decoded 1-3% slower than one made first, cause not
//       found; docs/gpu-workflow.md).
//   llm_cuda_bench --profile [--shape S] [--format F] [--skip N] [--ctx N]
//                  [--decode-tokens N | --prefill N]
//       one shape and format through the engine core: a 128-token prompt's (--skip N: 128 + N
//       tokens', for steps at later positions) request whose decode
//       steps after its first 65 tokens (64 timed warm ones, their median printed) run N at a time
//       (default 4) between cudaProfilerStart/Stop for `ncu --profile-from-start off` and
//       Nsight Systems; with --prefill N, a prefill of N tokens (after a warm-up one) instead;
//       --ctx N: an arena of N positions (default 4096; the decode graphs' bound).
//   --kernels '{matvec_split: 2, pdl: false}' (or matvec_split=2,pdl=false): strategies.kernels.
//       cuda for every row (the keys and domains of a recipe; `rinfer strategies` lists them).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/cuda/cublas_lt.h"
#include "core/cuda/device_allocator.h"
#include "core/cuda/stream.h"
#include "core/cuda_info.h"
#include "core/error.h"
#include "engine/engine_core.h"
#include "llm_cuda_bench.h"
#include "models/llama/cuda/llama_cuda_model.h"
#include "models/llama/shapes.h"
#include "ops/cuda/ops_cuda.h"
#include "strategies/registry.h"
#include "tools/ceilings.h"

namespace rinfer {
namespace {

using bench::Clock;
using bench::profile_decode;
using bench::seconds_since;
using bench::synthetic_tokens;

// --kernels: a YAML mapping of strategies.kernels.cuda's keys, or key=value,key=value (one shell
// word), applied over `k`.
Status parse_kernels_flag(const std::string& text, cuda::KernelConfig& k) {
  std::string yaml = text;
  if (yaml.find('{') == std::string::npos) {
    yaml = "{";
    for (char c : text)
      yaml += c == '=' ? std::string(": ") : c == ',' ? std::string(", ") : std::string(1, c);
    yaml += "}";
  }
  YAML::Node node;
  try {
    node = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return invalid_argument("--kernels: not YAML: {}", e.what());
  }
  RINFER_ASSIGN_OR_RETURN(YamlMap m, YamlMap::from(node, "--kernels", "kernels.cuda"));
  return parse_cuda_kernels(m, k);
}


DecoderHParams shape(const std::string& name) {
  return llama::named_shape(name == "llama3-8b" ? "llama3-8b" : "smollm2").value();
}

struct Limits {
  double copy_gbs = 0;
  double gemm_tflops = 0;
};

Limits measure_limits(int reps) {
  Limits l;
  auto c = measure_cuda_ceilings(0, reps);
  if (!c.ok()) return l;
  l.copy_gbs = c->bandwidth_gbs;
  l.gemm_tflops = c->peak_tflops;
  return l;
}

// Matmul FLOPs of one token (every matrix once; the output projection only where asked).
double matmul_flops_per_token(const DecoderHParams& hp, bool with_output) {
  const double e = static_cast<double>(hp.n_embd);
  const double q = static_cast<double>(hp.n_head * hp.head_dim);
  const double kv = static_cast<double>(hp.kv_dim());
  const double ff = static_cast<double>(hp.n_ff);
  double per_layer = e * (q + 2 * kv) + q * e + 3 * e * ff;
  double f = 2.0 * per_layer * static_cast<double>(hp.n_layer);
  if (with_output) f += 2.0 * e * static_cast<double>(hp.n_vocab);
  return f;
}

// Causal attention FLOPs of a prefill of n tokens: QK^T and PV over n^2/2 pairs.
double attention_flops(const DecoderHParams& hp, int64_t n) {
  return 4.0 * static_cast<double>(hp.n_layer * hp.n_head * hp.head_dim) * static_cast<double>(n) *
         static_cast<double>(n) / 2.0;
}

struct Variant {
  std::string name;
  std::string change;  // what differs from "optimized"
  DType dtype;
  LoadOptions opts;
  bool kv_cache = true;
};

struct Result1 {
  double decode_tok_s = 0, decode_ms_p10 = 0, decode_ms_p90 = 0, decode_ms = 0;
  double decode_long_ms = 0;  // a decode step at positions kLongPrompt.. (optimized rows)
  double prefill512 = 0, prefill2048 = 0;
  uint64_t weight_bytes = 0;
  uint64_t device_peak = 0;
  std::string error;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  const auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1));
  return v[i];
}

constexpr DType kFormats[] = {DType::kBF16, DType::kF16,  DType::kQ8_0,  DType::kQ4_0,
                              DType::kQ4_1, DType::kQ4_K, DType::kF8E4M3};

// Decode at a long context: a kLongPrompt-token prompt (in chunks of 2048), then kLongSteps
// steps; the KV cache holds 4096 positions.
constexpr int64_t kLongPrompt = 3968, kLongSteps = 64;

// One request through the engine core: the intervals between its tokens in `ms` (the first,
// which ends the prompt, left out), or its time to the first token when ms is null.
Result<double> core_request(EngineCore& core, std::span<const int32_t> prompt, int64_t n,
                            std::vector<double>* ms) {
  core.clear_prefix_cache();
  RequestParams p;
  p.prompt.assign(prompt.begin(), prompt.end());
  p.max_tokens = n;
  p.ignore_eos = true;
  p.sampling.temperature = 0.0f;
  p.sampling.repeat_penalty = 1.0f;
  auto t_prev = Clock::now();
  int64_t got = 0;
  p.on_event = [&](const RequestEvent& ev) {
    const auto now = Clock::now();
    if (ms != nullptr && got > 0 && !ev.tokens.empty()) {
      ms->push_back(std::chrono::duration<double, std::milli>(now - t_prev).count());
    }
    got += static_cast<int64_t>(ev.tokens.size());
    t_prev = now;
  };
  RINFER_ASSIGN_OR_RETURN(const RequestOutcome out, run_request(core, std::move(p)));
  return out.stats.ttft_ms;
}

Result1 run_variant(const DecoderHParams& hp, const Variant& v, int reps, int decode_tokens,
                    bool do_prefill) {
  Result1 r;
  auto m = llama::make_random_cuda_model(hp, v.dtype, 1234, v.opts);
  if (!m.ok()) {
    r.error = m.status().to_string();
    return r;
  }
  DecoderModel& model = **m;
  r.weight_bytes = model.weight_bytes_per_token();
  // One seat over a paged arena of 4096 positions; passes of up to 2048 tokens; no prefix
  // cache (every rep computes its prompt). Without the KV cache every step recomputes the whole
  // sequence.
  EngineCoreOptions eo;
  eo.n_ctx = 4096;
  eo.prefix_caching = false;
  eo.scheduler.max_seqs = 1;
  eo.scheduler.max_batched_tokens = 2048;
  eo.scheduler.recompute_each_step = !v.kv_cache;
  auto core = EngineCore::create(model, eo, nullptr);
  if (!core.ok()) {
    r.error = core.status().to_string();
    return r;
  }
  const std::vector<int32_t> tokens = synthetic_tokens(4096, hp.n_vocab);
  const std::span<const int32_t> all(tokens);
  // A prefill of n tokens: one teacher-forced pass, the last row's logits.
  const auto none = [](int64_t, std::span<const float>) { return ok_status(); };
  auto prefill = [&](int64_t n) -> double {
    const auto t0 = Clock::now();
    const Status st = (*core)->score(all.first(static_cast<size_t>(n)), n - 1, 0, none);
    const double s = seconds_since(t0);
    if (!st.ok()) r.error = st.to_string();
    return s;
  };
  if (do_prefill) {
    for (int64_t n : {512, 2048}) {
      std::vector<double> t;
      prefill(n);  // warm-up (cuBLASLt's autotuning, the allocator)
      for (int i = 0; i < reps && r.error.empty(); ++i) t.push_back(prefill(n));
      if (t.empty()) break;
      (n == 512 ? r.prefill512 : r.prefill2048) = static_cast<double>(n) / bench::median(t);
    }
  }
  // Decode: a request of a 128-token prompt and decode_tokens greedy tokens (with device
  // sampling each chosen on the device; a request alone has its steps queued ahead of the host),
  // the intervals between its tokens; the second of two runs.
  const int64_t prompt = 128;
  std::vector<double> step_ms;
  for (int rep = 0; rep < 2 && r.error.empty(); ++rep) {
    step_ms.clear();
    auto c = core_request(**core, all.first(prompt), decode_tokens + 1, &step_ms);
    if (!c.ok()) r.error = c.status().to_string();
  }
  if (do_prefill && v.kv_cache && r.error.empty()) {
    std::vector<double> long_ms;
    auto c = core_request(**core, all.first(kLongPrompt), kLongSteps + 1, &long_ms);
    if (!c.ok()) r.error = c.status().to_string();
    if (!long_ms.empty()) r.decode_long_ms = bench::median(long_ms);
  }
  if (!step_ms.empty() && r.error.empty()) {
    r.decode_ms = bench::median(step_ms);
    r.decode_ms_p10 = percentile(step_ms, 0.1);
    r.decode_ms_p90 = percentile(step_ms, 0.9);
    r.decode_tok_s = 1e3 / r.decode_ms;
  }
  r.device_peak = model.device_bytes_peak();
  return r;
}

int main_impl(int argc, char** argv) {
  std::string which = "all", out;
  int reps = 5, decode_tokens = 256;
  bool quick = false, profile = false, host_rows = false;
  int64_t profile_ctx = 4096;  // --profile: the KV cache's positions (the decode graph's bound)
  int prefill = 0, skip = 0;
  std::string format;          // --profile: q4_1 when not given; the table: every format
  cuda::KernelConfig kernels;  // --kernels: strategies.kernels.cuda as a YAML mapping
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : std::string(); };
    if (a == "--shape")
      which = next();
    else if (a == "--reps")
      reps = std::stoi(next());
    else if (a == "--decode-tokens")
      decode_tokens = std::stoi(next());
    else if (a == "--out")
      out = next();
    else if (a == "--quick")
      quick = true;
    else if (a == "--host-sampling")
      host_rows = true;
    else if (a == "--ctx")
      profile_ctx = std::stoll(next());
    else if (a == "--profile")
      profile = true;
    else if (a == "--format")
      format = next();
    else if (a == "--prefill")
      prefill = std::stoi(next());
    else if (a == "--skip")
      skip = std::stoi(next());
    else if (a == "--kernels") {
      const Status st = parse_kernels_flag(next(), kernels);
      if (!st.ok()) {
        std::fprintf(stderr, "llm_cuda_bench: %s\n", st.to_string().c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: llm_cuda_bench [--shape llama3-8b|smollm2|all] [--reps N] "
                   "[--decode-tokens N] [--quick] [--format F] [--host-sampling] [--out FILE] "
                   "[--kernels '{matvec_split: 2, pdl: false}'] | --profile [--shape S] "
                   "[--format F] [--skip N] [--ctx N] [--decode-tokens N | "
                   "--prefill N]\n");
      return 2;
    }
  }
  // --format a,b,...: the weight formats asked for, in that order; every name must be one the
  // benchmark makes.
  std::vector<DType> wanted;
  for (size_t b = 0; b < format.size();) {
    const size_t e = std::min(format.find(',', b), format.size());
    const std::string_view name = std::string_view(format).substr(b, e - b);
    const DType* c = std::find_if(std::begin(kFormats), std::end(kFormats),
                                  [&](DType t) { return dtype_name(t) == name; });
    if (c == std::end(kFormats)) {
      std::fprintf(stderr,
                   "llm_cuda_bench: --format: unknown weight format '%.*s' (bf16, f16, "
                   "q8_0, q4_0, q4_1, q4_k, f8_e4m3)\n",
                   static_cast<int>(name.size()), name.data());
      return 2;
    }
    wanted.push_back(*c);
    b = e + 1;
  }
  auto devices = cuda_devices();
  if (!devices.ok()) {
    std::fprintf(stderr, "llm_cuda_bench: %s\n", devices.status().to_string().c_str());
    return 1;
  }
  if (profile) {
    const DType t = wanted.size() == 1 ? wanted[0] : DType::kQ4_1;
    return profile_decode(shape(which == "all" ? "smollm2" : which), t,
                          decode_tokens == 256 ? 4 : decode_tokens, prefill, skip, profile_ctx,
                          kernels);
  }
  const Limits lim = measure_limits(5);
  std::printf("device %s: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s (measured)\n\n",
              devices->at(0).name.c_str(), lim.copy_gbs, lim.gemm_tflops);

  nlohmann::ordered_json j;
  j["benchmark"] = "bench/llm_cuda_bench.cpp";
  j["git_sha"] =
      bench::git_sha(RINFER_SOURCE_DIR) + (bench::git_dirty(RINFER_SOURCE_DIR) ? "+dirty" : "");
  j["date"] = bench::utc_date();
  j["machine"] = bench::machine_json(bench::machine_short_name(true, devices->at(0).name));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  j["device"] = {{"name", devices->at(0).name},
                 {"memory_bytes", devices->at(0).total_memory},
                 {"cuda_driver", driver},
                 {"cuda_runtime", runtime}};
  j["limits"] = {{"copy_gbs", lim.copy_gbs}, {"gemm_bf16_tflops", lim.gemm_tflops}};
  j["method"] =
      "random weights made on the device; every figure through the engine core at one seat (a "
      "paged arena of 4096 positions, passes of up to 2048 tokens); decode: a request of a "
      "128-token prompt and N greedy tokens, each chosen on the device with its next step queued "
      "before the host reads it (the host sampling rows copy the logits to the host every step "
      "instead), the median interval between tokens of the second of 2 requests; decode at 4k "
      "(optimized rows): a 3968-token prompt, then the median of 64 steps, its limit counting the "
      "K/V rows read (bf16); prefill: one teacher-forced pass of 512 / 2048 tokens into an empty "
      "cache, logits of the last row, median of --reps after a warm-up";
  j["results"] = nlohmann::ordered_json::array();

  std::vector<std::string> shapes;
  if (which == "all" || which == "llama3-8b") shapes.push_back("llama3-8b");
  if (which == "all" || which == "smollm2") shapes.push_back("smollm2");
  for (const std::string& sname : shapes) {
    const DecoderHParams hp = shape(sname);
    LoadOptions base;
    base.device = Device::cuda(0);
    base.max_batch = 2048;
    base.cuda.kernels = kernels;
    std::vector<Variant> vs;
    std::vector<DType> formats = sname == "llama3-8b"
                                     ? std::vector<DType>{DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                                          DType::kQ4_K, DType::kF8E4M3}
                                     : std::vector<DType>{DType::kBF16, DType::kQ8_0, DType::kQ4_1};
    if (!wanted.empty()) {  // --format: those rows, in that order (no switch-off rows)
      std::vector<DType> picked;
      for (DType t : wanted) {
        if (std::find(formats.begin(), formats.end(), t) != formats.end()) picked.push_back(t);
      }
      formats = picked;
    }
    for (DType t : formats) {
      vs.push_back({"optimized " + std::string(dtype_name(t)),
                    "weights " + std::string(dtype_name(t)), t, base});
      if (host_rows) {
        Variant h{"host sampling " + std::string(dtype_name(t)),
                  "device_sampling off (logits to the host every step)", t, base};
        h.opts.cuda.device_sampling = false;
        vs.push_back(h);
      }
    }
    if (!quick && wanted.empty()) {
      const DType t0 = sname == "llama3-8b" ? DType::kQ4_0 : DType::kQ4_1;
      const std::string tn(dtype_name(t0));
      Variant v{"no pdl " + tn, "programmatic dependent launch off", t0, base};
      v.opts.cuda.kernels.pdl = false;
      vs.push_back(v);
      v = {"no cuda graphs " + tn, "cuda_graphs off", t0, base};
      v.opts.cuda.graphs = false;
      vs.push_back(v);
      v = {"unfused " + tn, "fusion qkv/swiglu/residual_norm off", t0, base};
      v.opts.fusion = FusionOptions{true, false, false, false};
      vs.push_back(v);
      v = {"plain allocator, no graphs " + tn, "allocator plain (cudaMalloc per step)", t0, base};
      v.opts.cuda.allocator = AllocatorKind::kPlain;
      v.opts.cuda.graphs = false;
      v.opts.cuda.device_sampling = false;
      vs.push_back(v);
      v = {"host sampling " + tn, "device_sampling off (logits to the host every step)", t0, base};
      v.opts.cuda.device_sampling = false;
      vs.push_back(v);
      v = {"f32 kv cache " + tn, "kv_cache dtype f32 (keys and values unrounded)", t0, base};
      v.opts.kv_dtype = DType::kF32;
      vs.push_back(v);
      v = {"no kv cache " + tn, "kv_cache off (recompute the prefix)", t0, base};
      v.kv_cache = false;
      v.opts.cuda.graphs = false;
      v.opts.cuda.device_sampling = false;
      vs.push_back(v);
    }
    std::printf("## %s shape (%lld layers, hidden %lld, FFN %lld, %lld/%lld heads, vocab %lld)\n\n",
                sname.c_str(), static_cast<long long>(hp.n_layer),
                static_cast<long long>(hp.n_embd), static_cast<long long>(hp.n_ff),
                static_cast<long long>(hp.n_head), static_cast<long long>(hp.n_head_kv),
                static_cast<long long>(hp.n_vocab));
    std::printf(
        "| variant | decode tok/s (p10-p90 ms) | limit tok/s | %% | decode at 4k tok/s (limit) | "
        "prefill 512 tok/s | prefill 2048 tok/s | limit 2048 | %% | device peak GB "
        "|\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Variant& v : vs) {
      const bool kv = v.kv_cache;
      const Result1 r = run_variant(hp, v, reps, kv ? decode_tokens : 32,
                                    v.change.rfind("weights", 0) == 0);
      const double limit_dec = lim.copy_gbs * 1e9 / static_cast<double>(r.weight_bytes);
      const double f2048 = matmul_flops_per_token(hp, false) * 2048 + attention_flops(hp, 2048);
      const double limit_pf = lim.gemm_tflops * 1e12 / (f2048 / 2048);
      // At the long context each step also reads the K/V rows of every earlier position (bf16).
      const double kv_long = 2.0 * 2.0 * static_cast<double>(hp.n_layer * hp.kv_dim()) *
                             static_cast<double>(kLongPrompt + kLongSteps / 2);
      const double limit_long =
          lim.copy_gbs * 1e9 / (static_cast<double>(r.weight_bytes) + kv_long);
      const double long_tok_s = r.decode_long_ms > 0 ? 1e3 / r.decode_long_ms : 0.0;
      if (!r.error.empty()) {
        std::printf("| %s | error: %s |\n", v.name.c_str(), r.error.c_str());
      } else {
        const std::string long_cell =
            long_tok_s > 0 ? fmt::format("{:.1f} ({:.0f})", long_tok_s, limit_long) : "";
        std::printf(
            "| %s | %.1f (%.3f-%.3f) | %.0f | %.0f%% | %s | %.0f | %.0f | %.0f | %.0f%% | %.2f "
            "|\n",
            v.name.c_str(), r.decode_tok_s, r.decode_ms_p10, r.decode_ms_p90, limit_dec,
            100 * r.decode_tok_s / limit_dec, long_cell.c_str(), r.prefill512, r.prefill2048,
            limit_pf, 100 * r.prefill2048 / limit_pf, static_cast<double>(r.device_peak) / 1e9);
      }
      std::fflush(stdout);
      nlohmann::ordered_json e;
      e["shape"] = sname;
      e["variant"] = v.name;
      e["change"] = v.change;
      e["weights"] = std::string(dtype_name(v.dtype));
      e["cuda_graphs"] = v.opts.cuda.graphs;
      e["fusion"] = {{"qkv", v.opts.fusion.qkv},
                     {"swiglu", v.opts.fusion.swiglu},
                     {"residual_norm", v.opts.fusion.residual_norm}};
      e["allocator"] = v.opts.cuda.allocator == AllocatorKind::kPlain ? "plain" : "caching";
      e["kv_cache"] = v.kv_cache;
      e["kv_dtype"] = std::string(dtype_name(v.opts.kv_dtype.value_or(DType::kBF16)));
      e["device_sampling"] = v.opts.cuda.device_sampling && v.kv_cache;
      e["pdl"] = v.opts.cuda.kernels.pdl;
      e["weight_bytes_per_token"] = r.weight_bytes;
      e["decode_tok_s"] = r.decode_tok_s;
      e["decode_ms_median"] = r.decode_ms;
      e["decode_ms_p10"] = r.decode_ms_p10;
      e["decode_ms_p90"] = r.decode_ms_p90;
      e["decode_limit_tok_s"] = limit_dec;
      if (long_tok_s > 0) {
        e["decode_long_positions"] = {kLongPrompt, kLongPrompt + kLongSteps};
        e["decode_long_tok_s"] = long_tok_s;
        e["decode_long_limit_tok_s"] = limit_long;
      }
      if (r.prefill512 > 0) {
        e["prefill_512_tok_s"] = r.prefill512;
        e["prefill_2048_tok_s"] = r.prefill2048;
        e["prefill_2048_limit_tok_s"] = limit_pf;
      }
      e["device_peak_bytes"] = r.device_peak;
      if (!r.error.empty()) e["error"] = r.error;
      j["results"].push_back(e);
    }
    std::printf("\n");
  }
  if (!out.empty()) return bench::write_json(out, j);
  return 0;
}

}  // namespace
}  // namespace rinfer

int main(int argc, char** argv) { return rinfer::main_impl(argc, argv); }
