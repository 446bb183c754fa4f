// GGUF (versions 2 and 3) reader: a strict, zero-copy view over a memory-mapped file.
//
// Layout (little-endian):
//   magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x { string key, u32 value_type, value },
//   tensor_count x { string name, u32 n_dims, i64 ne[n_dims], u32 ggml_type, u64 offset },
//   padding to `general.alignment` (default 32), then the data section; tensor offsets are
//   relative to the data section and multiples of the alignment.
// A string is a u64 byte length and the bytes (no terminator); an array is a u32 element type,
// a u64 count and the elements.
//
// Everything a GgufFile hands out (string_views, array data, tensor data) points into the
// mapping; keep the GgufFile (or its file()) alive while using them. Parsing validates every
// length and offset before it is used, so a malformed file gives a Status naming the file, the
// problem and where it is, never a crash or a huge allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "rinfer/status.h"

namespace rinfer {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

inline constexpr uint32_t kGgufTypeCount = 13;
inline constexpr uint64_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;            // GGML_MAX_DIMS
inline constexpr size_t kGgufMaxTensorName = 63;  // GGML_MAX_NAME - 1 (ggml keeps a NUL)
inline constexpr size_t kGgufMaxKeyLength = 65535;
inline constexpr int kGgufMaxArrayDepth = 8;  // arrays nested deeper are rejected

// "u8", "i32", "f32", "bool", "string", "array", ...; "type N" for unknown values.
std::string gguf_type_name(GgufType t);
// Bytes of one fixed-size value in the file; 0 for strings, arrays and unknown types.
size_t gguf_scalar_size(GgufType t);
bool gguf_is_integer(GgufType t);
bool gguf_is_signed_integer(GgufType t);

// The GgufType that stores a C++ arithmetic type (uint32_t -> kU32, float -> kF32, ...).
template <typename T>
constexpr GgufType gguf_type_of() {
  using U = std::remove_cv_t<T>;
  static_assert(std::is_arithmetic_v<U>, "no GGUF type for this C++ type");
  if constexpr (std::is_same_v<U, bool>) {
    return GgufType::kBool;
  } else if constexpr (std::is_floating_point_v<U>) {
    static_assert(sizeof(U) == 4 || sizeof(U) == 8, "GGUF stores f32 and f64 only");
    return sizeof(U) == 4 ? GgufType::kF32 : GgufType::kF64;
  } else {
    constexpr bool s = std::is_signed_v<U>;
    switch (sizeof(U)) {
      case 1: return s ? GgufType::kI8 : GgufType::kU8;
      case 2: return s ? GgufType::kI16 : GgufType::kU16;
      case 4: return s ? GgufType::kI32 : GgufType::kU32;
      default: return s ? GgufType::kI64 : GgufType::kU64;
    }
  }
}

// GGML tensor type ids <-> DType. Ids without a DType (IQ formats, Q8_1, the removed 4/5,
// unknown ids) give nullopt; so do DTypes GGUF cannot store (bool, u8, f8).
std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type);
std::optional<uint32_t> ggml_type_from_dtype(DType dtype);
// "q4_k", "iq2_xxs", "q4_2 (removed)", "unknown" ... for messages.
std::string_view ggml_type_name(uint32_t ggml_type);

// One metadata value: a scalar, a string, or an array (numeric, of strings, or of arrays).
class GgufValue {
 public:
  GgufValue() = default;

  GgufType type() const { return type_; }
  bool is_array() const { return type_ == GgufType::kArray; }

  // Scalars, type-checked; nullopt on a type mismatch or a value that does not fit.
  std::optional<uint64_t> as_uint() const;  // any integer type holding a value >= 0
  std::optional<int64_t> as_int() const;    // any integer type holding a value <= INT64_MAX
  std::optional<double> as_float() const;   // f32, f64, or any integer type
  std::optional<std::string_view> as_string() const;
  std::optional<bool> as_bool() const;

  // Arrays. array_size() is 0 and array_type() nullopt for non-arrays.
  std::optional<GgufType> array_type() const;
  uint64_t array_size() const { return is_array() ? count_ : 0; }
  // Elements of an array of strings (empty otherwise).
  std::span<const std::string_view> array_strings() const { return strings_; }
  // Elements of an array of arrays (empty otherwise).
  std::span<const GgufValue> array_values() const { return values_; }
  // The raw little-endian elements of a numeric or bool array (empty otherwise).
  std::span<const uint8_t> array_bytes() const;

