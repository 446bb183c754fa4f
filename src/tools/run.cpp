// `rinfer run <recipe> -p "..."` and `rinfer run <recipe> --chat`: text generation with a
// recipe's model, strategies and sampling, streamed to stdout as it is produced. `rinfer run
// <model>` (a file, a folder or a cached model's name) runs it with the default recipe.
//
// Ctrl-C: the first one stops the reply being generated (its timing is printed); in --chat, one
// at the prompt ends the session; a second one while a reply is still stopping exits at once.
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/llm_engine.h"
#include "recipe/recipe.h"
#include "tools/input.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

std::atomic<bool> g_cancel{false};  // stop the current reply
std::atomic<int> g_interrupts{0};   // SIGINTs since the reply (or the prompt) started
std::atomic<bool> g_generating{false};
std::atomic<LlmEngine*> g_engine{nullptr};  // interrupted inside its forward pass on Ctrl-C

extern "C" void on_sigint(int) {
  const int n = g_interrupts.fetch_add(1) + 1;
  g_cancel.store(true);
  if (LlmEngine* e = g_engine.load(); e != nullptr && g_generating.load()) e->interrupt();
  if (g_generating.load() && n >= 2) {
    constexpr char kMsg[] = "\nrinfer: interrupted\n";
    (void)!::write(2, kMsg, sizeof(kMsg) - 1);
    ::_exit(130);
  }
}

// Installs the handler without SA_RESTART, so a read() at the chat prompt returns EINTR.
class SigintScope {
 public:
  SigintScope() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, &old_);
  }
  ~SigintScope() { sigaction(SIGINT, &old_, nullptr); }
  SigintScope(const SigintScope&) = delete;
  SigintScope& operator=(const SigintScope&) = delete;

 private:
  struct sigaction old_ {};
};

struct RunArgs {
  std::string recipe;
  std::string device;  // with a model instead of a recipe
  std::string prompt;
  std::string prompt_file;
  std::string system;
  bool chat = false;
  bool raw = false;
  bool verbose = false;
  bool allow_invalid_utf8 = false;
  bool allow_special = false;
  std::optional<int64_t> max_tokens;
  std::optional<double> temperature;
  std::optional<int64_t> seed;
  std::optional<int> threads;
  std::optional<int64_t> ctx;
  std::string chat_template;
  std::optional<int64_t> top_k;
  std::optional<double> top_p, min_p, repeat_penalty;
  std::vector<std::string> stop;
  bool json = false;
  // Structured output: --json-object, --json-schema FILE or --grammar FILE (read before the
  // model loads), compiled against the model's vocabulary once it has.
  bool json_object = false;
  std::string json_schema_file, grammar_file;
  std::optional<GrammarSpec> grammar;
  std::shared_ptr<const TokenConstraint> constraint;
};

// Streams a piece to stdout; a failed write (a full disk, a closed pipe) stops the reply.
void write_out(std::string_view s) {
  if (!write_stdout(s)) g_cancel.store(true);
}

// The prompt text from -p TEXT, -p - (stdin) or --prompt-file FILE, checked as UTF-8.
Result<std::string> prompt_text(const RunArgs& a) {
  std::string text;
  std::string source = "-p";
  if (!a.prompt_file.empty()) {
    RINFER_ASSIGN_OR_RETURN(text, read_text_input(a.prompt_file, "--prompt-file"));
    source = "--prompt-file " + a.prompt_file;
  } else if (a.prompt == "-") {
    RINFER_ASSIGN_OR_RETURN(text, read_text_input("-", "-p -"));
    source = "the prompt on stdin";
  } else {
    text = a.prompt;
  }
  if (text.empty()) return invalid_argument("{}: the prompt is empty", source);
  RINFER_RETURN_IF_ERROR(check_utf8(text, source, a.allow_invalid_utf8));
  RINFER_RETURN_IF_ERROR(check_utf8(a.system, "--system", a.allow_invalid_utf8));
  if (a.raw && !a.system.empty()) {
    return invalid_argument("--system needs the chat template, which --raw turns off");
  }
  return text;
}

