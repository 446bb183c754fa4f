// Strict GGUF v2/v3 parser. Every length, count and offset is checked against the bytes that
// remain before it is used or anything is allocated for it; errors name the file, the entry
// (metadata key, array element, tensor) and the byte offset.
#include "formats/gguf.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/strings.h"

namespace rinfer {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes little-endian");

namespace {

constexpr uint64_t kHeaderBytes = 24;  // magic, version, tensor count, kv count
// Smallest encodings: a kv is a 1-byte key (8 + 1), a type (4) and a u8 value (1); a tensor
// info is a 1-byte name (8 + 1), n_dims (4), one dim (8), a type (4) and an offset (8).
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;
constexpr uint64_t kMinArrayBytes = 4 + 8;  // element type, count
// Vectors grow with what was actually parsed beyond this, so a corrupt count cannot reserve
// memory the file does not back.
constexpr uint64_t kMaxReserve = uint64_t{1} << 20;

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

}  // namespace

class GgufParser {
 public:
  explicit GgufParser(std::shared_ptr<const MappedFile> file)
      : file_(std::move(file)), data_(file_->data()), size_(file_->size()) {}

  Result<GgufFile> run() {
    GgufFile out;
    out.file_ = file_;
    Status s = parse(out);
    if (!s.ok()) return s.with_context(file_->path());
    return out;
  }

 private:
  uint64_t remaining() const { return size_ - pos_; }

  // Fails unless n more bytes are in the file.
  Status need(uint64_t n, std::string_view what) const {
    if (n <= remaining()) return ok_status();
    return data_loss("{} runs past the end of the file (offset {}, needs {} bytes, file size {})",
                     what, pos_, n, size_);
  }

  template <typename T>
  Status read(T* out, std::string_view what) {
    RINFER_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return ok_status();
  }

  Status read_string(std::string_view* out, std::string_view what) {
    uint64_t len = 0;
    RINFER_RETURN_IF_ERROR(read(&len, fmt::format("{} length", what)));
    if (len > remaining()) {
      return data_loss("{} length {} runs past the end of the file (offset {}, file size {})", what,
                       len, pos_, size_);
    }
    *out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return ok_status();
  }

  Status read_type(GgufType* out, std::string_view what) {
    const uint64_t at = pos_;
    uint32_t t = 0;
    RINFER_RETURN_IF_ERROR(read(&t, what));
    if (t >= kGgufTypeCount) return data_loss("unknown {} {} (offset {})", what, t, at);
    *out = static_cast<GgufType>(t);
    return ok_status();
  }

  // A value of type t (not an array) into out.
  Status read_scalar(GgufType t, GgufValue* out) {
    const uint64_t at = pos_;
    const size_t n = gguf_scalar_size(t);
    RINFER_RETURN_IF_ERROR(need(n, fmt::format("{} value", gguf_type_name(t))));
    out->type_ = t;
    out->bits_ = GgufValue::load_element(t, data_ + pos_, 0);
    pos_ += n;
    if (t == GgufType::kBool && out->bits_ > 1) {
      return data_loss("bool value {} is not 0 or 1 (offset {})", out->bits_, at);
    }
    return ok_status();
  }

  Status read_value(GgufType t, int depth, GgufValue* out) {
    if (t == GgufType::kString) {
      out->type_ = t;
      return read_string(&out->str_, "string");
    }
    if (t == GgufType::kArray) return read_array(depth + 1, out);
    return read_scalar(t, out);
  }

