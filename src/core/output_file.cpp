#include "core/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/input_file.h"

namespace rinfer {

namespace {

constexpr const char* kRegularOnly =
    "the output must be a regular file or a missing one (it is written to a temporary file that "
    "is renamed over it)";

// Where a symlink points, for messages ("" when unreadable).
std::string link_text(const std::string& path) {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf));
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// The directory a new file `target` goes into must exist, be a directory and be writable.
Status check_parent(const std::string& path, const std::string& target) {
  std::string dir = std::filesystem::path(target).parent_path().string();
  if (dir.empty()) dir = ".";
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    // kIoError, as any other reason the file cannot be written there.
    if (err == ENOENT) return io_error("{}: the directory '{}' does not exist", path, dir);
    if (err == ENOTDIR) {
      return invalid_argument("{}: '{}' is not a directory (a part of it is a file)", path, dir);
    }
    return io_error("{}: cannot stat the directory '{}': {}", path, dir, std::strerror(err));
  }
  if (!S_ISDIR(st.st_mode)) {
    return invalid_argument("{}: '{}' is not a directory ({})", path, dir,
                            file_type_name(st.st_mode));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return io_error("{}: cannot create files in the directory '{}': {}", path, dir,
                    std::strerror(errno));
  }
  return ok_status();
}

Status check_not_an_input(const std::string& path, const struct stat& out,
                          const std::vector<std::string>& inputs) {
  for (const std::string& in : inputs) {
    struct stat st {};
    if (in.empty() || ::stat(in.c_str(), &st) != 0) continue;
    if (st.st_dev == out.st_dev && st.st_ino == out.st_ino) {
      return invalid_argument("{}: is the same file as the input '{}'; write to another file", path,
                              in);
    }
  }
  return ok_status();
}

std::atomic<uint64_t> temp_counter{0};

}  // namespace

Result<OutputTarget> check_output_path(const std::string& path,
                                       const std::vector<std::string>& inputs) {
  if (path.empty()) return invalid_argument("the output path is empty");
  OutputTarget t;
  t.path = path;
  t.target = path;
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) != 0) {
    const int err = errno;
    if (err != ENOENT) {
      if (err == ENOTDIR) {
        return invalid_argument("{}: a part of the path is not a directory", path);
      }
      return io_error("{}: cannot stat: {}", path, std::strerror(err));
    }
    RINFER_RETURN_IF_ERROR(check_parent(path, path));
    return t;  // a new file
  }
  struct stat st = lst;
  if (S_ISLNK(lst.st_mode)) {
    // Written through: the link's final target is the file replaced.
    std::unique_ptr<char, decltype(&std::free)> real(::realpath(path.c_str(), nullptr), &std::free);
    if (real == nullptr) {
      const int err = errno;
      if (err == ENOENT) {
        return invalid_argument(
            "{}: a symbolic link to a missing file ('{}'); an output link must point to an "
            "existing regular file",
            path, link_text(path));
      }
      return io_error("{}: cannot resolve the symbolic link: {}", path, std::strerror(err));
    }
    t.target = real.get();
    if (::stat(t.target.c_str(), &st) != 0) {
      return io_error("{}: cannot stat '{}': {}", path, t.target, std::strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
      return invalid_argument("{}: a symbolic link to '{}', which is not a regular file ({}); {}",
                              path, t.target, file_type_name(st.st_mode), kRegularOnly);
    }
  } else if (S_ISDIR(st.st_mode)) {
    return invalid_argument("{}: is a directory; give the path of a file to write", path);
  } else if (!S_ISREG(st.st_mode)) {
    return invalid_argument("{}: not a regular file ({}); {}", path, file_type_name(st.st_mode),
                            kRegularOnly);
  }
  RINFER_RETURN_IF_ERROR(check_not_an_input(path, st, inputs));
  RINFER_RETURN_IF_ERROR(check_parent(path, t.target));
  t.exists = true;
  t.mode = st.st_mode & 07777;
  return t;
}

Result<AtomicFile> AtomicFile::create(const std::string& path,
                                      const std::vector<std::string>& inputs) {
  RINFER_ASSIGN_OR_RETURN(OutputTarget t, check_output_path(path, inputs));
  AtomicFile f;
  for (int attempt = 0; attempt < 100; ++attempt) {
    f.temp_ = fmt::format("{}.tmp.{}.{}", t.target, ::getpid(), temp_counter++);
    f.fd_ = ::open(f.temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
    if (f.fd_ >= 0 || errno != EEXIST) break;
  }
  if (f.fd_ < 0) {
    return io_error("{}: cannot create the temporary file '{}': {}", path, f.temp_,
                    std::strerror(errno));
  }
  if (t.exists && ::fchmod(f.fd_, t.mode) != 0) {
    const int err = errno;
    f.discard();
    return io_error("{}: cannot set the mode of '{}': {}", path, f.temp_, std::strerror(err));
  }
  f.target_ = std::move(t);
  return f;
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : target_(std::move(o.target_)), temp_(std::move(o.temp_)), fd_(o.fd_) {
  o.fd_ = -1;
  o.temp_.clear();
}

AtomicFile& AtomicFile::operator=(AtomicFile&& o) noexcept {
  if (this != &o) {
    discard();
    target_ = std::move(o.target_);
    temp_ = std::move(o.temp_);
    fd_ = o.fd_;
    o.fd_ = -1;
    o.temp_.clear();
  }
  return *this;
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

Status AtomicFile::write(std::span<const uint8_t> bytes) {
  if (fd_ < 0) return internal_error("{}: write after commit", target_.path);
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("{}: write failed: {}", temp_, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return ok_status();
}

Status AtomicFile::write(std::string_view bytes) {
  return write(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

Status AtomicFile::commit() {
  if (fd_ < 0) return internal_error("{}: committed twice", target_.path);
  Status st;
  if (::fsync(fd_) != 0) st = io_error("{}: fsync failed: {}", temp_, std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && st.ok()) {
    st = io_error("{}: close failed: {}", temp_, std::strerror(errno));
  }
  if (st.ok()) {
    // The target may have changed since the check: never rename over a non-regular file.
    struct stat now {};
    if (::lstat(target_.target.c_str(), &now) == 0 && !S_ISREG(now.st_mode)) {
      st = invalid_argument("{}: '{}' became {} while writing; not replaced", target_.path,
                            target_.target, file_type_name(now.st_mode));
    }
  }
  if (st.ok() && std::rename(temp_.c_str(), target_.target.c_str()) != 0) {
    st = io_error("{}: cannot rename '{}' into place: {}", target_.path, temp_,
                  std::strerror(errno));
  }
  if (!st.ok()) {
    discard();
    return st;
  }
  temp_.clear();
  return ok_status();
}

Status write_file_atomically(const std::string& path, std::string_view bytes,
                             const std::vector<std::string>& inputs) {
  RINFER_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::create(path, inputs));
  RINFER_RETURN_IF_ERROR(f.write(bytes));
  return f.commit();
}

}  // namespace rinfer