// --json-object, --json-schema FILE or --grammar FILE into a->grammar (files read and checked
// before the model loads).
Status read_grammar(RunArgs& a) {
  if (a.json_object) a.grammar = GrammarSpec{GrammarSpec::Kind::kJsonObject, ""};
  if (!a.json_schema_file.empty()) {
    RINFER_ASSIGN_OR_RETURN(std::string text, read_text_input(a.json_schema_file, "--json-schema"));
    auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      return invalid_argument("--json-schema {}: not a JSON object (a JSON schema is one)",
                              a.json_schema_file);
    }
    a.grammar = GrammarSpec{GrammarSpec::Kind::kJsonSchema, j.dump()};
  }
  if (!a.grammar_file.empty()) {
    RINFER_ASSIGN_OR_RETURN(std::string text, read_text_input(a.grammar_file, "--grammar"));
    if (text.empty()) return invalid_argument("--grammar {}: the file is empty", a.grammar_file);
    a.grammar = GrammarSpec{GrammarSpec::Kind::kEbnf, std::move(text)};
  }
  return ok_status();
}

// The structured-output flag given, for messages.
std::string grammar_flag(const RunArgs& a) {
  if (!a.json_schema_file.empty()) return "--json-schema " + a.json_schema_file;
  if (!a.grammar_file.empty()) return "--grammar " + a.grammar_file;
  return "--json-object";
}

// One line from stdin without the newline; nullopt at EOF or on Ctrl-C.
std::optional<std::string> read_line() {
  std::string line;
  char c;
  for (;;) {
    const ssize_t n = ::read(0, &c, 1);
    if (n == 1) {
      if (c == '\n') return line;
      line += c;
      continue;
    }
    if (n < 0 && errno == EINTR) {
      if (g_cancel.load()) return std::nullopt;
      continue;
    }
    if (line.empty()) return std::nullopt;  // EOF
    return line;
  }
}

// --json: {"text", "tokens", "finish_reason", "timings": {...}} of a finished reply.
nlohmann::ordered_json reply_json(const GenerationResult& r) {
  nlohmann::ordered_json j;
  j["text"] = r.text;
  j["tokens"] = r.tokens;
  j["finish_reason"] = std::string(finish_reason_name(r.finish));
  j["timings"] = {{"prompt_tokens", r.stats.prompt_tokens},
                  {"cached_tokens", r.stats.cached_tokens},
                  {"generated_tokens", r.stats.generated_tokens},
                  {"first_token_ms", r.stats.ttft_ms},
                  {"total_ms", r.stats.total_ms},
                  {"prompt_tok_s", prefill_tps(r.stats)},
                  {"decode_tok_s", decode_tps(r.stats)}};
  return j;
}

void print_timing(const GenerationResult& r) {
  std::fprintf(stderr, "\n[%s | stop: %s]\n", stats_text(r.stats).c_str(),
               std::string(finish_reason_name(r.finish)).c_str());
}

// Generates one reply to `prompt`, streaming it (unless !stream); returns the result
// (cancellation included).
Result<GenerationResult> reply(LlmEngine& engine, const std::vector<int32_t>& prompt,
                               const RunArgs& a, bool stream = true) {
  g_cancel = false;
  g_interrupts = 0;
  g_generating = true;
  g_engine = &engine;
  auto r = engine.generate(prompt, stream ? PieceCallback(write_out) : PieceCallback(), &g_cancel,
                           a.constraint);
  g_engine = nullptr;
  g_generating = false;
  return r;
}

