// What the model samples' binders share (internal): shape text, the shape check, zero-copy
// views of mapped tensors and vectors (norm weights, biases) as f32.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace rinfer {

inline std::string shape_string(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// A tensor of `where` (the file it is in) must have shape `want`.
inline Status check_shape(const std::string& where, const std::string& name,
                          const std::vector<int64_t>& shape, const std::vector<int64_t>& want) {
  if (shape == want) return ok_status();
  return data_loss("{}: tensor '{}' has shape {}, expected {}", where, name, shape_string(shape),
                   shape_string(want));
}

// A read-only CPU view of a tensor's bytes in the mapped file `keepalive`.
inline Result<Tensor> view_tensor(const std::string& name, const void* data, uint64_t nbytes,
                                  const std::vector<int64_t>& shape, DType dtype,
                                  std::shared_ptr<const void> keepalive) {
  auto t = Tensor::wrap(data, nbytes, Dims(std::span<const int64_t>(shape)), dtype, Device::cpu(),
                        std::move(keepalive));
  if (!t.ok()) return t.status().with_context(fmt::format("tensor '{}'", name));
  return t;
}

// A bound vector (norm weight, bias) as contiguous f32; undefined stays undefined.
inline Result<Tensor> vector_as_f32(Tensor t, const std::string& name) {
  if (!t.defined() || t.dtype() == DType::kF32) return t;
  auto f32 = t.to_f32();
  if (!f32.ok()) return f32.status().with_context(fmt::format("tensor '{}'", name));
  return f32;
}

}  // namespace rinfer
