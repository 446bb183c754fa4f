// GgufValue accessors and display, GGUF type names, and the GGML type id <-> DType mapping.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "formats/gguf.h"

namespace rinfer {

namespace {

struct GgmlTypeEntry {
  std::string_view name;
  std::optional<DType> dtype;
};

// Indexed by GGML type id (ggml.h's enum ggml_type).
constexpr std::array<GgmlTypeEntry, 40> kGgmlTypes = {{
    {"f32", DType::kF32},
    {"f16", DType::kF16},
    {"q4_0", DType::kQ4_0},
    {"q4_1", DType::kQ4_1},
    {"q4_2 (removed)", std::nullopt},
    {"q4_3 (removed)", std::nullopt},
    {"q5_0", DType::kQ5_0},
    {"q5_1", DType::kQ5_1},
    {"q8_0", DType::kQ8_0},
    {"q8_1", std::nullopt},
    {"q2_k", DType::kQ2_K},
    {"q3_k", DType::kQ3_K},
    {"q4_k", DType::kQ4_K},
    {"q5_k", DType::kQ5_K},
    {"q6_k", DType::kQ6_K},
    {"q8_k", DType::kQ8_K},
    {"iq2_xxs", std::nullopt},
    {"iq2_xs", std::nullopt},
    {"iq3_xxs", std::nullopt},
    {"iq1_s", std::nullopt},
    {"iq4_nl", std::nullopt},
    {"iq3_s", std::nullopt},
    {"iq2_s", std::nullopt},
    {"iq4_xs", std::nullopt},
    {"i8", DType::kI8},
    {"i16", DType::kI16},
    {"i32", DType::kI32},
    {"i64", DType::kI64},
    {"f64", DType::kF64},
    {"iq1_m", std::nullopt},
    {"bf16", DType::kBF16},
    {"q4_0_4_4 (removed)", std::nullopt},
    {"q4_0_4_8 (removed)", std::nullopt},
    {"q4_0_8_8 (removed)", std::nullopt},
    {"tq1_0", std::nullopt},
    {"tq2_0", std::nullopt},
    {"iq4_nl_4_4 (removed)", std::nullopt},
    {"iq4_nl_4_8 (removed)", std::nullopt},
    {"iq4_nl_8_8 (removed)", std::nullopt},
    {"mxfp4", std::nullopt},
}};

// Appends s quoted, with control bytes, quotes, backslashes and invalid UTF-8 escaped, cut
// after max_bytes bytes of input.
void append_quoted(std::string& out, std::string_view s, size_t max_bytes) {
  out += '"';
  size_t i = 0;
  while (i < s.size() && i < max_bytes) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (c == '\t') {
      out += "\\t";
      ++i;
    } else if (c == '\r') {
      out += "\\r";
      ++i;
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      // A UTF-8 sequence: copy it whole when valid, else escape the lead byte.
      size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
      bool valid = len != 0 && i + len <= s.size() && c >= 0xc2 && c <= 0xf4;
      for (size_t k = 1; valid && k < len; ++k) {
        valid = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
      }
      if (valid) {
        out.append(s.substr(i, len));
        i += len;
      } else {
        out += fmt::format("\\x{:02x}", c);
        ++i;
      }
    }
  }
  out += '"';
  if (i < s.size()) out += fmt::format("... ({} bytes)", s.size());
}

constexpr size_t kMaxDisplayStringBytes = 200;

std::string display_scalar(GgufType t, uint64_t bits) {
  switch (t) {
    case GgufType::kBool: return bits != 0 ? "true" : "false";
    case GgufType::kF32: {
      const auto u = static_cast<uint32_t>(bits);
      float f;
      std::memcpy(&f, &u, sizeof(f));
      return fmt::format("{}", f);
    }
    case GgufType::kF64: {
      double d;
      std::memcpy(&d, &bits, sizeof(d));
      return fmt::format("{}", d);
    }
    default:
      if (gguf_is_signed_integer(t)) return fmt::format("{}", static_cast<int64_t>(bits));
      return fmt::format("{}", bits);
  }
}

}  // namespace

