// Tensor: a typed, shaped, strided view over a buffer.
//
// Shapes are outermost first (row-major): a weight matrix [n_out, n_in] has n_in contiguous.
// GGUF lists dims innermost first (ne[0]); readers reverse them. Strides count elements. For
// block-quantized dtypes the innermost dim must stay contiguous and whole-block aligned, so
// views of those may slice or reshape outer dims only.
//
// Buffers are shared: views and slices alias the bytes of the tensor they came from and keep
// its buffer alive. Tensors made over a memory-mapped file are read-only.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "rinfer/status.h"

namespace rinfer {

inline constexpr int kMaxDims = 6;

// A small fixed-capacity list of dims (or strides).
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> d);
  explicit Dims(std::span<const int64_t> d);

  int size() const { return n_; }
  int64_t operator[](int i) const { return v_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return v_[static_cast<size_t>(i)]; }
  const int64_t* begin() const { return v_.data(); }
  const int64_t* end() const { return v_.data() + n_; }
  bool operator==(const Dims& o) const;
  std::string to_string() const;  // "[2, 3, 4]"

 private:
  std::array<int64_t, kMaxDims> v_{};
  int n_ = 0;
};

// The bytes behind one or more tensors.
struct Buffer {
  void* data = nullptr;
  uint64_t nbytes = 0;
  Device device;
  bool read_only = false;
  std::shared_ptr<const void> owner;  // frees the bytes (or keeps a mapping alive)
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  // A new contiguous CPU tensor, uninitialized (64-byte aligned, from `allocator`, which must
  // outlive the tensor).
  static Result<Tensor> empty(const Dims& shape, DType dtype,
                              HostAllocator& allocator = default_host_allocator());
  // A contiguous CPU tensor copied from `values` (f32 only; convenience for tests and tools).
  static Result<Tensor> from_f32(const Dims& shape, std::span<const float> values);

  // A read-only, zero-copy tensor over existing bytes (e.g. an mmap'd weight); `keepalive`
  // keeps them valid. `nbytes` is the size of the region, checked against the shape.
  static Result<Tensor> wrap(const void* data, uint64_t nbytes, const Dims& shape, DType dtype,
                             Device device, std::shared_ptr<const void> keepalive);
  // The same over writable bytes (e.g. a device activation buffer): mutable_data() works.
  static Result<Tensor> wrap_mutable(void* data, uint64_t nbytes, const Dims& shape, DType dtype,
                                     Device device, std::shared_ptr<const void> keepalive);

  bool defined() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Dims& shape() const { return shape_; }
  const Dims& strides() const { return strides_; }
  int ndim() const { return shape_.size(); }
  int64_t dim(int i) const;  // negative counts from the end
  int64_t numel() const;
  Device device() const { return buffer_ ? buffer_->device : Device::cpu(); }
  bool read_only() const { return buffer_ && buffer_->read_only; }
  bool is_contiguous() const;
  // Bytes spanned by the elements when contiguous.
  uint64_t nbytes() const;
  uint64_t byte_offset() const { return offset_; }

  const void* data() const;
  // nullptr for read-only tensors.
  void* mutable_data();
  template <typename T>
  const T* data_as() const {
    return static_cast<const T*>(data());
  }
  template <typename T>
  T* mutable_data_as() {
    return static_cast<T*>(mutable_data());
  }

  // Same elements, new shape; one dim may be -1. Needs a contiguous tensor.
  Result<Tensor> view(const Dims& shape) const;
  // Elements [start, end) of dim `d`.
  Result<Tensor> slice(int d, int64_t start, int64_t end) const;
  // Swaps two dims (a strided view). Scalar dtypes only.
  Result<Tensor> transpose(int d0, int d1) const;
  // A contiguous CPU copy (this tensor's bytes are shared when already contiguous and
  // `force_copy` is false).
  Result<Tensor> contiguous(bool force_copy = false) const;
  // A contiguous f32 CPU copy, dequantizing block formats.
  Result<Tensor> to_f32() const;

  std::string to_string() const;  // "q4_k [576, 49152] cpu"

 private:
  Result<int> normalize_dim(int d) const;

  std::shared_ptr<Buffer> buffer_;
  uint64_t offset_ = 0;  // bytes from buffer_->data to element 0
  DType dtype_ = DType::kF32;
  Dims shape_;
  Dims strides_;
};

// Contiguous strides of a shape (elements).
Dims contiguous_strides(const Dims& shape);
// Product of dims with overflow and negativity checks.
Result<int64_t> checked_numel(const Dims& shape);

}  // namespace rinfer
