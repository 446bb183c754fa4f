// The cost of structured output's token mask (docs/structured-output.md): constrained replies
// through a recipe's engine core (CPU or CUDA), at 1 and at N requests together, each mask and
// each accept of the grammar timed. Printed next to the decode step it rides on: the masks'
// serial time per step over the median time per output token, and the time per output token of
// the same replies without the grammar (teacher-forced to the same tokens).
//
//   grammar_bench [--recipe PATH] [--seqs 1,64] [--tokens 96] [--reps 3] [--out FILE]
//
// The recipe defaults to SmolLM2's optimized CPU recipe; the schema is a bounded person record
// (nested object, enum array, integers, strings).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "engine/grammar.h"
#include "engine/llm_engine.h"
#include "recipe/recipe.h"

namespace {

using namespace rinfer;
using Clock = std::chrono::steady_clock;

constexpr const char* kSchema = R"({"type": "object", "required": ["name", "age", "address"],
  "properties": {"name": {"type": "string", "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "tags": {"type": "array", "maxItems": 4, "items": {"type": "string", "enum": ["a", "b", "c"]}},
    "address": {"type": "object", "required": ["city"],
                "properties": {"city": {"type": "string", "maxLength": 40},
                               "zip": {"type": "string", "maxLength": 10}}}}})";

struct Timing {
  std::atomic<int64_t> masks{0};
  std::atomic<double> mask_ns{0};
  std::atomic<double> accept_ns{0};
};

// Times its wrapped state's mask (the bitmask's fill) and accept into a shared Timing (masks
// and accepts run on several threads add up their times).
class TimedState final : public TokenConstraintState {
 public:
  TimedState(std::unique_ptr<TokenConstraintState> s, Timing* t) : s_(std::move(s)), t_(t) {}
  Status fill(std::span<uint32_t> bits) override {
    const auto t0 = Clock::now();
    Status st = s_->fill(bits);
    t_->mask_ns += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    ++t_->masks;
    return st;
  }
  Status accept(int32_t token) override {
    const auto t0 = Clock::now();
    Status st = s_->accept(token);
    t_->accept_ns += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    return st;
  }

 private:
  std::unique_ptr<TokenConstraintState> s_;
  Timing* t_;
};

class TimedConstraint final : public TokenConstraint {
 public:
  TimedConstraint(std::shared_ptr<const TokenConstraint> c, Timing* t) : c_(std::move(c)), t_(t) {}
  std::unique_ptr<TokenConstraintState> start() const override {
    return std::make_unique<TimedState>(c_->start(), t_);
  }
  std::string describe() const override { return c_->describe(); }

 private:
  std::shared_ptr<const TokenConstraint> c_;
  Timing* t_;
};

struct Run {
  double tpot_ms = 0;  // median time per output token over the requests
  int64_t tokens = 0;
  int64_t valid = 0;  // replies that parse as JSON objects
  std::vector<std::vector<int32_t>> replies;
};

