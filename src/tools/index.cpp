// `rinfer index RECIPE CORPUS -o DIR [--kind hnsw|flat] [--hnsw-m M] [--ef-construction N]
//  [--ef-search N]` embeds a corpus (one document per line, or .jsonl with ids) with an embedding
// recipe into a search index directory (search/search_index.h), with a progress bar;
// `rinfer search DIR QUERY... [-k 5] [--ef-search N] [--json]` prints each query's nearest
// documents, best first, with their cosine similarity.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/progress.h"
#include "core/strings.h"
#include "engine/embedder.h"
#include "recipe/recipe.h"
#include "search/search_index.h"
#include "tokenizer/unicode.h"
#include "tools/output.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

struct IndexArgs {
  std::string recipe, corpus, out;
  std::string kind = "hnsw";
  int m = 32, ef_construction = 200, ef_search = 128;
};

int run_index(const IndexArgs& a) {
  auto docs = search::read_corpus(a.corpus);
  if (!docs.ok()) return report_error(docs.status().message());
  auto recipe = load_recipe(a.recipe);
  if (!recipe.ok()) return report_error(recipe.status().message());
  auto emb = Embedder::create(*recipe);
  if (!emb.ok()) return report_error(emb.status().message());
  search::IndexOptions o;
  o.kind = a.kind == "flat" ? search::IndexKind::kFlat : search::IndexKind::kHnsw;
  o.hnsw_m = a.m;
  o.ef_construction = a.ef_construction;
  o.ef_search = a.ef_search;
  const auto n = static_cast<int64_t>(docs->size());
  Progress bar("indexing", n, "doc");
  const auto t0 = std::chrono::steady_clock::now();
  auto idx = search::SearchIndex::build(**emb, std::move(docs).value(), o,
                                        [&](int64_t done, int64_t) { bar.update(done); });
  bar.finish();
  if (!idx.ok()) return report_error(idx.status().message());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (Status st = (*idx)->save(a.out); !st.ok()) return report_error(st.message());
  std::fprintf(stderr, "rinfer index: %lld documents in %.1f s (%.0f docs/s): %s -> %s\n",
               static_cast<long long>(n), s, static_cast<double>(n) / s,
               (*idx)->vectors().describe().c_str(), a.out.c_str());
  return 0;
}

struct SearchArgs {
  std::string index;
  std::vector<std::string> queries;
  int64_t k = 5;
  int ef_search = 0;
  bool json = false;
};

int run_search(const SearchArgs& a) {
  for (size_t i = 0; i < a.queries.size(); ++i) {
    size_t bad = 0;
    if (!unicode::is_valid_utf8(a.queries[i], &bad)) {
      return report_error(fmt::format("QUERY {} is not valid UTF-8 (byte {})", i + 1, bad));
    }
  }
  auto idx = search::SearchIndex::open(a.index, a.ef_search);
  if (!idx.ok()) return report_error(idx.status().message());
  const search::IndexMeta& meta = (*idx)->meta();
  auto recipe = load_recipe(meta.recipe);
  if (!recipe.ok()) {
    return report_error(recipe.status().with_context(a.index + ": the index's recipe").message());
  }
  auto emb = Embedder::create(*recipe);
  if (!emb.ok()) return report_error(emb.status().message());
  if ((*emb)->dim() != meta.dim) {
    return report_error(fmt::format("{}: the index holds {}-dim vectors, {} makes {}", a.index,
                                    meta.dim, meta.recipe, (*emb)->dim()));
  }
  auto q = (*emb)->embed(a.queries);
  if (!q.ok()) return report_error(q.status().message());
  auto hits = (*idx)->search(q->data(), static_cast<int64_t>(a.queries.size()), a.k);
  if (!hits.ok()) return report_error(hits.status().message());
  const auto& docs = (*idx)->docs();
  if (a.json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (size_t i = 0; i < a.queries.size(); ++i) {
      nlohmann::ordered_json r = nlohmann::ordered_json::array();
      for (const search::Hit& h : (*hits)[i]) {
        const search::Document& d = docs[static_cast<size_t>(h.row)];
        r.push_back({{"id", d.id}, {"score", h.score}, {"text", d.text}});
      }
      j.push_back({{"query", a.queries[i]}, {"results", r}});
    }
    write_stdout(json_text(j) + "\n");
    return check_stdout_written(0);
  }
  std::string out;
  for (size_t i = 0; i < a.queries.size(); ++i) {
    out += fmt::format("query: {}\n", display_text(a.queries[i]));
    for (const search::Hit& h : (*hits)[i]) {
      const search::Document& d = docs[static_cast<size_t>(h.row)];
      std::string text = d.text.size() > 110 ? d.text.substr(0, 110) + "..." : d.text;
      out += fmt::format("  {:.3f}  [{}] {}\n", h.score, display_text(d.id), display_text(text));
    }
  }
  write_stdout(out);
  return check_stdout_written(0);
}

}  // namespace

void add_index_commands(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("index", "Embed a corpus into a semantic search index (FAISS)");
  auto a = std::make_shared<IndexArgs>();
  cmd->add_option("recipe", a->recipe, "An embedding recipe")->required();
  cmd->add_option("corpus", a->corpus, "One document per line, or .jsonl with {id, text}")
      ->required();
  cmd->add_option("-o,--output", a->out, "The index directory to write")->required();
  cmd->add_option("--kind", a->kind, "hnsw (approximate, fast) or flat (exact); default hnsw")
      ->check(CLI::IsMember({"hnsw", "flat"}));
  cmd->add_option("--hnsw-m", a->m, "HNSW neighbours per node (default 32)")
      ->check(CLI::Range(2, 512));
  cmd->add_option("--ef-construction", a->ef_construction, "HNSW build breadth (default 200)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--ef-search", a->ef_search, "HNSW search breadth stored (default 128)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->callback([a, &exit_code] { exit_code = run_index(*a); });

  auto* s = app.add_subcommand("search", "Nearest documents of queries in a search index");
  auto sa = std::make_shared<SearchArgs>();
  s->add_option("index", sa->index, "An index directory (rinfer index)")->required();
  s->add_option("queries", sa->queries, "Query texts")->required();
  s->add_option("-k", sa->k, "Results per query (default 5)")->check(CLI::Range(1, 10000));
  s->add_option("--ef-search", sa->ef_search, "HNSW search breadth (default: the index's)")
      ->check(CLI::Range(1, 1 << 16));
  s->add_flag("--json", sa->json, "Print JSON");
  s->callback([sa, &exit_code] { exit_code = run_search(*sa); });
}

}  // namespace rinfer
