// GGUF (v2 or v3) writer: collects metadata and tensors, then produces the file bytes or writes
// a file (core/output_file.h's AtomicFile: a temp file renamed into place). Tensors are laid out in
// the order added, each at an offset aligned to `alignment` and padded after, as ggml and gguf-py
// do.
//
//   GgufWriter w;                                   // v3, alignment 32
//   w.set("general.architecture", GgufWriter::Value::string("llama"));
//   w.set("llama.block_count", GgufWriter::Value::of<uint32_t>(30));
//   RINFER_RETURN_IF_ERROR(w.add_tensor("tok.weight", DType::kQ8_0, {49152, 576}, bytes));
//   RINFER_RETURN_IF_ERROR(w.write("out.gguf"));
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "formats/gguf.h"
#include "rinfer/status.h"

namespace rinfer {

class GgufWriter {
 public:
  // An owned metadata value (scalar, string, or array of scalars / strings / arrays).
  struct Value {
    GgufType type = GgufType::kU8;
    GgufType elem_type = GgufType::kU8;  // arrays
    uint64_t count = 0;                  // arrays
    std::string bytes;                   // scalar or numeric array: LE bytes; string: content
    std::vector<std::string> strings;    // array of strings
    std::vector<Value> items;            // array of arrays (each item has type kArray)

    template <typename T>
    static Value of(T v) {
      Value r;
      r.type = gguf_type_of<T>();
      if constexpr (std::is_same_v<T, bool>) {
        r.bytes.assign(1, v ? '\1' : '\0');
      } else {
        r.bytes.assign(reinterpret_cast<const char*>(&v), sizeof(v));
      }
      return r;
    }
    static Value string(std::string s);
    template <typename T>
    static Value array(std::span<const T> v) {
      Value r;
      r.type = GgufType::kArray;
      r.elem_type = gguf_type_of<T>();
      r.count = v.size();
      for (const T& x : v) r.bytes += of<T>(x).bytes;
      return r;
    }
    template <typename T>
    static Value array(const std::vector<T>& v) {  // also std::vector<bool>
      Value r;
      r.type = GgufType::kArray;
      r.elem_type = gguf_type_of<T>();
      r.count = v.size();
      for (T x : v) r.bytes += of<T>(x).bytes;
      return r;
    }
    static Value strings_array(std::vector<std::string> v);
    // An array whose elements are arrays (checked when the file is produced).
    static Value arrays(std::vector<Value> items);
    // An owned copy of a value read from a file (for copying metadata across).
    static Value copy_of(const GgufValue& v);
  };

  // version 2 or 3; alignment a power of two (checked when the file is produced). An alignment
  // other than 32 is recorded as `general.alignment` (u32) unless that key is set to it.
  explicit GgufWriter(uint32_t version = 3, uint32_t alignment = 32)
      : version_(version), alignment_(alignment) {}

  // Adds or replaces (keeping its position) a metadata entry.
  void set(std::string key, Value value);
  bool has(std::string_view key) const { return index_.count(std::string(key)) != 0; }

  // Adds a tensor: shape outermost first, data its rows packed (ggml layout for block
  // formats). Checks the name (1..63 bytes, unique), the dtype, the shape and the byte size.
  Status add_tensor(std::string name, DType dtype, std::vector<int64_t> shape, std::string data);
  // Like add_tensor without copying: `data` must outlive the write.
  Status add_tensor_view(std::string name, DType dtype, std::vector<int64_t> shape,
                         std::span<const uint8_t> data);

  size_t tensor_count() const { return tensors_.size(); }

  // The whole file in memory.
  Result<std::string> to_bytes() const;
  // Writes `path` through an AtomicFile (core/output_file.h: the path checked as an output, a
  // temporary file next to the target renamed over it, a symlink written through, nothing left
  // behind on error); `inputs` are files the output must not be. I/O errors name the path.
  Status write(const std::string& path, const std::vector<std::string>& inputs = {}) const;

 private:
  struct Tensor {
    std::string name;
    DType dtype;
    uint32_t ggml_type;
    std::vector<int64_t> shape;
    std::string owned;              // add_tensor
    std::span<const uint8_t> view;  // add_tensor_view
    bool is_view = false;
    std::span<const uint8_t> bytes() const {
      return is_view ? view
                     : std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(owned.data()),
                                                owned.size());
    }
  };

  Status check_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                      size_t nbytes, uint32_t* ggml_type) const;
  // Header, metadata, tensor infos and the padding up to the data section; offsets filled in.
  Result<std::string> header_bytes(std::vector<uint64_t>* offsets) const;

  uint32_t version_;
  uint32_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace rinfer
