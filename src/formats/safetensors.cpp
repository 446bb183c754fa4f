#include "formats/safetensors.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <exception>
#include <filesystem>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/strings.h"

namespace rinfer {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct DTypeName {
  std::string_view name;
  DType dtype;
};

constexpr std::array<DTypeName, 12> kDTypeNames = {{
    {"F32", DType::kF32},
    {"F16", DType::kF16},
    {"BF16", DType::kBF16},
    {"F64", DType::kF64},
    {"I8", DType::kI8},
    {"U8", DType::kU8},
    {"I16", DType::kI16},
    {"I32", DType::kI32},
    {"I64", DType::kI64},
    {"BOOL", DType::kBool},
    {"F8_E4M3", DType::kF8E4M3},
    {"F8_E5M2", DType::kF8E5M2},
}};

// Valid safetensors dtypes that have no DType here: reported as unsupported, not malformed.
constexpr std::array<std::string_view, 9> kUnsupportedDTypes = {
    "U16", "U32", "U64", "C64", "F4", "F6_E2M3", "F6_E3M2", "F8_E8M0", "E8M0"};

// Nesting deeper than this is never legitimate in a header or index and is rejected early.
constexpr int kMaxJsonDepth = 8;

// Thrown from the parser callback to stop parsing at the first problem.
struct JsonAbort {
  std::string message;
};

// A name or string from the file, for a message.
std::string shown(std::string_view s) { return printable(s, 120); }

// "a string", "an array", ... with a short rendering of scalar values, for messages.
std::string describe(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return j.get<bool>() ? "true" : "false";
    case json::value_t::string:
      return "the string \"" + shown(j.get_ref<const std::string&>()) + "\"";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "the integer " + j.dump();
    case json::value_t::number_float:
      return "the non-integer number " + j.dump();
    case json::value_t::array:
      return fmt::format("an array of {} element{}", j.size(), j.size() == 1 ? "" : "s");
    case json::value_t::object:
      return fmt::format("an object of {} key{}", j.size(), j.size() == 1 ? "" : "s");
    default:
      return "an unexpected value";
  }
}

// Parses JSON, rejecting duplicate object keys (nlohmann silently keeps the last one) and deep
// nesting. `top_level_what` names top-level keys in messages ("tensor name"). On failure returns
// the message (without a path prefix).
Result<json> parse_json_strict(std::string_view text, std::string_view top_level_what) {
  std::vector<std::set<std::string>> open_objects;
  std::string top_key;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) {
          throw JsonAbort{fmt::format("JSON nested deeper than {} levels", kMaxJsonDepth)};
        }
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (depth == 1) top_key = key;
        if (!open_objects.back().insert(key).second) {
          if (depth == 1) {
            throw JsonAbort{fmt::format("duplicate {} '{}'", top_level_what, shown(key))};
          }
          throw JsonAbort{
              fmt::format("duplicate key '{}' inside '{}'", shown(key), shown(top_key))};
        }
        break;
      }
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.data(), text.data() + text.size(), callback,
                       /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const JsonAbort& e) {
    return data_loss("{}", e.message);
  } catch (const json::parse_error& e) {
    return data_loss("not valid JSON at byte {}: {}", e.byte, printable(e.what()));
  } catch (const json::exception& e) {
    return data_loss("not valid JSON: {}", printable(e.what()));
  }
}

// A JSON value that must be a non-negative integer no larger than `max`.
Result<uint64_t> get_count(const json& j, std::string_view what, uint64_t max) {
  if (j.is_number_unsigned()) {
    const auto v = j.get<uint64_t>();
    if (v > max) return data_loss("{} is {}, larger than {}", what, v, max);
    return v;
  }
  if (j.is_number_integer()) return data_loss("{} is negative ({})", what, j.get<int64_t>());
  return data_loss("{} is {}, expected a non-negative integer", what, describe(j));
}

