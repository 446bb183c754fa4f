// LLM inference on the CPU, baseline and optimized side by side (recipes/llm-chat/smollm2-135m),
// each a client of the engine core, one request at a time (as `rinfer run`):
//   pp   prompt processing: a 512-token prompt (real text: the start of
//        /usr/share/common-licenses/GPL-3) from an empty KV cache, to its first token -> tokens/s
//   tg   generation: greedy decoding from a 1-token prompt, end-of-text ignored (llama-bench's
//        tg), measured over the decode steps                              -> tokens/s
// baseline  = no KV cache (every step recomputes the sequence), reference kernels, 1 thread.
//             It is slow: it generates --baseline-tg tokens (default 16), not 128.
// optimized = KV cache, fast kernels, --threads threads (default: all cores). Best of --reps.
// Decode is also given as a share of the machine's memory read bandwidth, measured here with
// the same threads: bytes of weights (+ KV cache) read per token * tokens/s / bandwidth.
//
// --f32-activations adds a row for the fast kernels with f32 activations (exact, much slower).
//
//   llm_cpu_bench [--model NAME|PATH] [--threads N] [--pp 512] [--tg 128] [--baseline-tg 16]
//                 [--reps 3] [--no-baseline] [--f32-activations] [--machine NAME] [--out FILE]
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "formats/gguf.h"
#include "formats/model_cache.h"
#include "models/model.h"
#include "ops/cpu/ops.h"
#include "tokenizer/tokenizer.h"
#include "tools/ceilings.h"

namespace {

using rinfer::bench::cpu_model;
using rinfer::bench::median;
using rinfer::bench::run_cmd;

using namespace rinfer;  // NOLINT
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}


struct Config {
  std::string name;
  bool kv_cache;
  cpu::Impl impl;
  int threads;
  int64_t tg_tokens;
  int reps;
  bool quantize_activations = true;
};

struct Measured {
  double pp_tps = 0;  // median over reps
  double tg_tps = 0;  // median over reps
  std::vector<double> pp_samples, tg_samples;
  int64_t tg_tokens = 0;
  double tg_avg_kv_bytes = 0;  // KV cache bytes read per decoded token, averaged
};

