// `rinfer classify RECIPE IMAGE... [--top N] [--json]`: the most probable classes of each image
// (JPEG or PNG) with an image-classification recipe.
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/classifier.h"
#include "recipe/recipe.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

struct ClassifyArgs {
  std::string recipe;
  std::vector<std::string> images;
  int64_t top = 0;  // 0: the recipe's classifier.top_k
  bool json = false;
};

int run_classify(const ClassifyArgs& a) {
  auto recipe = load_recipe(a.recipe);
  if (!recipe.ok()) return report_error(recipe.status().message());
  auto cls = Classifier::create(*recipe);
  if (!cls.ok()) return report_error(cls.status().message());
  Classifier& c = **cls;
  ClassifyStats st;
  auto logits = c.classify_files(a.images, &st);
  if (!logits.ok()) return report_error(logits.status().message());
  const int64_t k = a.top > 0 ? a.top : recipe->classifier.top_k;
  const int64_t nc = c.n_classes();
  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = recipe->model;
    j["data"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < a.images.size(); ++i) {
      nlohmann::ordered_json top = nlohmann::ordered_json::array();
      for (const ClassLabel& l : c.top_k(logits->data() + static_cast<int64_t>(i) * nc, k)) {
        top.push_back({{"id", l.id},
                       {"label", c.label(l.id)},
                       {"probability", l.probability},
                       {"logit", l.logit}});
      }
      j["data"].push_back({{"index", i}, {"image", a.images[i]}, {"top", top}});
    }
    j["usage"] = {{"images", st.images}, {"seconds", st.decode_s + st.preprocess_s + st.forward_s}};
    write_stdout(json_text(j) + "\n");
    return check_stdout_written(0);
  }
  std::string out;
  for (size_t i = 0; i < a.images.size(); ++i) {
    out += fmt::format("{}:\n", a.images[i]);
    for (const ClassLabel& l : c.top_k(logits->data() + static_cast<int64_t>(i) * nc, k)) {
      out += fmt::format("  {:6.2f}%  {:4}  {}\n", 100.0 * l.probability, l.id, c.label(l.id));
    }
  }
  write_stdout(out);
  std::fprintf(stderr, "rinfer classify: %s, %s; decode %.1f ms, preprocess %.1f ms, network %.1f ms\n",
               count_of(st.images, "image").c_str(),
               count_of(st.batches, "forward pass", "forward passes").c_str(), st.decode_s * 1e3,
               st.preprocess_s * 1e3, st.forward_s * 1e3);
  return check_stdout_written(0);
}

}  // namespace

void add_classify_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("classify", "The most probable classes of images (JPEG, PNG)");
  auto a = std::make_shared<ClassifyArgs>();
  cmd->add_option("recipe", a->recipe, "An image-classification recipe")->required();
  cmd->add_option("images", a->images, "Image files")->required();
  cmd->add_option("--top", a->top, "Classes per image (default: the recipe's classifier.top_k)")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([a, &exit_code] { exit_code = run_classify(*a); });
}

}  // namespace rinfer