// A recipe file (.yaml, .yml), or a model (a file or folder, a cached model's name, random:...)
// run with the default recipe of text generation: the model on `device` (cpu when empty) with
// the strategies' defaults (the optimized settings), its own context length and chat template.
Result<RecipeConfig> recipe_or_model(const std::string& arg, const std::string& device) {
  namespace fs = std::filesystem;
  const std::string ext = fs::path(arg).extension().string();
  if (ext == ".yaml" || ext == ".yml") {
    if (!device.empty()) {
      return invalid_argument("--device {}: {} is a recipe, which names its device (device:)",
                              device, arg);
    }
    return load_recipe(arg);
  }
  // A path that exists is that file or folder (absolute: the default recipe has no folder);
  // anything else is a cached model's name or a random: source, as in a recipe.
  std::error_code ec;
  std::string model = arg;
  if (fs::exists(arg, ec)) model = fs::absolute(arg, ec).string();
  std::string quoted = "'";
  for (char c : model) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  quoted += "'";
  return parse_recipe(fmt::format("model: {}\ndevice: {}\nscenario: llm-chat\n", quoted,
                                  device.empty() ? "cpu" : device),
                      "the default recipe for " + arg);
}

Result<std::unique_ptr<LlmEngine>> make_engine(const RunArgs& a) {
  RINFER_ASSIGN_OR_RETURN(RecipeConfig recipe, recipe_or_model(a.recipe, a.device));
  if (a.max_tokens) recipe.max_tokens = *a.max_tokens;
  if (a.temperature) {
    // Checked here, so that a bad value blames the flag rather than the recipe file.
    SamplingParams s = recipe.sampling;
    s.temperature = static_cast<float>(*a.temperature);
    if (!std::isfinite(*a.temperature)) {
      return invalid_argument("--temperature {}: expected a finite number >= 0", *a.temperature);
    }
    if (*a.temperature > 0 && *a.temperature < SamplingParams::kMinTemperature) {
      // Checked before the cast: 1e-50 would become 0 (greedy) as a float.
      return invalid_argument(
          "--temperature {}: below the smallest usable temperature {} (0: "
          "greedy)",
          *a.temperature, SamplingParams::kMinTemperature);
    }
    if (Status st = s.validate(); !st.ok()) {
      return invalid_argument("--temperature {}: {}", *a.temperature, st.message());
    }
    recipe.sampling.temperature = s.temperature;
  }
  // The chain's settings, each checked as the recipe's are and blamed on its flag.
  const auto sampling_flag = [&](const char* flag, double value, auto set) -> Status {
    SamplingParams s = recipe.sampling;
    set(s);
    if (!std::isfinite(value)) return invalid_argument("{} {}: expected a finite number", flag, value);
    if (Status st = s.validate(); !st.ok()) {
      return invalid_argument("{} {}: {}", flag, value, st.message());
    }
    recipe.sampling = s;
    return ok_status();
  };
  if (a.top_k) {
    if (*a.top_k < 0 || *a.top_k > std::numeric_limits<int32_t>::max()) {
      return invalid_argument("--top-k {}: expected an integer >= 0 (0: off)", *a.top_k);
    }
    RINFER_RETURN_IF_ERROR(sampling_flag("--top-k", static_cast<double>(*a.top_k),
                                         [&](SamplingParams& s) {
                                           s.top_k = static_cast<int32_t>(*a.top_k);
                                         }));
  }
  if (a.top_p) {
    RINFER_RETURN_IF_ERROR(sampling_flag("--top-p", *a.top_p, [&](SamplingParams& s) {
      s.top_p = static_cast<float>(*a.top_p);
    }));
  }
  if (a.min_p) {
    RINFER_RETURN_IF_ERROR(sampling_flag("--min-p", *a.min_p, [&](SamplingParams& s) {
      s.min_p = static_cast<float>(*a.min_p);
    }));
  }
  if (a.repeat_penalty) {
    RINFER_RETURN_IF_ERROR(sampling_flag("--repeat-penalty", *a.repeat_penalty,
                                         [&](SamplingParams& s) {
                                           s.repeat_penalty = static_cast<float>(*a.repeat_penalty);
                                         }));
  }
  for (const std::string& stop : a.stop) {
    if (stop.empty()) return invalid_argument("--stop: an empty stop string would end every reply");
    RINFER_RETURN_IF_ERROR(check_utf8(stop, "--stop", /*allow_invalid=*/false));
    recipe.stop.push_back(stop);
  }
  if (a.seed) {
    recipe.sampling.seed = static_cast<uint64_t>(*a.seed);
    recipe.seed_set = true;
  }
  // Flags record themselves as where the setting came from, so messages blame them.
  if (a.threads) {
    recipe.strategies.threads = *a.threads;
    recipe.strategies.origins.set("strategies.threads.count", "--threads");
  }
  warn_if_oversubscribed(recipe.strategies.threads,
                         recipe.origins().where("strategies.threads.count"));
  if (a.ctx) {
    recipe.context_length = *a.ctx;
    recipe.strategies.origins.set("context_length", "--ctx");
  }
  if (!a.chat_template.empty()) recipe.chat_template = a.chat_template;
  // One conversation: the engine core with one seat.
  LlmEngineOptions eo;
  eo.seats = 1;
  return LlmEngine::create(recipe, eo);
}

