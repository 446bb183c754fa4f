// Strict, zero-copy reader for the safetensors format, and a model loader that accepts a single
// file, a directory holding `model.safetensors`, or a sharded `model.safetensors.index.json`.
//
// Layout: an 8-byte little-endian u64 N, N bytes of UTF-8 JSON header, then the byte buffer. The
// header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
// to the start of the buffer), plus an optional "__metadata__" object of string -> string.
//
// Validation is strict: every byte of the buffer must belong to exactly one tensor, every
// tensor's byte size must match its dtype and shape, and nothing in the header may be ambiguous
// (duplicate keys, unknown keys, non-integer numbers). Every error is a Status whose message
// starts with the file path. Tensor data pointers are views into the mapping and are not
// necessarily aligned to the element size (that depends on the writer padding the header).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "rinfer/status.h"

namespace rinfer {

// Headers larger than this are rejected before anything is allocated for them.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull * 1000 * 1000;

// "F32" -> kF32, ... (case-sensitive, as the format specifies); nullopt for anything else.
std::optional<DType> safetensors_dtype_from_name(std::string_view name);
// kF32 -> "F32"; an empty view for the GGUF block formats, which safetensors cannot hold.
std::string_view safetensors_dtype_name(DType dtype);

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;     // outermost first; empty for a scalar
  uint64_t numel = 0;             // product of shape (1 for a scalar)
  uint64_t nbytes = 0;            // numel * element size
  uint64_t offset = 0;            // data_offsets[0], relative to the start of the byte buffer
  const uint8_t* data = nullptr;  // into the mapping; valid while the file (mapping) lives
};

class SafetensorsFile {
 public:
  // Maps `path` and parses it.
  static Result<SafetensorsFile> open(const std::string& path);
  // Parses bytes already mapped (or from MappedFile::from_bytes); error messages start with
  // file->path().
  static Result<SafetensorsFile> parse(std::shared_ptr<const MappedFile> file);

  const std::string& path() const { return file_->path(); }
  // Sorted by data offset (ties: zero-size tensors first, then by name).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr when there is no tensor of that name.
  const SafetensorsTensor* find(std::string_view name) const;
  // The "__metadata__" object (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::shared_ptr<const MappedFile> file() const { return file_; }

  // N, the JSON header length in bytes.
  uint64_t header_size() const { return header_size_; }
  // File offset of the byte buffer (8 + N).
  uint64_t buffer_offset() const { return 8 + header_size_; }
  // Sum of nbytes over all tensors (= the buffer size, since the buffer is fully indexed).
  uint64_t buffer_size() const { return file_->size() - buffer_offset(); }

 private:
  SafetensorsFile() = default;

  std::shared_ptr<const MappedFile> file_;
  uint64_t header_size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;  // name -> index into tensors_
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model, across shards.
class SafetensorsModel {
 public:
  // Accepts a `.safetensors` file, a `model.safetensors.index.json` file, or a directory that
  // holds `model.safetensors` (preferred, as transformers does) or
  // `model.safetensors.index.json`. A sharded index must map each tensor name to a shard file
  // next to it; every shard must exist and parse, every listed tensor must be in its shard, no
  // tensor may be in two shards, and no shard may hold a tensor the index does not list.
  static Result<SafetensorsModel> open(const std::string& path_or_dir);
  // One file already parsed (a checkpoint made in memory); `path` names it.
  static SafetensorsModel from_file(std::string path, SafetensorsFile file);

  // The path given to open().
  const std::string& path() const { return path_; }
  // The index file for a sharded model; empty for a single file.
  const std::string& index_path() const { return index_path_; }
  bool is_sharded() const { return !index_path_.empty(); }

  // One entry for a single file; the shards sorted by file name otherwise.
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  // Shard by shard (in shards() order), each sorted by data offset. Data pointers stay valid as
  // long as this model (or a copy of the shard) lives.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(std::string_view name) const;
  // The shard holding `name`, or nullptr.
  const SafetensorsFile* shard_of(std::string_view name) const;
  // Sum of nbytes over all tensors.
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  SafetensorsModel() = default;
  static Result<SafetensorsModel> open_single(const std::string& given, const std::string& file);
  static Result<SafetensorsModel> open_index(const std::string& given, const std::string& index);
  void add_shard(SafetensorsFile shard);

  std::string path_;
  std::string index_path_;
  std::vector<SafetensorsFile> shards_;
  std::vector<SafetensorsTensor> tensors_;
  // name -> (index into tensors_, index into shards_)
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> by_name_;
  uint64_t total_bytes_ = 0;
};

}  // namespace rinfer
