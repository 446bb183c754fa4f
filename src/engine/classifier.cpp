#include "engine/classifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"
#include "engine/strategy_options.h"
#include "formats/model_cache.h"

namespace rinfer {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Result<std::vector<std::string>> read_labels(const std::string& path, int64_t n_classes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error("{}: cannot open the class names", path);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  // A list of names, or an object of id -> name ("0": "tench, Tinca tinca", ...).
  if (j.is_discarded() || (!j.is_array() && !j.is_object())) {
    return data_loss("{}: expected a JSON list of class names, or an object of id -> name", path);
  }
  std::vector<std::string> out(j.size());
  size_t i = 0;
  for (auto it = j.begin(); it != j.end(); ++it, ++i) {
    size_t id = i;
    if (j.is_object()) {
      const std::string& key = it.key();
      const auto [p, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || p != key.data() + key.size() || id >= j.size()) {
        return data_loss("{}: key '{}' is not a class id below {}", path, key, j.size());
      }
    }
    if (!it->is_string()) return data_loss("{}: class {} is not a string", path, id);
    if (!out[id].empty()) return data_loss("{}: class {} named twice", path, id);
    out[id] = it->get<std::string>();
  }
  if (static_cast<int64_t>(out.size()) != n_classes) {
    return data_loss("{}: {} class names for a network of {} classes", path, out.size(), n_classes);
  }
  return out;
}

}  // namespace

ConvNetSpec conv_net_spec(const ClassifierNetworkConfig& c) {
  ConvNetSpec s;
  s.family = c.family;
  s.strides = c.strides;
  s.activation = c.activation;
  s.padding = c.same_padding ? ConvPadding::kSame : ConvPadding::kSymmetric;
  s.bn_eps = c.bn_eps;
  return s;
}

Result<std::unique_ptr<Classifier>> Classifier::create(const RecipeConfig& recipe) {
  std::unique_ptr<Classifier> c(new Classifier());
  c->recipe_ = recipe;
  const RecipeConfig& r = c->recipe_;
  if (r.scenario != "image-classification") {
    return unsupported(
        "{}: scenario '{}' is not image-classification (rinfer classify needs an "
        "image-classification recipe)",
        r.path, r.scenario);
  }
  LoadOptions opts;
  RINFER_ASSIGN_OR_RETURN(c->model_path_, prepare_model_load(r, opts));
  c->pool_ = std::make_unique<ThreadPool>(r.strategies.threads);
  opts.cpu.ops.pool = c->pool_.get();
  auto m = load_image_classifier(c->model_path_, conv_net_spec(r.classifier.network), opts);
  if (!m.ok()) return m.status().with_context(r.path);
  c->model_ = std::move(m).value();
  if (!r.classifier.labels.empty()) {
    RINFER_ASSIGN_OR_RETURN(std::string lp, resolve_cache_file(r.classifier.labels, ".json"));
    RINFER_ASSIGN_OR_RETURN(c->labels_, read_labels(lp, c->model_->n_classes()));
  }
  ClassifierRunnerOptions ro;
  ro.max_batch = r.classifier.max_batch;
  ro.height = ro.width = r.classifier.preprocess.crop;
  auto runner = c->model_->create_runner(ro);
  if (!runner.ok()) return runner.status().with_context(c->model_path_);
  c->runner_ = std::move(runner).value();
  return c;
}

std::vector<float> Classifier::preprocess(const Image& img) const {
  const ClassifierPreprocessConfig& p = recipe_.classifier.preprocess;
  const Image sized = p.resize > 0 ? resize_shorter(img, static_cast<int>(p.resize)) : img;
  const Image crop = center_crop(sized, static_cast<int>(p.crop), static_cast<int>(p.crop));
  std::vector<float> out(crop.rgb.size());  // [crop, crop, 3]
  float scale[3], shift[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * p.std[c]);
    shift[c] = -p.mean[c] / p.std[c];
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t c = i % 3;
    out[i] = static_cast<float>(crop.rgb[i]) * scale[c] + shift[c];
  }
  return out;
}

