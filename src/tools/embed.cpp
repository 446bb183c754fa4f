// `rinfer embed RECIPE [TEXT...] [--file FILE] [--json]`: sentence embeddings of texts with an
// embedding recipe. Prints each input's token count, norm and first values, and for several
// inputs their cosine similarities; --json prints the whole vectors.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/strings.h"
#include "engine/embedder.h"
#include "recipe/recipe.h"
#include "tokenizer/unicode.h"
#include "tools/input.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

struct EmbedArgs {
  std::string recipe;
  std::vector<std::string> texts;
  std::string file;
  bool json = false;
  int64_t show = 8;
};

double dot(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * double(b[i]);
  return s;
}

int run_embed(const EmbedArgs& a) {
  std::vector<std::string> texts = a.texts;
  for (size_t i = 0; i < texts.size(); ++i) {
    size_t bad = 0;
    if (!unicode::is_valid_utf8(texts[i], &bad)) {
      return report_error(fmt::format("TEXT {} is not valid UTF-8 (byte {})", i + 1, bad));
    }
    // As a blank line of --file: an input with nothing to embed is a mistake, not a vector.
    if (texts[i].find_first_not_of(" \t\r\n") == std::string::npos) {
      return report_error(fmt::format("TEXT {} is empty (each TEXT is one input; remove it)", i + 1));
    }
  }
  if (!a.file.empty()) {
    auto lines = read_text_lines(a.file, "--file");
    if (!lines.ok()) return report_error(lines.status().message());
    texts.insert(texts.end(), lines->begin(), lines->end());
  }
  if (texts.empty()) return report_error("nothing to embed: give TEXT arguments or --file FILE");
  auto recipe = load_recipe(a.recipe);
  if (!recipe.ok()) return report_error(recipe.status().message());
  auto emb = Embedder::create(*recipe);
  if (!emb.ok()) return report_error(emb.status().message());
  Embedder& e = **emb;
  EmbedStats st;
  auto vecs = e.embed(texts, &st);
  if (!vecs.ok()) return report_error(vecs.status().message());
  const int64_t d = e.dim();
  auto tok = e.tokenize(texts);
  if (!tok.ok()) return report_error(tok.status().message());

  if (a.json) {
    nlohmann::ordered_json j;
    j["model"] = recipe->model;
    j["dim"] = d;
    j["data"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < texts.size(); ++i) {
      const float* v = vecs->data() + static_cast<int64_t>(i) * d;
      j["data"].push_back({{"index", i},
                           {"text", texts[i]},
                           {"tokens", (*tok)[i].ids.size()},
                           {"truncated", (*tok)[i].truncated},
                           {"embedding", std::vector<float>(v, v + d)}});
    }
    j["usage"] = {{"tokens", st.tokens}, {"seconds", st.tokenize_s + st.forward_s}};
    write_stdout(json_text(j) + "\n");
    return check_stdout_written(0);
  }
  std::string out;
  for (size_t i = 0; i < texts.size(); ++i) {
    const float* v = vecs->data() + static_cast<int64_t>(i) * d;
    std::string vals;
    for (int64_t k = 0; k < std::min(a.show, d); ++k) vals += fmt::format(" {:+.4f}", v[k]);
    out += fmt::format("[{}] {} tokens{}, norm {:.4f}:{}{}  {}\n", i, (*tok)[i].ids.size(),
                       (*tok)[i].truncated ? " (truncated)" : "", std::sqrt(dot(v, v, d)), vals,
                       d > a.show ? " ..." : "", display_text(texts[i].substr(0, 60)));
  }
  if (texts.size() > 1 && texts.size() <= 16) {
    out += "cosine similarity:\n";
    for (size_t i = 0; i < texts.size(); ++i) {
      out += fmt::format("  [{}]", i);
      for (size_t k = 0; k < texts.size(); ++k) {
        const float* x = vecs->data() + static_cast<int64_t>(i) * d;
        const float* y = vecs->data() + static_cast<int64_t>(k) * d;
        out += fmt::format(" {:6.3f}", dot(x, y, d) / std::sqrt(dot(x, x, d) * dot(y, y, d)));
      }
      out += "\n";
    }
  }
  write_stdout(out);
  std::fprintf(stderr, "rinfer embed: %s, %s, %s, %.1f ms (%lld-dim)\n",
               count_of(static_cast<long long>(texts.size()), "input").c_str(),
               count_of(st.tokens, "token").c_str(),
               count_of(st.batches, "forward pass", "forward passes").c_str(),
               (st.tokenize_s + st.forward_s) * 1e3, static_cast<long long>(d));
  return check_stdout_written(0);
}

}  // namespace

void add_embed_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("embed", "Sentence embeddings of texts with an embedding recipe");
  auto a = std::make_shared<EmbedArgs>();
  cmd->add_option("recipe", a->recipe, "An embedding recipe (scenario: embedding)")->required();
  cmd->add_option("texts", a->texts, "Texts to embed");
  cmd->add_option("--file", a->file, "A text file, one input per line (- for stdin)");
  cmd->add_flag("--json", a->json, "Print JSON with the whole vectors");
  cmd->add_option("--show", a->show, "Values of each vector to print (default 8)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->callback([a, &exit_code] { exit_code = run_embed(*a); });
}

}  // namespace rinfer
