#include "core/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/input_file.h"

namespace rinfer {

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  // A regular file only: a FIFO, device or directory is refused without blocking.
  RINFER_ASSIGN_OR_RETURN(RegularFile file, open_regular_file(path));
  const int fd = file.fd.get();
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(file.size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      return io_error("{}: cannot mmap {} bytes: {}", path, f->size_, std::strerror(errno));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    f->mapped_ = true;
  }
  return std::shared_ptr<const MappedFile>(std::move(f));
}

std::shared_ptr<const MappedFile> MappedFile::from_bytes(std::string name, std::string bytes) {
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = std::move(name);
  f->owned_ = std::move(bytes);
  f->data_ = reinterpret_cast<const uint8_t*>(f->owned_.data());
  f->size_ = f->owned_.size();
  return f;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace rinfer
