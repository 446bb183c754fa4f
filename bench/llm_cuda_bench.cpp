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
//                  [--quick] [--format a,b,...] [--host-sampling] [--engine-core] [--out FILE.json]
//       decode: with device sampling (strategies.device_sampling, the generator's default on
//       CUDA), greedy tokens chosen on the device, each step queued before the host reads the
//       last token; the "host sampling" row copies the logits to the host every step instead.
//       --host-sampling: a "host sampling" row after each format's (A/B in one process).
//       --format: only those formats' rows, in that order, without the switch-off rows (a
//       format as a one-model process runs it: up to ac4b08d a q4_0 model made after others
//       decoded 1-3% slower than one made first, cause not found; docs/gpu-workflow.md).
//   llm_cuda_bench --profile [--shape S] [--format F] [--skip N] [--device-sampling]
//                  [--decode-tokens N | --prefill N]
//       one shape and format: a 128-token prompt, --skip N untimed steps (later positions), 64
//       timed warm-up steps (their median printed), then N decode steps (default
//       4) between cudaProfilerStart/Stop for `ncu --profile-from-start off`, and their wall
//       times (per step, and kernel count per step from the launches seen) on stdout; with
//       --prefill N, one forward of N tokens into an empty cache instead (after a warm-up);
//       with --device-sampling, the decode steps through decode_on_device (greedy); --ctx N: a
//       KV cache of N positions (default 4096; the decode attention's grid is sized for it);
//       with --engine-core, N decode steps of a request through the engine core instead (steps
//       queued ahead), after 64 warm ones, or with --prefill N, a prefill of N tokens through
//       the engine core (after a warm-up one).
//   --engine-core: after each row with the KV cache and device sampling, a row of the same
//       decode (a 128-token prompt, greedy, one request) and prefill 2048 through the engine core
//       (the paged KV arena, the runner, decode steps queued ahead), its reps interleaved with the
//       row's own, and the ratio of the two (what `rinfer run` at one seat costs over the model's
//       own single-sequence decode), and the core's decode without queueing ahead beside it.
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
#include "kv/kv_cache.h"
#include "llm_cuda_bench.h"
#include "models/llama/cuda/llama_cuda_model.h"
#include "models/llama/shapes.h"
#include "ops/cpu/sampler.h"
#include "ops/cuda/ops_cuda.h"
#include "strategies/registry.h"

