// `rinfer run <recipe> -p "..."` and `rinfer run <recipe> --chat`: text generation with a
// recipe's model, strategies and sampling, streamed to stdout as it is produced.
//
// Ctrl-C: the first one stops the reply being generated (its timing is printed); in --chat, one
// at the prompt ends the session; a second one while a reply is still stopping exits at once.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "recipe/recipe.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

std::atomic<bool> g_cancel{false};  // stop the current reply
std::atomic<int> g_interrupts{0};   // SIGINTs since the reply (or the prompt) started
std::atomic<bool> g_generating{false};

extern "C" void on_sigint(int) {
  const int n = g_interrupts.fetch_add(1) + 1;
  g_cancel.store(true);
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
  std::string prompt;
  std::string system;
  bool chat = false;
  bool raw = false;
  bool verbose = false;
  std::optional<int64_t> max_tokens;
  std::optional<double> temperature;
  std::optional<uint64_t> seed;
  std::optional<int> threads;
  std::optional<int64_t> ctx;
  std::string chat_template;
};

void write_out(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
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

void print_timing(const GenerationResult& r) {
  std::fprintf(stderr, "\n[%s | stop: %s]\n", r.timings.to_string().c_str(),
               std::string(stop_reason_name(r.stop_reason)).c_str());
}

// Generates one reply to `prompt`, streaming it; returns the result (cancellation included).
Result<GenerationResult> reply(LlmEngine& engine, const std::vector<int32_t>& prompt) {
  g_cancel = false;
  g_interrupts = 0;
  g_generating = true;
  auto r = engine.generator().generate(prompt, write_out, &g_cancel);
  g_generating = false;
  return r;
}

Result<std::unique_ptr<LlmEngine>> make_engine(const RunArgs& a) {
  RINFER_ASSIGN_OR_RETURN(RecipeConfig recipe, load_recipe(a.recipe));
  if (a.max_tokens) recipe.max_tokens = *a.max_tokens;
  if (a.temperature) recipe.sampling.temperature = static_cast<float>(*a.temperature);
  if (a.seed) {
    recipe.sampling.seed = *a.seed;
    recipe.seed_set = true;
  }
  if (a.threads) recipe.strategies.threads = *a.threads;
  if (a.ctx) recipe.context_length = *a.ctx;
  if (!a.chat_template.empty()) recipe.chat_template = a.chat_template;
  return LlmEngine::create(recipe);
}

// The conversation as tokens; drops the oldest turns (keeping a system message) while it
// leaves less than `reserve` positions for the reply.
Result<std::vector<int32_t>> chat_prompt(LlmEngine& e, std::vector<ChatMessage>& messages,
                                         int64_t reserve) {
  const int64_t n_ctx = e.kv_cache().n_ctx();
  for (;;) {
    RINFER_ASSIGN_OR_RETURN(std::vector<int32_t> ids, e.sample().preprocess(messages));
    const size_t first = !messages.empty() && messages[0].role == "system" ? 1 : 0;
    if (static_cast<int64_t>(ids.size()) + reserve <= n_ctx || messages.size() < first + 3) {
      return ids;  // fits, or only the new message is left (the generator reports the overflow)
    }
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first),
                   messages.begin() + static_cast<std::ptrdiff_t>(first + 2));
    std::fprintf(stderr,
                 "(the conversation is longer than the context: dropped the oldest turn)\n");
  }
}

int run_prompt(LlmEngine& e, const RunArgs& a) {
  Result<std::vector<int32_t>> ids = std::vector<int32_t>();
  if (a.raw || e.sample().chat_template() == nullptr) {
    if (!a.raw && a.verbose) std::fprintf(stderr, "(no chat template: raw prompt)\n");
    ids = e.sample().preprocess_raw(a.prompt);
  } else {
    std::vector<ChatMessage> messages;
    if (!a.system.empty()) messages.push_back({"system", a.system});
    messages.push_back({"user", a.prompt});
    ids = e.sample().preprocess(messages);
  }
  if (!ids.ok()) return report_error(ids.status().message());
  if (a.raw) write_out(a.prompt);  // a raw prompt is continued: show it
  auto r = reply(e, *ids);
  if (!r.ok()) return report_error(r.status().message());
  if (r->text.empty() || r->text.back() != '\n') write_out("\n");
  print_timing(*r);
  return r->stop_reason == StopReason::kCancelled ? 130 : 0;
}

int run_chat(LlmEngine& e, const RunArgs& a) {
  if (e.sample().chat_template() == nullptr) {
    return report_error(
        "--chat needs a chat template: this model has none (set chat_template "
        "in the recipe or pass --chat-template chatml|gemma)");
  }
  const bool tty = ::isatty(0) != 0;
  std::fprintf(stderr,
               "chat with %s: /exit or Ctrl-D ends, /reset forgets the history; Ctrl-C "
               "stops a reply\n",
               e.model_path().c_str());
  std::vector<ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  const int64_t reserve = std::min<int64_t>(e.recipe().max_tokens > 0 ? e.recipe().max_tokens : 256,
                                            e.kv_cache().n_ctx() / 4);
  for (;;) {
    if (tty) write_out("> ");
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
      e.generator().reset();
      std::fprintf(stderr, "(history cleared)\n");
      continue;
    }
    if (line->empty()) continue;
    messages.push_back({"user", *line});
    auto ids = chat_prompt(e, messages, reserve);
    if (!ids.ok()) {
      messages.pop_back();
      report_error(ids.status().message());
      continue;
    }
    auto r = reply(e, *ids);
    if (!r.ok()) {
      messages.pop_back();
      report_error(r.status().message());
      continue;
    }
    messages.push_back({"assistant", r->text});
    write_out("\n");
    print_timing(*r);
  }
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "run", "Generate text with a recipe's model, strategies and sampling (streams to stdout)");
  auto a = std::make_shared<RunArgs>();
  cmd->add_option("recipe", a->recipe,
                  "Recipe YAML, e.g. recipes/llm-chat/smollm2-135m/optimized.yaml")
      ->required();
  auto* prompt = cmd->add_option("-p,--prompt", a->prompt, "The prompt (a user message)");
  auto* chat = cmd->add_flag("--chat", a->chat,
                             "Multi-turn chat on stdin (/exit or EOF ends, /reset clears)");
  prompt->excludes(chat);
  cmd->add_flag("--raw", a->raw, "Continue the prompt as plain text: no chat template");
  cmd->add_option("--system", a->system, "A system message for the chat template");
  cmd->add_option("-n,--max-tokens", a->max_tokens, "Reply length limit (0: until the end)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("--temperature", a->temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--seed", a->seed, "Random seed (same seed, same output)");
  cmd->add_option("--threads", a->threads, "Threads (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--ctx", a->ctx, "Context length (overrides the recipe's context_length)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  cmd->add_option("--chat-template", a->chat_template, "Chat template by name: chatml, gemma");
  cmd->add_flag("-v,--verbose", a->verbose, "Print the model, strategies and sampling first");
  cmd->callback([&exit_code, a] {
    if (!a->chat && a->prompt.empty()) {
      exit_code = report_error("give a prompt with -p \"...\" or start a chat with --chat");
      return;
    }
    auto engine = make_engine(*a);
    if (!engine.ok()) {
      exit_code = report_error(engine.status().message());
      return;
    }
    if (a->verbose) std::fprintf(stderr, "%s", (*engine)->describe().c_str());
    SigintScope sigint;
    exit_code = a->chat ? run_chat(**engine, *a) : run_prompt(**engine, *a);
  });
}

}  // namespace rinfer
