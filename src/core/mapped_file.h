// Read-only memory map of a whole file. Model readers are zero-copy views over this mapping;
// keep the shared_ptr alive as long as any view is used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "rinfer/status.h"

namespace rinfer {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to an empty span.
  static Result<std::shared_ptr<const MappedFile>> open(const std::string& path);

  // Wraps bytes already in memory (tests, fuzzing): no file behind it.
  static std::shared_ptr<const MappedFile> from_bytes(std::string name, std::string bytes);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::string owned_;  // from_bytes storage
};

}  // namespace rinfer