// One request at a time through the engine core (paged KV, the scheduler, per-request sampling:
// what `rinfer run` does); the KV cache off is the core recomputing every sequence each step.
Result<Measured> measure(const std::string& path, const Config& c,
                         const std::vector<int32_t>& prompt) {
  ThreadPool pool(c.threads);
  LoadOptions opts;
  opts.cpu.ops.impl = c.impl;
  opts.cpu.ops.pool = &pool;
  opts.cpu.ops.quantize_activations = c.quantize_activations;
  opts.max_batch = 512;
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<DecoderModel> model, load_decoder_model(path, opts));
  const DecoderHParams& hp = model->hparams();
  const auto n_pp = static_cast<int64_t>(prompt.size());
  EngineCoreOptions eo;
  eo.n_ctx = std::max(n_pp, c.tg_tokens + 1) + 1;
  eo.scheduler.max_seqs = 1;
  eo.scheduler.max_batched_tokens = 512;
  eo.scheduler.recompute_each_step = !c.kv_cache;
  eo.prefix_caching = c.kv_cache;
  RINFER_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core,
                          EngineCore::create(*model, eo, nullptr));
  auto run = [&](std::span<const int32_t> p, int64_t max_tokens) -> Result<RequestStats> {
    core->clear_prefix_cache();
    RequestParams rp;
    rp.prompt.assign(p.begin(), p.end());
    rp.max_tokens = max_tokens;
    rp.ignore_eos = true;
    rp.sampling.temperature = 0.0f;
    rp.sampling.repeat_penalty = 1.0f;
    RINFER_ASSIGN_OR_RETURN(const RequestOutcome out, run_request(*core, std::move(rp)));
    return out.stats;
  };
  Measured m;
  // Prompt processing: the prompt's pass and its one sampled token (time to first token).
  for (int rep = 0; rep < c.reps; ++rep) {
    RINFER_ASSIGN_OR_RETURN(RequestStats st, run(prompt, 1));
    m.pp_samples.push_back(static_cast<double>(n_pp) / (st.ttft_ms / 1e3));
  }
  m.pp_tps = median(m.pp_samples);
  // Generation from a 1-token prompt.
  for (int rep = 0; rep < c.reps; ++rep) {
    RINFER_ASSIGN_OR_RETURN(RequestStats st, run(std::span(prompt.data(), 1), c.tg_tokens));
    m.tg_samples.push_back(decode_tps(st));
    m.tg_tokens = st.generated_tokens;
  }
  m.tg_tps = median(m.tg_samples);
  // Step k of the decode reads k+1 cached positions of K and V in every layer.
  const double avg_ctx = 1.0 + static_cast<double>(c.tg_tokens) / 2.0;
  m.tg_avg_kv_bytes = avg_ctx * 2.0 * static_cast<double>(hp.n_layer * hp.kv_dim()) * 4.0;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "smollm2-135m-instruct-q4_1";
  std::string out_path;
  std::string machine = rinfer::bench::machine_short_name(false, "");
  int threads = 0;
  int64_t pp = 512, tg = 128, baseline_tg = 16;
  int reps = 3;
  bool baseline = true;
  bool f32_acts = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") {
      model = next();
    } else if (a == "--threads") {
      threads = std::stoi(next());
    } else if (a == "--pp") {
      pp = std::stoll(next());
    } else if (a == "--tg") {
      tg = std::stoll(next());
    } else if (a == "--baseline-tg") {
      baseline_tg = std::stoll(next());
    } else if (a == "--reps") {
      reps = std::max(1, std::stoi(next()));
    } else if (a == "--f32-activations") {
      f32_acts = true;
    } else if (a == "--no-baseline") {
      baseline = false;
    } else if (a == "--machine") {
      machine = next();
    } else if (a == "--out") {
      out_path = next();
    } else {
      std::fprintf(
          stderr,
          "usage: llm_cpu_bench [--model NAME|PATH] [--threads N] [--pp N] [--tg N] "
          "[--baseline-tg N] [--reps N] [--no-baseline] [--f32-activations] [--machine NAME] "
          "[--out FILE]\n");
      return 2;
    }
  }
  auto path = resolve_model(model);
  if (!path.ok()) {
    std::fprintf(stderr, "llm_cpu_bench: %s (run scripts/fetch-models.sh)\n",
                 path.status().message().c_str());
    return 1;
  }
  auto file = GgufFile::open(*path);
  auto tok =
      file.ok() ? Tokenizer::from_gguf(*file) : Result<std::unique_ptr<Tokenizer>>(file.status());
  if (!tok.ok()) {
    std::fprintf(stderr, "llm_cpu_bench: %s\n", tok.status().message().c_str());
    return 1;
  }
  std::ifstream text_file("/usr/share/common-licenses/GPL-3");
  std::stringstream ss;
  ss << text_file.rdbuf();
  auto ids = (*tok)->encode(ss.str(), EncodeOptions{.add_special = false, .parse_special = false});
  if (!ids.ok() || static_cast<int64_t>(ids->size()) < pp) {
    std::fprintf(stderr, "llm_cpu_bench: need %lld tokens of /usr/share/common-licenses/GPL-3\n",
                 static_cast<long long>(pp));
    return 1;
  }
  std::vector<int32_t> prompt(ids->begin(), ids->begin() + pp);

  ThreadPool bw_pool(threads);
  const int n_threads = bw_pool.size();
  const double bandwidth = measure_cpu_read_bandwidth(bw_pool);

  std::vector<Config> configs;
  if (baseline) configs.push_back({"baseline", false, cpu::Impl::kReference, 1, baseline_tg, 1});
  configs.push_back({"optimized", true, cpu::Impl::kFast, n_threads, tg, reps});
  if (f32_acts) {
    configs.push_back({"opt-f32act", true, cpu::Impl::kFast, n_threads, tg, reps, false});
  }

  LoadOptions probe_opts;
  auto probe = load_decoder_model(*path, probe_opts);
  if (!probe.ok()) {
    std::fprintf(stderr, "llm_cpu_bench: %s\n", probe.status().message().c_str());
    return 1;
  }
  const uint64_t weight_bytes = (*probe)->weight_bytes_per_token();

  std::printf("%s\n%s, %d threads, SIMD %s; memory read bandwidth %.1f GB/s (%d threads)\n",
              (*probe)->describe().c_str(), cpu_model().c_str(), n_threads,
              std::string(cpu::simd_target_name()).c_str(), bandwidth, n_threads);
  std::printf(
      "| config    | kv cache | kernels   | threads | pp%-4lld tok/s | tg tok/s (tokens) "
      "| decode GB/s | of bandwidth |\n",
      static_cast<long long>(pp));
  std::printf(
      "|-----------|----------|-----------|---------|-------------|-------------------|"
      "-------------|--------------|\n");
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const Config& c : configs) {
    std::fflush(stdout);
    auto m = measure(*path, c, prompt);
    if (!m.ok()) {
      std::fprintf(stderr, "llm_cpu_bench: %s: %s\n", c.name.c_str(), m.status().message().c_str());
      return 1;
    }
    // Without the cache a decode step reads the weights once too (a batched pass), plus
    // recomputation: the share of bandwidth is only meaningful for the cached path.
    const double bytes_per_token = static_cast<double>(weight_bytes) + m->tg_avg_kv_bytes;
    const double gbps = bytes_per_token * m->tg_tps / 1e9;
    std::printf("| %-9s | %-8s | %-9s | %7d | %11.1f | %8.1f (%4lld)   | %11.1f | %11.0f%% |\n",
                c.name.c_str(), c.kv_cache ? "on" : "off",
                c.impl == cpu::Impl::kFast ? "fast" : "reference", c.threads, m->pp_tps, m->tg_tps,
                static_cast<long long>(m->tg_tokens), gbps, 100.0 * gbps / bandwidth);
    results.push_back({{"config", c.name},
                       {"kv_cache", c.kv_cache},
                       {"kernels", c.impl == cpu::Impl::kFast ? "fast" : "reference"},
                       {"threads", c.threads},
                       {"pp_tokens", pp},
                       {"pp_tokens_per_s", m->pp_tps},
                       {"pp_tokens_per_s_samples", m->pp_samples},
                       {"tg_tokens", m->tg_tokens},
                       {"tg_tokens_per_s", m->tg_tps},
                       {"tg_tokens_per_s_samples", m->tg_samples},
                       {"reps", c.reps},
                       {"decode_bytes_per_token", bytes_per_token},
                       {"decode_gb_per_s", gbps},
                       {"decode_share_of_bandwidth", gbps / bandwidth}});
  }
  std::printf(
      "Each row: one request at a time through the engine core. pp: time to the first token of "
      "%lld tokens of GPL-3 text; tg: greedy decode steps from a 1-token prompt. Baseline tg is "
      "%lld tokens (it recomputes the sequence every step). Decode reads %.1f MB of weights per "
      "token (+ the KV cache).\n",
      static_cast<long long>(pp), static_cast<long long>(baseline_tg),
      static_cast<double>(weight_bytes) / 1e6);

  if (!out_path.empty()) {
    const std::string src = RINFER_SOURCE_DIR;
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    utsname u{};
    uname(&u);
    nlohmann::ordered_json j = {
        {"benchmark", "llm_cpu"},
        {"git_sha", run_cmd("git -C '" + src + "' rev-parse HEAD 2>/dev/null")},
        {"git_dirty",
         !run_cmd("git -C '" + src + "' status --porcelain -- src 2>/dev/null").empty()},
        {"date", date},
        {"machine",
         {{"name", machine},
          {"cpu", cpu_model()},
          {"hardware_threads", sysconf(_SC_NPROCESSORS_ONLN)},
          {"simd", std::string(cpu::simd_target_name())},
          {"os", std::string(u.sysname) + " " + u.release}}},
        {"device", "cpu"},
        {"model", *path},
        {"model_description", (*probe)->describe()},
        {"weight_bytes_per_token", weight_bytes},
        {"memory_read_bandwidth_gb_per_s", bandwidth},
        {"method",
         "one request at a time through the engine core; pp: time to the first token of the "
         "first N tokens of /usr/share/common-licenses/GPL-3 from an empty KV cache, median of "
         "reps; tg: greedy decode steps from a 1-token prompt, EOS ignored, decode steps / decode "
         "time, median of reps; baseline generates fewer tokens"},
        {"results", results},
        {"limit",
         "decode is memory bound: (weight bytes + KV bytes) per token x tokens/s vs the measured "
         "read bandwidth; prefill is compute bound (int8 dot products)"},
    };
    if (rinfer::bench::write_json(out_path, j) != 0) return 1;
  }
  return 0;
}
