#include "search/vector_index.h"

#include <faiss/IndexFlat.h>
#include <faiss/IndexHNSW.h>
#include <faiss/index_io.h>
#include <fmt/format.h>

#include <exception>
#include <set>

#include "core/error.h"

namespace rinfer::search {

std::string_view index_kind_name(IndexKind k) { return k == IndexKind::kFlat ? "flat" : "hnsw"; }

VectorIndex::~VectorIndex() = default;

Result<std::unique_ptr<VectorIndex>> VectorIndex::create(int64_t dim, const IndexOptions& opts) {
  if (dim <= 0 || dim > (int64_t{1} << 16)) return invalid_argument("index: dimension {}", dim);
  if (opts.kind == IndexKind::kHnsw &&
      (opts.hnsw_m < 2 || opts.hnsw_m > 512 || opts.ef_construction < 1 || opts.ef_search < 1)) {
    return invalid_argument("index: hnsw M {} (2..512), efConstruction {}, efSearch {} (>= 1)",
                            opts.hnsw_m, opts.ef_construction, opts.ef_search);
  }
  std::unique_ptr<VectorIndex> v(new VectorIndex());
  v->dim_ = dim;
  v->kind_ = opts.kind;
  v->opts_ = opts;
  try {
    if (opts.kind == IndexKind::kFlat) {
      v->index_ = std::make_unique<faiss::IndexFlatIP>(static_cast<int>(dim));
    } else {
      auto h = std::make_unique<faiss::IndexHNSWFlat>(static_cast<int>(dim), opts.hnsw_m,
                                                      faiss::METRIC_INNER_PRODUCT);
      h->hnsw.efConstruction = opts.ef_construction;
      h->hnsw.efSearch = opts.ef_search;
      v->index_ = std::move(h);
    }
  } catch (const std::exception& e) {
    return internal_error("index: FAISS: {}", e.what());
  }
  return v;
}

Result<std::unique_ptr<VectorIndex>> VectorIndex::load(const std::string& path, int64_t dim,
                                                       int ef_search) {
  std::unique_ptr<VectorIndex> v(new VectorIndex());
  try {
    v->index_.reset(faiss::read_index(path.c_str()));
  } catch (const std::exception& e) {
    return data_loss("{}: not a readable FAISS index: {}", path, e.what());
  }
  if (v->index_ == nullptr) return data_loss("{}: not a readable FAISS index", path);
  if (v->index_->d != dim) {
    return data_loss("{}: the index holds {}-dimensional vectors, the model makes {}", path,
                     v->index_->d, dim);
  }
  v->dim_ = dim;
  if (auto* h = dynamic_cast<faiss::IndexHNSWFlat*>(v->index_.get()); h != nullptr) {
    v->kind_ = IndexKind::kHnsw;
    v->opts_.hnsw_m = h->hnsw.nb_neighbors(1);
    v->opts_.ef_construction = h->hnsw.efConstruction;
    h->hnsw.efSearch = ef_search > 0 ? ef_search : h->hnsw.efSearch;
    v->opts_.ef_search = h->hnsw.efSearch;
  } else if (dynamic_cast<faiss::IndexFlatIP*>(v->index_.get()) != nullptr) {
    v->kind_ = IndexKind::kFlat;
  } else {
    return unsupported("{}: a FAISS index of a kind rinfer does not build", path);
  }
  if (v->index_->metric_type != faiss::METRIC_INNER_PRODUCT) {
    return unsupported("{}: the index does not rank by inner product", path);
  }
  return v;
}

Status VectorIndex::add(const float* x, int64_t n) {
  try {
    index_->add(n, x);
  } catch (const std::exception& e) {
    return internal_error("index: adding {} vectors: FAISS: {}", n, e.what());
  }
  return ok_status();
}

Result<std::vector<std::vector<Hit>>> VectorIndex::search(const float* q, int64_t nq,
                                                          int64_t k) const {
  if (k < 1) return invalid_argument("search: k {} (>= 1)", k);
  std::vector<float> d(static_cast<size_t>(nq * k));
  std::vector<faiss::Index::idx_t> ids(static_cast<size_t>(nq * k));
  try {
    index_->search(nq, q, k, d.data(), ids.data());
  } catch (const std::exception& e) {
    return internal_error("search: FAISS: {}", e.what());
  }
  std::vector<std::vector<Hit>> out(static_cast<size_t>(nq));
  for (int64_t i = 0; i < nq; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const auto at = static_cast<size_t>(i * k + j);
      if (ids[at] < 0) break;  // fewer than k vectors
      out[static_cast<size_t>(i)].push_back(Hit{ids[at], d[at]});
    }
  }
  return out;
}

Status VectorIndex::save(const std::string& path) const {
  try {
    faiss::write_index(index_.get(), path.c_str());
  } catch (const std::exception& e) {
    return io_error("{}: writing the index: {}", path, e.what());
  }
  return ok_status();
}

int64_t VectorIndex::size() const { return index_->ntotal; }

void VectorIndex::set_ef_search(int ef) {
  if (auto* h = dynamic_cast<faiss::IndexHNSWFlat*>(index_.get()); h != nullptr && ef > 0) {
    h->hnsw.efSearch = ef;
    opts_.ef_search = ef;
  }
}

std::string VectorIndex::describe() const {
  if (kind_ == IndexKind::kFlat) {
    return fmt::format("flat (exact inner product), {} vectors of {}", size(), dim_);
  }
  return fmt::format("hnsw (M {}, efConstruction {}, efSearch {}), {} vectors of {}", opts_.hnsw_m,
                     opts_.ef_construction, opts_.ef_search, size(), dim_);
}

double recall_at_k(const std::vector<std::vector<Hit>>& exact,
                   const std::vector<std::vector<Hit>>& approx, int64_t k) {
  if (exact.empty()) return 0.0;
  double sum = 0.0;
  for (size_t i = 0; i < exact.size(); ++i) {
    std::set<int64_t> want;
    for (int64_t j = 0; j < k && j < static_cast<int64_t>(exact[i].size()); ++j) {
      want.insert(exact[i][static_cast<size_t>(j)].row);
    }
    int64_t got = 0;
    for (int64_t j = 0; j < k && i < approx.size() && j < static_cast<int64_t>(approx[i].size());
         ++j) {
      got += static_cast<int64_t>(want.count(approx[i][static_cast<size_t>(j)].row));
    }
    sum += want.empty() ? 1.0 : static_cast<double>(got) / static_cast<double>(want.size());
  }
  return sum / static_cast<double>(exact.size());
}

}  // namespace rinfer::search
