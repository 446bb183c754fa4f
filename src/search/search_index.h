// A semantic search index on disk: the documents of a corpus, their embeddings under a FAISS
// index (search/vector_index.h), and the recipe that made them (queries must be embedded by the
// same model). `rinfer index` builds one, `rinfer search` queries it. A directory of:
//   meta.json    {"format": "rinfer-search-index", "version": 1, "recipe": absolute path,
//                "model", "dim", "kind", "count", "index_bytes", "index_fnv1a64", "created"}
//   docs.jsonl   {"id", "text"} per document, in index order
//   index.faiss  the FAISS index (its size and FNV-1a-64 checked against meta.json before FAISS
//                reads it, so a truncated or altered file is refused with a clear error)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/embedder.h"
#include "search/corpus.h"
#include "search/vector_index.h"

namespace rinfer::search {

struct IndexMeta {
  std::string recipe;  // absolute path of the embedding recipe
  std::string model;
  int64_t dim = 0;
  IndexKind kind = IndexKind::kHnsw;
  int64_t count = 0;
};

class SearchIndex {
 public:
  // Embeds the documents with `embedder` (its batching; progress after each batch) and adds
  // them to a new index.
  static Result<std::unique_ptr<SearchIndex>> build(Embedder& embedder, std::vector<Document> docs,
                                                    const IndexOptions& opts,
                                                    const EmbedProgress& progress = {});
  // An index over vectors already made ([docs.size(), dim]).
  static Result<std::unique_ptr<SearchIndex>> from_vectors(const IndexMeta& meta,
                                                           std::vector<Document> docs,
                                                           const float* vectors,
                                                           const IndexOptions& opts);
  // Writes the directory (created; an existing index in it is replaced).
  Status save(const std::string& dir) const;
  // ef_search > 0 overrides the HNSW search breadth stored in the index.
  static Result<std::unique_ptr<SearchIndex>> open(const std::string& dir, int ef_search = 0);

  // The k nearest documents of each query vector ([nq, dim]).
  Result<std::vector<std::vector<Hit>>> search(const float* q, int64_t nq, int64_t k) const {
    return index_->search(q, nq, k);
  }
  const std::vector<Document>& docs() const { return docs_; }
  const IndexMeta& meta() const { return meta_; }
  VectorIndex& vectors() { return *index_; }

 private:
  SearchIndex() = default;
  IndexMeta meta_;
  std::vector<Document> docs_;
  std::unique_ptr<VectorIndex> index_;
};

}  // namespace rinfer::search
