#include "engine/embedder.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"
#include "core/input_file.h"
#include "engine/strategy_options.h"
#include "formats/model_cache.h"
#include "strategies/registry.h"

namespace rinfer {

namespace {

namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

fs::path model_dir(const std::string& model_path) {
  std::error_code ec;
  if (fs::is_directory(model_path, ec)) return model_path;
  fs::path p = fs::path(model_path).parent_path();
  return p.empty() ? fs::path(".") : p;
}

// sentence-transformers' max_seq_length (sentence_bert_config.json), when the model has one.
Result<int64_t> sentence_bert_max_length(const fs::path& dir) {
  const fs::path p = dir / "sentence_bert_config.json";
  std::error_code ec;
  if (!fs::exists(p, ec)) return int64_t{0};
  RINFER_ASSIGN_OR_RETURN(std::string text, read_regular_file(p.string(), 1 << 20));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return data_loss("{}: not valid JSON", p.string());
  if (!j.contains("max_seq_length")) return int64_t{0};
  if (!j["max_seq_length"].is_number_integer() || j["max_seq_length"].get<int64_t>() < 2) {
    return data_loss("{}: max_seq_length must be an integer >= 2", p.string());
  }
  return j["max_seq_length"].get<int64_t>();
}

}  // namespace

Result<std::unique_ptr<Embedder>> Embedder::create(const RecipeConfig& recipe) {
  std::unique_ptr<Embedder> e(new Embedder());
  e->recipe_ = recipe;
  const RecipeConfig& r = e->recipe_;
  if (r.scenario != "embedding") {
    return unsupported(
        "{}: scenario '{}' is not embedding (rinfer embed needs an embedding "
        "recipe)",
        r.path, r.scenario);
  }
  LoadOptions opts;
  RINFER_ASSIGN_OR_RETURN(e->model_path_, prepare_model_load(r, opts));
  e->pool_ = std::make_unique<ThreadPool>(r.strategies.threads);
  opts.cpu.ops.pool = e->pool_.get();
  RINFER_ASSIGN_OR_RETURN(e->model_, load_encoder_model(e->model_path_, opts));
  const EncoderHParams& hp = e->model_->hparams();

  // A model that carries its tokenizer (random weights: a synthetic vocabulary), else the
  // tokenizer.json beside the weights.
  const std::string builtin = e->model_->builtin_tokenizer_json();
  const bool random = !builtin.empty();
  const fs::path dir = random ? fs::path() : model_dir(e->model_path_);
  auto tok = random ? WordPieceTokenizer::parse(builtin, "the synthetic vocabulary")
                    : WordPieceTokenizer::load((dir / "tokenizer.json").string());
  if (!tok.ok()) return tok.status().with_context(e->model_path_);
  e->tokenizer_ = std::move(tok).value();
  if (e->tokenizer_->vocab_size() != hp.n_vocab) {
    return data_loss("{}: tokenizer.json has {} pieces, the model's vocabulary {}", e->model_path_,
                     e->tokenizer_->vocab_size(), hp.n_vocab);
  }
  int64_t max_len = r.embedding.max_length;
  if (max_len == 0 && !random) {
    RINFER_ASSIGN_OR_RETURN(max_len, sentence_bert_max_length(dir));
  }
  if (max_len == 0) max_len = hp.n_positions;
  if (max_len > hp.n_positions) {
    return key_error(
        r.origins(), "embedding.max_length",
        fmt::format("{} is longer than the model's {} positions", max_len, hp.n_positions));
  }
  e->max_length_ = max_len;
  e->pooling_ = PoolingOptions{r.embedding.pooling, r.embedding.normalize};
  const DynamicBatchingConfig& b = r.strategies.dynamic_batching;
  EncoderRunnerOptions ro;
  ro.max_rows = b.policy == EmbedBatching::kSingle ? max_len : std::max(b.max_tokens, max_len);
  auto runner = e->model_->create_runner(ro);
  if (!runner.ok()) return runner.status().with_context(e->model_path_);
  e->runner_ = std::move(runner).value();
  return e;
}

Result<std::vector<TokenEncoding>> Embedder::tokenize(std::span<const std::string> texts) const {
  // Spread over the pool's threads (the tokenizer is immutable); the first failing input (by
  // index) is the error.
  std::vector<TokenEncoding> out(texts.size());
  std::mutex mu;
  size_t bad = texts.size();
  Status bad_status;
  const auto n = static_cast<int64_t>(texts.size());
  pool_->parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto k = static_cast<size_t>(i);
      auto enc = tokenizer_->encode(texts[k], max_length_);
      if (!enc.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (k < bad) {
          bad = k;
          bad_status = enc.status().with_context(fmt::format("input {}", k));
        }
        return;
      }
      out[k] = std::move(enc).value();
    }
  });
  if (bad < texts.size()) return bad_status;
  return out;
}

