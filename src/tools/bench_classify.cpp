#include "tools/bench_classify.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/input_file.h"
#include "core/progress.h"
#include "engine/classifier.h"
#include "formats/model_cache.h"
#include "image/image.h"
#include "strategies/registry.h"
#include "tools/bench_report.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// Logits against the baseline's: f32 variants (the CPU) differ by rounding order only; bf16 ones
// (CUDA) by a bf16 rounding of every activation.
constexpr double kMaxRelL2 = 1e-4;
constexpr double kMaxRelL2Bf16 = 2e-2;

std::vector<std::string> default_images() {
  std::vector<std::string> out;
  for (const char* p :
       {"chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "motorcycle_left.png"}) {
    out.push_back((fs::path(model_cache_dir()) / "photos" / p).string());
  }
  return out;
}

// The peer's images/s at `batch` (the fastest of its modes), or 0.
double peer_at(const ordered_json& peer, int64_t batch, std::string* mode) {
  double best = 0;
  for (const auto& r : peer.value("results", ordered_json::array())) {
    if (r.value("batch", 0) != batch) continue;
    const double ips = r.value("images_per_s", 0.0);
    if (ips > best) {
      best = ips;
      if (mode != nullptr) *mode = r.value("mode", "");
    }
  }
  return best;
}

std::string markdown(const ordered_json& r) {
  std::string t =
      "| variant | batch | images/s | ms per batch | GFLOP/s | vs baseline | vs peer (same "
      "batch) | top-1 vs baseline | max rel L2 | end to end images/s |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  const double base = r["variants"][0]["images_per_s"].get<double>();
  for (const auto& v : r["variants"]) {
    const double ips = v["images_per_s"].get<double>();
    const int64_t b = v["batch"].get<int64_t>();
    const double peer = r.contains("peer") ? peer_at(r["peer"], b, nullptr) : 0.0;
    const double e2e = v.value("end_to_end_images_per_s", 0.0);
    t += fmt::format(
        "| {}{} | {} | {:.1f} | {:.1f} | {:.1f} | {:.2f}x | {} | {:.4f} | {:.1e} | {} |\n",
        v["name"].get<std::string>(), v["passed"].get<bool>() ? "" : " (FAILS)", b, ips,
        1e3 * double(b) / ips, v["gflops"].get<double>(), ips / base,
        peer > 0 ? fmt::format("{:.2f}x", ips / peer) : std::string("-"),
        v["top1_agreement"].get<double>(), v["max_rel_l2"].get<double>(),
        e2e > 0 ? fmt::format("{:.1f}", e2e) : std::string("-"));
  }
  if (r.contains("peer")) {
    for (const auto& p : r["peer"]["results"]) {
      const double ips = p["images_per_s"].get<double>();
      t += fmt::format("| {} {} {} (peer) | {} | {:.1f} | {:.1f} | - | {:.2f}x | - | - | - | - |\n",
                       r["peer"].value("name", "peer"), p.value("mode", ""), p.value("layout", ""),
                       p["batch"].get<int64_t>(), ips,
                       1e3 * double(p["batch"].get<int64_t>()) / ips, ips / base);
    }
  }
  const bool gpu = r["device"].value("kind", "") == "cuda";
  t += fmt::format(
      "\n{} images per run ({} photos, each preprocessed by the variant's recipe), {} "
      "of the network alone{}; {}; {:.2f} GFLOP per image; logits against the baseline's (a "
      "variant over a relative L2 of {:.0e} fails).\n",
      r["images"].get<int64_t>(), r["photos"].size(), bench::medians_of(r["repeat"].get<int64_t>()),
      gpu ? " on inputs in device memory (end to end: host pixels in, logits out)" : "",
      gpu ? fmt::format("{} (host: {})", r["device"].value("name", "GPU"),
                        r["machine"]["cpu"].get<std::string>())
          : r["machine"]["cpu"].get<std::string>(),
      r["gflop_per_image"].get<double>(), gpu ? kMaxRelL2Bf16 : kMaxRelL2);
  return t;
}

}  // namespace