std::string gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return fmt::format("type {}", static_cast<uint32_t>(t));
}

size_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool: return 1;
    case GgufType::kU16:
    case GgufType::kI16: return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32: return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64: return 8;
    case GgufType::kString:
    case GgufType::kArray: return 0;
  }
  return 0;
}

bool gguf_is_integer(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64: return true;
    default: return false;
  }
}

bool gguf_is_signed_integer(GgufType t) {
  return t == GgufType::kI8 || t == GgufType::kI16 || t == GgufType::kI32 || t == GgufType::kI64;
}

std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type) {
  if (ggml_type >= kGgmlTypes.size()) return std::nullopt;
  return kGgmlTypes[ggml_type].dtype;
}

std::optional<uint32_t> ggml_type_from_dtype(DType dtype) {
  for (size_t i = 0; i < kGgmlTypes.size(); ++i) {
    if (kGgmlTypes[i].dtype == dtype) return static_cast<uint32_t>(i);
  }
  return std::nullopt;
}

std::string_view ggml_type_name(uint32_t ggml_type) {
  if (ggml_type >= kGgmlTypes.size()) return "unknown";
  return kGgmlTypes[ggml_type].name;
}

uint64_t GgufValue::load_element(GgufType t, const uint8_t* data, uint64_t i) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kBool: return data[i];
    case GgufType::kI8: {
      int8_t v;
      std::memcpy(&v, data + i, 1);
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    }
    case GgufType::kU16: {
      uint16_t v;
      std::memcpy(&v, data + 2 * i, 2);
      return v;
    }
    case GgufType::kI16: {
      int16_t v;
      std::memcpy(&v, data + 2 * i, 2);
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    }
    case GgufType::kU32:
    case GgufType::kF32: {
      uint32_t v;
      std::memcpy(&v, data + 4 * i, 4);
      return v;
    }
    case GgufType::kI32: {
      int32_t v;
      std::memcpy(&v, data + 4 * i, 4);
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    }
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64: {
      uint64_t v;
      std::memcpy(&v, data + 8 * i, 8);
      return v;
    }
    case GgufType::kString:
    case GgufType::kArray: break;
  }
  return 0;
}

std::optional<uint64_t> GgufValue::as_uint() const { return convert<uint64_t>(type_, bits_); }
std::optional<int64_t> GgufValue::as_int() const { return convert<int64_t>(type_, bits_); }
std::optional<double> GgufValue::as_float() const { return convert<double>(type_, bits_); }
std::optional<bool> GgufValue::as_bool() const { return convert<bool>(type_, bits_); }

std::optional<std::string_view> GgufValue::as_string() const {
  if (type_ != GgufType::kString) return std::nullopt;
  return str_;
}

std::optional<GgufType> GgufValue::array_type() const {
  if (!is_array()) return std::nullopt;
  return elem_type_;
}

std::span<const uint8_t> GgufValue::array_bytes() const {
  if (!is_numeric_array()) return {};
  return {array_data_, static_cast<size_t>(count_) * gguf_scalar_size(elem_type_)};
}

std::string GgufValue::to_display(size_t max_items) const {
  std::string out;
  if (type_ == GgufType::kString) {
    append_quoted(out, str_, kMaxDisplayStringBytes);
    return out;
  }
  if (!is_array()) return display_scalar(type_, bits_);
  out += '[';
  const uint64_t shown = std::min<uint64_t>(count_, max_items);
  for (uint64_t i = 0; i < shown; ++i) {
    if (i != 0) out += ", ";
    if (elem_type_ == GgufType::kString) {
      append_quoted(out, strings_[i], kMaxDisplayStringBytes);
    } else if (elem_type_ == GgufType::kArray) {
      out += values_[i].to_display(max_items);
    } else {
      out += display_scalar(elem_type_, load_element(elem_type_, array_data_, i));
    }
  }
  if (shown < count_) out += fmt::format("{}... ({} items)", shown == 0 ? "" : ", ", count_);
  out += ']';
  return out;
}

}  // namespace rinfer
