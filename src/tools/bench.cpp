// `rinfer bench <recipe-dir | recipe.yaml ...> [--vs NAME] [--repeat N] [--warmup N]
//  [--prompt-tokens P] [--gen-tokens G] [--precision-tokens K] [--json PATH] [--svg PATH]
//  [--readme] [--no-precision]`
//
// Measures recipe variants side by side in one process. Every *.yaml of a recipe folder is a
// variant; baseline.yaml (or --vs NAME) is the reference. For each variant, one at a time:
//   1. LlmEngine::create(recipe): the recipe's strategies applied as `rinfer run` applies them
//   2. warm-up runs (the P-token prompt and min(G, 16) tokens), then N measured runs of: prefill
//      the P-token prompt from an empty cache (time to first token = prefill + the first
//      sampled token), then G greedy tokens, end-of-text ignored (every run decodes G tokens)
//   3. peak host memory: the process's VmHWM (reset through /proc/self/clear_refs before the
//      engine is made) minus VmRSS before it: the variant's own footprint (weights read, KV
//      cache, scratch); peak device memory from DecoderModel::device_bytes_peak()
//   4. precision (engine/precision.h): teacher-forced logits of K tokens of the same text,
//      against the baseline's: top-1 agreement, mean KL, perplexity change; then the variant's
//      decode steps over the last 64 of them against the same rows (decode_precision), the worse
//      of the two reported, and the recipe's gate (the defaults, each replaced by the recipe's
//      bound where set). A failing variant is marked and never chosen as best (the rollback
//      rule).
// Then: the Markdown table (baseline first; best = the passing variant with the highest decode
// tok/s), JSON under bench/results/<machine>/<folder>.json (git sha, date, machine, device,
// driver, every raw sample), an SVG chart next to it, and with --readme the table between the
// bench markers of the folder's README.md, regenerated from that JSON.
#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_info.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/output_file.h"
#include "core/progress.h"
#include "engine/llm_engine.h"
#include "engine/precision.h"
#include "recipe/recipe.h"
#include "tools/bench_classify.h"
#include "tools/bench_embed.h"
#include "tools/bench_report.h"
#include "tools/bench_run.h"
#include "tools/bench_text.h"
#include "tools/input.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::vector<std::string> inputs;
  std::string vs = "baseline";
  std::optional<int> repeat;
  std::optional<int> warmup;
  std::optional<int64_t> prompt_tokens;
  std::optional<int64_t> gen_tokens;
  int64_t precision_tokens = 256;
  std::string json;
  std::string svg;
  bool readme = false;
  bool no_precision = false;
  std::string text_file;                // default: the baseline's bench.prompts, else GPL-3
  std::vector<std::string> peer_jsons;  // embedding recipes: bench/embedding_peer.py's results
  int64_t limit = 0;                    // embedding recipes: texts used (0: all)
  std::vector<std::string> images;      // image-classification recipes: the bench photos
  int64_t n_images = 64;                // image-classification recipes: images per run
};

struct Variant {
  std::string name;  // file stem
  std::string path;
  RecipeConfig recipe;
};

struct Settings {
  int repeat = 3;
  int warmup = 1;
  int64_t prompt_tokens = 128;
  int64_t gen_tokens = 256;
};

// Settings: the command line, else the baseline recipe's `bench:` section.
Settings settings_for(const BenchArgs& a, const RecipeConfig& baseline) {
  Settings s;
  s.repeat = static_cast<int>(baseline.bench.repeat);
  s.warmup = static_cast<int>(baseline.bench.warmup);
  s.prompt_tokens = baseline.bench.prompt_tokens;
  s.gen_tokens = baseline.bench.gen_tokens;
  if (a.repeat) s.repeat = *a.repeat;
  if (a.warmup) s.warmup = *a.warmup;
  if (a.prompt_tokens) s.prompt_tokens = *a.prompt_tokens;
  if (a.gen_tokens) s.gen_tokens = *a.gen_tokens;
  return s;
}

// ---- host memory (Linux /proc) ----

// A field of /proc/self/status in bytes (VmHWM, VmRSS), or 0.
uint64_t proc_status_bytes(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(key.size())) * 1024;
  }
  return 0;
}

// Resets VmHWM to the current RSS ("5" to clear_refs, Linux >= 4.0); false when refused.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

// ---- inputs ----

