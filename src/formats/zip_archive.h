// The directory of a zip archive whose entries are stored uncompressed (as `torch.save` writes
// them), read from the end of central directory record (zip64 too), the central directory and
// each entry's local header. Every offset and size is checked against the file; a compressed or
// encrypted entry, a multi-disk archive, duplicate names or entries overlapping the central
// directory are errors naming the entry. Entry data are views into the mapping.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "rinfer/status.h"

namespace rinfer {

class ZipReader;

struct ZipEntry {
  std::string name;
  uint64_t header_offset = 0;  // of the local file header
  uint64_t data_offset = 0;    // of the first data byte
  uint64_t size = 0;           // stored = uncompressed size
  const uint8_t* data = nullptr;
};

class ZipArchive {
 public:
  // Messages start with file.path(). The archive keeps no reference to `file`: keep it alive as
  // long as the entries' data are used.
  static Result<ZipArchive> read(const MappedFile& file);

  // In central directory order.
  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(std::string_view name) const;
  uint64_t central_directory_offset() const { return cd_offset_; }

 private:
  friend class ZipReader;

  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t, std::less<>> by_name_;
  uint64_t cd_offset_ = 0;
};

}  // namespace rinfer
