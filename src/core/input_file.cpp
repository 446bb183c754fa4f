#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace rinfer {

std::string_view file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "an unknown kind of file";
}

void FileDescriptor::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {

// The error for a path that stat() or open() refused with `err`.
Status open_error(const std::string& path, int err) {
  if (err == ENOENT) {
    struct stat lst {};
    if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      return not_found("{}: no such file (a symbolic link to a missing file)", path);
    }
    return not_found("{}: no such file", path);
  }
  if (err == ENOTDIR)
    return not_found("{}: no such file (a part of the path is not a directory)", path);
  return io_error("{}: cannot open: {}", path, std::strerror(err));
}

// The error for a path that is not a regular file.
Status type_error(const std::string& path, mode_t mode) {
  if (S_ISDIR(mode)) return invalid_argument("{}: is a directory, expected a file", path);
  return invalid_argument("{}: not a regular file ({})", path, file_type_name(mode));
}

}  // namespace

Result<RegularFile> open_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return open_error(path, errno);
  if (!S_ISREG(st.st_mode)) return type_error(path, st.st_mode);
  // O_NONBLOCK: should the path have become a FIFO since the stat, the open returns at once
  // instead of waiting for a writer; O_NOCTTY: a terminal never becomes ours.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return open_error(path, errno);
  if (::fstat(fd.get(), &st) != 0) {
    return io_error("{}: cannot stat: {}", path, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return type_error(path, st.st_mode);
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return io_error("{}: cannot clear O_NONBLOCK: {}", path, std::strerror(errno));
  }
  RegularFile f;
  f.fd = std::move(fd);
  f.size = static_cast<uint64_t>(st.st_size);
  return f;
}

Result<std::string> read_regular_file(const std::string& path, uint64_t max_bytes) {
  RINFER_ASSIGN_OR_RETURN(RegularFile f, open_regular_file(path));
  if (f.size > max_bytes) {
    return data_loss("{}: {} bytes is larger than the {}-byte limit for this file", path, f.size,
                     max_bytes);
  }
  std::string out;
  out.resize(static_cast<size_t>(f.size));
  size_t pos = 0;
  // Reads to the end: the file may have grown since the fstat (and /proc files report size 0).
  // Once the expected size is read, growth is probed with a small buffer first, so that the
  // usual end of file costs no second, zero-filled copy.
  for (;;) {
    if (pos == out.size()) {
      char probe[4096];
      const ssize_t m = ::read(f.fd.get(), probe, sizeof probe);
      if (m < 0) {
        if (errno == EINTR) continue;
        return io_error("{}: read error: {}", path, std::strerror(errno));
      }
      if (m == 0) break;
      out.append(probe, static_cast<size_t>(m));
      pos += static_cast<size_t>(m);
      if (pos > max_bytes) {
        return data_loss("{}: larger than the {}-byte limit for this file", path, max_bytes);
      }
      out.resize(std::max<size_t>(pos + 4096, out.size() * 2));
      continue;
    }
    const ssize_t n = ::read(f.fd.get(), out.data() + pos, out.size() - pos);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("{}: read error: {}", path, std::strerror(errno));
    }
    if (n == 0) break;
    pos += static_cast<size_t>(n);
    if (pos > max_bytes) {
      return data_loss("{}: larger than the {}-byte limit for this file", path, max_bytes);
    }
  }
  out.resize(pos);
  return out;
}

}  // namespace rinfer