Result<std::vector<Variant>> collect_variants(const BenchArgs& a, std::string* folder) {
  std::vector<std::string> files;
  for (const std::string& in : a.inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(in, ec)) {
        if (e.path().extension() == ".yaml" || e.path().extension() == ".yml") {
          found.push_back(e.path().string());
        }
      }
      if (found.empty()) return not_found("{}: no *.yaml recipes in this folder", in);
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
      if (folder->empty()) *folder = in;
    } else if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
      if (folder->empty()) *folder = fs::path(in).parent_path().string();
    } else {
      return not_found("{}: no such recipe file or folder", in);
    }
  }
  std::vector<Variant> out;
  std::set<std::string> names;
  for (const std::string& f : files) {
    auto r = load_recipe(f);
    if (!r.ok()) return r.status();
    Variant v{fs::path(f).stem().string(), f, std::move(r).value()};
    if (!names.insert(v.name).second) {
      return invalid_argument("{}: two variants are named '{}'", f, v.name);
    }
    out.push_back(std::move(v));
  }
  auto base =
      std::find_if(out.begin(), out.end(), [&](const Variant& v) { return v.name == a.vs; });
  if (base == out.end()) {
    std::string names_list;
    for (const auto& v : out) names_list += (names_list.empty() ? "" : ", ") + v.name;
    return not_found("no baseline variant '{}' among the recipes ({}); name one with --vs", a.vs,
                     names_list);
  }
  std::rotate(out.begin(), base, base + 1);  // baseline first, the rest in name order
  // One table per device kind: variants for another device (cuda-*.yaml next to a CPU
  // baseline) are left out and named, never compared across devices.
  const DeviceType kind = out.front().recipe.device.type;
  std::vector<Variant> kept;
  for (Variant& v : out) {
    if (v.recipe.device.type == kind) {
      kept.push_back(std::move(v));
    } else {
      std::fprintf(stderr, "bench: skipping %s (device %s; the baseline %s runs on %s)\n",
                   v.name.c_str(), v.recipe.device.to_string().c_str(), kept.front().name.c_str(),
                   kept.front().recipe.device.to_string().c_str());
    }
  }
  return kept;
}

// What differs from the baseline: the strategy summary items it does not share, and the model.
std::string strategy_change(const RecipeConfig& base, const RecipeConfig& v) {
  auto split = [](const std::string& s) {
    std::vector<std::string> items;
    size_t p = 0;
    while (p <= s.size()) {
      const size_t q = s.find(", ", p);
      items.push_back(s.substr(p, q == std::string::npos ? std::string::npos : q - p));
      if (q == std::string::npos) break;
      p = q + 2;
    }
    return items;
  };
  const auto b = split(base.strategies_summary());
  std::string out;
  for (const std::string& item : split(v.strategies_summary())) {
    if (std::find(b.begin(), b.end(), item) == b.end()) out += (out.empty() ? "" : ", ") + item;
  }
  if (v.model_ref != base.model_ref) out += (out.empty() ? "" : ", ") + ("model " + v.model);
  return out.empty() ? "same as baseline" : out;
}

struct RunSample {
  double ttft_ms = 0;
  double prefill_tps = 0;
  double decode_tps = 0;
  double token_ms = 0;  // median decode step (sampling included)
};

ordered_json metrics_json(const std::vector<RunSample>& runs, int which) {
  auto col = [&](auto get) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(get(r));
    return v;
  };
  const std::vector<std::pair<const char*, std::vector<double>>> cols = {
      {"ttft_ms", col([](const RunSample& r) { return r.ttft_ms; })},
      {"prefill_tps", col([](const RunSample& r) { return r.prefill_tps; })},
      {"decode_tps", col([](const RunSample& r) { return r.decode_tps; })},
      {"token_ms", col([](const RunSample& r) { return r.token_ms; })}};
  ordered_json j = ordered_json::object();
  for (const auto& [k, v] : cols) {
    const bench::Spread s = bench::spread(v);
    if (which == 0) j[k] = v;
    if (which == 1) j[k] = s.median;
    if (which == 2) j[k] = s.min;
    if (which == 3) j[k] = s.max;
  }
  return j;
}