std::string shape_string(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Validates one tensor entry of the header; fills everything but `data`.
Status parse_tensor_entry(const std::string& path, const std::string& name, const json& entry,
                          uint64_t buffer_size, SafetensorsTensor* t) {
  const std::string where = fmt::format("{}: tensor '{}'", path, shown(name));
  if (!entry.is_object()) {
    return data_loss("{}: entry is {}, expected an object", where, describe(entry));
  }
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return data_loss("{}: unknown key '{}' (expected dtype, shape, data_offsets)", where,
                       shown(key));
    }
  }
  t->name = name;

  // dtype
  auto it = entry.find("dtype");
  if (it == entry.end()) return data_loss("{}: missing 'dtype'", where);
  if (!it->is_string()) {
    return data_loss("{}: 'dtype' is {}, expected a string", where, describe(*it));
  }
  const auto& dtype_str = it->get_ref<const std::string&>();
  std::optional<DType> dtype = safetensors_dtype_from_name(dtype_str);
  if (!dtype) {
    const bool known = std::find(kUnsupportedDTypes.begin(), kUnsupportedDTypes.end(), dtype_str) !=
                       kUnsupportedDTypes.end();
    if (known) return unsupported("{}: dtype '{}' is not supported", where, shown(dtype_str));
    return data_loss("{}: unknown dtype '{}'", where, shown(dtype_str));
  }
  t->dtype = *dtype;

  // shape
  it = entry.find("shape");
  if (it == entry.end()) return data_loss("{}: missing 'shape'", where);
  if (!it->is_array()) {
    return data_loss("{}: 'shape' is {}, expected an array of integers", where, describe(*it));
  }
  t->shape.clear();
  t->shape.reserve(it->size());
  uint64_t numel = 1;
  bool numel_overflow = false;
  for (size_t i = 0; i < it->size(); ++i) {
    auto dim = get_count((*it)[i], fmt::format("shape[{}]", i),
                         static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
    if (!dim.ok()) return dim.status().with_context(where);
    t->shape.push_back(static_cast<int64_t>(*dim));
    if (__builtin_mul_overflow(numel, *dim, &numel)) numel_overflow = true;
  }
  // A zero dimension anywhere makes the count 0, even if a partial product overflowed.
  const bool has_zero = std::find(t->shape.begin(), t->shape.end(), 0) != t->shape.end();
  if (has_zero) {
    numel = 0;
  } else if (numel_overflow) {
    return data_loss("{}: element count of shape {} overflows 64 bits", where,
                     shape_string(t->shape));
  }
  t->numel = numel;
  const auto elem = static_cast<uint64_t>(dtype_traits(t->dtype).block_bytes);
  if (__builtin_mul_overflow(numel, elem, &t->nbytes)) {
    return data_loss("{}: byte size of {} x {} elements overflows 64 bits", where, dtype_str,
                     numel);
  }

  // data_offsets
  it = entry.find("data_offsets");
  if (it == entry.end()) return data_loss("{}: missing 'data_offsets'", where);
  if (!it->is_array() || it->size() != 2) {
    return data_loss("{}: 'data_offsets' is {}, expected [begin, end]", where, describe(*it));
  }
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  auto begin = get_count((*it)[0], "data_offsets[0]", kMax);
  if (!begin.ok()) return begin.status().with_context(where);
  auto end = get_count((*it)[1], "data_offsets[1]", kMax);
  if (!end.ok()) return end.status().with_context(where);
  if (*begin > *end) {
    return data_loss("{}: data_offsets [{}, {}] begin after they end", where, *begin, *end);
  }
  if (*end - *begin != t->nbytes) {
    return data_loss("{}: data_offsets [{}, {}] hold {} bytes, but {} {} needs {}", where, *begin,
                     *end, *end - *begin, dtype_str, shape_string(t->shape), t->nbytes);
  }
  if (*end > buffer_size) {
    return data_loss("{}: data_offsets [{}, {}] run past the end of the {}-byte data buffer", where,
                     *begin, *end, buffer_size);
  }
  t->offset = *begin;
  return ok_status();
}

Status parse_metadata(const std::string& path, const json& j,
                      std::map<std::string, std::string>* out) {
  if (!j.is_object()) {
    return data_loss("{}: __metadata__ is {}, expected an object of strings", path, describe(j));
  }
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) {
      return data_loss("{}: __metadata__ key '{}' is {}, expected a string", path, shown(key),
                       describe(value));
    }
    (*out)[key] = value.get<std::string>();
  }
  return ok_status();
}

// Sorts by offset and checks that the tensors tile [0, buffer_size) exactly.
Status check_coverage(const std::string& path, uint64_t buffer_offset, uint64_t buffer_size,
                      std::vector<SafetensorsTensor>* tensors) {
  std::sort(tensors->begin(), tensors->end(), [](const auto& a, const auto& b) {
    return std::tie(a.offset, a.nbytes, a.name) < std::tie(b.offset, b.nbytes, b.name);
  });
  uint64_t covered = 0;  // end of the bytes claimed so far
  const SafetensorsTensor* prev = nullptr;
  for (const auto& t : *tensors) {
    if (t.offset < covered) {
      return data_loss("{}: tensor '{}' [{}, {}) overlaps tensor '{}' [{}, {}) in the data buffer",
                       path, shown(t.name), t.offset, t.offset + t.nbytes, shown(prev->name),
                       prev->offset, prev->offset + prev->nbytes);
    }
    if (t.offset > covered) {
      return data_loss(
          "{}: hole in the data buffer: bytes [{}, {}) (file offsets [{}, {})) before tensor '{}' "
          "belong to no tensor",
          path, covered, t.offset, buffer_offset + covered, buffer_offset + t.offset,
          shown(t.name));
    }
    covered = t.offset + t.nbytes;
    prev = &t;
  }
  if (covered != buffer_size) {
    return data_loss(
        "{}: hole in the data buffer: its last {} bytes [{}, {}) (file offsets [{}, {})) belong to "
        "no tensor",
        path, buffer_size - covered, covered, buffer_size, buffer_offset + covered,
        buffer_offset + buffer_size);
  }
  return ok_status();
}

