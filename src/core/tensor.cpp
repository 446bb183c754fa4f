#include "core/tensor.h"

#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"

namespace rinfer {

// ---- Dims -------------------------------------------------------------------------------------

Dims::Dims(std::initializer_list<int64_t> d)
    : Dims(std::span<const int64_t>(d.begin(), d.size())) {}

Dims::Dims(std::span<const int64_t> d) {
  // Callers validate rank first (checked_numel / make); clamp rather than overflow.
  n_ = static_cast<int>(std::min<size_t>(d.size(), kMaxDims));
  for (int i = 0; i < n_; ++i) v_[static_cast<size_t>(i)] = d[static_cast<size_t>(i)];
}

bool Dims::operator==(const Dims& o) const {
  if (n_ != o.n_) return false;
  for (int i = 0; i < n_; ++i) {
    if ((*this)[i] != o[i]) return false;
  }
  return true;
}

std::string Dims::to_string() const {
  std::string s = "[";
  for (int i = 0; i < n_; ++i) {
    if (i) s += ", ";
    s += std::to_string((*this)[i]);
  }
  return s + "]";
}

Dims contiguous_strides(const Dims& shape) {
  Dims s = shape;
  int64_t acc = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

Result<int64_t> checked_numel(const Dims& shape) {
  int64_t n = 1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) return invalid_argument("shape {}: negative dim {}", shape.to_string(), i);
    if (shape[i] != 0 && n > std::numeric_limits<int64_t>::max() / shape[i]) {
      return out_of_range("shape {}: element count overflows 64 bits", shape.to_string());
    }
    n *= shape[i];
  }
  return n;
}

// ---- Tensor -----------------------------------------------------------------------------------

namespace {

// Bytes of `elems` consecutive elements; `elems` is whole blocks for block formats.
uint64_t elem_bytes(DType t, int64_t elems) {
  const DTypeTraits& tr = dtype_traits(t);
  return static_cast<uint64_t>(elems / tr.block_size) * static_cast<uint64_t>(tr.block_bytes);
}

Status check_shape(const Dims& shape, DType dtype) {
  RINFER_ASSIGN_OR_RETURN(const int64_t n, checked_numel(shape));
  const int64_t bs = dtype_traits(dtype).block_size;
  const int64_t inner = shape.size() > 0 ? shape[shape.size() - 1] : 1;
  if (bs > 1 && inner % bs != 0) {
    return invalid_argument("shape {}: innermost dim {} is not a multiple of the {} block size {}",
                            shape.to_string(), inner, dtype_name(dtype), bs);
  }
  auto bytes = dtype_row_bytes(dtype, static_cast<uint64_t>(n));
  return bytes.ok() ? ok_status() : bytes.status().with_context("shape " + shape.to_string());
}

}  // namespace

