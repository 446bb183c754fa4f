// `rinfer bench` for embedding recipes (scenario: embedding), and `rinfer bench-search`.
//
// bench: every variant of the folder embeds the same texts (one per line: --text, else the
// baseline's bench.prompts), warm-up runs then `repeat` measured runs each; the median inputs/s
// and tokens/s, the matmul GFLOP/s they imply, and each variant's cosine similarity to the
// baseline's vectors (min and mean; a variant under 0.999 fails). With --peer JSON (from
// bench/embedding_peer.py, run on the same texts just before), the peer's row and each
// variant's ratio to it. Writes the table, the JSON (bench/results/<machine>/<folder>.json) and
// with --readme the folder README's table.
//
// bench-search: embeds a corpus with a recipe, holds out Q documents as queries, builds the
// exact (flat) and the approximate (HNSW) index over the rest, and reports the build time,
// per-query latency and recall@1 / recall@10 of HNSW against flat; JSON beside the table.
#pragma once

#include <string>
#include <vector>

#include "recipe/recipe.h"

namespace rinfer {

struct EmbedBenchVariant {
  std::string name;
  std::string path;
  RecipeConfig recipe;
};

struct EmbedBenchOptions {
  std::string folder;
  std::string text_file;  // empty: the baseline's bench.prompts
  int repeat = 3;
  int warmup = 1;
  int64_t limit = 0;                    // texts used (0: all)
  std::string json;                     // empty: bench/results/<machine>/<folder>.json
  std::vector<std::string> peer_jsons;  // the first is "peer", the rest "other_peers"
  bool readme = false;
};

int run_embedding_bench(const std::vector<EmbedBenchVariant>& variants, const EmbedBenchOptions& o);

}  // namespace rinfer
