#include "server/served_embedder.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rinfer::server {

namespace {

void respond_json(HttpExchange& ex, int status, std::string body) {
  ex.respond(HttpResponse{status, "application/json", std::move(body), {}, false});
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string base64_encode(const void* data, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i < n) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string embedding_response(const std::string& model, const float* vectors, int64_t n,
                               int64_t dim, bool base64, int64_t prompt_tokens) {
  std::string out = R"({"object":"list","data":[)";
  for (int64_t i = 0; i < n; ++i) {
    const float* v = vectors + i * dim;
    out += fmt::format(R"({}{{"object":"embedding","index":{},"embedding":)", i > 0 ? "," : "", i);
    if (base64) {
      // Little-endian float32, as the official client decodes it.
      std::vector<uint8_t> bytes(static_cast<size_t>(dim) * 4);
      for (int64_t k = 0; k < dim; ++k) {
        uint32_t u = 0;
        std::memcpy(&u, v + k, 4);
        for (int b = 0; b < 4; ++b)
          bytes[static_cast<size_t>(k * 4 + b)] = static_cast<uint8_t>(u >> (8 * b));
      }
      out += '"' + base64_encode(bytes.data(), bytes.size()) + '"';
    } else {
      out += '[';
      for (int64_t k = 0; k < dim; ++k) out += fmt::format("{}{}", k > 0 ? "," : "", v[k]);
      out += ']';
    }
    out += '}';
  }
  nlohmann::ordered_json tail = {
      {"model", model},
      {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
  std::string t = tail.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  out += "]," + t.substr(1);  // {"model":...} spliced after "data"
  return out;
}

Result<std::unique_ptr<ServedEmbedder>> ServedEmbedder::load(const RecipeConfig& recipe,
                                                             const ServeLimits& limits,
                                                             Metrics& metrics) {
  std::unique_ptr<ServedEmbedder> s(new ServedEmbedder());
  RINFER_ASSIGN_OR_RETURN(s->embedder_, Embedder::create(recipe));
  s->name_ = recipe.serve.name.empty() ? recipe.model : recipe.serve.name;
  s->aliases_ = recipe.serve.aliases;
  s->limits_ = limits;
  s->metrics_ = &metrics;
  metrics.set("rinfer_model_ready", {{"model", s->name_}}, 0);
  return s;
}

ServedEmbedder::~ServedEmbedder() { stop(); }

bool ServedEmbedder::answers_to(std::string_view model) const {
  return model == name_ || std::find(aliases_.begin(), aliases_.end(), model) != aliases_.end();
}

void ServedEmbedder::start() {
  thread_ = std::thread([this] { loop(); });
  metrics_->set("rinfer_model_ready", {{"model", name_}}, 1);
}

void ServedEmbedder::serve(const EmbeddingRequest& req, const std::shared_ptr<HttpExchange>& ex) {
  if (!admitting_.load()) {
    return respond_json(
        *ex, 503,
        ApiError{503, "the server is shutting down", "", "server_shutting_down"}.to_json());
  }
  if (req.dimensions && *req.dimensions != dim()) {
    return respond_json(*ex, 400,
                        ApiError{400,
                                 fmt::format("'dimensions': {} makes {}-dimensional vectors "
                                             "only, not {}",
                                             name_, dim(), *req.dimensions),
                                 "dimensions"}
                            .to_json());
  }
  Job job;
  job.ex = ex;
  job.base64 = req.base64;
  job.start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < req.size(); ++i) {
    auto enc = req.texts.empty() ? embedder_->wrap_ids(req.token_ids[i])
                                 : embedder_->tokenizer().encode(req.texts[i], max_length());
    if (!enc.ok()) {
      return respond_json(
          *ex, 400,
          ApiError{400, fmt::format("'input[{}]': {}", i, enc.status().message()), "input"}
              .to_json());
    }
    job.enc.push_back(std::move(enc).value());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int64_t>(queue_.size()) >= std::max<int64_t>(1, limits_.max_queue)) {
      return respond_json(*ex, 429,
                          ApiError{429,
                                   fmt::format("the server is busy: {} embedding requests are "
                                               "waiting; retry later",
                                               queue_.size()),
                                   "", "rate_limit_exceeded", "rate_limit_exceeded"}
                              .to_json());
    }
    queue_.push_back(std::move(job));
    metrics_->set("rinfer_requests_waiting", {{"model", name_}},
                  static_cast<double>(queue_.size()));
  }
  cv_.notify_one();
}

void ServedEmbedder::answer(const Job& job, const float* vectors, int64_t n_tokens) {
  const Labels model{{"model", name_}};
  respond_json(*job.ex, 200,
               embedding_response(name_, vectors, static_cast<int64_t>(job.enc.size()), dim(),
                                  job.base64, n_tokens));
  metrics_->add("rinfer_requests_total", {{"model", name_}, {"finish", "stop"}});
  metrics_->add("rinfer_prompt_tokens_total", model, static_cast<double>(n_tokens));
  metrics_->add("rinfer_embedding_inputs_total", model, static_cast<double>(job.enc.size()));
  metrics_->observe("rinfer_request_duration_seconds", model, seconds_since(job.start));
}

void ServedEmbedder::loop() {
  const auto max_inputs =
      static_cast<size_t>(std::max<int64_t>(recipe().strategies.dynamic_batching.max_seqs, 1) * 8);
  for (;;) {
    std::vector<Job> jobs;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ with nothing left
      size_t inputs = 0;
      while (!queue_.empty() &&
             (jobs.empty() || inputs + queue_.front().enc.size() <= max_inputs)) {
        inputs += queue_.front().enc.size();
        jobs.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      working_ = jobs.size();
      metrics_->set("rinfer_requests_waiting", {{"model", name_}},
                    static_cast<double>(queue_.size()));
      metrics_->set("rinfer_requests_running", {{"model", name_}},
                    static_cast<double>(jobs.size()));
    }
    std::vector<TokenEncoding> all;
    for (Job& j : jobs) {
      for (TokenEncoding& e : j.enc) all.push_back(e);
    }
    auto vecs = embedder_->embed_encoded(all);
    size_t at = 0;
    for (const Job& j : jobs) {
      if (!vecs.ok()) {
        spdlog::error("{}: embedding failed: {}", name_, vecs.status().to_string());
        respond_json(*j.ex, 500,
                     ApiError{500, "the engine failed on this request: " + vecs.status().message(),
                              "", "server_error"}
                         .to_json());
        metrics_->add("rinfer_requests_total", {{"model", name_}, {"finish", "error"}});
        continue;
      }
      int64_t tokens = 0;
      for (const TokenEncoding& e : j.enc) tokens += static_cast<int64_t>(e.ids.size());
      answer(j, vecs->data() + static_cast<int64_t>(at) * dim(), tokens);
      at += j.enc.size();
    }
    std::lock_guard<std::mutex> lock(mu_);
    working_ = 0;
    metrics_->set("rinfer_requests_running", {{"model", name_}}, 0);
  }
}

size_t ServedEmbedder::in_flight() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + working_;
}

bool ServedEmbedder::wait_idle(std::chrono::steady_clock::time_point deadline) {
  while (std::chrono::steady_clock::now() < deadline) {
    if (in_flight() == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return in_flight() == 0;
}

void ServedEmbedder::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    // What is still queued is answered, not computed.
    for (Job& j : queue_) {
      respond_json(*j.ex, 503,
                   ApiError{503, "the server stopped", "", "server_shutting_down"}.to_json());
    }
    queue_.clear();
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  metrics_->set("rinfer_model_ready", {{"model", name_}}, 0);
}

}  // namespace rinfer::server
