#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace rinfer {

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return not_found("{}: no such file", path);
    return io_error("{}: cannot open: {}", path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return io_error("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return invalid_argument("{}: is a directory, expected a file", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("{}: not a regular file", path);
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return io_error("{}: cannot mmap {} bytes: {}", path, f->size_, std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    f->mapped_ = true;
  }
  ::close(fd);
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