struct ParsedHeader {
  uint64_t header_size = 0;
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};

Status parse_header(const MappedFile& file, ParsedHeader* out) {
  const std::string& path = file.path();
  const uint64_t size = file.size();
  if (size < 8) {
    return data_loss("{}: file is {} bytes, too short for the 8-byte header length", path, size);
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file.data()[i];
  if (n > kSafetensorsMaxHeaderBytes) {
    return data_loss("{}: header length {} (file bytes 0-7) exceeds the {}-byte limit", path, n,
                     kSafetensorsMaxHeaderBytes);
  }
  if (n > size - 8) {
    return data_loss(
        "{}: header length {} (file bytes 0-7) runs past the end of the file ({} bytes, so at "
        "most {})",
        path, n, size, size - 8);
  }
  out->header_size = n;
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), n);
  if (text.empty() || text.front() != '{') {
    return data_loss("{}: header is not a JSON object: it must start with '{{' at file offset 8",
                     path);
  }
  auto parsed = parse_json_strict(text, "tensor name");
  if (!parsed.ok()) return parsed.status().with_context(path + ": header");
  const json& root = *parsed;
  if (!root.is_object()) {
    return data_loss("{}: header is {}, expected a JSON object", path, describe(root));
  }

  const uint64_t buffer_size = size - 8 - n;
  out->tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      RINFER_RETURN_IF_ERROR(parse_metadata(path, entry, &out->metadata));
      continue;
    }
    SafetensorsTensor t;
    RINFER_RETURN_IF_ERROR(parse_tensor_entry(path, name, entry, buffer_size, &t));
    t.data = file.data() + 8 + n + t.offset;
    out->tensors.push_back(std::move(t));
  }
  return check_coverage(path, 8 + n, buffer_size, &out->tensors);
}

Status from_exception(const std::string& path, const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    return out_of_memory("{}: out of memory", path);
  } catch (const std::exception& ex) {
    return internal_error("{}: unexpected exception: {}", path, ex.what());
  } catch (...) {
    return internal_error("{}: unexpected exception", path);
  }
}

}  // namespace

std::optional<DType> safetensors_dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypeNames) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& d : kDTypeNames) {
    if (d.dtype == dtype) return d.name;
  }
  return {};
}

// ----------------------------------------------------------------------------- SafetensorsFile

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  RINFER_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  return parse(std::move(file));
}

Result<SafetensorsFile> SafetensorsFile::parse(std::shared_ptr<const MappedFile> file) {
  if (file == nullptr) return invalid_argument("SafetensorsFile::parse: null file");
  try {
    ParsedHeader h;
    RINFER_RETURN_IF_ERROR(parse_header(*file, &h));
    SafetensorsFile f;
    f.file_ = std::move(file);
    f.header_size_ = h.header_size;
    f.tensors_ = std::move(h.tensors);
    f.metadata_ = std::move(h.metadata);
    for (size_t i = 0; i < f.tensors_.size(); ++i) f.by_name_.emplace(f.tensors_[i].name, i);
    return f;
  } catch (...) {
    return from_exception(file->path(), std::current_exception());
  }
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------- SafetensorsModel

Result<SafetensorsModel> SafetensorsModel::open(const std::string& path_or_dir) {
  try {
    std::error_code ec;
    const fs::file_status st = fs::status(path_or_dir, ec);
    if (!fs::exists(st)) return not_found("{}: no such file or directory", path_or_dir);
    if (fs::is_directory(st)) {
      // exists, not is_regular_file: a FIFO or directory of that name is refused by
      // MappedFile::open with its type named, rather than reported as missing.
      const fs::path single = fs::path(path_or_dir) / "model.safetensors";
      if (fs::exists(single, ec)) return open_single(path_or_dir, single.string());
      const fs::path index = fs::path(path_or_dir) / "model.safetensors.index.json";
      if (fs::exists(index, ec)) return open_index(path_or_dir, index.string());
      return not_found(
          "{}: directory holds neither model.safetensors nor model.safetensors.index.json",
          path_or_dir);
    }
    if (path_or_dir.ends_with(".index.json")) return open_index(path_or_dir, path_or_dir);
    return open_single(path_or_dir, path_or_dir);
  } catch (...) {
    return from_exception(path_or_dir, std::current_exception());
  }
}

Result<SafetensorsModel> SafetensorsModel::open_single(const std::string& given,
                                                       const std::string& file) {
  RINFER_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(file));
  SafetensorsModel m;
  m.path_ = given;
  m.add_shard(std::move(f));
  return m;
}

