#include "tools/bench_embed.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "core/input_file.h"
#include "core/output_file.h"
#include "core/progress.h"
#include "engine/embedder.h"
#include "search/search_index.h"
#include "strategies/registry.h"
#include "tools/bench_report.h"
#include "tools/input.h"
#include "tools/tools.h"

namespace rinfer {

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Multiply-add FLOPs of the encoder over these inputs: the matrices per token, plus the
// attention scores and weighted sums per pair of tokens of a sequence.
double encoder_flops(const EncoderHParams& hp, const std::vector<TokenEncoding>& enc) {
  const double e = double(hp.n_embd), ff = double(hp.n_ff), layers = double(hp.n_layer);
  double f = 0;
  for (const TokenEncoding& t : enc) {
    const double n = double(t.ids.size());
    f += layers * (2.0 * n * (4 * e * e + 2 * e * ff) + 4.0 * n * n * e);
  }
  return f;
}

double cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
}

std::string markdown(const ordered_json& r) {
  std::string t =
      "| variant | batching | inputs/s | tokens/s | GFLOP/s | vs baseline | vs peer | min cos | "
      "mean cos |\n|---|---|---|---|---|---|---|---|---|\n";
  const double base = r["variants"][0]["inputs_per_s"].get<double>();
  const double peer = r.contains("peer") ? r["peer"]["inputs_per_s"].get<double>() : 0.0;
  for (const auto& v : r["variants"]) {
    const double ips = v["inputs_per_s"].get<double>();
    t += fmt::format("| {}{} | {} | {:.1f} | {:.0f} | {:.1f} | {:.2f}x | {} | {:.6f} | {:.6f} |\n",
                     v["name"].get<std::string>(), v["passed"].get<bool>() ? "" : " (FAILS)",
                     v["batching"].get<std::string>(), ips, v["tokens_per_s"].get<double>(),
                     v["gflops"].get<double>(), ips / base,
                     peer > 0 ? fmt::format("{:.2f}x", ips / peer) : std::string("-"),
                     v["min_cosine"].get<double>(), v["mean_cosine"].get<double>());
  }
  if (peer > 0) {
    std::vector<const ordered_json*> peers{&r["peer"]};
    if (r.contains("other_peers")) {
      for (const auto& p : r["other_peers"]) peers.push_back(&p);
    }
    for (const ordered_json* p : peers) {
      const double ips = (*p)["inputs_per_s"].get<double>();
      t += fmt::format(
          "| {} {} (peer) | batch {} | {:.1f} | {:.0f} | - | {:.2f}x | {:.2f}x | - | - |\n",
          p->value("name", "peer"), p->value("dtype", ""), p->value("batch_size", 0), ips,
          p->value("tokens_per_s", 0.0), ips / base, ips / peer);
    }
  }
  t += fmt::format(
      "\n{} inputs ({} tokens) from {}; {}; {}; cosine against the "
      "baseline's vectors (a variant under {} fails).\n",
      r["texts"].get<int64_t>(), r["tokens"].get<int64_t>(), r["text_file"].get<std::string>(),
      bench::medians_of(r["repeat"].get<int64_t>()),
      r["device"].value("kind", "") == "cuda"
          ? fmt::format("{} (host: {})", r["device"].value("name", "GPU"),
                        r["machine"]["cpu"].get<std::string>())
          : r["machine"]["cpu"].get<std::string>(),
      r["min_cosine_gate"].get<double>());
  return t;
}

}  // namespace