int run_classify_bench(const std::vector<ClassifyBenchVariant>& variants,
                       const ClassifyBenchOptions& o) {
  const std::vector<std::string> photos = o.images.empty() ? default_images() : o.images;
  std::string machine;
  ordered_json report;
  report["benchmark"] = "rinfer bench (image-classification)";
  report["recipe_folder"] = o.folder;
  report["git_sha"] = bench::git_sha(o.folder.empty() ? "." : o.folder);
  report["date"] = bench::utc_date();
  report["device"] = bench::device_json(variants.front().recipe.device, &machine);
  report["machine"] = bench::machine_json(machine);
  report["photos"] = photos;
  report["images"] = o.n_images;
  report["repeat"] = o.repeat;
  const std::string folder_name = fs::path(o.folder).filename().string();
  const std::string json_path =
      !o.json.empty() ? o.json : fmt::format("bench/results/{}/{}.json", machine, folder_name);
  {
    std::vector<std::string> inputs;
    for (const auto& v : variants) inputs.push_back(v.path);
    if (Status c = bench::prepare_json_output(json_path, inputs); !c.ok()) {
      return report_error(c.message());
    }
  }
  for (size_t i = 0; i < o.peer_jsons.size(); ++i) {
    auto text = read_regular_file(o.peer_jsons[i], 1 << 20);
    if (!text.ok()) return report_error(text.status().message());
    ordered_json p = ordered_json::parse(*text, nullptr, false);
    if (p.is_discarded() || !p.contains("results")) {
      return report_error(o.peer_jsons[i] + ": not a peer result (bench/classifier_peer.py)");
    }
    if (i == 0) {
      report["peer"] = p;
    } else {
      report["other_peers"].push_back(p);
    }
  }
  std::vector<float> base_logits;
  ordered_json out = ordered_json::array();
  for (const ClassifyBenchVariant& v : variants) {
    auto c = Classifier::create(v.recipe);
    if (!c.ok() &&
        bench::skip_unsupported(report, v.name, v.path, c.status(), &v == &variants.front())) {
      continue;
    }
    if (!c.ok()) return report_error(c.status().message());
    Classifier& cls = **c;
    const int64_t s = cls.input_size(), per = s * s * 3, nc = cls.n_classes();
    std::vector<float> pixels;
    for (const std::string& p : photos) {
      auto img = load_image(p);
      if (!img.ok()) return report_error(img.status().message());
      const std::vector<float> x = cls.preprocess(*img);
      pixels.insert(pixels.end(), x.begin(), x.end());
    }
    while (static_cast<int64_t>(pixels.size()) < o.n_images * per) {
      pixels.insert(pixels.end(), pixels.begin(), pixels.begin() + per * int64_t(photos.size()));
    }
    pixels.resize(static_cast<size_t>(o.n_images * per));
    std::vector<float> logits(static_cast<size_t>(o.n_images * nc));
    std::vector<double> secs;
    Progress bar(fmt::format("bench {}", v.name), o.warmup + o.repeat, "run");
    for (int run = 0; run < o.warmup + o.repeat; ++run) {
      const auto t0 = Clock::now();
      if (Status st = cls.logits(pixels, o.n_images, logits.data()); !st.ok()) {
        return report_error(st.message());
      }
      const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
      if (run >= o.warmup) secs.push_back(sec);
      bar.update(run + 1, fmt::format("{:.2f} s", sec));
    }
    bar.finish();
    // On a GPU the figure is the network alone on inputs already in device memory (as the peer
    // measures its own), the last batch's inputs run again as batches of the same sizes; the
    // end-to-end rate (host pixels in, logits out) goes beside it.
    std::vector<double> net_secs;
    const bool resident = v.recipe.device.is_cuda();
    const int64_t mb = v.recipe.classifier.max_batch;
    for (int run = 0; resident && run < o.warmup + o.repeat; ++run) {
      const auto t0 = Clock::now();
      for (int64_t b0 = 0; b0 < o.n_images; b0 += mb) {
        if (Status st = cls.rerun(std::min(mb, o.n_images - b0)); !st.ok()) {
          return report_error(st.message());
        }
      }
      if (run >= o.warmup)
        net_secs.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    if (base_logits.empty()) base_logits = logits;
    int64_t agree = 0;
    double worst = 0;
    for (int64_t i = 0; i < o.n_images; ++i) {
      const float* a = logits.data() + i * nc;
      const float* b = base_logits.data() + i * nc;
      agree += std::max_element(a, a + nc) - a == std::max_element(b, b + nc) - b ? 1 : 0;
      double d = 0, n = 0;
      for (int64_t k = 0; k < nc; ++k) {
        d += (double(a[k]) - b[k]) * (double(a[k]) - b[k]);
        n += double(b[k]) * b[k];
      }
      worst = std::max(worst, n > 0 ? std::sqrt(d / n) : 0.0);
    }
    const double med = resident ? bench::median(net_secs) : bench::median(secs);
    const double limit = resident ? kMaxRelL2Bf16 : kMaxRelL2;
    const double flops = cls.model().flops_per_image(s, s);
    report["gflop_per_image"] = flops / 1e9;
    ordered_json j;
    j["name"] = v.name;
    j["recipe"] = v.path;
    j["strategies"] = describe_strategies(v.recipe.strategies, v.recipe.device);
    // The batch as it ran: a run of fewer images than max_batch is one smaller batch.
    j["batch"] = std::min(v.recipe.classifier.max_batch, o.n_images);
    j["max_batch"] = v.recipe.classifier.max_batch;
    j["seconds"] = resident ? net_secs : secs;
    j["images_per_s"] = double(o.n_images) / med;
    if (resident) {
      j["end_to_end_seconds"] = secs;
      j["end_to_end_images_per_s"] = double(o.n_images) / bench::median(secs);
    }
    j["gflops"] = flops * double(o.n_images) / med / 1e9;
    j["top1_agreement"] = double(agree) / double(o.n_images);
    j["max_rel_l2"] = worst;
    j["max_rel_l2_limit"] = limit;
    j["passed"] = worst <= limit;
    out.push_back(j);
  }
  report["variants"] = out;
  return bench::publish(report, markdown(report), json_path, o.readme, o.folder, machine);
}

}  // namespace rinfer
