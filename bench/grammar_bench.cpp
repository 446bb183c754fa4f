// The cost of structured output's token mask (docs/structured-output.md): constrained replies
// through a recipe's engine core on the CPU, at 1 and at N requests together, each mask and
// each accept of the grammar timed. Printed next to the decode step it rides on: the mask's
// share of a step (masks per step x mean mask time over the median time per output token), and
// the time per output token of the same replies without the grammar.
//
//   grammar_bench [--recipe PATH] [--seqs 1,64] [--tokens 96] [--out FILE]
//
// The recipe defaults to SmolLM2's optimized CPU recipe; the schema is a bounded person record
// (nested object, enum array, integers, strings).
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
  int64_t masks = 0;
  double mask_ns = 0;
  double accept_ns = 0;
};

// Times its wrapped state's mask and accept into a shared Timing (the engine core's thread only).
class TimedState final : public TokenConstraintState {
 public:
  TimedState(std::unique_ptr<TokenConstraintState> s, Timing* t) : s_(std::move(s)), t_(t) {}
  Status mask(std::span<float> row) override {
    const auto t0 = Clock::now();
    Status st = s_->mask(row);
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
};

// `seqs` requests of the same chat prompt together (seeds 1..seqs, temperature 1), constrained
// by `c` (may be null), through `core` until idle.
Run run(LlmEngine& e, const std::vector<int32_t>& prompt, int64_t seqs, int64_t tokens,
        std::shared_ptr<const TokenConstraint> c) {
  EngineCore& core = *e.core();
  std::vector<RequestStats> stats(static_cast<size_t>(seqs));
  std::vector<std::string> texts(static_cast<size_t>(seqs));
  for (int64_t i = 0; i < seqs; ++i) {
    RequestParams p;
    p.prompt = prompt;
    p.sampling = e.recipe().sampling;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = static_cast<uint64_t>(i + 1);
    p.max_tokens = tokens;
    p.constraint = c;
    p.on_event = [&stats, &texts, i](const RequestEvent& ev) {
      texts[static_cast<size_t>(i)] += ev.text;
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
  Run r;
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
    } else if (a == "--out") {
      out = next();
    } else {
      std::fprintf(
          stderr, "usage: grammar_bench [--recipe PATH] [--seqs 1,64] [--tokens N] [--out FILE]\n");
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
  std::printf(
      "| requests | TPOT free ms | TPOT constrained ms | mask us (mean) | accept us | "
      "masks per step / TPOT | TPOT change | valid JSON |\n|---|---|---|---|---|---|---|---|\n");
  for (int64_t seqs : seqs_list) {
    run(e, *prompt, std::min<int64_t>(seqs, 4), 8, nullptr);  // warm-up
    const Run free = run(e, *prompt, seqs, tokens, nullptr);
    Timing t;
    auto timed = std::make_shared<TimedConstraint>(*compiled, &t);
    const Run con = run(e, *prompt, seqs, tokens, timed);
    const double mask_us = t.masks > 0 ? t.mask_ns / static_cast<double>(t.masks) / 1e3 : 0;
    const double accept_us = t.masks > 0 ? t.accept_ns / static_cast<double>(t.masks) / 1e3 : 0;
    // Each step masks one row per request, one after another on the engine's thread.
    const double share = static_cast<double>(seqs) * (mask_us + accept_us) / 1e3 / con.tpot_ms;
    const double change = con.tpot_ms / free.tpot_ms - 1.0;
    std::printf("| %lld | %.2f | %.2f | %.1f | %.1f | %.1f%% | %+.1f%% | %lld of %lld |\n",
                static_cast<long long>(seqs), free.tpot_ms, con.tpot_ms, mask_us, accept_us,
                100 * share, 100 * change, static_cast<long long>(con.valid),
                static_cast<long long>(seqs));
    rows.push_back({{"requests", seqs},
                    {"tpot_free_ms", free.tpot_ms},
                    {"tpot_constrained_ms", con.tpot_ms},
                    {"mask_us_mean", mask_us},
                    {"accept_us_mean", accept_us},
                    {"masks", t.masks},
                    {"mask_share_of_step", share},
                    {"tpot_change", change},
                    {"valid_json", con.valid},
                    {"tokens_constrained", con.tokens}});
  }
  std::printf(
      "\nTPOT: median time per output token over the requests (temperature 1, at most %lld "
      "tokens each, the end-of-text ends a constrained reply); mask share: requests x "
      "(mask + accept) over the constrained TPOT.\n",
      static_cast<long long>(tokens));
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
  j["rows"] = rows;
  return bench::write_json(out, j);
}