  // An array at nesting level `depth` (1 for a top-level array).
  Status read_array(int depth, GgufValue* out) {
    const uint64_t at = pos_;
    if (depth > kGgufMaxArrayDepth) {
      return data_loss("arrays nested deeper than {} levels (offset {})", kGgufMaxArrayDepth, at);
    }
    GgufType elem = GgufType::kU8;
    RINFER_RETURN_IF_ERROR(read_type(&elem, "array element type"));
    uint64_t count = 0;
    RINFER_RETURN_IF_ERROR(read(&count, "array length"));
    out->type_ = GgufType::kArray;
    out->elem_type_ = elem;
    const uint64_t min_elem_bytes = elem == GgufType::kString  ? 8
                                    : elem == GgufType::kArray ? kMinArrayBytes
                                                               : gguf_scalar_size(elem);
    if (count > remaining() / min_elem_bytes) {
      return data_loss(
          "array of {} {} elements runs past the end of the file (at least {} bytes each, "
          "offset {}, {} bytes left, file size {})",
          count, gguf_type_name(elem), min_elem_bytes, pos_, remaining(), size_);
    }
    out->count_ = count;
    if (elem == GgufType::kString) {
      out->strings_.reserve(std::min(count, kMaxReserve));
      for (uint64_t i = 0; i < count; ++i) {
        std::string_view s;
        Status st = read_string(&s, "string");
        if (!st.ok()) return st.with_context(fmt::format("array element {}", i));
        out->strings_.push_back(s);
      }
    } else if (elem == GgufType::kArray) {
      out->values_.reserve(std::min(count, kMaxReserve));
      for (uint64_t i = 0; i < count; ++i) {
        GgufValue v;
        Status st = read_array(depth + 1, &v);
        if (!st.ok()) return st.with_context(fmt::format("array element {}", i));
        out->values_.push_back(std::move(v));
      }
    } else {
      out->array_data_ = data_ + pos_;
      pos_ += count * min_elem_bytes;  // checked above
      if (elem == GgufType::kBool) {
        for (uint64_t i = 0; i < count; ++i) {
          if (out->array_data_[i] > 1) {
            return data_loss("array element {}: bool value {} is not 0 or 1 (offset {})", i,
                             out->array_data_[i], pos_ - count + i);
          }
        }
      }
    }
    return ok_status();
  }

  Status parse_header(GgufFile& out, uint64_t* n_tensors, uint64_t* n_kv) {
    RINFER_RETURN_IF_ERROR(need(4, "magic"));
    if (std::memcmp(data_, "GGUF", 4) != 0) {
      return data_loss("bad magic {:02x} {:02x} {:02x} {:02x} (expected 'GGUF'): not a GGUF file",
                       data_[0], data_[1], data_[2], data_[3]);
    }
    pos_ = 4;
    uint32_t version = 0;
    RINFER_RETURN_IF_ERROR(read(&version, "version"));
    if (version != 2 && version != 3) {
      const uint32_t swapped = __builtin_bswap32(version);
      if (swapped >= 1 && swapped <= 3) {
        return unsupported("big-endian GGUF files are not supported (version field {:#010x})",
                           version);
      }
      return unsupported("GGUF version {} is not supported (only versions 2 and 3)", version);
    }
    out.version_ = version;
    RINFER_RETURN_IF_ERROR(read(n_tensors, "tensor count"));
    RINFER_RETURN_IF_ERROR(read(n_kv, "metadata kv count"));
    if (*n_kv > remaining() / kMinKvBytes) {
      return data_loss(
          "metadata kv count {} cannot fit in the {} bytes after the header (offset {}, file "
          "size {})",
          *n_kv, remaining(), kHeaderBytes, size_);
    }
    if (*n_tensors > remaining() / kMinTensorInfoBytes) {
      return data_loss(
          "tensor count {} cannot fit in the {} bytes after the header (offset {}, file size {})",
          *n_tensors, remaining(), kHeaderBytes, size_);
    }
    if (*n_kv * kMinKvBytes + *n_tensors * kMinTensorInfoBytes > remaining()) {
      return data_loss(
          "{} metadata kvs and {} tensor infos cannot fit in the {} bytes after the header "
          "(file size {})",
          *n_kv, *n_tensors, remaining(), size_);
    }
    return ok_status();
  }

  Status parse_metadata(GgufFile& out, uint64_t n_kv) {
    out.metadata_.reserve(std::min(n_kv, kMaxReserve));
    out.metadata_index_.reserve(std::min(n_kv, kMaxReserve));
    for (uint64_t i = 0; i < n_kv; ++i) {
      const uint64_t at = pos_;
      std::string_view key;
      uint64_t key_len = 0;
      Status s = need(8, "key length");
      if (s.ok()) {
        std::memcpy(&key_len, data_ + pos_, 8);
        if (key_len == 0) {
          s = data_loss("empty key (offset {})", at);
        } else if (key_len > kGgufMaxKeyLength) {
          s = data_loss("key length {} exceeds the limit of {} bytes (offset {})", key_len,
                        kGgufMaxKeyLength, at);
        } else {
          s = read_string(&key, "key");
        }
      }
      if (!s.ok()) return s.with_context(fmt::format("metadata entry {} of {}", i, n_kv));

      GgufValue value;
      GgufType type = GgufType::kU8;
      s = read_type(&type, "value type");
      if (s.ok()) s = read_value(type, 0, &value);
      if (!s.ok()) return s.with_context(fmt::format("metadata key {}", quoted(key)));

      auto [it, inserted] = out.metadata_index_.emplace(key, out.metadata_.size());
      if (!inserted) {
        return data_loss("duplicate metadata key {} (entries {} and {}, offset {})", quoted(key),
                         it->second, i, at);
      }
      out.metadata_.emplace_back(key, std::move(value));
    }
    return ok_status();
  }