int run_embedding_bench(const std::vector<EmbedBenchVariant>& variants,
                        const EmbedBenchOptions& o) {
  const RecipeConfig& base = variants.front().recipe;
  std::string text_file = o.text_file;
  if (text_file.empty() && base.bench.prompts) text_file = *base.bench.prompts;
  if (text_file.empty()) {
    return report_error(base.path +
                        ": an embedding bench needs texts: --text FILE (one per "
                        "line) or bench.prompts in the baseline recipe");
  }
  auto lines = read_text_lines(text_file, "bench texts");
  if (!lines.ok()) return report_error(lines.status().message());
  std::vector<std::string> texts = std::move(lines).value();
  if (o.limit > 0 && static_cast<int64_t>(texts.size()) > o.limit)
    texts.resize(static_cast<size_t>(o.limit));

  std::string machine;
  ordered_json report;
  report["benchmark"] = "rinfer bench (embedding)";
  report["recipe_folder"] = o.folder;
  report["git_sha"] = bench::git_sha(o.folder.empty() ? "." : o.folder);
  report["date"] = bench::utc_date();
  report["device"] = bench::device_json(base.device, &machine);
  report["machine"] = bench::machine_json(machine);
  report["text_file"] = text_file;
  report["texts"] = texts.size();
  report["repeat"] = o.repeat;
  report["min_cosine_gate"] = 0.999;
  const std::string folder_name =
      fs::path(o.folder).filename().empty() ? "bench" : fs::path(o.folder).filename().string();
  const std::string json_path =
      !o.json.empty() ? o.json : fmt::format("bench/results/{}/{}.json", machine, folder_name);
  if (Status c = bench::prepare_json_output(json_path, {text_file}); !c.ok()) {
    return report_error(c.message());
  }
  for (const std::string& path : o.peer_jsons) {
    auto peer = read_regular_file(path, 1 << 20);
    if (!peer.ok()) return report_error(peer.status().message());
    const auto pj = nlohmann::json::parse(*peer, nullptr, false);
    if (pj.is_discarded() || !pj.contains("inputs_per_s")) {
      return report_error(path + ": not a peer result (bench/embedding_peer.py writes one)");
    }
    if (pj.value("texts", int64_t{0}) != static_cast<int64_t>(texts.size())) {
      return report_error(fmt::format("{}: the peer embedded {} texts, this run {}", path,
                                      pj.value("texts", int64_t{0}), texts.size()));
    }
    if (!report.contains("peer")) {
      report["peer"] = ordered_json::parse(pj.dump());
    } else {
      report["other_peers"].push_back(ordered_json::parse(pj.dump()));
    }
  }

  std::vector<float> base_vecs;
  ordered_json out = ordered_json::array();
  for (const EmbedBenchVariant& v : variants) {
    auto emb = Embedder::create(v.recipe);
    if (!emb.ok() &&
        bench::skip_unsupported(report, v.name, v.path, emb.status(), &v == &variants.front())) {
      continue;
    }
    if (!emb.ok()) return report_error(emb.status().with_context(v.path).message());
    Embedder& e = **emb;
    auto enc = e.tokenize(texts);
    if (!enc.ok()) return report_error(enc.status().message());
    int64_t tokens = 0;
    for (const TokenEncoding& t : *enc) tokens += static_cast<int64_t>(t.ids.size());
    const double flops = encoder_flops(e.model().hparams(), *enc);
    std::vector<double> secs, tok_secs, fwd_secs;
    std::vector<float> vecs;
    Progress bar(fmt::format("bench {}", v.name), o.warmup + o.repeat, "run");
    for (int run = 0; run < o.warmup + o.repeat; ++run) {
      EmbedStats st;
      const auto t0 = Clock::now();
      auto r = e.embed(texts, &st);  // tokenization included, as a user's call
      const double s = seconds_since(t0);
      if (!r.ok()) return report_error(r.status().with_context(v.path).message());
      if (run >= o.warmup) {
        secs.push_back(s);
        tok_secs.push_back(st.tokenize_s);
        fwd_secs.push_back(st.forward_s);
      }
      vecs = std::move(r).value();
      bar.update(run + 1, fmt::format("{:.2f} s", s));
    }
    bar.finish();
    if (base_vecs.empty()) base_vecs = vecs;
    double min_cos = 1.0, sum_cos = 0.0;
    const int64_t d = e.dim();
    for (size_t i = 0; i < texts.size(); ++i) {
      const double c = cosine(vecs.data() + static_cast<int64_t>(i) * d,
                              base_vecs.data() + static_cast<int64_t>(i) * d, d);
      min_cos = std::min(min_cos, c);
      sum_cos += c;
    }
    const double med = bench::median(secs);
    const auto& db = v.recipe.strategies.dynamic_batching;
    ordered_json j;
    j["name"] = v.name;
    j["recipe"] = v.path;
    j["strategies"] = describe_strategies(v.recipe.strategies, v.recipe.device);
    j["batching"] = db.policy == EmbedBatching::kSingle
                        ? std::string("single")
                        : fmt::format("{} {}", embed_batching_name(db.policy), db.max_seqs);
    j["seconds"] = secs;
    j["tokenize_seconds"] = bench::median(tok_secs);  // medians of the parts
    j["forward_seconds"] = bench::median(fwd_secs);
    j["inputs_per_s"] = double(texts.size()) / med;
    j["tokens_per_s"] = double(tokens) / med;
    j["gflops"] = flops / med / 1e9;
    j["min_cosine"] = min_cos;
    j["mean_cosine"] = sum_cos / double(texts.size());
    j["passed"] = min_cos >= 0.999;
    out.push_back(j);
    report["tokens"] = tokens;
  }
  report["variants"] = out;
  return bench::publish(report, markdown(report), json_path, o.readme, o.folder, machine);
}

