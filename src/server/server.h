// `rinfer serve`: the OpenAI-compatible HTTP API over one or more recipes.
//
//   POST /v1/chat/completions, /v1/completions   generation, streamed (SSE) or whole
//   POST /v1/embeddings                          embeddings of an embedding recipe
//   GET  /v1/models                              the served names (with their aliases)
//   GET  /health                                 200 ready, 503 while the models load
//   GET  /metrics                                Prometheus text
//   GET  /                                       the chat page (web/)
//
// The HTTP port opens first and the recipes load behind it, so /health says "loading" until
// every model is ready. Errors use OpenAI's JSON shape; bad input is a 4xx naming the field.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "recipe/recipe.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/served_embedder.h"
#include "server/served_model.h"

namespace rinfer::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;  // empty: no key needed
  HttpLimits http;
  ServeLimits serve;
  std::chrono::seconds drain{30};  // at shutdown: how long requests in flight may finish
};

class Server {
 public:
  // Opens the port; the recipes load in the background (see wait_loaded()).
  static Result<std::unique_ptr<Server>> start(std::vector<RecipeConfig> recipes,
                                               ServerOptions opts);
  ~Server();

  int port() const { return http_->port(); }
  // Blocks until every model is loaded (OK) or one failed to (its error).
  Status wait_loaded();
  // Graceful shutdown: stop accepting, let requests in flight finish until the drain deadline,
  // abort the rest, close. Returns how many were aborted.
  size_t shutdown();
  Metrics& metrics() { return metrics_; }

 private:
  Server() = default;
  void handle(const std::shared_ptr<HttpExchange>& ex);
  void handle_generation(const std::shared_ptr<HttpExchange>& ex, Endpoint endpoint);
  void handle_embeddings(const std::shared_ptr<HttpExchange>& ex);
  // A 404 naming the served models (or 503 while they load) for an unknown `model`.
  void reply_unknown_model(HttpExchange& ex, const std::string& model);
  // A request that left out `model`: the name of the one model of its kind served (embedding
  // or text generation), or empty after replying 400 naming them (503 while they load).
  std::string sole_model(HttpExchange& ex, bool embedding);
  void reply(HttpExchange& ex, HttpResponse r);
  void reply_error(HttpExchange& ex, const ApiError& e);
  // /v1/models: every served name and alias; with `only`, that one entry (GET /v1/models/{id}),
  // or "" when nothing is served by that id.
  std::string models_json(const std::string* only = nullptr);
  ServedModel* find_model(std::string_view name);
  ServedEmbedder* find_embedder(std::string_view name);

  ServerOptions opts_;
  Metrics metrics_;
  std::unique_ptr<HttpServer> http_;
  std::vector<RecipeConfig> recipes_;
  std::thread loader_;
  std::mutex mu_;  // models_, load_status_
  std::vector<std::unique_ptr<ServedModel>> models_;
  std::vector<std::unique_ptr<ServedEmbedder>> embedders_;
  std::atomic<bool> ready_{false};
  bool loaded_ = false;
  Status load_status_;
  std::condition_variable loaded_cv_;
};

}  // namespace rinfer::server