Result<Tensor> Tensor::empty(const Dims& shape, DType dtype, HostAllocator& allocator) {
  RINFER_RETURN_IF_ERROR(check_shape(shape, dtype));
  RINFER_ASSIGN_OR_RETURN(const int64_t n, checked_numel(shape));
  const uint64_t bytes = elem_bytes(dtype, n);
  if (bytes > std::numeric_limits<size_t>::max() / 2) {
    return out_of_memory("tensor {} {} needs {} bytes", dtype_name(dtype), shape.to_string(),
                         bytes);
  }
  RINFER_ASSIGN_OR_RETURN(void* p, allocator.allocate(static_cast<size_t>(bytes)));
  HostAllocator* a = &allocator;
  auto buf = std::make_shared<Buffer>();
  buf->data = p;
  buf->nbytes = bytes;
  buf->owner = std::shared_ptr<void>(p, [a, bytes](void* q) { a->deallocate(q, bytes); });
  Tensor t;
  t.buffer_ = std::move(buf);
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Result<Tensor> Tensor::from_f32(const Dims& shape, std::span<const float> values) {
  RINFER_ASSIGN_OR_RETURN(Tensor t, empty(shape, DType::kF32));
  if (static_cast<uint64_t>(t.numel()) != values.size()) {
    return invalid_argument("shape {} has {} elements but {} values were given", shape.to_string(),
                            t.numel(), values.size());
  }
  if (!values.empty()) std::memcpy(t.mutable_data(), values.data(), values.size_bytes());
  return t;
}

Result<Tensor> Tensor::wrap(const void* data, uint64_t nbytes, const Dims& shape, DType dtype,
                            Device device, std::shared_ptr<const void> keepalive) {
  RINFER_RETURN_IF_ERROR(check_shape(shape, dtype));
  RINFER_ASSIGN_OR_RETURN(const int64_t n, checked_numel(shape));
  const uint64_t need = elem_bytes(dtype, n);
  if (need > nbytes) {
    return out_of_range("tensor {} {} needs {} bytes but the region holds {}", dtype_name(dtype),
                        shape.to_string(), need, nbytes);
  }
  if (data == nullptr && need > 0) return invalid_argument("wrap: null data for {} bytes", need);
  auto buf = std::make_shared<Buffer>();
  buf->data = const_cast<void*>(data);
  buf->nbytes = nbytes;
  buf->device = device;
  buf->read_only = true;
  buf->owner = std::move(keepalive);
  Tensor t;
  t.buffer_ = std::move(buf);
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

Result<Tensor> Tensor::wrap_mutable(void* data, uint64_t nbytes, const Dims& shape, DType dtype,
                                    Device device, std::shared_ptr<const void> keepalive) {
  RINFER_ASSIGN_OR_RETURN(Tensor t, wrap(data, nbytes, shape, dtype, device, std::move(keepalive)));
  t.buffer_->read_only = false;
  return t;
}

int64_t Tensor::dim(int i) const {
  if (i < 0) i += ndim();
  return (i >= 0 && i < ndim()) ? shape_[i] : 1;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

uint64_t Tensor::nbytes() const { return elem_bytes(dtype_, numel()); }

const void* Tensor::data() const {
  if (!buffer_ || buffer_->data == nullptr) return nullptr;
  return static_cast<const uint8_t*>(buffer_->data) + offset_;
}

void* Tensor::mutable_data() {
  if (!buffer_ || buffer_->read_only || buffer_->data == nullptr) return nullptr;
  return static_cast<uint8_t*>(buffer_->data) + offset_;
}

Result<int> Tensor::normalize_dim(int d) const {
  const int orig = d;
  if (d < 0) d += ndim();
  if (d < 0 || d >= ndim()) {
    return out_of_range("dim {} is out of range for a tensor of rank {}", orig, ndim());
  }
  return d;
}

Result<Tensor> Tensor::view(const Dims& shape) const {
  if (!defined()) return invalid_argument("view of an undefined tensor");
  if (!is_contiguous()) {
    return invalid_argument("view {} of non-contiguous tensor {}", shape.to_string(), to_string());
  }
  Dims s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) return invalid_argument("view {}: more than one -1", shape.to_string());
      infer = i;
    } else if (s[i] < 0) {
      return invalid_argument("view {}: negative dim", shape.to_string());
    } else {
      if (s[i] != 0 && known > std::numeric_limits<int64_t>::max() / s[i]) {
        return out_of_range("view {}: element count overflows", shape.to_string());
      }
      known *= s[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0) {
      return invalid_argument("view {}: cannot infer -1 for {} elements", shape.to_string(),
                              numel());
    }
    s[infer] = numel() / known;
  } else if (known != numel()) {
    return invalid_argument("view {} has {} elements, tensor {} has {}", shape.to_string(), known,
                            shape_.to_string(), numel());
  }
  RINFER_RETURN_IF_ERROR(check_shape(s, dtype_));
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Result<Tensor> Tensor::slice(int d, int64_t start, int64_t end) const {
  if (!defined()) return invalid_argument("slice of an undefined tensor");
  RINFER_ASSIGN_OR_RETURN(d, normalize_dim(d));
  if (start < 0 || end < start || end > shape_[d]) {
    return out_of_range("slice [{}, {}) of dim {} (size {}) of {}", start, end, d, shape_[d],
                        to_string());
  }
  const int64_t bs = dtype_traits(dtype_).block_size;
  if (bs > 1 && d == ndim() - 1 && (start % bs != 0 || end % bs != 0)) {
    return invalid_argument(
        "slice [{}, {}) of the innermost dim of a {} tensor must be whole "
        "blocks of {}",
        start, end, dtype_name(dtype_), bs);
  }
  Tensor t = *this;
  t.offset_ += elem_bytes(dtype_, start * strides_[d]);
  t.shape_[d] = end - start;
  return t;
}

Result<Tensor> Tensor::transpose(int d0, int d1) const {
  if (!defined()) return invalid_argument("transpose of an undefined tensor");
  if (is_quantized(dtype_)) {
    return unsupported("transpose of block-quantized {} tensor", dtype_name(dtype_));
  }
  RINFER_ASSIGN_OR_RETURN(d0, normalize_dim(d0));
  RINFER_ASSIGN_OR_RETURN(d1, normalize_dim(d1));
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Result<Tensor> Tensor::contiguous(bool force_copy) const {
  if (!defined()) return invalid_argument("contiguous copy of an undefined tensor");
  if (!device().is_cpu()) {
    return unsupported("contiguous copy of a {} tensor on the host", device().to_string());
  }
  if (is_contiguous() && !force_copy) return *this;
  RINFER_ASSIGN_OR_RETURN(Tensor out, empty(shape_, dtype_));
  if (numel() == 0) return out;
  auto* dst = static_cast<uint8_t*>(out.mutable_data());
  const auto* src = static_cast<const uint8_t*>(buffer_->data) + offset_;
  // Copy runs along the innermost dim: whole rows of blocks for block formats, or single
  // elements when the innermost stride is not 1.
  const int nd = ndim();
  const int64_t inner = nd > 0 ? shape_[nd - 1] : 1;
  const int64_t inner_stride = nd > 0 ? strides_[nd - 1] : 1;
  const uint64_t esize = static_cast<uint64_t>(dtype_traits(dtype_).block_bytes);
  const int64_t rows = inner == 0 ? 0 : numel() / inner;
  std::vector<int64_t> idx(static_cast<size_t>(std::max(nd - 1, 0)), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t elem = 0;  // element offset of the row start
    for (int i = 0; i < nd - 1; ++i) elem += idx[static_cast<size_t>(i)] * strides_[i];
    if (inner_stride == 1 || is_quantized(dtype_)) {
      const uint64_t row_bytes = elem_bytes(dtype_, inner);
      std::memcpy(dst, src + elem_bytes(dtype_, elem), row_bytes);
      dst += row_bytes;
    } else {
      for (int64_t k = 0; k < inner; ++k) {
        std::memcpy(dst, src + static_cast<uint64_t>(elem + k * inner_stride) * esize, esize);
        dst += esize;
      }
    }
    for (int i = nd - 2; i >= 0; --i) {  // odometer over the outer dims
      if (++idx[static_cast<size_t>(i)] < shape_[i]) break;
      idx[static_cast<size_t>(i)] = 0;
    }
  }
  return out;
}

Result<Tensor> Tensor::to_f32() const {
  RINFER_ASSIGN_OR_RETURN(Tensor c, contiguous());
  RINFER_ASSIGN_OR_RETURN(Tensor out, empty(shape_, DType::kF32));
  const int64_t inner = ndim() > 0 ? shape_[ndim() - 1] : 1;
  if (numel() == 0) return out;
  const int64_t rows = numel() / inner;
  const auto* src = static_cast<const uint8_t*>(c.data());
  float* dst = out.mutable_data_as<float>();
  const uint64_t row_bytes = elem_bytes(dtype_, inner);
  for (int64_t r = 0; r < rows; ++r) {
    RINFER_RETURN_IF_ERROR(
        dequantize_row(dtype_, src + static_cast<uint64_t>(r) * row_bytes, dst + r * inner, inner));
  }
  return out;
}

std::string Tensor::to_string() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype_)) + " " + shape_.to_string() + " " + device().to_string();
}

}  // namespace rinfer
