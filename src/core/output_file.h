// Writing a user-named output file without destroying what the path was. Every tool that writes
// a file the user names (`rinfer quantize`'s model, bench --json / --svg / --readme, parity
// --json / --dump) checks the path with check_output_path BEFORE any work starts (so a bad
// output fails in a second, not after a long conversion or benchmark), then writes through an
// AtomicFile: a temporary file next to the target, renamed over it only once it is complete, so
// a failed or interrupted write leaves the old file as it was and no temporary file behind.
//
// What an output path may be:
//   missing            created; its directory must exist and be writable
//   a regular file     replaced atomically (its permission bits are kept)
//   a symbolic link    written THROUGH when it resolves to a regular file: the temporary file
//                      goes next to the resolved target and is renamed over it, so the link (and
//                      any other link to the target) survives and sees the new content; a
//                      dangling link or a link to anything but a regular file is refused
// Refused with a message naming the path and what it is: a directory, a FIFO, a character or
// block device (e.g. /dev/null), a socket; a missing or non-writable directory; an output that
// is the same file as one of the command's inputs (same device and inode).
//
//   RINFER_ASSIGN_OR_RETURN(OutputTarget t, check_output_path(out, {in}));  // before the work
//   ...
//   RINFER_RETURN_IF_ERROR(write_file_atomically(out, bytes, {in}));
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

struct OutputTarget {
  std::string path;     // as given
  std::string target;   // the file that will be replaced: `path`, or where its symlink resolves
  bool exists = false;  // target is an existing regular file
  mode_t mode = 0;      // its permission bits (exists only)
};

// The checks above, without touching the file system. `inputs` are the command's input files
// (those that do not exist are ignored).
Result<OutputTarget> check_output_path(const std::string& path,
                                       const std::vector<std::string>& inputs = {});

// A file written in full, then moved into place. Not committed (an error, an early return): the
// destructor closes and removes the temporary file and the target is untouched.
class AtomicFile {
 public:
  // check_output_path, then creates the temporary file "<target>.tmp.<pid>.<n>" (O_EXCL) in the
  // target's directory, with the old file's permission bits (new files: 0666 less the umask).
  static Result<AtomicFile> create(const std::string& path,
                                   const std::vector<std::string>& inputs = {});

  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&& o) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  // Appends bytes (retrying short writes); errors name the temporary file.
  Status write(std::span<const uint8_t> bytes);
  Status write(std::string_view bytes);
  // fsync, close, and rename over the target (refused when the target has meanwhile become
  // something other than a regular file). After an error the temporary file is removed.
  Status commit();

  const std::string& path() const { return target_.path; }
  const std::string& temp_path() const { return temp_; }

 private:
  AtomicFile() = default;
  void discard();

  OutputTarget target_;
  std::string temp_;
  int fd_ = -1;
};

// AtomicFile::create, write, commit.
Status write_file_atomically(const std::string& path, std::string_view bytes,
                             const std::vector<std::string>& inputs = {});

}  // namespace rinfer
