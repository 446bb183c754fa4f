#include "formats/gguf_writer.h"

#include <bit>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/output_file.h"

namespace rinfer {

namespace {

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

uint64_t align_up(uint64_t n, uint64_t a) { return n % a == 0 ? n : n + (a - n % a); }

Status append_value(std::string& out, const GgufWriter::Value& v, int depth) {
  if (v.type == GgufType::kString) {
    put_string(out, v.bytes);
    return ok_status();
  }
  if (v.type != GgufType::kArray) {
    const size_t n = gguf_scalar_size(v.type);
    if (n == 0 || v.bytes.size() != n) {
      return invalid_argument("{} value has {} bytes", gguf_type_name(v.type), v.bytes.size());
    }
    out += v.bytes;
    return ok_status();
  }
  if (depth > kGgufMaxArrayDepth) {
    return invalid_argument("arrays nested deeper than {} levels", kGgufMaxArrayDepth);
  }
  put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
  put<uint64_t>(out, v.count);
  if (v.elem_type == GgufType::kString) {
    if (v.strings.size() != v.count) {
      return invalid_argument("array of {} strings has count {}", v.strings.size(), v.count);
    }
    for (const std::string& s : v.strings) put_string(out, s);
    return ok_status();
  }
  if (v.elem_type == GgufType::kArray) {
    if (v.items.size() != v.count) {
      return invalid_argument("array of {} arrays has count {}", v.items.size(), v.count);
    }
    for (size_t i = 0; i < v.items.size(); ++i) {
      if (v.items[i].type != GgufType::kArray) {
        return invalid_argument("element {} of an array of arrays is a {}", i,
                                gguf_type_name(v.items[i].type));
      }
      Status s = append_value(out, v.items[i], depth + 1);
      if (!s.ok()) return s.with_context(fmt::format("array element {}", i));
    }
    return ok_status();
  }
  const size_t n = gguf_scalar_size(v.elem_type);
  if (n == 0 || v.bytes.size() / n != v.count || v.bytes.size() % n != 0) {
    return invalid_argument("array of {} {} elements has {} bytes", v.count,
                            gguf_type_name(v.elem_type), v.bytes.size());
  }
  out += v.bytes;
  return ok_status();
}

}  // namespace

GgufWriter::Value GgufWriter::Value::string(std::string s) {
  Value r;
  r.type = GgufType::kString;
  r.bytes = std::move(s);
  return r;
}

GgufWriter::Value GgufWriter::Value::strings_array(std::vector<std::string> v) {
  Value r;
  r.type = GgufType::kArray;
  r.elem_type = GgufType::kString;
  r.count = v.size();
  r.strings = std::move(v);
  return r;
}

GgufWriter::Value GgufWriter::Value::arrays(std::vector<Value> items) {
  Value r;
  r.type = GgufType::kArray;
  r.elem_type = GgufType::kArray;
  r.count = items.size();
  r.items = std::move(items);
  return r;
}

GgufWriter::Value GgufWriter::Value::copy_of(const GgufValue& v) {
  Value r;
  r.type = v.type();
  if (v.type() == GgufType::kString) {
    r.bytes = std::string(*v.as_string());
  } else if (!v.is_array()) {
    // Re-encode the scalar from its converted value: exact for every type.
    switch (v.type()) {
      case GgufType::kF32: return of<float>(static_cast<float>(*v.as_float()));
      case GgufType::kF64: return of<double>(*v.as_float());
      case GgufType::kBool: return of<bool>(*v.as_bool());
      default: {
        const size_t n = gguf_scalar_size(v.type());
        const uint64_t bits = v.as_uint() ? *v.as_uint() : static_cast<uint64_t>(*v.as_int());
        r.bytes.assign(reinterpret_cast<const char*>(&bits), n);  // little-endian low bytes
      }
    }
  } else {
    r.elem_type = *v.array_type();
    r.count = v.array_size();
    if (r.elem_type == GgufType::kString) {
      for (std::string_view s : v.array_strings()) r.strings.emplace_back(s);
    } else if (r.elem_type == GgufType::kArray) {
      for (const GgufValue& item : v.array_values()) r.items.push_back(copy_of(item));
    } else {
      std::span<const uint8_t> b = v.array_bytes();
      r.bytes.assign(reinterpret_cast<const char*>(b.data()), b.size());
    }
  }
  return r;
}

void GgufWriter::set(std::string key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    metadata_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, metadata_.size());
  metadata_.emplace_back(std::move(key), std::move(value));
}

