// Opening a user-named file for reading without surprises. Every reader of a path that a user
// gives (a model file, config.json, tokenizer.json, a recipe, a text file) goes through
// open_regular_file or read_regular_file, so that a FIFO with no writer, a device, a socket or a
// directory is refused at once with its type named, instead of blocking forever in open() or
// read() or failing later with a vague message.
//
//   RINFER_ASSIGN_OR_RETURN(std::string text, read_regular_file(path));
//   // "data.txt: not a regular file (a FIFO)"
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "rinfer/status.h"

namespace rinfer {

// "a regular file", "a directory", "a FIFO", "a character device", "a block device", "a socket",
// "a symbolic link", or "an unknown kind of file", for a stat() st_mode.
std::string_view file_type_name(mode_t mode);

// An open file descriptor, closed when destroyed.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { reset(); }
  FileDescriptor(FileDescriptor&& o) noexcept : fd_(o.release()) {}
  FileDescriptor& operator=(FileDescriptor&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership: the caller closes it.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the descriptor held (if any) and holds `fd`.
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct RegularFile {
  FileDescriptor fd;  // open read-only, blocking, close-on-exec
  uint64_t size = 0;  // bytes, from fstat of the descriptor
};

// Opens `path` (symlinks followed) for reading when it is a regular file. Refuses, without ever
// blocking:
//   a missing path                 kNotFound         "<path>: no such file"
//   a directory                    kInvalidArgument  "<path>: is a directory, expected a file"
//   a FIFO, device, socket, ...    kInvalidArgument  "<path>: not a regular file (a FIFO)"
// Race-free: stat() first (so nothing but a regular file is opened in the common case), then
// open() with O_NONBLOCK (an open of a FIFO with no writer would otherwise block), fstat() of
// the descriptor (the file opened is the one checked, whatever replaced the path meanwhile),
// then O_NONBLOCK is cleared.
Result<RegularFile> open_regular_file(const std::string& path);

// The whole content of a regular file (open_regular_file's checks). Files larger than
// `max_bytes` are refused (kDataLoss, naming the size and the limit).
Result<std::string> read_regular_file(const std::string& path,
                                      uint64_t max_bytes = uint64_t{1} << 40);

}  // namespace rinfer