  // Element i of a numeric/bool array converted like the scalar accessors (integers must fit
  // in T; floats accept f32/f64/integers; bool only bool). nullopt if i is out of range.
  template <typename T>
  std::optional<T> array_element(uint64_t i) const {
    if (!is_numeric_array() || i >= count_) return std::nullopt;
    return convert<T>(elem_type_, load_element(elem_type_, array_data_, i));
  }
  // All elements, or nullopt when any one does not convert (see array_element).
  template <typename T>
  std::optional<std::vector<T>> to_vector() const {
    if (!is_numeric_array()) return std::nullopt;
    if (count_ != 0 && !convert<T>(elem_type_, 0).has_value()) return std::nullopt;
    std::vector<T> out;
    out.reserve(count_);
    for (uint64_t i = 0; i < count_; ++i) {
      std::optional<T> v = convert<T>(elem_type_, load_element(elem_type_, array_data_, i));
      if (!v) return std::nullopt;
      out.push_back(*v);
    }
    return out;
  }

  // Human-readable value: strings quoted and escaped, arrays cut after max_items elements
  // ("[1, 2, 3, ... (262144 items)]").
  std::string to_display(size_t max_items = 8) const;

 private:
  friend class GgufParser;

  bool is_numeric_array() const { return is_array() && array_data_ != nullptr; }
  // Reads element i of a numeric array as raw bits: sign-extended for signed integers, the
  // IEEE bits for floats.
  static uint64_t load_element(GgufType t, const uint8_t* data, uint64_t i);

  template <typename T>
  static std::optional<T> convert(GgufType t, uint64_t bits);

  GgufType type_ = GgufType::kU8;
  GgufType elem_type_ = GgufType::kU8;   // arrays
  uint64_t bits_ = 0;                    // scalars, see load_element
  uint64_t count_ = 0;                   // arrays
  std::string_view str_;                 // kString
  const uint8_t* array_data_ = nullptr;  // numeric and bool arrays (never null), into the mapping
  std::vector<std::string_view> strings_;
  std::vector<GgufValue> values_;
};

struct GgufTensorInfo {
  std::string_view name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // outermost first: GGUF ne[] reversed
  std::vector<int64_t> ne;     // GGUF order, ne[0] innermost (contiguous)
  int64_t n_elements = 0;
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping
};

class GgufFile {
 public:
  static Result<GgufFile> open(const std::string& path);
  static Result<GgufFile> parse(std::shared_ptr<const MappedFile> file);

  uint32_t version() const { return version_; }
  const std::string& path() const { return file_->path(); }

  // In file order.
  const std::vector<std::pair<std::string_view, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  // nullopt when the key is missing or its value does not convert (see GgufValue).
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<std::string_view> get_string(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  // Like get_*, but a missing key or wrong type is an error naming the file and the key.
  Result<uint64_t> require_uint(std::string_view key) const;
  Result<double> require_float(std::string_view key) const;
  Result<std::string_view> require_string(std::string_view key) const;

  // In file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  uint64_t alignment() const { return alignment_; }
  // Absolute file offset of the data section.
  uint64_t data_offset() const { return data_offset_; }
  const std::shared_ptr<const MappedFile>& file() const { return file_; }

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string_view, GgufValue>> metadata_;
  std::unordered_map<std::string_view, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

// ---- implementation details of the templates above ----

template <typename T>
std::optional<T> GgufValue::convert(GgufType t, uint64_t bits) {
  static_assert(std::is_arithmetic_v<T>, "GgufValue converts to arithmetic types only");
  if constexpr (std::is_same_v<T, bool>) {
    if (t != GgufType::kBool) return std::nullopt;
    return bits != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if (gguf_is_signed_integer(t)) {
      const auto s = static_cast<int64_t>(bits);
      if (!std::in_range<T>(s)) return std::nullopt;
      return static_cast<T>(s);
    }
    if (gguf_is_integer(t)) {
      if (!std::in_range<T>(bits)) return std::nullopt;
      return static_cast<T>(bits);
    }
    return std::nullopt;
  } else {
    if (t == GgufType::kF32) {
      const auto u = static_cast<uint32_t>(bits);
      float f;
      static_assert(sizeof(f) == sizeof(u));
      std::memcpy(&f, &u, sizeof(f));
      return static_cast<T>(f);
    }
    if (t == GgufType::kF64) {
      double d;
      static_assert(sizeof(d) == sizeof(bits));
      std::memcpy(&d, &bits, sizeof(d));
      return static_cast<T>(d);
    }
    if (gguf_is_signed_integer(t)) return static_cast<T>(static_cast<int64_t>(bits));
    if (gguf_is_integer(t)) return static_cast<T>(bits);
    return std::nullopt;
  }
}

}  // namespace rinfer
