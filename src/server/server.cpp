#include "server/server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/web_assets.h"

namespace rinfer::server {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// A time-independent comparison of the key a client sent with the server's.
bool same_key(std::string_view a, std::string_view b) {
  if (a.size() != b.size() || b.empty()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

// The route label of the metrics: a known path, or "other".
std::string route_of(std::string_view path) {
  for (std::string_view known : {"/v1/chat/completions", "/v1/completions", "/v1/models",
                                 "/v1/embeddings", "/health", "/metrics"}) {
    if (path == known) return std::string(known);
  }
  for (const WebAsset& a : web_assets()) {
    if (path == a.path || path == "/") return "/";
  }
  return "other";
}

bool is_json(std::string_view content_type) {
  const std::string t = lower(content_type.substr(0, content_type.find(';')));
  std::string trimmed;
  for (char c : t) {
    if (c != ' ' && c != '\t') trimmed += c;
  }
  return trimmed == "application/json";
}

ApiError not_json(const HttpRequest& req) {
  return ApiError{415,
                  fmt::format("the body must be JSON (Content-Type: application/json), got '{}'",
                              req.header("content-type")),
                  "", "invalid_request_error"};
}

}  // namespace

Result<std::unique_ptr<Server>> Server::start(std::vector<RecipeConfig> recipes,
                                              ServerOptions opts) {
  if (recipes.empty()) return invalid_argument("rinfer serve: no recipe given");
  for (const RecipeConfig& r : recipes) {
    if (r.scenario != "llm-chat" && r.scenario != "llm-serve" && r.scenario != "embedding") {
      return unsupported(
          "{}: scenario '{}' cannot be served (llm-chat, llm-serve and embedding "
          "can)",
          r.path, r.scenario);
    }
  }
  // Two recipes must not answer to one name.
  std::vector<std::string> names;
  for (const RecipeConfig& r : recipes) {
    names.push_back(r.serve.name.empty() ? r.model : r.serve.name);
    for (const std::string& a : r.serve.aliases) names.push_back(a);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (std::count(names.begin(), names.end(), names[i]) > 1) {
      return invalid_argument(
          "rinfer serve: two recipes answer to the model name '{}' (set serve.name or "
          "serve.aliases in one of them)",
          names[i]);
    }
  }
  std::unique_ptr<Server> s(new Server());
  s->opts_ = std::move(opts);
  s->recipes_ = std::move(recipes);
  declare_server_metrics(s->metrics_);
  Server* self = s.get();
  auto http = HttpServer::start(
      s->opts_.host, s->opts_.port, s->opts_.http,
      [self](const std::shared_ptr<HttpExchange>& ex) { self->handle(ex); },
      [self](const std::string& path, int status) {
        self->metrics_.add("rinfer_http_requests_total",
                           {{"route", route_of(path)}, {"status", std::to_string(status)}});
      });
  if (!http.ok()) return http.status();
  s->http_ = std::move(http).value();
  s->loader_ = std::thread([self] {
    Status st;
    for (const RecipeConfig& r : self->recipes_) {
      if (r.scenario == "embedding") {
        auto e = ServedEmbedder::load(r, self->opts_.serve, self->metrics_);
        if (!e.ok()) {
          st = e.status();
          break;
        }
        (*e)->start();
        std::lock_guard<std::mutex> lock(self->mu_);
        self->embedders_.push_back(std::move(e).value());
        continue;
      }
      auto m = ServedModel::load(r, self->opts_.serve, self->metrics_);
      if (!m.ok()) {
        st = m.status();
        break;
      }
      (*m)->start();
      std::lock_guard<std::mutex> lock(self->mu_);
      self->models_.push_back(std::move(m).value());
    }
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->load_status_ = st;
      self->loaded_ = true;
      if (st.ok()) self->ready_.store(true);
    }
    self->loaded_cv_.notify_all();
  });
  return s;
}

Server::~Server() { shutdown(); }

Status Server::wait_loaded() {
  std::unique_lock<std::mutex> lock(mu_);
  loaded_cv_.wait(lock, [this] { return loaded_; });
  return load_status_;
}

size_t Server::shutdown() {
  if (!http_) return 0;
  http_->stop_accepting();
  if (loader_.joinable()) loader_.join();
  std::vector<ServedModel*> models;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& m : models_) models.push_back(m.get());
  }
  for (ServedModel* m : models) m->stop_admitting();
  std::vector<ServedEmbedder*> embedders;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : embedders_) embedders.push_back(e.get());
  }
  for (ServedEmbedder* e : embedders) e->stop_admitting();
  const auto deadline = std::chrono::steady_clock::now() + opts_.drain;
  size_t aborted = 0;
  for (ServedEmbedder* e : embedders) {
    if (!e->wait_idle(deadline)) aborted += e->in_flight();
    e->stop();
  }
  for (ServedModel* m : models) {
    if (!m->wait_idle(deadline)) {
      aborted += m->in_flight();
      m->abort_all();
    }
  }
  // The aborted requests' last events answer their connections.
  for (ServedModel* m : models) {
    m->wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(10));
    m->stop();
  }
  http_->stop();
  http_.reset();
  return aborted;
}