Status Embedder::run_batch(std::span<const TokenEncoding> enc, std::span<const size_t> order,
                           bool padded, float* out, EmbedStats& st, const std::atomic<bool>* cancel,
                           TapSink* taps) {
  size_t width = 0;
  for (size_t i : order) width = std::max(width, enc[i].ids.size());
  tokens_.clear();
  types_.clear();
  starts_.assign(1, 0);
  lengths_.clear();
  for (size_t i : order) {
    const TokenEncoding& e = enc[i];
    tokens_.insert(tokens_.end(), e.ids.begin(), e.ids.end());
    types_.insert(types_.end(), e.type_ids.begin(), e.type_ids.end());
    if (padded) {
      tokens_.resize(tokens_.size() + (width - e.ids.size()), tokenizer_->pad());
      types_.resize(tokens_.size(), 0);
    }
    starts_.push_back(static_cast<int32_t>(tokens_.size()));
    lengths_.push_back(static_cast<int32_t>(e.ids.size()));
  }
  EncoderBatch b{tokens_, types_, starts_, lengths_, cancel, taps};
  const int64_t d = dim();
  out_.resize(order.size() * static_cast<size_t>(d));
  RINFER_RETURN_IF_ERROR(runner_->embed(b, pooling_, out_.data()));
  for (size_t k = 0; k < order.size(); ++k) {
    std::copy_n(out_.data() + static_cast<int64_t>(k) * d, d,
                out + static_cast<int64_t>(order[k]) * d);
  }
  st.rows += b.n_rows();
  st.batches += 1;
  return ok_status();
}

Result<std::vector<float>> Embedder::embed_tapped(const TokenEncoding& enc, TapSink& taps) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<float> out(static_cast<size_t>(dim()));
  EmbedStats st;
  const size_t order[1] = {0};
  RINFER_RETURN_IF_ERROR(run_batch(std::span<const TokenEncoding>(&enc, 1), order, false,
                                   out.data(), st, nullptr, &taps));
  return out;
}

Result<TokenEncoding> Embedder::wrap_ids(std::span<const int32_t> ids) const {
  TokenEncoding e;
  const size_t room = static_cast<size_t>(max_length_ - 2);
  e.truncated = ids.size() > room;
  e.ids.push_back(tokenizer_->cls());
  for (size_t i = 0; i < ids.size() && i < room; ++i) {
    if (ids[i] < 0 || ids[i] >= tokenizer_->vocab_size()) {
      return invalid_argument("token id {} at position {} is outside the vocabulary of {}", ids[i],
                              i, tokenizer_->vocab_size());
    }
    e.ids.push_back(ids[i]);
  }
  e.ids.push_back(tokenizer_->sep());
  e.type_ids.assign(e.ids.size(), 0);
  return e;
}

Result<std::vector<float>> Embedder::embed(std::span<const std::string> texts, EmbedStats* stats,
                                           const EmbedProgress& progress,
                                           const std::atomic<bool>* cancel) {
  const auto t0 = std::chrono::steady_clock::now();
  RINFER_ASSIGN_OR_RETURN(std::vector<TokenEncoding> enc, tokenize(texts));
  const double tokenize_s = seconds_since(t0);
  auto out = embed_encoded(enc, stats, progress, cancel);
  if (stats != nullptr) stats->tokenize_s = tokenize_s;
  return out;
}

Result<std::vector<float>> Embedder::embed_encoded(std::span<const TokenEncoding> enc,
                                                   EmbedStats* stats, const EmbedProgress& progress,
                                                   const std::atomic<bool>* cancel) {
  EmbedStats st;
  st.texts = static_cast<int64_t>(enc.size());
  for (const TokenEncoding& e : enc) {
    st.tokens += static_cast<int64_t>(e.ids.size());
    st.truncated += e.truncated ? 1 : 0;
  }
  std::vector<float> out(enc.size() * static_cast<size_t>(dim()));
  const DynamicBatchingConfig& b = recipe_.strategies.dynamic_batching;
  std::vector<size_t> order(enc.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (b.policy == EmbedBatching::kPacked) {  // longest first, as sentence-transformers sorts
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return enc[x].ids.size() > enc[y].ids.size(); });
  }
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = std::chrono::steady_clock::now();
  const bool padded = b.policy == EmbedBatching::kPadded;
  const auto max_seqs =
      b.policy == EmbedBatching::kSingle ? size_t{1} : static_cast<size_t>(b.max_seqs);
  const int64_t max_rows = runner_->options().max_rows;
  for (size_t first = 0; first < order.size();) {
    if (cancel != nullptr && cancel->load()) return cancelled_error("embed: cancelled");
    // As many inputs as fit: max_seqs, and rows (padded: count x the longest) <= max_rows.
    size_t last = first;
    int64_t rows = 0, width = 0;
    while (last < order.size() && last - first < max_seqs) {
      const auto len = static_cast<int64_t>(enc[order[last]].ids.size());
      const int64_t w = std::max(width, len);
      const int64_t need = padded ? w * static_cast<int64_t>(last - first + 1) : rows + len;
      if (last > first && need > max_rows) break;
      width = w;
      rows = need;
      ++last;
    }
    const std::span<const size_t> part(order.data() + first, last - first);
    Status s = run_batch(enc, part, padded, out.data(), st, cancel);
    if (!s.ok()) return s;
    first = last;
    if (progress) progress(static_cast<int64_t>(first), static_cast<int64_t>(order.size()));
  }
  st.forward_s = seconds_since(t0);
  if (stats != nullptr) *stats = st;
  return out;
}

std::string Embedder::describe() const {
  return fmt::format(
      "model: {} ({})\n  {}\ntokenizer: {}, max length {}\ndevice: {}\nstrategies: {}\n"
      "pooling: {}{}",
      recipe_.model, model_path_, model_->describe(), tokenizer_->describe(), max_length_,
      recipe_.device.to_string(), describe_strategies(recipe_.strategies, recipe_.device),
      pooling_.kind == cpu::PoolKind::kMean ? "mean" : "cls",
      pooling_.normalize ? ", L2-normalized" : "");
}

}  // namespace rinfer