SafetensorsModel SafetensorsModel::from_file(std::string path, SafetensorsFile file) {
  SafetensorsModel m;
  m.path_ = std::move(path);
  m.add_shard(std::move(file));
  return m;
}

void SafetensorsModel::add_shard(SafetensorsFile shard) {
  const size_t shard_index = shards_.size();
  for (const auto& t : shard.tensors()) {
    by_name_.emplace(t.name, std::make_pair(tensors_.size(), shard_index));
    tensors_.push_back(t);
    total_bytes_ += t.nbytes;
  }
  shards_.push_back(std::move(shard));
}

Result<SafetensorsModel> SafetensorsModel::open_index(const std::string& given,
                                                      const std::string& index) {
  RINFER_ASSIGN_OR_RETURN(auto file, MappedFile::open(index));
  if (file->size() > kSafetensorsMaxHeaderBytes) {
    return data_loss("{}: index is {} bytes, larger than the {}-byte limit", index, file->size(),
                     kSafetensorsMaxHeaderBytes);
  }
  const std::string_view text(reinterpret_cast<const char*>(file->data()), file->size());
  auto parsed = parse_json_strict(text, "key");
  if (!parsed.ok()) return parsed.status().with_context(index);
  const json& root = *parsed;
  if (!root.is_object()) {
    return data_loss("{}: index is {}, expected a JSON object", index, describe(root));
  }
  if (auto meta = root.find("metadata"); meta != root.end() && !meta->is_object()) {
    return data_loss("{}: 'metadata' is {}, expected an object", index, describe(*meta));
  }
  auto wm = root.find("weight_map");
  if (wm == root.end()) return data_loss("{}: missing 'weight_map'", index);
  if (!wm->is_object()) {
    return data_loss("{}: 'weight_map' is {}, expected an object", index, describe(*wm));
  }
  if (wm->empty()) return data_loss("{}: 'weight_map' lists no tensors", index);

  std::map<std::string, std::string, std::less<>> listed;    // tensor -> shard file name
  std::map<std::string, std::vector<std::string>> by_shard;  // shard file name -> tensors
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) {
      return data_loss("{}: weight_map['{}'] is {}, expected a shard file name", index, shown(name),
                       describe(shard));
    }
    const auto& s = shard.get_ref<const std::string&>();
    const fs::path rel(s);
    bool ok = !s.empty() && rel.is_relative();
    for (const auto& part : rel) ok = ok && part != "..";
    if (!ok) {
      return data_loss("{}: weight_map['{}'] = '{}' is not a file name inside the model directory",
                       index, shown(name), shown(s));
    }
    listed.emplace(name, s);
    by_shard[s].push_back(name);
  }

  // Open every shard and check that it holds what the index lists for it.
  const fs::path dir = fs::path(index).parent_path();
  std::vector<std::pair<std::string, SafetensorsFile>> shards;
  for (const auto& [shard_name, names] : by_shard) {
    auto shard = SafetensorsFile::open((dir / shard_name).string());
    if (!shard.ok()) {
      return Status(shard.status().code(),
                    fmt::format("{}: shard '{}' (listed for tensor '{}'): {}", index,
                                shown(shard_name), shown(names.front()), shard.status().message()));
    }
    for (const auto& name : names) {
      if (shard->find(name) == nullptr) {
        return data_loss("{}: tensor '{}' is listed in shard '{}', which does not contain it",
                         index, shown(name), shown(shard_name));
      }
    }
    shards.emplace_back(shard_name, std::move(shard).value());
  }
  // No tensor in two shards, then no tensor the index does not list.
  std::map<std::string_view, std::string_view> seen;  // tensor -> shard name
  for (const auto& [shard_name, shard] : shards) {
    for (const auto& t : shard.tensors()) {
      auto [it, inserted] = seen.emplace(t.name, shard_name);
      if (!inserted) {
        return data_loss("{}: tensor '{}' appears in two shards: '{}' and '{}'", index,
                         shown(t.name), shown(it->second), shown(shard_name));
      }
    }
  }
  for (const auto& [shard_name, shard] : shards) {
    for (const auto& t : shard.tensors()) {
      if (auto l = listed.find(t.name); l == listed.end() || l->second != shard_name) {
        return data_loss("{}: shard '{}' holds tensor '{}', which the index does not list there",
                         index, shown(shard_name), shown(t.name));
      }
    }
  }

  SafetensorsModel m;
  m.path_ = given;
  m.index_path_ = index;
  for (auto& entry : shards) m.add_shard(std::move(entry.second));
  return m;
}

const SafetensorsTensor* SafetensorsModel::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second.first];
}

const SafetensorsFile* SafetensorsModel::shard_of(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &shards_[it->second.second];
}

}  // namespace rinfer
