// One recipe served by `rinfer serve`: its model loaded behind the engine core, and the serving
// loop, a thread that steps the core while requests are in flight. Requests arrive from the
// HTTP threads (serve()), are rendered (chat template, tokenizer) and checked there, then
// submitted; their tokens go back to their connections from the loop's thread.
//
// Every step the loop looks at each request's connection: a client that hung up, or whose
// connection ended (a write error, a timeout), has its request aborted, which frees its KV
// blocks at the start of the next step.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/llm_engine.h"
#include "recipe/recipe.h"
#include "server/completion.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace rinfer::server {

struct ServeLimits {
  int64_t max_queue = 1024;  // requests waiting beyond the engine's seats; more get 429
};

class ServedModel {
 public:
  // Loads the recipe's model and its engine core (seconds), without starting the loop.
  static Result<std::unique_ptr<ServedModel>> load(const RecipeConfig& recipe,
                                                   const ServeLimits& limits, Metrics& metrics);
  ~ServedModel();  // stop()

  // The name requests use (serve.name, else the recipe's model) and its aliases.
  const std::string& name() const { return name_; }
  const std::vector<std::string>& aliases() const { return aliases_; }
  bool answers_to(std::string_view model) const;
  int64_t context_length() const { return recipe_.context_length; }
  int64_t seats() const;
  int64_t vocab_size() const { return model_->hparams().n_vocab; }
  const RecipeConfig& recipe() const { return recipe_; }

  void start();
  // Any thread: renders, checks and submits the request; `ex` is always answered (an error
  // status, the whole reply or a stream).
  void serve(const GenerationRequest& req, const std::shared_ptr<HttpExchange>& ex);

  // Shutdown, in order: no new requests (503); wait_idle() until those in flight finish or the
  // deadline passes; abort_all(); wait_idle() again for their last events; stop().
  void stop_admitting() { admitting_.store(false); }
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  void abort_all();
  void stop();
  size_t in_flight();

 private:
  ServedModel() = default;
  void loop();
  void sweep();  // aborts the requests of departed clients; forgets finished ones
  void publish(const EngineStats& s);
  // The token ids of prompt `prompt` (completions) or of the chat.
  Result<std::vector<int32_t>> render(const GenerationRequest& req, size_t prompt) const;
  std::string echo_of(const PromptInput& in) const;
  // Under mu_: submits choice k of c (its deferred parameters) and records its id.
  Result<RequestId> submit_choice(const std::shared_ptr<Completion>& c, int32_t k);
  // The loop, after each step: every follower whose leader has started is submitted, so it
  // finds the prompt's blocks in the prefix cache.
  void submit_followers();
  // Under mu_: aborts c's submitted choices that have not ended; returns how many.
  int abort_choices(Completion& c);

  // The model, its tokenizer and chat template and its engine core (a random-weight model has
  // no tokenizer: token ids in, ids as text out).
  std::unique_ptr<LlmEngine> engine_;
  const DecoderModel* model_ = nullptr;
  const Tokenizer* tokenizer_ = nullptr;  // null for a random-weight model
  EngineCore* core_ = nullptr;
  RecipeConfig recipe_;
  uint64_t seed_ = 0;
  std::string name_;
  std::vector<std::string> aliases_;
  ServeLimits limits_;
  Metrics* metrics_ = nullptr;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> admitting_{true};
  std::atomic<uint64_t> calls_{0};
  std::mutex mu_;
  std::vector<std::shared_ptr<Completion>> active_;
  EngineStats last_{};               // the loop's last published figures
  std::vector<pollfd> fds_;          // sweep(): the sockets polled ...
  std::vector<Completion*> polled_;  // ... and their requests
};

// The metric families the server records (declared once per Metrics).
void declare_server_metrics(Metrics& m);

}  // namespace rinfer::server