Status Classifier::logits(std::span<const float> pixels, int64_t n, float* out, ClassifyStats* st,
                          TapSink* taps) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t s = input_size(), per = s * s * 3, nc = n_classes();
  if (static_cast<int64_t>(pixels.size()) != n * per) {
    return invalid_argument("classifier: {} values for {} images of {}x{}x3", pixels.size(), n, s,
                            s);
  }
  const int64_t mb = runner_->options().max_batch;
  for (int64_t b0 = 0; b0 < n; b0 += mb) {
    const int64_t nb = std::min(mb, n - b0);
    const auto t0 = std::chrono::steady_clock::now();
    ImageBatch batch{pixels.subspan(static_cast<size_t>(b0 * per), static_cast<size_t>(nb * per)),
                     nb, s, s, taps};
    RINFER_RETURN_IF_ERROR(runner_->classify(batch, out + b0 * nc));
    if (st != nullptr) {
      st->forward_s += seconds_since(t0);
      st->batches += 1;
    }
  }
  if (st != nullptr) st->images += n;
  return Status();
}

Status Classifier::rerun(int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  return runner_->rerun(n);
}

Result<std::vector<float>> Classifier::classify_files(std::span<const std::string> paths,
                                                      ClassifyStats* st) {
  const int64_t s = input_size(), per = s * s * 3, nc = n_classes();
  const auto mb = static_cast<size_t>(recipe_.classifier.max_batch);
  ClassifyStats local;
  ClassifyStats& stats = st != nullptr ? *st : local;
  std::vector<float> out(paths.size() * static_cast<size_t>(nc));
  std::vector<float> pixels;  // one batch at a time: [mb, s, s, 3]
  for (size_t b0 = 0; b0 < paths.size(); b0 += mb) {
    const size_t nb = std::min(mb, paths.size() - b0);
    pixels.assign(nb * static_cast<size_t>(per), 0.0f);
    for (size_t i = 0; i < nb; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      RINFER_ASSIGN_OR_RETURN(Image img, load_image(paths[b0 + i]));
      stats.decode_s += seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      const std::vector<float> x = preprocess(img);
      std::copy(x.begin(), x.end(), pixels.begin() + static_cast<int64_t>(i) * per);
      stats.preprocess_s += seconds_since(t0);
    }
    RINFER_RETURN_IF_ERROR(logits(pixels, static_cast<int64_t>(nb),
                                  out.data() + static_cast<int64_t>(b0) * nc, &stats));
  }
  return out;
}

std::vector<ClassLabel> Classifier::top_k(const float* logits, int64_t k) const {
  const int64_t nc = n_classes();
  k = std::clamp<int64_t>(k, 0, nc);
  double mx = -INFINITY;
  for (int64_t i = 0; i < nc; ++i) mx = std::max(mx, double(logits[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < nc; ++i) sum += std::exp(double(logits[i]) - mx);
  std::vector<int64_t> ids(static_cast<size_t>(nc));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int64_t a, int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::vector<ClassLabel> out;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t id = ids[static_cast<size_t>(i)];
    out.push_back({id, static_cast<float>(std::exp(double(logits[id]) - mx) / sum), logits[id]});
  }
  return out;
}

std::string Classifier::label(int64_t id) const {
  if (id >= 0 && id < static_cast<int64_t>(labels_.size())) return labels_[static_cast<size_t>(id)];
  return fmt::format("class {}", id);
}

std::string Classifier::describe() const {
  const ClassifierPreprocessConfig& p = recipe_.classifier.preprocess;
  return fmt::format(
      "model: {} ({})\n{}\ndevice: {}, strategies: {}\npreprocess: resize {}, crop {}, mean "
      "[{:.3f} "
      "{:.3f} {:.3f}], std [{:.3f} {:.3f} {:.3f}]; {:.2f} GFLOP per image\n",
      recipe_.model, model_path_, model_->describe(), recipe_.device.to_string(),
      recipe_.strategies_summary(), p.resize, p.crop, p.mean[0], p.mean[1], p.mean[2], p.std[0],
      p.std[1], p.std[2], model_->flops_per_image(p.crop, p.crop) / 1e9);
}

}  // namespace rinfer
