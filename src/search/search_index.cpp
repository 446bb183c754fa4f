#include "search/search_index.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"
#include "core/output_file.h"

namespace rinfer::search {

namespace {

namespace fs = std::filesystem;
constexpr const char* kFormat = "rinfer-search-index";

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 14695981039346656037ull;
  for (char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

Status write_file(const std::string& path, const std::string& bytes) {
  RINFER_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(path));
  RINFER_RETURN_IF_ERROR(f.write(bytes));
  return f.commit();
}

}  // namespace

Result<std::unique_ptr<SearchIndex>> SearchIndex::from_vectors(const IndexMeta& meta,
                                                               std::vector<Document> docs,
                                                               const float* vectors,
                                                               const IndexOptions& opts) {
  std::unique_ptr<SearchIndex> s(new SearchIndex());
  s->meta_ = meta;
  s->meta_.kind = opts.kind;
  s->meta_.count = static_cast<int64_t>(docs.size());
  RINFER_ASSIGN_OR_RETURN(s->index_, VectorIndex::create(meta.dim, opts));
  RINFER_RETURN_IF_ERROR(s->index_->add(vectors, static_cast<int64_t>(docs.size())));
  s->docs_ = std::move(docs);
  return s;
}

Result<std::unique_ptr<SearchIndex>> SearchIndex::build(Embedder& embedder,
                                                        std::vector<Document> docs,
                                                        const IndexOptions& opts,
                                                        const EmbedProgress& progress) {
  if (docs.empty()) return invalid_argument("index: no documents");
  if (!embedder.recipe().embedding.normalize) {
    return invalid_argument(
        "{}: embedding.normalize is false; an inner-product index ranks by "
        "cosine only over normalized vectors",
        embedder.recipe().path);
  }
  std::vector<std::string> texts;
  texts.reserve(docs.size());
  for (const Document& d : docs) texts.push_back(d.text);
  auto vecs = embedder.embed(texts, nullptr, progress);
  if (!vecs.ok()) return vecs.status().with_context("embedding the corpus");
  IndexMeta meta;
  std::error_code ec;
  meta.recipe = fs::absolute(embedder.recipe().path, ec).lexically_normal().string();
  meta.model = embedder.recipe().model;
  meta.dim = embedder.dim();
  return from_vectors(meta, std::move(docs), vecs->data(), opts);
}

Status SearchIndex::save(const std::string& dir) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("{}: cannot create the index directory: {}", dir, ec.message());
  // FAISS writes to a temporary name, renamed once whole (meta.json, written last, vouches
  // for it).
  const std::string index_path = (fs::path(dir) / "index.faiss").string();
  const std::string tmp = index_path + ".tmp";
  RINFER_RETURN_IF_ERROR(index_->save(tmp));
  RINFER_ASSIGN_OR_RETURN(std::string bytes, read_regular_file(tmp));
  fs::rename(tmp, index_path, ec);
  if (ec) return io_error("{}: {}", index_path, ec.message());
  std::string docs;
  for (const Document& d : docs_) {
    docs += nlohmann::json{{"id", d.id}, {"text", d.text}}.dump() + "\n";
  }
  RINFER_RETURN_IF_ERROR(write_file((fs::path(dir) / "docs.jsonl").string(), docs));
  nlohmann::ordered_json m;
  m["format"] = kFormat;
  m["version"] = 1;
  m["recipe"] = meta_.recipe;
  m["model"] = meta_.model;
  m["dim"] = meta_.dim;
  m["kind"] = std::string(index_kind_name(meta_.kind));
  m["count"] = meta_.count;
  m["index_bytes"] = bytes.size();
  m["index_fnv1a64"] = fmt::format("{:016x}", fnv1a64(bytes));
  return write_file((fs::path(dir) / "meta.json").string(), m.dump(2) + "\n");
}

Result<std::unique_ptr<SearchIndex>> SearchIndex::open(const std::string& dir, int ef_search) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec)) {
    return not_found("{}: not an index directory (rinfer index ... -o {} makes one)", dir, dir);
  }
  const std::string meta_path = (d / "meta.json").string();
  auto meta_text = read_regular_file(meta_path, 1 << 20);
  if (!meta_text.ok()) return meta_text.status().with_context("index");
  const nlohmann::json m = nlohmann::json::parse(*meta_text, nullptr, false);
  if (m.is_discarded() || !m.is_object() || m.value("format", "") != kFormat) {
    return data_loss("{}: not a rinfer search index's meta.json", meta_path);
  }
  std::unique_ptr<SearchIndex> s(new SearchIndex());
  std::string fnv;
  uint64_t index_bytes = 0;
  try {
    if (m.at("version").get<int>() != 1) {
      return unsupported("{}: index format version {} (this rinfer reads 1)", meta_path,
                         m.at("version").get<int>());
    }
    s->meta_.recipe = m.at("recipe").get<std::string>();
    s->meta_.model = m.at("model").get<std::string>();
    s->meta_.dim = m.at("dim").get<int64_t>();
    s->meta_.count = m.at("count").get<int64_t>();
    s->meta_.kind = m.at("kind").get<std::string>() == "flat" ? IndexKind::kFlat : IndexKind::kHnsw;
    index_bytes = m.at("index_bytes").get<uint64_t>();
    fnv = m.at("index_fnv1a64").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    return data_loss("{}: {}", meta_path, e.what());
  }
  const std::string index_path = (d / "index.faiss").string();
  RINFER_ASSIGN_OR_RETURN(std::string bytes, read_regular_file(index_path));
  if (bytes.size() != index_bytes || fmt::format("{:016x}", fnv1a64(bytes)) != fnv) {
    return data_loss(
        "{}: {} bytes, FNV-1a {:016x}; meta.json says {} bytes, {} (the file is "
        "truncated or altered: rebuild the index)",
        index_path, bytes.size(), fnv1a64(bytes), index_bytes, fnv);
  }
  RINFER_ASSIGN_OR_RETURN(s->index_, VectorIndex::load(index_path, s->meta_.dim, ef_search));
  const std::string docs_path = (d / "docs.jsonl").string();
  RINFER_ASSIGN_OR_RETURN(s->docs_, read_corpus(docs_path));
  if (static_cast<int64_t>(s->docs_.size()) != s->meta_.count ||
      s->index_->size() != s->meta_.count) {
    return data_loss("{}: {} documents and {} vectors, meta.json says {}", dir, s->docs_.size(),
                     s->index_->size(), s->meta_.count);
  }
  return s;
}

}  // namespace rinfer::search