  Status parse_alignment(GgufFile& out) {
    const GgufValue* v = out.find("general.alignment");
    if (v == nullptr) return ok_status();
    if (v->type() != GgufType::kU32) {
      return data_loss("metadata key 'general.alignment' has type {}, expected u32",
                       gguf_type_name(v->type()));
    }
    const uint64_t a = *v->as_uint();
    if (!std::has_single_bit(a)) {
      return data_loss("metadata key 'general.alignment' is {}, not a power of two", a);
    }
    out.alignment_ = a;
    return ok_status();
  }

  // One tensor info; its data is checked once the data section is known.
  Status parse_tensor_info(GgufTensorInfo& t) {
    const uint64_t at = pos_;
    RINFER_RETURN_IF_ERROR(read_string(&t.name, "tensor name"));
    if (t.name.empty()) return data_loss("empty tensor name (offset {})", at);
    if (t.name.size() > kGgufMaxTensorName) {
      return data_loss("tensor name {} is {} bytes, longer than GGML's limit of {} (offset {})",
                       quoted(t.name), t.name.size(), kGgufMaxTensorName, at);
    }
    Status s = parse_tensor_layout(t);
    if (!s.ok()) return s.with_context(fmt::format("tensor {}", quoted(t.name)));
    return ok_status();
  }

  Status parse_tensor_layout(GgufTensorInfo& t) {
    uint64_t at = pos_;
    uint32_t n_dims = 0;
    RINFER_RETURN_IF_ERROR(read(&n_dims, "n_dims"));
    if (n_dims == 0 || n_dims > kGgufMaxDims) {
      return data_loss("n_dims {} is not in 1..{} (offset {})", n_dims, kGgufMaxDims, at);
    }
    t.ne.resize(n_dims);
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      at = pos_;
      RINFER_RETURN_IF_ERROR(read(&t.ne[d], fmt::format("ne[{}]", d)));
      if (t.ne[d] <= 0)
        return data_loss("ne[{}] is {}, must be positive (offset {})", d, t.ne[d], at);
      if (mul_overflows(n_elements, static_cast<uint64_t>(t.ne[d]), &n_elements) ||
          n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return data_loss("element count of ne {} overflows 64 bits", fmt::join(t.ne, ", "));
      }
    }
    t.n_elements = static_cast<int64_t>(n_elements);
    t.shape.assign(t.ne.rbegin(), t.ne.rend());

    at = pos_;
    uint32_t ggml_type = 0;
    RINFER_RETURN_IF_ERROR(read(&ggml_type, "ggml type"));
    std::optional<DType> dtype = dtype_from_ggml_type(ggml_type);
    if (!dtype) {
      return unsupported("ggml type {} ({}) is not supported (offset {})", ggml_type,
                         ggml_type_name(ggml_type), at);
    }
    t.dtype = *dtype;
    const auto block = static_cast<uint64_t>(dtype_traits(t.dtype).block_size);
    const auto ne0 = static_cast<uint64_t>(t.ne[0]);
    if (ne0 % block != 0) {
      return data_loss("row length ne[0] = {} is not a multiple of the {} block size {}", ne0,
                       dtype_name(t.dtype), block);
    }
    Result<uint64_t> row_bytes = dtype_row_bytes(t.dtype, ne0);
    if (!row_bytes.ok()) return data_loss("{}", row_bytes.status().message());
    if (mul_overflows(*row_bytes, n_elements / ne0, &t.nbytes)) {
      return data_loss("byte size of {} {} elements overflows 64 bits", n_elements,
                       dtype_name(t.dtype));
    }
    RINFER_RETURN_IF_ERROR(read(&t.offset, "data offset"));
    return ok_status();
  }

  Status parse_tensors(GgufFile& out, uint64_t n_tensors) {
    out.tensors_.reserve(std::min(n_tensors, kMaxReserve));
    out.tensor_index_.reserve(std::min(n_tensors, kMaxReserve));
    for (uint64_t i = 0; i < n_tensors; ++i) {
      const uint64_t at = pos_;
      GgufTensorInfo t;
      Status s = parse_tensor_info(t);
      if (!s.ok()) return s.with_context(fmt::format("tensor info {} of {}", i, n_tensors));
      auto [it, inserted] = out.tensor_index_.emplace(t.name, out.tensors_.size());
      if (!inserted) {
        return data_loss("duplicate tensor name {} (tensor infos {} and {}, offset {})",
                         quoted(t.name), it->second, i, at);
      }
      out.tensors_.push_back(std::move(t));
    }
    return ok_status();
  }

