// Nearest-neighbour search over embeddings, on FAISS (Debian libfaiss): inner product, which is
// cosine similarity for the L2-normalized vectors of an embedding recipe.
//   flat  exact search, every vector compared (the baseline: recall 1 by definition)
//   hnsw  a hierarchical navigable small-world graph (M neighbours per node, efConstruction at
//         build, efSearch per query): approximate, sublinear, measured against flat by recall@k
// FAISS's exceptions are caught here; every error is a Status.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rinfer/status.h"

namespace faiss {
struct Index;
}

namespace rinfer::search {

enum class IndexKind : uint8_t { kFlat, kHnsw };
std::string_view index_kind_name(IndexKind k);

struct IndexOptions {
  IndexKind kind = IndexKind::kHnsw;
  int hnsw_m = 32;
  int ef_construction = 200;
  int ef_search = 128;
};

struct Hit {
  int64_t row = -1;  // the vector's position in the order added
  float score = 0;   // inner product
};

class VectorIndex {
 public:
  ~VectorIndex();
  static Result<std::unique_ptr<VectorIndex>> create(int64_t dim, const IndexOptions& opts);
  // Reads an index written by save(); its dimension must be `dim`.
  static Result<std::unique_ptr<VectorIndex>> load(const std::string& path, int64_t dim,
                                                   int ef_search);

  Status add(const float* x, int64_t n);  // x [n, dim]
  // The k best of each query, best first: [nq][<= k].
  Result<std::vector<std::vector<Hit>>> search(const float* q, int64_t nq, int64_t k) const;
  Status save(const std::string& path) const;

  int64_t size() const;
  int64_t dim() const { return dim_; }
  IndexKind kind() const { return kind_; }
  void set_ef_search(int ef);
  std::string describe() const;

 private:
  VectorIndex() = default;
  std::unique_ptr<faiss::Index> index_;
  int64_t dim_ = 0;
  IndexKind kind_ = IndexKind::kFlat;
  IndexOptions opts_;
};

// The mean over queries of |approx top-k ∩ exact top-k| / k.
double recall_at_k(const std::vector<std::vector<Hit>>& exact,
                   const std::vector<std::vector<Hit>>& approx, int64_t k);

}  // namespace rinfer::search