// The conversation as tokens; drops the oldest turns (keeping a system message) while it
// leaves less than `reserve` positions for the reply.
Result<std::vector<int32_t>> chat_prompt(LlmEngine& e, std::vector<ChatMessage>& messages,
                                         int64_t reserve, bool allow_special) {
  const int64_t n_ctx = e.context_length();
  for (;;) {
    RINFER_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                            e.sample().preprocess(messages, allow_special));
    const size_t first = !messages.empty() && messages[0].role == "system" ? 1 : 0;
    if (static_cast<int64_t>(ids.size()) + reserve <= n_ctx || messages.size() < first + 3) {
      return ids;  // fits, or only the new message is left (the engine core reports the overflow)
    }
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first),
                   messages.begin() + static_cast<std::ptrdiff_t>(first + 2));
    std::fprintf(stderr,
                 "(the conversation is longer than the context: dropped the oldest turn)\n");
  }
}

// Without a chat template a prompt is continued as plain text only when --raw asks for it.
Status check_template(LlmEngine& e, const char* what) {
  if (e.sample().chat_template() != nullptr) return ok_status();
  return invalid_argument(
      "{}: {} needs a chat template and this model has none ({}): pass --raw to continue the "
      "prompt as plain text, or choose a template with --chat-template chatml|gemma (or "
      "chat_template in the recipe)",
      e.model_path(), what, e.sample().chat_template_note());
}

// The reply's exit code: 0, 130 when Ctrl-C stopped it, 1 when stdout failed (reported at the
// end of the command by check_stdout_written).
int reply_exit_code(const GenerationResult& r) {
  if (!write_stdout("")) return 1;
  return r.finish == FinishReason::kAborted ? 130 : 0;
}

int run_prompt(LlmEngine& e, const RunArgs& a, const std::string& text) {
  Result<std::vector<int32_t>> ids = std::vector<int32_t>();
  if (a.raw) {
    ids = e.sample().preprocess_raw(text);
  } else {
    if (Status st = check_template(e, "a chat prompt"); !st.ok()) return report_error(st.message());
    std::vector<ChatMessage> messages;
    if (!a.system.empty()) messages.push_back({"system", a.system});
    messages.push_back({"user", text});
    ids = e.sample().preprocess(messages, a.allow_special);
  }
  if (!ids.ok()) return report_error(ids.status().message());
  if (a.json) {
    // One JSON object once the reply is done, nothing streamed.
    auto r = reply(e, *ids, a, /*stream=*/false);
    if (!r.ok()) return report_error(r.status().message());
    write_out(reply_json(*r).dump() + "\n");
    return reply_exit_code(*r);
  }
  if (a.raw) write_out(text);  // a raw prompt is continued: show it
  auto r = reply(e, *ids, a);
  if (!r.ok()) return report_error(r.status().message());
  if (r->text.empty() || r->text.back() != '\n') write_out("\n");
  print_timing(*r);
  return reply_exit_code(*r);
}