  Status place_tensors(GgufFile& out) {
    // The data section starts at the end of the tensor infos rounded up to the alignment.
    const uint64_t a = out.alignment_;
    out.data_offset_ = pos_ % a == 0 ? pos_ : pos_ + (a - pos_ % a);
    if (out.tensors_.empty()) return ok_status();
    if (out.data_offset_ > size_) {
      return data_loss(
          "padding after the tensor infos runs past the end of the file (data section at offset "
          "{} with alignment {}, file size {})",
          out.data_offset_, a, size_);
    }
    const uint64_t section = size_ - out.data_offset_;
    for (GgufTensorInfo& t : out.tensors_) {
      if (t.offset % a != 0) {
        return data_loss("tensor {}: data offset {} is not a multiple of the alignment {}",
                         quoted(t.name), t.offset, a);
      }
      uint64_t end = 0;
      if (t.offset > section || add_overflows(t.offset, t.nbytes, &end) || end > section) {
        return data_loss(
            "tensor {}: data [{}, +{}) runs past the end of the file (data section at offset {}, "
            "file size {})",
            quoted(t.name), t.offset, t.nbytes, out.data_offset_, size_);
      }
      t.data = data_ + out.data_offset_ + t.offset;
    }
    std::vector<const GgufTensorInfo*> order;
    order.reserve(out.tensors_.size());
    for (const GgufTensorInfo& t : out.tensors_) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const GgufTensorInfo* x, const GgufTensorInfo* y) {
      return x->offset < y->offset;
    });
    for (size_t i = 1; i < order.size(); ++i) {
      const GgufTensorInfo& p = *order[i - 1];
      const GgufTensorInfo& q = *order[i];
      if (p.offset + p.nbytes > q.offset) {
        return data_loss("tensors {} [{}, {}) and {} [{}, {}) overlap in the data section",
                         quoted(p.name), p.offset, p.offset + p.nbytes, quoted(q.name), q.offset,
                         q.offset + q.nbytes);
      }
    }
    return ok_status();
  }

  Status parse(GgufFile& out) {
    uint64_t n_tensors = 0;
    uint64_t n_kv = 0;
    RINFER_RETURN_IF_ERROR(parse_header(out, &n_tensors, &n_kv));
    RINFER_RETURN_IF_ERROR(parse_metadata(out, n_kv));
    RINFER_RETURN_IF_ERROR(parse_alignment(out));
    RINFER_RETURN_IF_ERROR(parse_tensors(out, n_tensors));
    return place_tensors(out);
  }

  std::shared_ptr<const MappedFile> file_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

Result<GgufFile> GgufFile::open(const std::string& path) {
  RINFER_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::open(path));
  return parse(std::move(file));
}

Result<GgufFile> GgufFile::parse(std::shared_ptr<const MappedFile> file) {
  if (file == nullptr) return invalid_argument("GgufFile::parse: null file");
  return GgufParser(std::move(file)).run();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

std::optional<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? v->as_uint() : std::nullopt;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? v->as_int() : std::nullopt;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? v->as_float() : std::nullopt;
}

std::optional<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? v->as_string() : std::nullopt;
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  return v ? v->as_bool() : std::nullopt;
}

namespace {

template <typename T>
Result<T> require(const GgufFile& f, std::string_view key,
                  std::optional<T> (GgufValue::*get)() const, std::string_view expected) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return not_found("{}: missing metadata key '{}'", f.path(), key);
  std::optional<T> r = (v->*get)();
  if (!r) {
    return data_loss("{}: metadata key '{}' is {} {}, expected {}", f.path(), key,
                     gguf_type_name(v->type()), v->to_display(4), expected);
  }
  return *r;
}

}  // namespace

Result<uint64_t> GgufFile::require_uint(std::string_view key) const {
  return require<uint64_t>(*this, key, &GgufValue::as_uint, "a non-negative integer");
}

Result<double> GgufFile::require_float(std::string_view key) const {
  return require<double>(*this, key, &GgufValue::as_float, "a number");
}

Result<std::string_view> GgufFile::require_string(std::string_view key) const {
  return require<std::string_view>(*this, key, &GgufValue::as_string, "a string");
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace rinfer