Status GgufWriter::check_tensor(const std::string& name, DType dtype,
                                const std::vector<int64_t>& shape, size_t nbytes,
                                uint32_t* ggml_type) const {
  if (name.empty() || name.size() > kGgufMaxTensorName) {
    return invalid_argument("tensor name '{}' must be 1..{} bytes", name, kGgufMaxTensorName);
  }
  if (tensor_index_.count(name) != 0) return invalid_argument("duplicate tensor '{}'", name);
  std::optional<uint32_t> t = ggml_type_from_dtype(dtype);
  if (!t) return unsupported("tensor '{}': GGUF cannot store {}", name, dtype_name(dtype));
  *ggml_type = *t;
  if (shape.empty() || shape.size() > static_cast<size_t>(kGgufMaxDims)) {
    return invalid_argument("tensor '{}': {} dims, expected 1..{}", name, shape.size(),
                            kGgufMaxDims);
  }
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return invalid_argument("tensor '{}': dimension {} is not positive", name, d);
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) ||
        n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return invalid_argument("tensor '{}': element count overflows", name);
    }
  }
  const auto row = static_cast<uint64_t>(shape.back());
  Result<uint64_t> row_bytes = dtype_row_bytes(dtype, row);
  if (!row_bytes.ok()) return row_bytes.status().with_context(fmt::format("tensor '{}'", name));
  uint64_t total = 0;
  if (__builtin_mul_overflow(*row_bytes, n / row, &total)) {
    return invalid_argument("tensor '{}': byte size overflows", name);
  }
  if (total != nbytes) {
    return invalid_argument("tensor '{}': {} {} elements need {} bytes, got {}", name, n,
                            dtype_name(dtype), total, nbytes);
  }
  return ok_status();
}

Status GgufWriter::add_tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                              std::string data) {
  Tensor t;
  RINFER_RETURN_IF_ERROR(check_tensor(name, dtype, shape, data.size(), &t.ggml_type));
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.owned = std::move(data);
  tensor_index_.emplace(t.name, tensors_.size());
  tensors_.push_back(std::move(t));
  return ok_status();
}

Status GgufWriter::add_tensor_view(std::string name, DType dtype, std::vector<int64_t> shape,
                                   std::span<const uint8_t> data) {
  Tensor t;
  RINFER_RETURN_IF_ERROR(check_tensor(name, dtype, shape, data.size(), &t.ggml_type));
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.view = data;
  t.is_view = true;
  tensor_index_.emplace(t.name, tensors_.size());
  tensors_.push_back(std::move(t));
  return ok_status();
}

Result<std::string> GgufWriter::header_bytes(std::vector<uint64_t>* offsets) const {
  if (version_ != 2 && version_ != 3) {
    return invalid_argument("GGUF version {} cannot be written (only 2 and 3)", version_);
  }
  if (!std::has_single_bit(alignment_)) {
    return invalid_argument("GGUF alignment {} is not a power of two", alignment_);
  }
  bool add_alignment_key = alignment_ != kGgufDefaultAlignment;
  auto it = index_.find("general.alignment");
  if (it != index_.end()) {
    const Value& v = metadata_[it->second].second;
    uint32_t a = 0;
    if (v.type == GgufType::kU32 && v.bytes.size() == 4) std::memcpy(&a, v.bytes.data(), 4);
    if (a != alignment_) {
      return invalid_argument("metadata 'general.alignment' must be u32 {} to match the writer",
                              alignment_);
    }
    add_alignment_key = false;
  }

  std::string out = "GGUF";
  put<uint32_t>(out, version_);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, metadata_.size() + (add_alignment_key ? 1 : 0));
  for (const auto& [key, value] : metadata_) {
    if (key.empty() || key.size() > kGgufMaxKeyLength) {
      return invalid_argument("metadata key '{}' must be 1..{} bytes", key, kGgufMaxKeyLength);
    }
    put_string(out, key);
    put<uint32_t>(out, static_cast<uint32_t>(value.type));
    Status s = append_value(out, value, 1);
    if (!s.ok()) return s.with_context(fmt::format("metadata key '{}'", key));
  }
  if (add_alignment_key) {
    put_string(out, "general.alignment");
    put<uint32_t>(out, static_cast<uint32_t>(GgufType::kU32));
    put<uint32_t>(out, alignment_);
  }

  offsets->clear();
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) put<int64_t>(out, *d);  // ne[]
    put<uint32_t>(out, t.ggml_type);
    put<uint64_t>(out, offset);
    offsets->push_back(offset);
    offset = align_up(offset + t.bytes().size(), alignment_);
  }
  out.resize(align_up(out.size(), alignment_), '\0');
  return out;
}

Result<std::string> GgufWriter::to_bytes() const {
  std::vector<uint64_t> offsets;
  RINFER_ASSIGN_OR_RETURN(std::string out, header_bytes(&offsets));
  const size_t data_offset = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    std::span<const uint8_t> b = tensors_[i].bytes();
    out.resize(data_offset + offsets[i], '\0');
    out.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  out.resize(data_offset + align_up(out.size() - data_offset, alignment_), '\0');
  return out;
}

Status GgufWriter::write(const std::string& path, const std::vector<std::string>& inputs) const {
  std::vector<uint64_t> offsets;
  RINFER_ASSIGN_OR_RETURN(std::string header, header_bytes(&offsets));
  RINFER_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::create(path, inputs));
  RINFER_RETURN_IF_ERROR(out.write(header));
  const std::string zeros(alignment_, '\0');
  uint64_t pos = 0;  // within the data section
  for (size_t i = 0; i < tensors_.size(); ++i) {
    RINFER_RETURN_IF_ERROR(out.write(std::string_view(zeros).substr(0, offsets[i] - pos)));
    RINFER_RETURN_IF_ERROR(out.write(tensors_[i].bytes()));
    pos = offsets[i] + tensors_[i].bytes().size();
  }
  RINFER_RETURN_IF_ERROR(
      out.write(std::string_view(zeros).substr(0, align_up(pos, alignment_) - pos)));
  return out.commit();  // on any error above, `out` removes its temporary file
}

}  // namespace rinfer