int run_bench(const BenchArgs& a) {
  std::string folder;
  auto variants = collect_variants(a, &folder);
  if (!variants.ok()) return report_error(variants.status().message());
  const RecipeConfig& base_recipe = variants->front().recipe;
  if (base_recipe.scenario == "image-classification") {
    std::vector<ClassifyBenchVariant> cv;
    for (const Variant& v : *variants) cv.push_back({v.name, v.path, v.recipe});
    ClassifyBenchOptions co;
    co.folder = folder;
    co.images = a.images;
    co.n_images = a.n_images;
    co.repeat = a.repeat.value_or(static_cast<int>(base_recipe.bench.repeat));
    co.warmup = a.warmup.value_or(static_cast<int>(base_recipe.bench.warmup));
    co.json = a.json;
    co.peer_jsons = a.peer_jsons;
    co.readme = a.readme;
    return run_classify_bench(cv, co);
  }
  if (base_recipe.scenario == "embedding") {
    std::vector<EmbedBenchVariant> ev;
    for (const Variant& v : *variants) ev.push_back({v.name, v.path, v.recipe});
    EmbedBenchOptions eo;
    eo.folder = folder;
    eo.text_file = a.text_file;
    eo.repeat = a.repeat.value_or(static_cast<int>(base_recipe.bench.repeat));
    eo.warmup = a.warmup.value_or(static_cast<int>(base_recipe.bench.warmup));
    eo.limit = a.limit;
    eo.json = a.json;
    eo.peer_jsons = a.peer_jsons;
    eo.readme = a.readme;
    return run_embedding_bench(ev, eo);
  }
  const Settings st = settings_for(a, base_recipe);
  if (st.repeat < 1 || st.prompt_tokens < 1 || st.gen_tokens < 1 || st.warmup < 0) {
    return report_error("--repeat, --prompt-tokens and --gen-tokens must be >= 1");
  }
  // Fixed large allocations go straight to mmap and back to the OS on free, so one variant's
  // freed buffers do not count in the next one's resident memory.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);

  std::string machine;
  ordered_json report;
  report["benchmark"] = "rinfer bench";
  report["recipe_folder"] = folder;
  report["git_sha"] = bench::git_sha(folder.empty() ? "." : folder);
  report["git_dirty"] = bench::git_dirty(folder.empty() ? "." : folder, ":/src :/recipes");
  report["date"] = bench::utc_date();
  report["device"] = bench::device_json(base_recipe.device, &machine);
  report["machine"] = bench::machine_json(machine);
  report["baseline"] = variants->front().name;
  report["default_gate"] = PrecisionThresholds{}.to_string();

  // The outputs are checked before the benchmark runs (core/output_file.h): a directory, FIFO,
  // device, dangling symlink or missing folder fails now, not after minutes of measurements.
  const std::string folder_name = fs::path(folder).filename().string().empty()
                                      ? std::string("bench")
                                      : fs::path(folder).filename().string();
  const std::string json_path =
      !a.json.empty() ? a.json : fmt::format("bench/results/{}/{}.json", machine, folder_name);
  const std::string svg_path =
      !a.svg.empty() ? a.svg : fs::path(json_path).replace_extension(".svg").string();
  const std::string readme = (fs::path(folder) / "README.md").string();
  {
    std::error_code ec;  // the JSON's folder is made (write_json does too); the others must exist
    fs::create_directories(fs::path(json_path).parent_path(), ec);
  }
  {
    std::vector<std::string> inputs;
    for (const Variant& v : *variants) inputs.push_back(v.path);
    if (!a.text_file.empty()) inputs.push_back(a.text_file);
    for (const std::string& out : {json_path, svg_path}) {
      auto checked = check_output_path(out, inputs);
      if (!checked.ok()) return report_error(checked.status().message());
    }
    if (a.readme) {
      auto checked = check_output_path(readme, inputs);
      if (!checked.ok()) return report_error(checked.status().message());
    }
  }

  // The text too, before any model loads: a named file that is missing, empty or not UTF-8 is
  // an error now, never a silent switch to other text.
  if (auto text = read_bench_text(bench_text(a.text_file, base_recipe)); !text.ok()) {
    return report_error(text.status().message());
  }

  std::vector<int32_t> prompt;
  std::vector<int32_t> ptokens;
  std::vector<float> base_logits;
  int64_t base_vocab = 0;
  std::string text_source;
  ordered_json out_variants = ordered_json::array();
  bool hwm_reset_ok = true;

  for (size_t vi = 0; vi < variants->size(); ++vi) {
    const Variant& v = (*variants)[vi];
    const bool is_base = vi == 0;
    release_default_host_cache();  // the last variant's cached blocks are not this one's
    malloc_trim(0);
    const uint64_t rss0 = proc_status_bytes("VmRSS");
    hwm_reset_ok = reset_peak_rss() && hwm_reset_ok;
    // What `rinfer run` makes of the recipe: the engine core with one seat.
    auto engine = LlmEngine::create(v.recipe);
    if (!engine.ok() && bench::skip_unsupported(report, v.name, v.path, engine.status(), is_base)) {
      continue;
    }
    if (!engine.ok()) return report_error(engine.status().with_context(v.path).message());
    LlmEngine& e = **engine;
    if (is_base) {
      const int64_t need = std::max(st.prompt_tokens, a.no_precision ? 0 : a.precision_tokens);
      auto tokenizer = e.sample().require_tokenizer("rinfer bench's text prompt");
      if (!tokenizer.ok()) return report_error(tokenizer.status().message());
      auto toks = text_tokens(**tokenizer, bench_text(a.text_file, v.recipe), need, &text_source);
      if (!toks.ok()) return report_error(toks.status().message());
      prompt.assign(toks->begin(), toks->begin() + st.prompt_tokens);
      ptokens.assign(toks->begin(), toks->begin() + std::min<int64_t>(need, a.precision_tokens));
    }
    if (st.prompt_tokens + st.gen_tokens >= e.context_length()) {
      return report_error(fmt::format(
          "{}: prompt {} + {} generated tokens do not fit the context of {} (context_length)",
          v.path, st.prompt_tokens, st.gen_tokens, e.context_length()));
    }
    const int64_t warm_tokens = std::min<int64_t>(st.gen_tokens, 16);
    const int64_t total_tokens = st.warmup * warm_tokens + st.repeat * st.gen_tokens;
    Progress bar(fmt::format("bench {} ({}/{})", v.name, vi + 1, variants->size()), total_tokens,
                 "token");
    int64_t done_tokens = 0;
    std::vector<Clock::time_point> stamps;
    auto stamp = [&] {
      stamps.push_back(Clock::now());
      bar.update(++done_tokens);
    };
    // One measured run: prefill from an empty cache, then max_tokens greedy tokens.
    auto run_once = [&](int64_t max_tokens) -> Result<RequestStats> {
      stamps.clear();
      return bench_core_run(*e.core(), prompt, max_tokens, stamp);
    };

    std::vector<RunSample> runs;
    for (int r = 0; r < st.warmup + st.repeat; ++r) {
      const bool warm = r < st.warmup;
      auto res = run_once(warm ? warm_tokens : st.gen_tokens);
      if (!res.ok()) {
        bar.finish();
        return report_error(res.status().with_context(v.path).message());
      }
      if (warm) continue;
      const RequestStats& tm = *res;
      RunSample s;
      s.ttft_ms = tm.ttft_ms;
      s.prefill_tps = prefill_tps(tm);
      s.decode_tps = decode_tps(tm);
      std::vector<double> steps;
      for (size_t i = 1; i < stamps.size(); ++i) {
        steps.push_back(
            std::chrono::duration<double, std::milli>(stamps[i] - stamps[i - 1]).count());
      }
      s.token_ms = bench::median(steps);
      runs.push_back(s);
    }
    bar.finish();
    const uint64_t hwm = proc_status_bytes("VmHWM");
    const uint64_t host_peak = hwm > rss0 ? hwm - rss0 : 0;
    const uint64_t dev_peak = e.decoder().device_bytes_peak();

    ordered_json vj;
    vj["name"] = v.name;
    vj["recipe"] = v.path;
    vj["baseline"] = is_base;
    vj["model"] = e.model_path();
    vj["strategies"] = v.recipe.strategies_summary();
    vj["change"] = is_base ? "" : strategy_change(base_recipe, v.recipe);
    vj["samples"] = metrics_json(runs, 0);
    vj["median"] = metrics_json(runs, 1);
    vj["min"] = metrics_json(runs, 2);
    vj["max"] = metrics_json(runs, 3);
    vj["host_peak_bytes"] = host_peak;
    vj["host_hwm_bytes"] = hwm;
    vj["device_peak_bytes"] = dev_peak;

    // Precision against the baseline.
    const PrecisionThresholds gate = gate_of_recipe(v.recipe.precision);
    auto opt = [](const std::optional<double>& x) {
      return x ? ordered_json(*x) : ordered_json(nullptr);
    };
    vj["gate"] = {{"min_top1", opt(gate.min_top1)},
                  {"max_mean_kl", opt(gate.max_mean_kl)},
                  {"max_ppl_change", opt(gate.max_ppl_change)},
                  {"from", v.recipe.precision.empty() ? "defaults" : "recipe and defaults"},
                  {"text", gate.to_string()}};
    vj["precision"] = nullptr;
    vj["gate_passed"] = true;
    vj["gate_failures"] = "";
    if (!a.no_precision) {
      const int64_t n_vocab = e.decoder().hparams().n_vocab;
      // Teacher-forced logits through the engine core (every row, one sequence).
      auto core = e.scoring_core();
      if (!core.ok()) return report_error(core.status().with_context(v.path).message());
      auto logits = teacher_forced_logits(**core, ptokens);
      if (!logits.ok()) return report_error(logits.status().with_context(v.path).message());
      if (is_base) {
        base_logits = std::move(logits).value();
        base_vocab = n_vocab;
        vj["ppl"] = perplexity_of_logits(base_logits, ptokens, n_vocab);
      } else if (n_vocab != base_vocab) {
        vj["precision_note"] = fmt::format(
            "vocabulary {} differs from the baseline's {}: not "
            "comparable",
            n_vocab, base_vocab);
        vj["gate_passed"] = false;
        vj["gate_failures"] = "different vocabulary";
      } else {
        const PrecisionReport tf = compare_precision(base_logits, *logits, ptokens, n_vocab, gate);
        // The decode steps too (engine/precision.h): the one-row kernels and graphs.
        auto dp = decode_precision(**core, base_logits, ptokens, kDecodeGateSteps, kDecodeGateSeats,
                                   gate);
        if (!dp.ok()) return report_error(dp.status().with_context(v.path).message());
        const PrecisionReport p = worse_of(tf, *dp);
        vj["precision"] = {{"positions", p.positions},
                           {"top1_agreement", p.logits.top1_agreement},
                           {"mean_kl", p.logits.mean_kl},
                           {"max_kl", p.logits.max_kl},
                           {"rel_l2", p.logits.rel_l2},
                           {"ppl_baseline", p.ppl_baseline},
                           {"ppl_variant", p.ppl_variant},
                           {"ppl_change", p.ppl_change},
                           {"decode",
                            {{"positions", dp->positions},
                             {"top1_agreement", dp->logits.top1_agreement},
                             {"mean_kl", dp->logits.mean_kl},
                             {"ppl_change", dp->ppl_change}}}};
        vj["gate_passed"] = p.passed;
        vj["gate_failures"] = p.failures;
      }
    }
    const auto& med = vj["median"];
    std::fprintf(
        stderr,
        "%-16s TTFT %8.1f ms  prefill %8.1f tok/s  decode %7.2f tok/s  %.2f ms/token  "
        "host +%.1f MiB%s%s\n",
        v.name.c_str(), med["ttft_ms"].get<double>(), med["prefill_tps"].get<double>(),
        med["decode_tps"].get<double>(), med["token_ms"].get<double>(),
        static_cast<double>(host_peak) / (1 << 20),
        vj["gate_passed"].get<bool>() ? "" : "  gate FAIL: ",
        vj["gate_passed"].get<bool>() ? "" : vj["gate_failures"].get<std::string>().c_str());
    out_variants.push_back(std::move(vj));
    engine->reset();
  }

  // Relative figures and the best passing variant.
  const auto& b = out_variants[0];
  const double b_tok = b["median"]["token_ms"].get<double>();
  const double b_dec = b["median"]["decode_tps"].get<double>();
  const double b_mem = static_cast<double>(b["host_peak_bytes"].get<uint64_t>() +
                                           b["device_peak_bytes"].get<uint64_t>());
  std::string best;
  double best_tps = -1;
  for (size_t i = 1; i < out_variants.size(); ++i) {
    auto& vj = out_variants[i];
    const double tok = vj["median"]["token_ms"].get<double>();
    const double dec = vj["median"]["decode_tps"].get<double>();
    const double mem = static_cast<double>(vj["host_peak_bytes"].get<uint64_t>() +
                                           vj["device_peak_bytes"].get<uint64_t>());
    vj["relative"] = {{"latency_reduction", b_tok > 0 ? 1.0 - tok / b_tok : 0.0},
                      {"throughput_gain", b_dec > 0 ? dec / b_dec : 0.0},
                      {"memory_saving", b_mem > 0 ? 1.0 - mem / b_mem : 0.0}};
    // The best is faster than the baseline: a slower variant is never called best.
    if (vj["gate_passed"].get<bool>() && dec > best_tps && dec > b_dec) {
      best_tps = dec;
      best = vj["name"].get<std::string>();
    }
  }
  report["best"] = best.empty() ? ordered_json(nullptr) : ordered_json(best);
  report["best_rule"] =
      "highest median decode tok/s among the variants that pass their precision gate and decode "
      "faster than the baseline";
  report["settings"] = {
      {"prompt_tokens", st.prompt_tokens},
      {"gen_tokens", st.gen_tokens},
      {"repeat", st.repeat},
      {"warmup", st.warmup},
      {"warmup_gen_tokens", std::min<int64_t>(st.gen_tokens, 16)},
      {"precision_tokens", a.no_precision ? 0 : a.precision_tokens},
      {"text", text_source},
      {"sampling", "greedy, end-of-text ignored"},
      {"host_memory", hwm_reset_ok ? "VmHWM after a clear_refs reset, minus VmRSS before the "
                                     "engine was made"
                                   : "VmHWM (could not be reset: cumulative) minus VmRSS "
                                     "before the engine was made"}};
  report["variants"] = std::move(out_variants);

  if (bench::write_json(json_path, report) != 0) return 1;

  // Everything below is made from the JSON as written (read back), never from live numbers.
  auto json_text = read_regular_file(json_path);
  if (!json_text.ok()) return report_error(json_text.status().message());
  const ordered_json written = ordered_json::parse(*json_text, nullptr, false);
  if (written.is_discarded()) return report_error(fmt::format("cannot read back {}", json_path));
  const std::string table = bench::markdown_table(written);
  std::printf("%s", table.c_str());
  {
    const Status sv = write_file_atomically(svg_path, bench::svg_chart(written));
    if (!sv.ok()) return report_error(sv.message());
    std::fprintf(stderr, "wrote %s\n", svg_path.c_str());
  }
  if (a.readme) {
    const Status s = bench::replace_readme_table(readme, table, machine);
    if (!s.ok()) return report_error(s.message());
    std::fprintf(stderr, "updated the table in %s\n", readme.c_str());
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "bench", "Measure recipe variants against a baseline: speed, memory, precision");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("recipes", a->inputs,
                  "A recipe folder (every *.yaml is a variant) or recipe files")
      ->required();
  cmd->add_option("--vs", a->vs, "The baseline variant's name (default: baseline)");
  cmd->add_option("--repeat", a->repeat, "Measured runs per variant (default 3)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", a->warmup, "Warm-up runs per variant (default 1)")
      ->check(CLI::Range(0, 100));
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Prompt length (default 128)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--gen-tokens", a->gen_tokens, "Generated tokens per run (default 256)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--precision-tokens", a->precision_tokens,
                  "Teacher-forced tokens for the precision check (default 256)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  cmd->add_option(
      "--text", a->text_file,
      "Text for the prompt and the precision check (default: the baseline's bench.prompts, else "
      "/usr/share/common-licenses/GPL-3)");
  cmd->add_option("--json", a->json,
                  "JSON output (default bench/results/<machine>/<recipe folder>.json)");
  cmd->add_option("--svg", a->svg, "SVG chart (default: the JSON path with .svg)");
  cmd->add_flag("--readme", a->readme,
                "Rewrite the table between the bench markers of the folder's README.md");
  cmd->add_flag("--no-precision", a->no_precision, "Skip the precision comparison");
  cmd->add_option("--peer", a->peer_jsons,
                  "Embedding and image-classification recipes: a peer's result on the same inputs "
                  "(bench/embedding_peer.py, bench/classifier_peer.py); "
                  "repeat for more peers, the first is the one the 'vs peer' column divides by");
  cmd->add_option("--limit", a->limit, "Embedding recipes: use the first N texts (default all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--image", a->images,
                  "Image-classification recipes: a photo to classify (repeatable; default the "
                  "photos of scripts/fetch-models.sh)");
  cmd->add_option("--images", a->n_images,
                  "Image-classification recipes: images per run "
                  "(default 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->callback([&exit_code, a] { exit_code = run_bench(*a); });
}

}  // namespace rinfer
