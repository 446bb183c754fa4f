#include "formats/zip_archive.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/strings.h"

namespace rinfer {

namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kLocalHeaderBytes = 30;
constexpr uint64_t kCentralBytes = 46;
constexpr uint64_t kEocdBytes = 22;
constexpr uint64_t kZip64EocdBytes = 56;
constexpr uint64_t kZip64LocatorBytes = 20;
constexpr uint64_t kMaxComment = 0xffff;

// Little-endian reads at a checked position.
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string_view method_name(uint16_t m) {
  switch (m) {
    case 8: return "deflate";
    case 9: return "deflate64";
    case 12: return "bzip2";
    case 14: return "lzma";
    case 93: return "zstd";
    case 95: return "xz";
    default: return "unknown";
  }
}

struct Eocd {
  uint64_t entries = 0;
  uint64_t cd_size = 0;
  uint64_t cd_offset = 0;
  uint64_t cd_limit = 0;  // where the central directory must end (the first EOCD record)
};

}  // namespace

class ZipReader {
 public:
  explicit ZipReader(const MappedFile& file)
      : path_(file.path()), data_(file.data()), size_(file.size()) {}

  Result<ZipArchive> run() {
    Eocd e;
    RINFER_RETURN_IF_ERROR(find_eocd(&e));
    ZipArchive a;
    a.cd_offset_ = e.cd_offset;
    RINFER_RETURN_IF_ERROR(read_central(e, &a));
    return a;
  }

 private:
  bool inside(uint64_t off, uint64_t n) const { return off <= size_ && n <= size_ - off; }

  Status find_eocd(Eocd* e) {
    if (size_ < kEocdBytes) {
      return data_loss("{}: {} bytes, too short for a zip archive's end record", path_, size_);
    }
    uint64_t at = size_ - kEocdBytes;
    const uint64_t lowest =
        size_ - kEocdBytes - std::min<uint64_t>(size_ - kEocdBytes, kMaxComment);
    bool found = false;
    while (true) {
      if (load<uint32_t>(data_ + at) == kEocdSig &&
          at + kEocdBytes + load<uint16_t>(data_ + at + 20) == size_) {
        found = true;
        break;
      }
      if (at == lowest) break;
      --at;
    }
    if (!found) {
      return data_loss(
          "{}: no zip end of central directory record (the file is truncated or not a zip "
          "archive)",
          path_);
    }
    const uint8_t* p = data_ + at;
    const uint16_t disk = load<uint16_t>(p + 4);
    const uint16_t cd_disk = load<uint16_t>(p + 6);
    const uint16_t n_disk = load<uint16_t>(p + 8);
    e->entries = load<uint16_t>(p + 10);
    e->cd_size = load<uint32_t>(p + 12);
    e->cd_offset = load<uint32_t>(p + 16);
    e->cd_limit = at;
    const bool has_locator = at >= kZip64LocatorBytes &&
                             load<uint32_t>(data_ + at - kZip64LocatorBytes) == kZip64LocatorSig;
    if (has_locator) {
      RINFER_RETURN_IF_ERROR(read_zip64(at - kZip64LocatorBytes, e));
    } else if (disk != 0 || cd_disk != 0 || n_disk != e->entries) {
      return unsupported("{}: multi-disk zip archives are not supported (end record at offset {})",
                         path_, at);
    }
    if (!inside(e->cd_offset, e->cd_size) || e->cd_offset + e->cd_size > e->cd_limit) {
      return data_loss(
          "{}: central directory (offset {}, {} bytes) runs past its end record at offset {}",
          path_, e->cd_offset, e->cd_size, e->cd_limit);
    }
    if (e->entries > e->cd_size / kCentralBytes) {
      return data_loss("{}: {} entries cannot fit a {}-byte central directory", path_, e->entries,
                       e->cd_size);
    }
    return ok_status();
  }

  Status read_zip64(uint64_t loc, Eocd* e) {
    const uint8_t* p = data_ + loc;
    const uint32_t disk = load<uint32_t>(p + 4);
    const uint64_t off = load<uint64_t>(p + 8);
    const uint32_t disks = load<uint32_t>(p + 16);
    if (disk != 0 || disks > 1) {
      return unsupported("{}: multi-disk zip archives are not supported (zip64 locator at {})",
                         path_, loc);
    }
    if (off > loc || loc - off < kZip64EocdBytes) {
      return data_loss("{}: zip64 end record offset {} (from the locator at {}) is out of place",
                       path_, off, loc);
    }
    const uint8_t* r = data_ + off;
    if (load<uint32_t>(r) != kZip64EocdSig) {
      return data_loss("{}: no zip64 end record at offset {} (named by the locator at {})", path_,
                       off, loc);
    }
    const uint32_t rdisk = load<uint32_t>(r + 16);
    const uint32_t rcd_disk = load<uint32_t>(r + 20);
    const uint64_t n_disk = load<uint64_t>(r + 24);
    e->entries = load<uint64_t>(r + 32);
    e->cd_size = load<uint64_t>(r + 40);
    e->cd_offset = load<uint64_t>(r + 48);
    e->cd_limit = off;
    if (rdisk != 0 || rcd_disk != 0 || n_disk != e->entries) {
      return unsupported("{}: multi-disk zip archives are not supported (zip64 end record at {})",
                         path_, off);
    }
    return ok_status();
  }

