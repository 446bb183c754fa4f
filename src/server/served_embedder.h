// One embedding recipe served by `rinfer serve` at POST /v1/embeddings: the embedding engine
// (engine/embedder.h) and a worker thread. Requests are tokenized and checked on the HTTP
// thread that received them (a bad one is answered there), then queued; the worker takes every
// request waiting and embeds all their inputs together in one call, so concurrent requests share
// forward passes (the recipe's dynamic batching sorts and packs them), and answers each.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/embedder.h"
#include "recipe/recipe.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/served_model.h"

namespace rinfer::server {

class ServedEmbedder {
 public:
  static Result<std::unique_ptr<ServedEmbedder>> load(const RecipeConfig& recipe,
                                                      const ServeLimits& limits, Metrics& metrics);
  ~ServedEmbedder();  // stop()

  const std::string& name() const { return name_; }
  bool answers_to(std::string_view model) const;
  int64_t dim() const { return embedder_->dim(); }
  int64_t max_length() const { return embedder_->max_length(); }
  int64_t vocab_size() const { return embedder_->tokenizer().vocab_size(); }
  const RecipeConfig& recipe() const { return embedder_->recipe(); }

  void start();
  // Any thread; `ex` is always answered.
  void serve(const EmbeddingRequest& req, const std::shared_ptr<HttpExchange>& ex);

  // Shutdown as ServedModel's: refuse new requests, wait for the queue, answer what is left.
  void stop_admitting() { admitting_.store(false); }
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  void stop();
  size_t in_flight();

 private:
  struct Job {
    std::shared_ptr<HttpExchange> ex;
    std::vector<TokenEncoding> enc;
    bool base64 = false;
    std::chrono::steady_clock::time_point start;
  };
  ServedEmbedder() = default;
  void loop();
  void answer(const Job& job, const float* vectors, int64_t n_tokens);

  std::unique_ptr<Embedder> embedder_;
  std::string name_;
  std::vector<std::string> aliases_;
  ServeLimits limits_;
  Metrics* metrics_ = nullptr;
  std::thread thread_;
  std::atomic<bool> admitting_{true};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  size_t working_ = 0;  // jobs taken by the worker, not yet answered
  bool stop_ = false;
};

// The OpenAI embeddings response: {"object": "list", "data": [{"object": "embedding", "index",
// "embedding": [floats] or a base64 string of little-endian float32}], "model", "usage"}.
std::string embedding_response(const std::string& model, const float* vectors, int64_t n,
                               int64_t dim, bool base64, int64_t prompt_tokens);

// RFC 4648 base64 (with padding).
std::string base64_encode(const void* data, size_t n);

}  // namespace rinfer::server