namespace rinfer {
namespace {

using bench::Clock;
using bench::greedy_on_device;
using bench::profile_decode;
using bench::seconds_since;

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
  auto stream = cuda::Stream::create(0);
  if (!stream.ok()) return l;
  cudaStream_t st = stream->get();
  const size_t bytes = size_t{2} << 30;
  auto a = cuda::DeviceBuffer::create(bytes, 0, st);
  auto b = cuda::DeviceBuffer::create(bytes, 0, st);
  auto e0 = cuda::Event::create(0);
  auto e1 = cuda::Event::create(0);
  if (!a.ok() || !b.ok() || !e0.ok() || !e1.ok()) return l;
  std::vector<double> t;
  for (int r = 0; r < reps + 1; ++r) {
    (void)e0->record(st);
    cudaMemcpyAsync(b->data(), a->data(), bytes, cudaMemcpyDeviceToDevice, st);
    (void)e1->record(st);
    (void)e1->synchronize();
    if (r > 0) t.push_back(*cuda::elapsed_ms(*e0, *e1));
  }
  l.copy_gbs = 2.0 * static_cast<double>(bytes) / (bench::median(t) * 1e-3) / 1e9;
  // bf16 GEMM 8192^3 through cuBLASLt.
  auto lt = cuda::CublasLt::create(0);
  const int64_t n = 8192;
  auto x = cuda::DeviceBuffer::create(static_cast<size_t>(n * n * 2), 0, st);
  auto w = cuda::DeviceBuffer::create(static_cast<size_t>(n * n * 2), 0, st);
  auto y = cuda::DeviceBuffer::create(static_cast<size_t>(n * n * 2), 0, st);
  if (!lt.ok() || !x.ok() || !w.ok() || !y.ok()) return l;
  (void)cuda::fill_random(x->data(), DType::kBF16, n * n, -1, 1, 1, st);
  (void)cuda::fill_random(w->data(), DType::kBF16, n * n, -1, 1, 2, st);
  t.clear();
  for (int r = 0; r < reps + 1; ++r) {
    (void)e0->record(st);
    (void)cuda::gemm_lowp(*lt, DType::kBF16, w->data(), n, x->data(), n, n, n, n, DType::kBF16,
                          y->data(), 0.0f, st);
    (void)e1->record(st);
    (void)e1->synchronize();
    if (r > 0) t.push_back(*cuda::elapsed_ms(*e0, *e1));
  }
  l.gemm_tflops = 2.0 * std::pow(static_cast<double>(n), 3) / (bench::median(t) * 1e-3) / 1e12;
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
  // --engine-core: the same through the engine core (0: not measured), and each figure over the
  // row's own, the medians of the interleaved reps' ratios.
  double core_decode_ms = 0, core_prefill2048 = 0, core_decode_ratio = 0, core_prefill_ratio = 0;
  double core_stepwise_ratio = 0;  // the core's decode without queueing ahead, over the row's
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

constexpr DType kFormats[] = {DType::kBF16, DType::kF16,  DType::kQ8_0,
                              DType::kQ4_0, DType::kQ4_1, DType::kQ4_K};

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
                    bool do_prefill, bool engine_core) {
  Result1 r;
  auto m = llama::make_random_cuda_model(hp, v.dtype, 1234, v.opts);
  if (!m.ok()) {
    r.error = m.status().to_string();
    return r;
  }
  DecoderModel& model = **m;
  r.weight_bytes = model.weight_bytes_per_token();
  const int64_t n_ctx = 4096;
  std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
  std::vector<int32_t> tokens(4096), pos(4096);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919 + 13) % static_cast<size_t>(hp.n_vocab));
    pos[i] = static_cast<int32_t>(i);
  }
  auto cache = model.create_cache(n_ctx);
  if (!cache.ok()) {
    r.error = cache.status().to_string();
    return r;
  }
  const int32_t last = 0;
  auto prefill = [&](int64_t n) -> double {
    cache->clear();
    const int32_t row = static_cast<int32_t>(n - 1);
    DecoderBatch b{std::span(tokens).first(static_cast<size_t>(n)),
                   std::span(pos).first(static_cast<size_t>(n)), std::span(&row, 1)};
    const auto t0 = Clock::now();
    Status st = model.infer(b, *cache, logits.data());
    const double s = seconds_since(t0);
    if (!st.ok()) r.error = st.to_string();
    return s;
  };
  if (do_prefill) {
    for (int64_t n : {512, 2048}) {
      std::vector<double> t;
      prefill(n);  // warm-up (cuBLASLt heuristics, allocator)
      for (int i = 0; i < reps; ++i) t.push_back(prefill(n));
      const double tok_s = static_cast<double>(n) / bench::median(t);
      (n == 512 ? r.prefill512 : r.prefill2048) = tok_s;
    }
  }
  // n decode steps from position p0 (the cache holds p0 tokens): their times in ms. Device
  // sampling (the generator's path with the strategy on): greedy tokens chosen on the device,
  // each step queued before the host reads the previous one's token; a step's time is the
  // interval between the host receiving two tokens. Host sampling: teacher-forced tokens, the
  // logits copied to the host every step (the generator then samples there).
  auto decode_steps = [&](int64_t p0, int64_t n, std::vector<double>& ms) {
    ms.clear();
    if (v.opts.cuda.device_sampling && v.kv_cache) {
      if (Status st = greedy_on_device(model, *cache, tokens, p0, n, &ms); !st.ok()) {
        r.error = st.to_string();
      }
      return;
    }
    for (int64_t i = 0; i < n && r.error.empty(); ++i) {
      const int64_t p = p0 + i;
      const auto t0 = Clock::now();
      Status st;
      if (v.kv_cache) {
        DecoderBatch d{std::span(tokens).subspan(static_cast<size_t>(p), 1),
                       std::span(pos).subspan(static_cast<size_t>(p), 1), std::span(&last, 1)};
        st = model.infer(d, *cache, logits.data());
      } else {
        cache->clear();
        const int32_t row = static_cast<int32_t>(p);
        DecoderBatch d{std::span(tokens).first(static_cast<size_t>(p + 1)),
                       std::span(pos).first(static_cast<size_t>(p + 1)), std::span(&row, 1)};
        st = model.infer(d, *cache, logits.data());
      }
      ms.push_back(seconds_since(t0) * 1e3);
      if (!st.ok()) r.error = st.to_string();
    }
  };
  // Decode: a 128-token prompt, then decode_tokens steps. Without the KV cache every step
  // recomputes the whole prefix.
  const int64_t prompt = 128;
  std::vector<double> step_ms;
  for (int rep = 0; rep < 2 && r.error.empty(); ++rep) {
    prefill(prompt);
    decode_steps(prompt, decode_tokens, step_ms);
  }
  if (do_prefill && v.kv_cache && r.error.empty()) {
    cache->clear();
    for (int64_t p0 = 0; p0 < kLongPrompt && r.error.empty(); p0 += 2048) {
      const int64_t n = std::min<int64_t>(2048, kLongPrompt - p0);
      const int32_t row = static_cast<int32_t>(n - 1);
      DecoderBatch b{std::span(tokens).subspan(static_cast<size_t>(p0), static_cast<size_t>(n)),
                     std::span(pos).subspan(static_cast<size_t>(p0), static_cast<size_t>(n)),
                     std::span(&row, 1)};
      if (Status st = model.infer(b, *cache, logits.data()); !st.ok()) r.error = st.to_string();
    }
    std::vector<double> long_ms;
    if (r.error.empty()) decode_steps(kLongPrompt, kLongSteps, long_ms);
    if (!long_ms.empty()) r.decode_long_ms = bench::median(long_ms);
  }
  if (engine_core && v.kv_cache && v.opts.cuda.device_sampling && r.error.empty()) {
    // The same decode and prefill 2048 through the engine core, each rep beside one of the
    // model's own.
    EngineCoreOptions eo;
    eo.n_ctx = n_ctx;
    eo.scheduler.max_seqs = 1;
    eo.scheduler.max_batched_tokens = 2048;
    eo.queue_ahead = true;
    auto core = EngineCore::create(model, eo, nullptr);
    eo.queue_ahead = false;
    auto stepwise = EngineCore::create(model, eo, nullptr);
    if (!core.ok() || !stepwise.ok()) {
      r.error = (core.ok() ? stepwise.status() : core.status()).to_string();
      return r;
    }
    std::vector<double> own_ms, core_ms, dec_ratio, pf_ratio, core_pf, step_ratio;
    const auto head = std::span<const int32_t>(tokens).first(static_cast<size_t>(prompt));
    for (int rep = 0; rep < std::max(3, reps) && r.error.empty(); ++rep) {
      prefill(prompt);
      decode_steps(prompt, decode_tokens, own_ms);
      const double own = bench::median(own_ms);
      core_ms.clear();
      auto c = core_request(**core, head, decode_tokens + 1, &core_ms);
      if (!c.ok()) {
        r.error = c.status().to_string();
        break;
      }
      dec_ratio.push_back(own / bench::median(core_ms));
      r.core_decode_ms += bench::median(core_ms) / std::max(3, reps);
      core_ms.clear();
      if (auto sw = core_request(**stepwise, head, decode_tokens + 1, &core_ms); !sw.ok()) {
        r.error = sw.status().to_string();
        break;
      }
      step_ratio.push_back(own / bench::median(core_ms));
      if (!do_prefill) continue;
      const double own_pf = 2048.0 / prefill(2048);
      auto t = core_request(**core, std::span<const int32_t>(tokens).first(2048), 1, nullptr);
      if (!t.ok()) {
        r.error = t.status().to_string();
        break;
      }
      core_pf.push_back(2048.0 / (*t / 1e3));
      pf_ratio.push_back(core_pf.back() / own_pf);
    }
    if (!dec_ratio.empty()) r.core_decode_ratio = bench::median(dec_ratio);
    if (!step_ratio.empty()) r.core_stepwise_ratio = bench::median(step_ratio);
    if (!pf_ratio.empty()) {
      r.core_prefill_ratio = bench::median(pf_ratio);
      r.core_prefill2048 = bench::median(core_pf);
    }
  }
  if (!step_ms.empty()) {
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
  bool quick = false, profile = false, host_rows = false, device_profile = false;
  bool engine_core = false;
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
    else if (a == "--engine-core")
      engine_core = true;
    else if (a == "--host-sampling")
      host_rows = true;
    else if (a == "--device-sampling")
      device_profile = true;
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
                   "[--decode-tokens N] [--quick] [--format F] [--host-sampling] [--engine-core] "
                   "[--out FILE] "
                   "[--kernels '{matvec_split: 2, pdl: false}'] | --profile [--shape S] "
                   "[--format F] [--skip N] [--device-sampling] [--ctx N] [--decode-tokens N | "
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
                   "q8_0, q4_0, q4_1, q4_k)\n",
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
                          decode_tokens == 256 ? 4 : decode_tokens, prefill, skip, device_profile,
                          profile_ctx, kernels, engine_core);
  }
  const Limits lim = measure_limits(5);
  std::printf("device %s: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s (measured)\n\n",
              devices->at(0).name.c_str(), lim.copy_gbs, lim.gemm_tflops);

  nlohmann::ordered_json j;
  j["benchmark"] = "bench/llm_cuda_bench.cpp";
  j["git_sha"] =
      bench::git_sha(RINFER_SOURCE_DIR) + (bench::git_dirty(RINFER_SOURCE_DIR) ? "+dirty" : "");
  j["date"] = bench::utc_date();
  j["machine"] = bench::machine_json("h200");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  j["device"] = {{"name", devices->at(0).name},
                 {"memory_bytes", devices->at(0).total_memory},
                 {"cuda_driver", driver},
                 {"cuda_runtime", runtime}};
  j["limits"] = {{"copy_gbs", lim.copy_gbs}, {"gemm_bf16_tflops", lim.gemm_tflops}};
  j["method"] =
      "random weights made on the device; decode: 128-token prompt then N greedy steps at batch 1, "
      "each token chosen on the device and the next step queued before the host reads it (the "
      "generator's device sampling; the host sampling row copies the logits to the host every "
      "step instead), median interval between tokens over 2 runs; decode at 4k (optimized rows): a "
      "3968-token prompt, then the median of 64 steps, "
      "its limit counting the K/V rows read (bf16); prefill: one forward of 512 / 2048 tokens into "
      "an empty cache, logits of the last "
      "row, median of --reps after a warm-up";
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
    std::vector<DType> formats =
        sname == "llama3-8b"
            ? std::vector<DType>{DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}
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
      v.opts.cuda.device_sampling = false;  // infer() allocates per step; the device loop once
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
                                    v.change.rfind("weights", 0) == 0, engine_core);
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
      if (r.error.empty() && r.core_decode_ms > 0) {
        const double core_tok_s = 1e3 / r.core_decode_ms;
        std::printf(
            "| %s, engine core | %.1f (x%.4f of the row's; step by step x%.4f) | %.0f | %.0f%% "
            "|  |  | %s | %.0f | %s |  |\n",
            v.name.c_str(), core_tok_s, r.core_decode_ratio, r.core_stepwise_ratio, limit_dec,
            100 * core_tok_s / limit_dec,
            r.core_prefill2048 > 0
                ? fmt::format("{:.0f} (x{:.4f})", r.core_prefill2048, r.core_prefill_ratio).c_str()
                : "",
            limit_pf,
            r.core_prefill2048 > 0
                ? fmt::format("{:.0f}%", 100 * r.core_prefill2048 / limit_pf).c_str()
                : "");
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
      if (r.core_decode_ms > 0) {
        e["engine_core"] = {{"decode_tok_s", 1e3 / r.core_decode_ms},
                            {"decode_ratio", r.core_decode_ratio},
                            {"decode_step_by_step_ratio", r.core_stepwise_ratio},
                            {"prefill_2048_tok_s", r.core_prefill2048},
                            {"prefill_2048_ratio", r.core_prefill_ratio}};
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