int run_chat(LlmEngine& e, const RunArgs& a) {
  if (Status st = check_template(e, "--chat"); !st.ok()) return report_error(st.message());
  if (a.raw) return report_error("--raw and --chat exclude each other: a chat needs a template");
  if (Status st = check_utf8(a.system, "--system", a.allow_invalid_utf8); !st.ok()) {
    return report_error(st.message());
  }
  const bool tty = ::isatty(0) != 0;
  std::fprintf(stderr,
               "chat with %s: /exit or Ctrl-D ends, /reset forgets the history; Ctrl-C "
               "stops a reply\n",
               e.model_path().c_str());
  std::vector<ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  const int64_t reserve = std::min<int64_t>(e.recipe().max_tokens > 0 ? e.recipe().max_tokens : 256,
                                            e.context_length() / 4);
  for (;;) {
    if (tty) std::fputs("> ", stderr);  // the prompt is not part of the output
    g_cancel = false;
    g_interrupts = 0;
    std::optional<std::string> line = read_line();
    if (!line) {
      write_out("\n");
      return 0;  // EOF or Ctrl-C at the prompt
    }
    if (*line == "/exit" || *line == "/quit") return 0;
    if (*line == "/reset") {
      messages.resize(a.system.empty() ? 0 : 1);
      e.reset();
      std::fprintf(stderr, "(history cleared)\n");
      continue;
    }
    if (line->empty()) continue;
    if (Status st = check_utf8(*line, "the message", a.allow_invalid_utf8); !st.ok()) {
      report_error(st.message());
      continue;
    }
    messages.push_back({"user", *line});
    auto ids = chat_prompt(e, messages, reserve, a.allow_special);
    if (!ids.ok()) {
      messages.pop_back();
      report_error(ids.status().message());
      continue;
    }
    auto r = reply(e, *ids, a);
    if (!r.ok()) {
      messages.pop_back();
      report_error(r.status().message());
      continue;
    }
    messages.push_back({"assistant", r->text});
    write_out("\n");
    print_timing(*r);
    if (!write_stdout("")) return 1;  // stdout is gone: end the session
  }
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "run", "Generate text with a recipe's model, strategies and sampling (streams to stdout)");
  auto a = std::make_shared<RunArgs>();
  cmd->add_option("recipe", a->recipe,
                  "Recipe YAML (recipes/llm-chat/smollm2-135m/optimized.yaml), or a model (a GGUF "
                  "file, a Hugging Face folder, a cached model's name) run with the default "
                  "recipe: the optimized strategies on --device")
      ->required();
  cmd->add_option("--device", a->device,
                  "With a model instead of a recipe: cpu (the default) or cuda:N");
  auto* prompt =
      cmd->add_option("-p,--prompt", a->prompt, "The prompt (a user message); - reads stdin");
  auto* prompt_file =
      cmd->add_option("--prompt-file", a->prompt_file, "Read the prompt from a UTF-8 text file");
  auto* chat = cmd->add_flag("--chat", a->chat,
                             "Multi-turn chat on stdin (/exit or EOF ends, /reset clears)");
  prompt->excludes(chat);
  prompt->excludes(prompt_file);
  prompt_file->excludes(chat);
  cmd->add_flag("--raw", a->raw,
                "Continue the prompt as plain text: no chat template (needed for a model "
                "without one)");
  cmd->add_option("--system", a->system, "A system message for the chat template");
  cmd->add_flag("--allow-special", a->allow_special,
                "Parse control-token text in the messages (<|im_start|>, ...) as control tokens "
                "(default: messages are plain text; only the template makes control tokens)");
  cmd->add_flag("--allow-invalid-utf8", a->allow_invalid_utf8,
                "Take prompts that are not valid UTF-8 as raw bytes (default: rejected)");
  cmd->add_option("-n,--max-tokens", a->max_tokens, "Reply length limit (0: until the end)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0));
  // Parsed here: CLI11 clamps an out-of-range integer to the type's limit without a word.
  cmd->add_option_function<std::string>(
         "--seed",
         [a](const std::string& text) {
           int64_t v = -1;
           const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
           if (ec != std::errc() || end != text.data() + text.size() || v < 0) {
             throw CLI::ValidationError(
                 "--seed", fmt::format("{} is not an integer in [0, {}] (the recipe's range)", text,
                                       INT64_MAX));
           }
           a->seed = v;
         },
         "Random seed in [0, 2^63 - 1] (same seed, same output)")
      ->type_name("INT");
  cmd->add_option("--threads", a->threads, "Threads (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--ctx", a->ctx, "Context length (overrides the recipe's context_length)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  cmd->add_option("--chat-template", a->chat_template, "Chat template by name: chatml, gemma");
  cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0: off)");
  cmd->add_option("--top-p", a->top_p, "Keep the smallest set with this probability mass (1: off)");
  cmd->add_option("--min-p", a->min_p, "Keep tokens at least this fraction as likely as the top");
  cmd->add_option("--repeat-penalty", a->repeat_penalty,
                  "Penalty on tokens already in the window (1: off)");
  cmd->add_option("--stop", a->stop,
                  "A stop string (repeatable; added to the recipe's): the reply ends before it");
  cmd->add_flag("--json", a->json,
                "With -p or --prompt-file: one JSON object (text, tokens, finish_reason, "
                "timings) instead of the streamed text")
      ->excludes(chat);
  auto* json_object = cmd->add_flag("--json-object", a->json_object,
                                    "Structured output: the reply is a JSON object");
  auto* schema = cmd->add_option("--json-schema", a->json_schema_file,
                                 "Structured output: the reply is JSON that validates against "
                                 "the JSON schema in FILE (docs/structured-output.md)");
  auto* grammar = cmd->add_option("--grammar", a->grammar_file,
                                  "Structured output: the reply follows the EBNF grammar in FILE "
                                  "(root rule `root`)");
  json_object->excludes(schema);
  json_object->excludes(grammar);
  schema->excludes(grammar);
  cmd->add_flag("-v,--verbose", a->verbose, "Print the model, strategies and sampling first");
  cmd->callback([&exit_code, a] {
    if (!a->chat && a->prompt.empty() && a->prompt_file.empty()) {
      exit_code = report_error(
          "give a prompt with -p \"...\" (- reads stdin) or --prompt-file FILE, or start a chat "
          "with --chat");
      return;
    }
    // The prompt is read and checked before the model loads.
    std::string text;
    if (!a->chat) {
      auto t = prompt_text(*a);
      if (!t.ok()) {
        exit_code = report_error(t.status().message());
        return;
      }
      text = std::move(t).value();
    }
    if (Status st = read_grammar(*a); !st.ok()) {
      exit_code = report_error(st.message());
      return;
    }
    auto engine = make_engine(*a);
    if (!engine.ok()) {
      exit_code = report_error(engine.status().message());
      return;
    }
    if (a->grammar) {
      auto grammars = (*engine)->grammars();
      auto c = grammars.ok() ? (*grammars)->compile(*a->grammar)
                             : Result<std::shared_ptr<const TokenConstraint>>(grammars.status());
      if (!c.ok()) {
        exit_code = report_error(fmt::format("{}: {}", grammar_flag(*a), c.status().message()));
        return;
      }
      a->constraint = std::move(c).value();
    }
    if (a->verbose) std::fprintf(stderr, "%s", (*engine)->describe().c_str());
    SigintScope sigint;
    exit_code = a->chat ? run_chat(**engine, *a) : run_prompt(**engine, *a, text);
  });
}

}  // namespace rinfer
