// Reader for PyTorch checkpoints (`torch.save` of a state dict): the legacy format (before 1.6: a
// pickle stream of magic, protocol and sys info, then the object, then the storage keys and each
// storage's raw bytes) and the zip format (since 1.6: `archive/data.pkl` plus one uncompressed
// entry `archive/data/<key>` per storage).
//
// The pickle is read by a restricted unpickler that understands only the opcodes and the globals
// a state dict needs (ordered dicts, torch._utils._rebuild_tensor_v2, the storage types) and
// refuses everything else: it never executes anything. Every error is a Status whose message
// starts with the file path and names what is wrong and where (the pickle offset, the tensor).
// Tensor data are views into the mapping (zero-copy); each tensor must be dense and lie inside
// its storage. A dense tensor whose dimensions are stored in another order (a transposed or
// permuted view, as TensorFlow-converted conv weights are) is copied to row-major by default;
// TorchReadOptions::copy_permuted = false refuses it instead. A tensor with gaps or overlaps
// (a strided slice, an expanded view) is always refused.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "rinfer/status.h"

namespace rinfer {

class TorchReader;

enum class TorchFormat { kLegacy, kZip };

// "pytorch (legacy)", "pytorch (zip)": what `rinfer info` prints.
std::string_view torch_format_name(TorchFormat format);

struct TorchTensor {
  std::string name;  // the state dict key, e.g. "features.0.0.weight"
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;     // outermost first; empty for a scalar
  uint64_t numel = 0;             // product of shape (1 for a scalar)
  uint64_t nbytes = 0;            // numel * element size
  const uint8_t* data = nullptr;  // into the mapping; row-major, dense; valid while file() lives
  // The stored layout was a permutation of the dimensions: `data` is a row-major copy owned by
  // the checkpoint (valid while it, or a copy of it, lives).
  bool copied = false;
};

struct TorchReadOptions {
  // Copy dense tensors stored in another dimension order to row-major (else refuse them). The
  // copies together may not exceed the file's size.
  bool copy_permuted = true;
};

class TorchCheckpoint {
 public:
  // Maps `path` and parses it.
  static Result<TorchCheckpoint> open(const std::string& path,
                                      const TorchReadOptions& options = {});
  // Parses bytes already mapped (or from MappedFile::from_bytes).
  static Result<TorchCheckpoint> parse(std::shared_ptr<const MappedFile> file,
                                       const TorchReadOptions& options = {});
  // A state dict made in memory (random weights of a network's shape): f32 tensors in the
  // given order, named `name` where a file's path would be.
  struct F32Tensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;  // product of shape
  };
  static Result<TorchCheckpoint> from_f32_tensors(std::string name,
                                                  std::vector<F32Tensor> tensors);
  // True when the bytes start like a PyTorch checkpoint (a zip, or pickle protocol 2 with the
  // legacy magic number): what a registry asks before choosing this reader.
  static bool sniff(std::span<const uint8_t> head);

  const std::string& path() const { return file_->path(); }
  TorchFormat format() const { return format_; }
  // In the state dict's order.
  const std::vector<TorchTensor>& tensors() const { return tensors_; }
  // nullptr when there is no tensor of that name.
  const TorchTensor* find(std::string_view name) const;
  std::shared_ptr<const MappedFile> file() const { return file_; }

 private:
  friend class TorchReader;
  TorchCheckpoint() = default;

  std::shared_ptr<const MappedFile> file_;
  TorchFormat format_ = TorchFormat::kLegacy;
  std::vector<TorchTensor> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> copies_;  // of permuted tensors
};

}  // namespace rinfer