  // Replaces the 0xffffffff fields with their values from the zip64 extra field.
  Status zip64_extra(const std::string& name, const uint8_t* extra, uint16_t n, uint64_t* usize,
                     uint64_t* csize, uint64_t* offset) {
    const bool need_u = *usize == 0xffffffff;
    const bool need_c = *csize == 0xffffffff;
    const bool need_o = *offset == 0xffffffff;
    if (!need_u && !need_c && !need_o) return ok_status();
    for (uint32_t i = 0; i + 4 <= n;) {
      const uint16_t id = load<uint16_t>(extra + i);
      const uint16_t len = load<uint16_t>(extra + i + 2);
      if (i + 4 + len > n) break;
      if (id == 0x0001) {
        uint32_t at = i + 4;
        const uint32_t end = at + len;
        for (uint64_t* field :
             {need_u ? usize : nullptr, need_c ? csize : nullptr, need_o ? offset : nullptr}) {
          if (field == nullptr) continue;
          if (at + 8 > end) {
            return data_loss("{}: entry {}: zip64 extra field too short", path_, quoted(name));
          }
          *field = load<uint64_t>(extra + at);
          at += 8;
        }
        return ok_status();
      }
      i += 4 + len;
    }
    return data_loss("{}: entry {}: sizes need a zip64 extra field, which is missing", path_,
                     quoted(name));
  }

  Status read_central(const Eocd& e, ZipArchive* a) {
    uint64_t pos = e.cd_offset;
    const uint64_t end = e.cd_offset + e.cd_size;
    a->entries_.reserve(e.entries);
    for (uint64_t i = 0; i < e.entries; ++i) {
      if (end - pos < kCentralBytes) {
        return data_loss("{}: central directory entry {} (offset {}) runs past its end", path_, i,
                         pos);
      }
      const uint8_t* p = data_ + pos;
      if (load<uint32_t>(p) != kCentralSig) {
        return data_loss("{}: central directory entry {} at offset {} has a bad signature", path_,
                         i, pos);
      }
      const uint16_t flags = load<uint16_t>(p + 8);
      const uint16_t method = load<uint16_t>(p + 10);
      uint64_t csize = load<uint32_t>(p + 20);
      uint64_t usize = load<uint32_t>(p + 24);
      const uint16_t name_len = load<uint16_t>(p + 28);
      const uint16_t extra_len = load<uint16_t>(p + 30);
      const uint16_t comment_len = load<uint16_t>(p + 32);
      uint64_t local = load<uint32_t>(p + 42);
      const uint64_t var = uint64_t{name_len} + extra_len + comment_len;
      if (end - pos - kCentralBytes < var) {
        return data_loss("{}: central directory entry {} (offset {}) runs past its end", path_, i,
                         pos);
      }
      ZipEntry z;
      z.name.assign(reinterpret_cast<const char*>(p + kCentralBytes), name_len);
      RINFER_RETURN_IF_ERROR(
          zip64_extra(z.name, p + kCentralBytes + name_len, extra_len, &usize, &csize, &local));
      pos += kCentralBytes + var;
      if ((flags & 1) != 0) {
        return unsupported("{}: entry {} is encrypted", path_, quoted(z.name));
      }
      if (method != 0) {
        return unsupported(
            "{}: entry {} is compressed (method {}: {}); PyTorch checkpoints store entries "
            "uncompressed",
            path_, quoted(z.name), method, method_name(method));
      }
      if (csize != usize) {
        return data_loss("{}: stored entry {} has compressed size {} != size {}", path_,
                         quoted(z.name), csize, usize);
      }
      z.size = usize;
      z.header_offset = local;
      RINFER_RETURN_IF_ERROR(read_local(e.cd_offset, method, &z));
      if (!a->by_name_.emplace(z.name, a->entries_.size()).second) {
        return data_loss("{}: two entries named {}", path_, quoted(z.name));
      }
      a->entries_.push_back(std::move(z));
    }
    if (pos != end) {
      return data_loss("{}: central directory has {} bytes after its {} entries", path_, end - pos,
                       e.entries);
    }
    return ok_status();
  }

  // Checks the local header of `z` and sets its data range, which must end before `limit`.
  Status read_local(uint64_t limit, uint16_t method, ZipEntry* z) {
    const uint64_t off = z->header_offset;
    if (off > limit || limit - off < kLocalHeaderBytes) {
      return data_loss(
          "{}: entry {}: local header offset {} is outside the entries' area (0 to {})", path_,
          quoted(z->name), off, limit);
    }
    const uint8_t* p = data_ + off;
    if (load<uint32_t>(p) != kLocalHeaderSig) {
      return data_loss("{}: entry {}: no local header at offset {}", path_, quoted(z->name), off);
    }
    const uint16_t lmethod = load<uint16_t>(p + 8);
    const uint64_t name_len = load<uint16_t>(p + 26);
    const uint64_t extra_len = load<uint16_t>(p + 28);
    if (lmethod != method) {
      return data_loss("{}: entry {}: local header says method {}, central directory {}", path_,
                       quoted(z->name), lmethod, method);
    }
    const uint64_t after = off + kLocalHeaderBytes;
    if (limit - after < name_len + extra_len) {
      return data_loss("{}: entry {}: local header at offset {} runs past the entries' area", path_,
                       quoted(z->name), off);
    }
    if (std::string_view(reinterpret_cast<const char*>(data_ + after), name_len) != z->name) {
      return data_loss("{}: entry {}: local header at offset {} names another file", path_,
                       quoted(z->name), off);
    }
    z->data_offset = after + name_len + extra_len;
    if (limit - z->data_offset < z->size) {
      return data_loss(
          "{}: entry {}: {} bytes at offset {} run past the entries' area (which ends at {})",
          path_, quoted(z->name), z->size, z->data_offset, limit);
    }
    z->data = data_ + z->data_offset;
    return ok_status();
  }

  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
};

Result<ZipArchive> ZipArchive::read(const MappedFile& file) { return ZipReader(file).run(); }

const ZipEntry* ZipArchive::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

}  // namespace rinfer