ServedEmbedder* Server::find_embedder(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : embedders_) {
    if (e->answers_to(name)) return e.get();
  }
  return nullptr;
}

ServedModel* Server::find_model(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& m : models_) {
    if (m->answers_to(name)) return m.get();
  }
  return nullptr;
}

void Server::reply(HttpExchange& ex, HttpResponse r) { ex.respond(std::move(r)); }

void Server::reply_error(HttpExchange& ex, const ApiError& e) {
  reply(ex, HttpResponse{e.status, "application/json", e.to_json(), {}, false});
}

std::string Server::models_json(const std::string* only) {
  nlohmann::ordered_json data = nlohmann::ordered_json::array();
  std::lock_guard<std::mutex> lock(mu_);
  for (const RecipeConfig& r : recipes_) {
    const std::string name = r.serve.name.empty() ? r.model : r.serve.name;
    bool ready = false;
    int64_t ctx = r.context_length, vocab = 0;
    for (auto& m : models_) {
      if (m->name() == name) {
        ready = true;
        ctx = m->context_length();
        vocab = m->vocab_size();
      }
    }
    for (auto& e : embedders_) {
      if (e->name() == name) {
        ready = true;
        ctx = e->max_length();
        vocab = e->vocab_size();
      }
    }
    auto entry = [&](const std::string& id) {
      return nlohmann::ordered_json{
          {"id", id},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "recipes-infer"},
          {"root", name},
          {"recipe", r.path},
          {"context_length", ctx},
          {"vocab_size", vocab},
          {"task", r.scenario == "embedding" ? "embedding" : "text-generation"},
          {"ready", ready}};
    };
    data.push_back(entry(name));
    for (const std::string& a : r.serve.aliases) data.push_back(entry(a));
  }
  constexpr auto kReplace = nlohmann::ordered_json::error_handler_t::replace;
  if (only != nullptr) {
    for (const auto& m : data) {
      if (m["id"] == *only) return m.dump(-1, ' ', false, kReplace);
    }
    return "";
  }
  return nlohmann::ordered_json{{"object", "list"}, {"data", std::move(data)}}.dump(-1, ' ', false,
                                                                                    kReplace);
}

void Server::handle(const std::shared_ptr<HttpExchange>& ex) {
  const HttpRequest& req = ex->request();
  const std::string& path = req.path;
  const bool get = req.method == "GET" || req.method == "HEAD";
  const bool post = req.method == "POST";
  auto wrong_method = [&](const char* allowed) {
    reply_error(*ex, ApiError{405, fmt::format("{} takes {}, not {}", path, allowed, req.method),
                              "", "invalid_request_error"});
  };

  // A browser's preflight, before the key check (it carries no credentials): what the allowed
  // origin may send (HttpLimits::cors_origin; the origin header comes with every response).
  if (req.method == "OPTIONS" && !opts_.http.cors_origin.empty()) {
    const std::string_view asked = req.header("access-control-request-headers");
    return reply(*ex,
                 HttpResponse{204,
                              "text/plain",
                              "",
                              {{"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                               {"Access-Control-Allow-Headers",
                                asked.empty() ? "Authorization, Content-Type" : std::string(asked)},
                               {"Access-Control-Max-Age", "600"}},
                              false});
  }
  if (path.starts_with("/v1/") && !opts_.api_key.empty()) {
    const std::string_view auth = req.header("authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (!auth.starts_with(kBearer) || !same_key(auth.substr(kBearer.size()), opts_.api_key)) {
      return reply_error(*ex, ApiError{401,
                                       auth.empty() ? "no API key: send 'Authorization: Bearer KEY'"
                                                    : "the API key is not the server's",
                                       "", "invalid_request_error", "invalid_api_key"});
    }
  }
  if (path == "/health") {
    if (!get) return wrong_method("GET");
    const bool ready = ready_.load();
    return reply(*ex, HttpResponse{ready ? 200 : 503,
                                   "application/json",
                                   ready ? R"({"status":"ready"})" : R"({"status":"loading"})",
                                   {},
                                   false});
  }
  if (path == "/metrics") {
    if (!get) return wrong_method("GET");
    return reply(*ex, HttpResponse{200, "text/plain; version=0.0.4", metrics_.render(), {}, false});
  }
  if (path == "/v1/models") {
    if (!get) return wrong_method("GET");
    return reply(*ex, HttpResponse{200, "application/json", models_json(), {}, false});
  }
  if (path.starts_with("/v1/models/")) {  // client.models.retrieve(id)
    if (!get) return wrong_method("GET");
    const std::string id = path.substr(std::string_view("/v1/models/").size());
    if (std::string entry = models_json(&id); !entry.empty()) {
      return reply(*ex, HttpResponse{200, "application/json", std::move(entry), {}, false});
    }
    return reply_error(*ex, ApiError{404, fmt::format("the model '{}' does not exist here", id),
                                     "model", "invalid_request_error", "model_not_found"});
  }
  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (!post) return wrong_method("POST");
    return handle_generation(
        ex, path == "/v1/chat/completions" ? Endpoint::kChat : Endpoint::kCompletion);
  }
  if (path == "/v1/embeddings") {
    if (!post) return wrong_method("POST");
    return handle_embeddings(ex);
  }
  if (get) {
    for (const WebAsset& a : web_assets()) {
      if (path == a.path || (path == "/" && a.path == "/index.html")) {
        return reply(*ex, HttpResponse{200,
                                       std::string(a.type),
                                       std::string(a.body),
                                       {{"Cache-Control", "no-cache"}},
                                       false});
      }
    }
  }
  reply_error(
      *ex, ApiError{404, fmt::format("no route {} {}", req.method, path), "", "not_found_error"});
}