// `seqs` requests of the same chat prompt together (seeds 1..seqs, temperature 1), constrained
// by `c` (may be null) or teacher-forced to `forced`'s replies (same lengths, same contexts:
// the free run of a like-for-like comparison), through `core` until idle.
Run run(LlmEngine& e, const std::vector<int32_t>& prompt, int64_t seqs, int64_t tokens,
        std::shared_ptr<const TokenConstraint> c, const Run* forced = nullptr) {
  EngineCore& core = *e.core();
  std::vector<RequestStats> stats(static_cast<size_t>(seqs));
  std::vector<std::string> texts(static_cast<size_t>(seqs));
  Run r;
  r.replies.resize(static_cast<size_t>(seqs));
  for (int64_t i = 0; i < seqs; ++i) {
    RequestParams p;
    p.prompt = prompt;
    p.sampling = e.recipe().sampling;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = static_cast<uint64_t>(i + 1);
    p.max_tokens = tokens;
    p.constraint = c;
    if (forced != nullptr) {
      p.forced = forced->replies[static_cast<size_t>(i)];
      p.max_tokens = std::max<int64_t>(1, static_cast<int64_t>(p.forced.size()));
    }
    p.on_event = [&stats, &texts, &r, i](const RequestEvent& ev) {
      texts[static_cast<size_t>(i)] += ev.text;
      auto& reply = r.replies[static_cast<size_t>(i)];
      reply.insert(reply.end(), ev.tokens.begin(), ev.tokens.end());
      if (ev.stats != nullptr) stats[static_cast<size_t>(i)] = *ev.stats;
    };
    if (auto id = core.submit(std::move(p)); !id.ok()) {
      std::fprintf(stderr, "submit: %s\n", id.status().to_string().c_str());
      std::exit(1);
    }
  }
  if (Status st = core.run_until_idle(); !st.ok()) {
    std::fprintf(stderr, "run: %s\n", st.to_string().c_str());
    std::exit(1);
  }
  std::vector<double> tpot;
  for (size_t i = 0; i < stats.size(); ++i) {
    const RequestStats& s = stats[i];
    r.tokens += s.generated_tokens;
    if (s.generated_tokens > 1) {
      tpot.push_back((s.total_ms - s.ttft_ms) / static_cast<double>(s.generated_tokens - 1));
    }
    r.valid += nlohmann::json::parse(texts[i], nullptr, false).is_object();
  }
  r.tpot_ms = bench::median(tpot);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string recipe_path =
      std::string(RINFER_SOURCE_DIR) + "/recipes/llm-chat/smollm2-135m/optimized.yaml";
  std::vector<int64_t> seqs_list = {1, 64};
  int64_t tokens = 96;
  int64_t reps = 3;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--recipe") {
      recipe_path = next();
    } else if (a == "--tokens") {
      tokens = std::stoll(next());
    } else if (a == "--seqs") {
      seqs_list.clear();
      std::stringstream ss(next());
      for (std::string s; std::getline(ss, s, ',');) seqs_list.push_back(std::stoll(s));
    } else if (a == "--reps") {
      reps = std::max<int64_t>(1, std::stoll(next()));
    } else if (a == "--out") {
      out = next();
    } else {
      std::fprintf(stderr,
                   "usage: grammar_bench [--recipe PATH] [--seqs 1,64] [--tokens N] [--reps N] "
                   "[--out FILE]\n");
      return 2;
    }
  }
  auto recipe = load_recipe(recipe_path);
  if (!recipe.ok()) {
    std::fprintf(stderr, "%s\n", recipe.status().to_string().c_str());
    return 1;
  }
  int64_t max_seqs = 1;
  for (int64_t s : seqs_list) max_seqs = std::max(max_seqs, s);
  recipe->context_length = std::min<int64_t>(recipe->context_length, 512);
  LlmEngineOptions eo;
  eo.seats = max_seqs;
  auto engine = LlmEngine::create(*recipe, eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().to_string().c_str());
    return 1;
  }
  LlmEngine& e = **engine;
  const auto t0 = Clock::now();
  auto grammars = e.grammars();
  if (!grammars.ok()) {
    std::fprintf(stderr, "%s\n", grammars.status().to_string().c_str());
    return 1;
  }
  const double index_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const auto t1 = Clock::now();
  auto compiled = (*grammars)->compile({GrammarSpec::Kind::kJsonSchema, kSchema});
  if (!compiled.ok()) {
    std::fprintf(stderr, "%s\n", compiled.status().to_string().c_str());
    return 1;
  }
  const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  const std::vector<ChatMessage> chat = {{"user", "Describe a person as a JSON record."}};
  auto prompt = e.sample().preprocess(chat);
  if (!prompt.ok()) return 1;

  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::printf(
      "grammar_bench: %s, vocabulary %lld tokens (indexed in %.0f ms), schema compiled in "
      "%.1f ms\n\n",
      recipe->model.c_str(), static_cast<long long>(e.decoder().hparams().n_vocab), index_ms,
      compile_ms);
  SamplingParams sp = e.recipe().sampling;
  sp.temperature = 1.0f;
  const bool device_masks = e.core()->masks_on_device(sp);
  std::printf("masks: %s\n\n", device_masks
                                   ? "filled on a pool of host threads while the device runs the "
                                     "pass, applied and sampled on the device"
                                   : "filled and applied on the engine's thread, rows sampled on "
                                     "the host");
  std::printf(
      "| requests | TPOT free, own ms | TPOT free, forced ms | TPOT constrained ms | mask us "
      "(mean) | accept us | serial masks / TPOT | change vs forced | change vs own | valid JSON "
      "|\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t seqs : seqs_list) {
    Timing t;
    auto timed = std::make_shared<TimedConstraint>(*compiled, &t);
    run(e, *prompt, std::min<int64_t>(seqs, 4), 8, timed);  // warm-up (graphs, caches)
    run(e, *prompt, std::min<int64_t>(seqs, 4), 8, nullptr);
    t.masks = 0;
    t.mask_ns = 0;
    t.accept_ns = 0;
    // Interleaved repetitions: constrained, the same replies teacher-forced without the grammar
    // (same lengths and contexts), and free replies of the model's own (which a single request
    // may run ahead of the host: a constrained one cannot).
    std::vector<double> con_ms, forced_ms, own_ms;
    Run con;
    for (int64_t rep = 0; rep < reps; ++rep) {
      con = run(e, *prompt, seqs, tokens, timed);
      con_ms.push_back(con.tpot_ms);
      forced_ms.push_back(run(e, *prompt, seqs, tokens, nullptr, &con).tpot_ms);
      own_ms.push_back(run(e, *prompt, seqs, tokens, nullptr).tpot_ms);
    }
    const double tc = bench::median(con_ms), tf = bench::median(forced_ms),
                 to = bench::median(own_ms);
    const double mask_us = t.masks > 0 ? t.mask_ns / static_cast<double>(t.masks) / 1e3 : 0;
    const double accept_us = t.masks > 0 ? t.accept_ns / static_cast<double>(t.masks) / 1e3 : 0;
    // Each step masks one row per request: their time one after another, over the step (on the
    // device path they run in parallel, hidden behind the pass: the TPOT change tells).
    const double share = static_cast<double>(seqs) * (mask_us + accept_us) / 1e3 / tc;
    const double change = tc / tf - 1.0;
    std::printf(
        "| %lld | %.3f | %.3f | %.3f | %.1f | %.1f | %.1f%% | %+.1f%% | %+.1f%% | %lld of %lld |\n",
        static_cast<long long>(seqs), to, tf, tc, mask_us, accept_us, 100 * share, 100 * change,
        100 * (tc / to - 1.0), static_cast<long long>(con.valid), static_cast<long long>(seqs));
    rows.push_back({{"requests", seqs},
                    {"repetitions", reps},
                    {"tpot_free_own_ms", to},
                    {"tpot_free_forced_ms", tf},
                    {"tpot_constrained_ms", tc},
                    {"tpot_constrained_ms_each", con_ms},
                    {"tpot_free_forced_ms_each", forced_ms},
                    {"tpot_free_own_ms_each", own_ms},
                    {"mask_us_mean", mask_us},
                    {"accept_us_mean", accept_us},
                    {"masks", t.masks.load()},
                    {"mask_share_of_step", share},
                    {"tpot_change_vs_forced", change},
                    {"tpot_change_vs_own", tc / to - 1.0},
                    {"valid_json", con.valid},
                    {"tokens_constrained", con.tokens}});
  }
  std::printf(
      "\nTPOT: median time per output token over the requests (temperature 1, at most %lld "
      "tokens each, the end-of-text ends a constrained reply), the median of %lld interleaved "
      "runs; free, forced: the same requests teacher-forced to the constrained replies (same "
      "lengths and contexts); free, own: the model's own replies; serial masks: requests x "
      "(mask + accept) over the constrained TPOT.\n",
      static_cast<long long>(tokens), static_cast<long long>(reps));
  if (out.empty()) return 0;
  nlohmann::ordered_json j;
  j["benchmark"] = "grammar_bench";
  j["recipe"] = recipe_path;
  j["model"] = recipe->model;
  j["git_sha"] = bench::git_sha(RINFER_SOURCE_DIR);
  j["date"] = bench::utc_date();
  j["machine"] = bench::machine_json(bench::machine_short_name(false, ""));
  j["vocab_index_ms"] = index_ms;
  j["schema_compile_ms"] = compile_ms;
  j["masks_on_device"] = device_masks;
  j["rows"] = rows;
  return bench::write_json(out, j);
}