namespace {

struct SearchBenchArgs {
  std::string recipe, corpus, json;
  int64_t queries = 1000;
  int64_t k = 10;
  int m = 32, ef_construction = 200, ef_search = 128;
};

int run_bench_search(const SearchBenchArgs& a) {
  auto docs = search::read_corpus(a.corpus);
  if (!docs.ok()) return report_error(docs.status().message());
  if (static_cast<int64_t>(docs->size()) <= a.queries) {
    return report_error(fmt::format("{}: {} documents; more than --queries {} needed", a.corpus,
                                    docs->size(), a.queries));
  }
  auto recipe = load_recipe(a.recipe);
  if (!recipe.ok()) return report_error(recipe.status().message());
  auto emb = Embedder::create(*recipe);
  if (!emb.ok()) return report_error(emb.status().message());
  std::vector<std::string> texts;
  for (const search::Document& d : *docs) texts.push_back(d.text);
  auto t0 = Clock::now();
  auto vecs = (*emb)->embed(texts);
  if (!vecs.ok()) return report_error(vecs.status().message());
  const double embed_s = seconds_since(t0);
  const int64_t dim = (*emb)->dim();
  // Held-out queries: a fixed random sample, not indexed.
  std::vector<size_t> order(docs->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 rng(42);
  std::shuffle(order.begin(), order.end(), rng);
  const auto nq = static_cast<size_t>(a.queries);
  std::vector<float> q, base;
  for (size_t i = 0; i < order.size(); ++i) {
    const float* v = vecs->data() + static_cast<int64_t>(order[i]) * dim;
    (i < nq ? q : base).insert(i < nq ? q.end() : base.end(), v, v + dim);
  }
  const int64_t n = static_cast<int64_t>(order.size() - nq);
  ordered_json report;
  std::string machine;
  report["benchmark"] = "rinfer bench-search";
  report["git_sha"] = bench::git_sha(".");
  report["date"] = bench::utc_date();
  report["device"] = bench::device_json(recipe->device, &machine);
  report["machine"] = bench::machine_json(machine);
  report["recipe"] = a.recipe;
  report["corpus"] = a.corpus;
  report["documents_indexed"] = n;
  report["queries"] = nq;
  report["embed_seconds"] = embed_s;
  report["embed_docs_per_s"] = double(docs->size()) / embed_s;
  std::vector<std::vector<search::Hit>> exact;
  ordered_json kinds = ordered_json::array();
  std::string table = fmt::format(
      "| index | build s | query ms (one at a time) | queries/s | recall@1 | recall@{} |\n"
      "|---|---|---|---|---|---|\n",
      a.k);
  for (search::IndexKind kind : {search::IndexKind::kFlat, search::IndexKind::kHnsw}) {
    auto idx = search::VectorIndex::create(
        dim, search::IndexOptions{kind, a.m, a.ef_construction, a.ef_search});
    if (!idx.ok()) return report_error(idx.status().message());
    t0 = Clock::now();
    if (Status s = (*idx)->add(base.data(), n); !s.ok()) return report_error(s.message());
    const double build = seconds_since(t0);
    std::vector<std::vector<search::Hit>> hits;
    t0 = Clock::now();
    for (size_t i = 0; i < nq; ++i) {  // one query per call, as a user's search
      auto h = (*idx)->search(q.data() + static_cast<int64_t>(i) * dim, 1, a.k);
      if (!h.ok()) return report_error(h.status().message());
      hits.push_back(std::move((*h)[0]));
    }
    const double per_query = seconds_since(t0) / double(nq);
    if (kind == search::IndexKind::kFlat) exact = hits;
    const double r1 = search::recall_at_k(exact, hits, 1),
                 rk = search::recall_at_k(exact, hits, a.k);
    table += fmt::format("| {} | {:.2f} | {:.3f} | {:.0f} | {:.4f} | {:.4f} |\n",
                         (*idx)->describe(), build, per_query * 1e3, 1.0 / per_query, r1, rk);
    kinds.push_back({{"index", (*idx)->describe()},
                     {"build_seconds", build},
                     {"query_ms", per_query * 1e3},
                     {"recall_at_1", r1},
                     {fmt::format("recall_at_{}", a.k), rk}});
  }
  report["indexes"] = kinds;
  table += fmt::format(
      "\n{} documents indexed, {} held-out queries (embedded at {:.0f} docs/s); "
      "recall of each index's top {} against the exact (flat) one.\n",
      n, nq, double(docs->size()) / embed_s, a.k);
  std::printf("%s", table.c_str());
  std::fflush(stdout);
  const std::string json_path = !a.json.empty()
                                    ? a.json
                                    : fmt::format("bench/results/{}/search_{}.json", machine,
                                                  fs::path(a.corpus).stem().string());
  return bench::write_json(json_path, report);
}

}  // namespace

void add_bench_search_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "bench-search", "Measure exact vs HNSW search over a corpus: build, latency, recall");
  auto a = std::make_shared<SearchBenchArgs>();
  cmd->add_option("recipe", a->recipe, "An embedding recipe")->required();
  cmd->add_option("corpus", a->corpus, "One document per line, or .jsonl")->required();
  cmd->add_option("--queries", a->queries, "Held-out documents used as queries (default 1000)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("-k", a->k, "Neighbours compared (default 10)")->check(CLI::Range(1, 1000));
  cmd->add_option("--hnsw-m", a->m, "HNSW neighbours per node (default 32)")
      ->check(CLI::Range(2, 512));
  cmd->add_option("--ef-construction", a->ef_construction, "HNSW build breadth (default 200)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--ef-search", a->ef_search, "HNSW search breadth (default 128)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--json", a->json, "JSON output (default bench/results/<machine>/search_*.json)");
  cmd->callback([a, &exit_code] { exit_code = run_bench_search(*a); });
}

}  // namespace rinfer