void Server::handle_generation(const std::shared_ptr<HttpExchange>& ex, Endpoint endpoint) {
  const HttpRequest& req = ex->request();
  if (!is_json(req.header("content-type"))) return reply_error(*ex, not_json(req));
  auto parsed = parse_generation_request(req.body, endpoint);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(*ex, *e);
  GenerationRequest& g = std::get<GenerationRequest>(parsed);
  if (g.model.empty()) {
    g.model = sole_model(*ex, /*embedding=*/false);
    if (g.model.empty()) return;
  }
  ServedModel* m = find_model(g.model);
  if (m == nullptr) {
    if (find_embedder(g.model) != nullptr) {
      return reply_error(*ex, ApiError{400,
                                       fmt::format("model '{}' is an embedding model: use "
                                                   "/v1/embeddings",
                                                   g.model),
                                       "model", "invalid_request_error"});
    }
    return reply_unknown_model(*ex, g.model);
  }
  m->serve(g, ex);
}

std::string Server::sole_model(HttpExchange& ex, bool embedding) {
  if (!ready_.load()) {
    reply_error(ex, ApiError{503, "the models are loading; name one in 'model' or retry", "model",
                             "model_loading"});
    return "";
  }
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (embedding) {
      for (auto& e : embedders_) names.push_back(e->name());
    } else {
      for (auto& m : models_) names.push_back(m->name());
    }
  }
  if (names.size() == 1) return names[0];
  const char* kind = embedding ? "embedding" : "text-generation";
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  reply_error(ex, ApiError{400,
                           names.empty()
                               ? fmt::format("'model': missing, and this server serves no {} model",
                                             kind)
                               : fmt::format("'model': missing, and this server serves {} {} "
                                             "models ({}): name one",
                                             names.size(), kind, list),
                           "model", "invalid_request_error"});
  return "";
}

void Server::reply_unknown_model(HttpExchange& ex, const std::string& model) {
  if (!ready_.load()) {
    return reply_error(
        ex, ApiError{503, fmt::format("the models are loading; '{}' is not ready yet", model),
                     "model", "model_loading"});
  }
  std::string known;
  for (const RecipeConfig& r : recipes_) {
    known += (known.empty() ? "" : ", ") + (r.serve.name.empty() ? r.model : r.serve.name);
  }
  reply_error(ex,
              ApiError{404, fmt::format("model '{}' is not served here (served: {})", model, known),
                       "model", "invalid_request_error", "model_not_found"});
}

void Server::handle_embeddings(const std::shared_ptr<HttpExchange>& ex) {
  const HttpRequest& req = ex->request();
  if (!is_json(req.header("content-type"))) return reply_error(*ex, not_json(req));
  auto parsed = parse_embedding_request(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return reply_error(*ex, *e);
  EmbeddingRequest& r = std::get<EmbeddingRequest>(parsed);
  if (r.model.empty()) {
    r.model = sole_model(*ex, /*embedding=*/true);
    if (r.model.empty()) return;
  }
  ServedEmbedder* e = find_embedder(r.model);
  if (e == nullptr) {
    if (find_model(r.model) != nullptr) {
      return reply_error(*ex, ApiError{400,
                                       fmt::format("model '{}' generates text; /v1/embeddings "
                                                   "needs an embedding recipe",
                                                   r.model),
                                       "model", "invalid_request_error"});
    }
    return reply_unknown_model(*ex, r.model);
  }
  e->serve(r, ex);
}

}  // namespace rinfer::server
