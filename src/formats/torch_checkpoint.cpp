// PyTorch checkpoints: the state dict pickle read by the restricted unpickler, its tensors
// (calls of torch._utils._rebuild_tensor*) checked against their storages, which come from zip
// entries or follow the pickles in a legacy stream.
#include "formats/torch_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <new>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "core/strings.h"
#include "formats/pickle.h"
#include "formats/zip_archive.h"

namespace rinfer {

namespace {

// 0x1950a86a20f9469cfc6c, the legacy magic number, as LONG1's little-endian bytes.
constexpr std::array<uint8_t, 10> kLegacyMagic = {0x6c, 0xfc, 0x9c, 0x46, 0xf9,
                                                  0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr int64_t kLegacyProtocolVersion = 1001;
constexpr size_t kMaxDims = 64;

// What an allowed global stands for (PickleGlobal::tag): a kind and an index into its table.
enum TagKind { kTagStorage = 1, kTagDType = 2, kTagCall = 3, kTagDict = 4 };
constexpr int tag(TagKind kind, int index) { return kind * 1000 + index; }
constexpr TagKind tag_kind(int t) { return static_cast<TagKind>(t / 1000); }
constexpr int tag_index(int t) { return t % 1000; }

struct TypeName {
  std::string_view name;
  std::optional<DType> dtype;  // nullopt: a type torch has that rinfer does not support
};

// torch.<name>: the typed storages, then torch.storage.UntypedStorage (element size 1).
constexpr std::array<TypeName, 18> kStorageTypes = {{
    {"FloatStorage", DType::kF32},
    {"DoubleStorage", DType::kF64},
    {"HalfStorage", DType::kF16},
    {"BFloat16Storage", DType::kBF16},
    {"LongStorage", DType::kI64},
    {"IntStorage", DType::kI32},
    {"ShortStorage", DType::kI16},
    {"CharStorage", DType::kI8},
    {"ByteStorage", DType::kU8},
    {"BoolStorage", DType::kBool},
    {"ComplexFloatStorage", {}},
    {"ComplexDoubleStorage", {}},
    {"QInt8Storage", {}},
    {"QUInt8Storage", {}},
    {"QInt32Storage", {}},
    {"QUInt4x2Storage", {}},
    {"QUInt2x4Storage", {}},
    {"UntypedStorage", {}},
}};
constexpr int kUntypedStorage = static_cast<int>(kStorageTypes.size()) - 1;

// torch.<dtype>, as _rebuild_tensor_v3 names the dtype of a tensor on an untyped storage.
constexpr std::array<TypeName, 22> kDTypes = {{
    {"float32", DType::kF32},
    {"float64", DType::kF64},
    {"float16", DType::kF16},
    {"bfloat16", DType::kBF16},
    {"int64", DType::kI64},
    {"int32", DType::kI32},
    {"int16", DType::kI16},
    {"int8", DType::kI8},
    {"uint8", DType::kU8},
    {"bool", DType::kBool},
    {"float8_e4m3fn", DType::kF8E4M3},
    {"float8_e5m2", DType::kF8E5M2},
    {"uint16", {}},
    {"uint32", {}},
    {"uint64", {}},
    {"complex32", {}},
    {"complex64", {}},
    {"complex128", {}},
    {"float8_e4m3fnuz", {}},
    {"float8_e5m2fnuz", {}},
    {"float8_e8m0fnu", {}},
    {"float4_e2m1fn_x2", {}},
}};

enum Callable { kRebuildTensor, kRebuildTensorV2, kRebuildTensorV3, kRebuildParameter };

// The allow-list: nothing else may appear in a checkpoint's pickles.
const std::vector<PickleGlobal>& allowed_globals() {
  static const std::vector<PickleGlobal> globals = [] {
    std::vector<PickleGlobal> g;
    g.push_back({"collections", "OrderedDict", PickleGlobalUse::kDictType, tag(kTagDict, 0)});
    const std::array<std::string_view, 4> calls = {"_rebuild_tensor", "_rebuild_tensor_v2",
                                                   "_rebuild_tensor_v3", "_rebuild_parameter"};
    for (size_t i = 0; i < calls.size(); ++i) {
      g.push_back({"torch._utils", calls[i], PickleGlobalUse::kCallable,
                   tag(kTagCall, static_cast<int>(i))});
    }
    for (size_t i = 0; i < kStorageTypes.size(); ++i) {
      const int t = tag(kTagStorage, static_cast<int>(i));
      g.push_back({"torch", kStorageTypes[i].name, PickleGlobalUse::kValue, t});
    }
    g.push_back({"torch.storage", "UntypedStorage", PickleGlobalUse::kValue,
                 tag(kTagStorage, kUntypedStorage)});
    for (size_t i = 0; i < kDTypes.size(); ++i) {
      g.push_back(
          {"torch", kDTypes[i].name, PickleGlobalUse::kValue, tag(kTagDType, static_cast<int>(i))});
    }
    return g;
  }();
  return globals;
}

std::string dims_string(const std::vector<int64_t>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

struct StorageSpec {
  std::string key;
  int type = 0;        // index into kStorageTypes
  uint64_t numel = 0;  // elements of its type (bytes for an untyped storage)
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
};

struct TensorSpec {
  std::string name;
  size_t storage = 0;
  DType dtype = DType::kF32;
  uint64_t offset = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
};

uint64_t storage_elem_size(int type) {
  const auto& t = kStorageTypes[static_cast<size_t>(type)];
  return t.dtype ? static_cast<uint64_t>(dtype_traits(*t.dtype).block_bytes) : 1;
}

}  // namespace

class TorchReader {
 public:
  TorchReader(std::shared_ptr<const MappedFile> file, const TorchReadOptions& options)
      : file_(std::move(file)), path_(file_->path()), options_(options) {}

  Result<TorchCheckpoint> run() {
    const auto head = file_->bytes();
    if (head.size() >= 4 && std::memcmp(head.data(), "PK\x03\x04", 4) == 0) {
      out_.format_ = TorchFormat::kZip;
      RINFER_RETURN_IF_ERROR(parse_zip());
    } else if (!head.empty() && head[0] == 0x80) {
      out_.format_ = TorchFormat::kLegacy;
      RINFER_RETURN_IF_ERROR(parse_legacy());
    } else {
      return data_loss(
          "{}: not a PyTorch checkpoint (neither a zip archive nor a pickle stream starting with "
          "the legacy magic number)",
          path_);
    }
    RINFER_RETURN_IF_ERROR(finish());
    out_.file_ = file_;
    for (size_t i = 0; i < out_.tensors_.size(); ++i)
      out_.by_name_.emplace(out_.tensors_[i].name, i);
    return std::move(out_);
  }

 private:
  const std::vector<PickleGlobal>& globals() const { return allowed_globals(); }

  std::string describe(const Pickle& p, uint32_t id) const { return p.describe(id, globals()); }

  // ------------------------------------------------------------------------------ zip format

  Status parse_zip() {
    RINFER_ASSIGN_OR_RETURN(ZipArchive zip, ZipArchive::read(*file_));
    if (zip.entries().empty()) return data_loss("{}: the zip archive has no entries", path_);
    const std::string& first = zip.entries().front().name;
    const size_t slash = first.find('/');
    if (slash == std::string::npos || slash == 0) {
      return data_loss("{}: first entry {} is not inside an archive directory", path_,
                       quoted(first));
    }
    const std::string prefix = first.substr(0, slash + 1);
    const ZipEntry* pkl = zip.find(prefix + "data.pkl");
    if (pkl == nullptr) return data_loss("{}: no entry {}", path_, quoted(prefix + "data.pkl"));
    if (const ZipEntry* order = zip.find(prefix + "byteorder"); order != nullptr) {
      const std::string_view v(reinterpret_cast<const char*>(order->data), order->size);
      if (v != "little") {
        return unsupported("{}: byte order {} (only little-endian checkpoints are supported)",
                           path_, quoted(v));
      }
    }
    const std::span<const uint8_t> bytes(pkl->data, pkl->size);
    auto pickle = read_pickle(bytes, 0, globals());
    const std::string where = fmt::format("{}: {}", path_, pkl->name);
    if (!pickle.ok()) return pickle.status().with_context(where);
    if (pickle->end != bytes.size()) {
      return data_loss("{}: {} bytes after the pickle's STOP (offset {})", where,
                       bytes.size() - pickle->end, pickle->end - 1);
    }
    RINFER_RETURN_IF_ERROR(read_state_dict(*pickle, where));
    for (StorageSpec& s : storages_) {
      const std::string name = prefix + "data/" + s.key;
      const ZipEntry* e = zip.find(name);
      if (e == nullptr) {
        return data_loss("{}: no entry {} for storage {} (used by tensor {})", path_, quoted(name),
                         quoted(s.key), quoted(first_user(s)));
      }
      const uint64_t want = s.numel * storage_elem_size(s.type);
      if (e->size != want) {
        return data_loss("{}: entry {} is {} bytes, but storage {} of {} {} needs {}", path_,
                         quoted(name), e->size, quoted(s.key), s.numel,
                         kStorageTypes[static_cast<size_t>(s.type)].name, want);
      }
      s.data = e->data;
      s.nbytes = e->size;
    }
    return ok_status();
  }

  // --------------------------------------------------------------------------- legacy format

  // The next pickle of the stream, at pos_.
  Result<Pickle> next_pickle(std::string_view what) {
    const auto all = file_->bytes();
    auto p = read_pickle(all.subspan(pos_), pos_, globals());
    if (!p.ok()) return p.status().with_context(fmt::format("{}: {}", path_, what));
    pos_ += p->end;
    return p;
  }

  Status parse_legacy() {
    RINFER_ASSIGN_OR_RETURN(Pickle magic, next_pickle("magic number"));
    const PickleValue& m = magic.root_value();
    if (m.kind != PickleKind::kBigInt || m.text.size() != kLegacyMagic.size() ||
        std::memcmp(m.text.data(), kLegacyMagic.data(), kLegacyMagic.size()) != 0) {
      return data_loss(
          "{}: not a PyTorch checkpoint: the first pickle is {}, not the magic number "
          "0x1950a86a20f9469cfc6c",
          path_, describe(magic, magic.root));
    }
    RINFER_ASSIGN_OR_RETURN(Pickle version, next_pickle("protocol version"));
    const PickleValue& v = version.root_value();
    if (v.kind != PickleKind::kInt || v.int_value != kLegacyProtocolVersion) {
      return unsupported("{}: legacy protocol version is {}, expected {}", path_,
                         describe(version, version.root), kLegacyProtocolVersion);
    }
    RINFER_ASSIGN_OR_RETURN(Pickle sys_info, next_pickle("system info"));
    RINFER_RETURN_IF_ERROR(check_sys_info(sys_info));
    const uint64_t dict_at = pos_;
    RINFER_ASSIGN_OR_RETURN(Pickle state, next_pickle("state dict"));
    RINFER_RETURN_IF_ERROR(
        read_state_dict(state, fmt::format("{}: state dict at offset {}", path_, dict_at)));
    RINFER_ASSIGN_OR_RETURN(Pickle keys, next_pickle("storage keys"));
    RINFER_RETURN_IF_ERROR(read_storage_data(keys));
    if (pos_ != file_->size()) {
      return data_loss("{}: {} unexpected bytes after the last storage (offset {})", path_,
                       file_->size() - pos_, pos_);
    }
    return ok_status();
  }

  Status check_sys_info(const Pickle& p) {
    const PickleValue& d = p.root_value();
    if (d.kind != PickleKind::kDict) {
      return data_loss("{}: system info is {}, expected a dict", path_, describe(p, p.root));
    }
    for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
      if (p.is_string(d.items[i], "little_endian")) {
        const PickleValue& le = p.at(d.items[i + 1]);
        if (le.kind != PickleKind::kBool || !le.flag) {
          return unsupported(
              "{}: little_endian is {} (only little-endian checkpoints are supported)", path_,
              describe(p, d.items[i + 1]));
        }
      }
    }
    return ok_status();
  }

  // The list of storage keys, then each storage: an 8-byte element count and its bytes.
  Status read_storage_data(const Pickle& p) {
    const PickleValue& list = p.root_value();
    if (list.kind != PickleKind::kList) {
      return data_loss("{}: storage keys are {}, expected a list", path_, describe(p, p.root));
    }
    std::vector<bool> seen(storages_.size(), false);
    for (uint32_t id : list.items) {
      const PickleValue& k = p.at(id);
      if (k.kind != PickleKind::kString) {
        return data_loss("{}: storage key at offset {} is {}, expected a string", path_, k.offset,
                         describe(p, id));
      }
      auto it = storage_by_key_.find(k.text);
      if (it == storage_by_key_.end()) {
        return data_loss("{}: storage {} (listed at offset {}) is used by no tensor", path_,
                         quoted(k.text), k.offset);
      }
      if (seen[it->second]) {
        return data_loss("{}: storage {} is listed twice (offset {})", path_, quoted(k.text),
                         k.offset);
      }
      seen[it->second] = true;
      StorageSpec& s = storages_[it->second];
      const uint64_t at = pos_;
      if (file_->size() - pos_ < 8) {
        return data_loss("{}: storage {}: element count at offset {} runs past the end of the file",
                         path_, quoted(s.key), at);
      }
      int64_t n = 0;
      std::memcpy(&n, file_->data() + pos_, 8);
      pos_ += 8;
      if (n < 0 || static_cast<uint64_t>(n) != s.numel) {
        return data_loss("{}: storage {}: element count {} at offset {}, but its tensors say {}",
                         path_, quoted(s.key), n, at, s.numel);
      }
      const uint64_t es = storage_elem_size(s.type);
      if (s.numel > (file_->size() - pos_) / es) {
        return data_loss(
            "{}: storage {}: {} elements of {} bytes at offset {} run past the end of the file "
            "({} bytes)",
            path_, quoted(s.key), s.numel, es, pos_, file_->size());
      }
      s.data = file_->data() + pos_;
      s.nbytes = s.numel * es;
      pos_ += s.nbytes;
    }
    for (size_t i = 0; i < storages_.size(); ++i) {
      if (!seen[i]) {
        return data_loss("{}: storage {} (used by tensor {}) is missing from the storage list",
                         path_, quoted(storages_[i].key), quoted(first_user(storages_[i])));
      }
    }
    return ok_status();
  }

  // ----------------------------------------------------------------------------- the pickle

  Status read_state_dict(const Pickle& p, const std::string& where) {
    const PickleValue& d = p.root_value();
    if (d.kind != PickleKind::kDict) {
      return data_loss("{}: the pickled object is {}, expected a state dict (a dict of tensors)",
                       where, describe(p, p.root));
    }
    // BUILD state (the _metadata attribute of a module's state dict) is ignored.
    std::map<std::string_view, uint64_t, std::less<>> names;  // name -> offset
    specs_.reserve(d.items.size() / 2);
    for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
      const PickleValue& k = p.at(d.items[i]);
      if (k.kind != PickleKind::kString) {
        return data_loss("{}: offset {}: state dict key is {}, expected a string", where, k.offset,
                         describe(p, d.items[i]));
      }
      if (auto [it, inserted] = names.emplace(k.text, k.offset); !inserted) {
        return data_loss("{}: tensor {} appears twice (offsets {} and {})", where, quoted(k.text),
                         it->second, k.offset);
      }
      TensorSpec t;
      t.name = std::string(k.text);
      RINFER_RETURN_IF_ERROR(read_tensor(p, d.items[i + 1], where, 0, &t));
      specs_.push_back(std::move(t));
    }
    return ok_status();
  }

  Status read_int(const Pickle& p, uint32_t id, std::string_view what, const std::string& at,
                  int64_t* out) {
    const PickleValue& v = p.at(id);
    if (v.kind != PickleKind::kInt || v.int_value < 0) {
      return data_loss("{}: {} is {}, expected a non-negative int", at, what, describe(p, id));
    }
    *out = v.int_value;
    return ok_status();
  }

  Status read_dims(const Pickle& p, uint32_t id, std::string_view what, const std::string& at,
                   std::vector<int64_t>* out) {
    const PickleValue& v = p.at(id);
    if (v.kind != PickleKind::kTuple) {
      return data_loss("{}: {} is {}, expected a tuple of ints", at, what, describe(p, id));
    }
    if (v.items.size() > kMaxDims) {
      return data_loss("{}: {} has {} dimensions, more than {}", at, what, v.items.size(),
                       kMaxDims);
    }
    out->resize(v.items.size());
    for (size_t i = 0; i < v.items.size(); ++i) {
      RINFER_RETURN_IF_ERROR(
          read_int(p, v.items[i], fmt::format("{}[{}]", what, i), at, &(*out)[i]));
    }
    return ok_status();
  }

  Status read_tensor(const Pickle& p, uint32_t id, const std::string& where, int depth,
                     TensorSpec* t) {
    const std::string at = fmt::format("{}: tensor {}", where, quoted(t->name));
    const PickleValue& v = p.at(id);
    if (v.kind != PickleKind::kCall) {
      return data_loss("{}: value is {}, expected a tensor (torch._utils._rebuild_tensor_v2)", at,
                       describe(p, id));
    }
    const int callable = tag_index(globals()[v.global].tag);
    const std::vector<uint32_t>& args = p.at(v.ref).items;
    const std::string call = fmt::format("{}: offset {}: {}", at, v.offset, describe(p, id));
    if (callable == kRebuildParameter) {
      if (depth > 0 || args.size() != 3) {
        return data_loss("{} with {} arguments{}, expected (tensor, requires_grad, hooks)", call,
                         args.size(), depth > 0 ? " inside a parameter" : "");
      }
      return read_tensor(p, args[0], where, depth + 1, t);
    }
    size_t min_args = 6;
    size_t max_args = 7;
    if (callable == kRebuildTensor) {
      min_args = 4;
      max_args = 4;
    } else if (callable == kRebuildTensorV3) {
      min_args = 7;
      max_args = 8;
    }
    if (args.size() < min_args || args.size() > max_args) {
      return data_loss("{} has {} arguments, expected {}{}", call, args.size(), min_args,
                       max_args > min_args ? fmt::format(" or {}", max_args) : "");
    }
    int64_t offset = 0;
    RINFER_RETURN_IF_ERROR(read_storage(p, args[0], at, &t->storage));
    RINFER_RETURN_IF_ERROR(read_int(p, args[1], "storage offset", at, &offset));
    t->offset = static_cast<uint64_t>(offset);
    RINFER_RETURN_IF_ERROR(read_dims(p, args[2], "size", at, &t->shape));
    RINFER_RETURN_IF_ERROR(read_dims(p, args[3], "stride", at, &t->stride));
    if (t->shape.size() != t->stride.size()) {
      return data_loss("{}: size {} and stride {} differ in length", at, dims_string(t->shape),
                       dims_string(t->stride));
    }
    if (callable != kRebuildTensor) {
      if (p.at(args[4]).kind != PickleKind::kBool) {
        return data_loss("{}: requires_grad is {}, expected a bool", at, describe(p, args[4]));
      }
      if (p.at(args[5]).kind != PickleKind::kDict) {
        return data_loss("{}: backward hooks are {}, expected a dict", at, describe(p, args[5]));
      }
    }
    const int type = storages_[t->storage].type;
    const auto& st = kStorageTypes[static_cast<size_t>(type)];
    if (callable == kRebuildTensorV3) {
      const PickleValue& d = p.at(args[6]);
      if (d.kind != PickleKind::kGlobal || tag_kind(globals()[d.global].tag) != kTagDType) {
        return data_loss("{}: dtype is {}, expected a torch dtype", at, describe(p, args[6]));
      }
      const auto& dt = kDTypes[static_cast<size_t>(tag_index(globals()[d.global].tag))];
      if (!dt.dtype) return unsupported("{}: dtype torch.{} is not supported", at, dt.name);
      if (type != kUntypedStorage) {
        return data_loss("{}: _rebuild_tensor_v3 of a torch.{}, expected an untyped storage", at,
                         st.name);
      }
      t->dtype = *dt.dtype;
    } else if (type == kUntypedStorage) {
      return data_loss("{}: an untyped storage without a dtype", at);
    } else if (!st.dtype) {
      return unsupported("{}: storage type torch.{} is not supported", at, st.name);
    } else {
      t->dtype = *st.dtype;
    }
    const size_t n_meta = callable == kRebuildTensorV3 ? 8 : 7;
    if (args.size() == n_meta) {
      const PickleKind k = p.at(args.back()).kind;
      if (k != PickleKind::kNone && k != PickleKind::kDict) {
        return data_loss("{}: metadata is {}, expected None or a dict", at,
                         describe(p, args.back()));
      }
    }
    return ok_status();
  }

  // A persistent id ('storage', type, key, location, numel[, None]) -> index into storages_.
  Status read_storage(const Pickle& p, uint32_t id, const std::string& at, size_t* out) {
    const PickleValue& v = p.at(id);
    if (v.kind != PickleKind::kPersistentId) {
      return data_loss("{}: storage is {}, expected a persistent id", at, describe(p, id));
    }
    const PickleValue& pid = p.at(v.ref);
    const std::string where = fmt::format("{}: storage id at offset {}", at, v.offset);
    if (pid.kind != PickleKind::kTuple || pid.items.size() < 5 || pid.items.size() > 6 ||
        !p.is_string(pid.items[0], "storage")) {
      return data_loss("{} is {}, expected ('storage', type, key, location, size)", where,
                       describe(p, v.ref));
    }
    const auto& it = pid.items;
    const PickleValue& type = p.at(it[1]);
    if (type.kind != PickleKind::kGlobal || tag_kind(globals()[type.global].tag) != kTagStorage) {
      return data_loss("{}: type is {}, expected a torch storage type", where, describe(p, it[1]));
    }
    const PickleValue& key = p.at(it[2]);
    if (key.kind != PickleKind::kString) {
      return data_loss("{}: key is {}, expected a string", where, describe(p, it[2]));
    }
    if (p.at(it[3]).kind != PickleKind::kString) {
      return data_loss("{}: location is {}, expected a string", where, describe(p, it[3]));
    }
    int64_t numel = 0;
    RINFER_RETURN_IF_ERROR(read_int(p, it[4], "storage size", where, &numel));
    if (it.size() == 6 && p.at(it[5]).kind != PickleKind::kNone) {
      return unsupported("{}: storage views (checkpoints of torch before 1.0) are not supported",
                         where);
    }
    const int t = tag_index(globals()[type.global].tag);
    const uint64_t es = storage_elem_size(t);
    if (static_cast<uint64_t>(numel) > file_->size() / es) {
      return data_loss("{}: storage {} of {} elements is larger than the file ({} bytes)", where,
                       quoted(key.text), numel, file_->size());
    }
    auto found = storage_by_key_.find(key.text);
    if (found != storage_by_key_.end()) {
      const StorageSpec& s = storages_[found->second];
      if (s.type != t || s.numel != static_cast<uint64_t>(numel)) {
        return data_loss("{}: storage {} is {} torch.{}, but earlier {} torch.{}", where,
                         quoted(key.text), numel, kStorageTypes[static_cast<size_t>(t)].name,
                         s.numel, kStorageTypes[static_cast<size_t>(s.type)].name);
      }
      *out = found->second;
      return ok_status();
    }
    *out = storages_.size();
    storages_.push_back({std::string(key.text), t, static_cast<uint64_t>(numel)});
    first_users_.push_back(specs_.size());
    storage_by_key_.emplace(storages_.back().key, *out);
    return ok_status();
  }

  // The name of the first tensor that uses `s`, for messages.
  std::string first_user(const StorageSpec& s) const {
    const size_t i = static_cast<size_t>(&s - storages_.data());
    return first_users_[i] < specs_.size() ? specs_[first_users_[i]].name : std::string();
  }

  // --------------------------------------------------------------------------- the tensors

  Status finish() {
    out_.tensors_.reserve(specs_.size());
    for (const TensorSpec& spec : specs_) {
      TorchTensor t;
      RINFER_RETURN_IF_ERROR(make_tensor(spec, &t));
      out_.tensors_.push_back(std::move(t));
    }
    return ok_status();
  }

  Status make_tensor(const TensorSpec& spec, TorchTensor* t) {
    const std::string at = fmt::format("{}: tensor {}", path_, quoted(spec.name));
    const StorageSpec& s = storages_[spec.storage];
    const uint64_t es = static_cast<uint64_t>(dtype_traits(spec.dtype).block_bytes);
    const uint64_t storage_elems = s.nbytes / es;
    t->name = spec.name;
    t->dtype = spec.dtype;
    t->shape = spec.shape;
    const std::string layout =
        fmt::format("size {}, stride {}", dims_string(spec.shape), dims_string(spec.stride));
    // numel, and the last element's offset from the first.
    uint64_t numel = 1;
    uint64_t span = 0;
    bool overflow = false;
    for (size_t i = 0; i < spec.shape.size(); ++i) {
      const auto d = static_cast<uint64_t>(spec.shape[i]);
      uint64_t reach = 0;
      overflow |= __builtin_mul_overflow(numel, d, &numel);
      if (d > 0) {
        overflow |= __builtin_mul_overflow(d - 1, static_cast<uint64_t>(spec.stride[i]), &reach);
        overflow |= __builtin_add_overflow(span, reach, &span);
      }
    }
    uint64_t end = 0;  // one past the last element, in elements of the storage
    if (!overflow && numel > 0) {
      overflow = __builtin_add_overflow(spec.offset, span, &end) || end == UINT64_MAX;
      ++end;
    }
    if (!overflow && numel == 0) end = spec.offset;
    if (overflow || end > storage_elems) {
      return out_of_range(
          "{}: {}, storage offset {}: elements up to {} lie outside its storage {} of {} "
          "elements",
          at, layout, spec.offset, overflow ? std::string("overflow") : std::to_string(end),
          quoted(s.key), storage_elems);
    }
    t->numel = numel;
    t->nbytes = numel * es;
    const uint8_t* base = s.data + spec.offset * es;
    t->data = base;
    if (numel <= 1 || is_contiguous(spec)) return ok_status();
    if (!is_permuted_dense(spec)) {
      return unsupported(
          "{}: not dense ({}): a strided or overlapping view; only dense tensors are supported", at,
          layout);
    }
    if (!options_.copy_permuted) {
      return unsupported("{}: stored in another dimension order ({}), not row-major", at, layout);
    }
    if (t->nbytes > file_->size() - copied_bytes_) {
      return out_of_range(
          "{}: copying permuted tensors to row-major would take more than the file's "
          "{} bytes",
          at, file_->size());
    }
    copied_bytes_ += t->nbytes;
    auto copy = std::make_shared<std::vector<uint8_t>>(t->nbytes);
    copy_to_row_major(spec, es, base, copy->data());
    t->data = copy->data();
    t->copied = true;
    out_.copies_.push_back(std::move(copy));
    return ok_status();
  }

  // Row-major strides (size-1 dimensions may have any).
  static bool is_contiguous(const TensorSpec& s) {
    int64_t expected = 1;
    for (size_t i = s.shape.size(); i-- > 0;) {
      if (s.shape[i] != 1 && s.stride[i] != expected) return false;
      expected *= s.shape[i];
    }
    return true;
  }

  // The strides are row-major strides of some order of the dimensions: no gaps, no overlaps.
  static bool is_permuted_dense(const TensorSpec& s) {
    std::vector<size_t> dims;
    for (size_t i = 0; i < s.shape.size(); ++i) {
      if (s.shape[i] != 1) dims.push_back(i);
    }
    std::sort(dims.begin(), dims.end(),
              [&](size_t a, size_t b) { return s.stride[a] > s.stride[b]; });
    int64_t expected = 1;
    for (size_t j = dims.size(); j-- > 0;) {
      if (s.stride[dims[j]] != expected) return false;
      expected *= s.shape[dims[j]];
    }
    return true;
  }

  static void copy_to_row_major(const TensorSpec& s, uint64_t es, const uint8_t* src,
                                uint8_t* dst) {
    const size_t n = s.shape.size();
    std::vector<int64_t> idx(n, 0);
    uint64_t at = 0;  // source element offset
    const uint64_t numel =
        std::accumulate(s.shape.begin(), s.shape.end(), uint64_t{1},
                        [](uint64_t a, int64_t d) { return a * static_cast<uint64_t>(d); });
    for (uint64_t e = 0; e < numel; ++e) {
      std::memcpy(dst + e * es, src + at * es, es);
      for (size_t d = n; d-- > 0;) {
        if (++idx[d] < s.shape[d]) {
          at += static_cast<uint64_t>(s.stride[d]);
          break;
        }
        at -= static_cast<uint64_t>(s.stride[d]) * static_cast<uint64_t>(s.shape[d] - 1);
        idx[d] = 0;
      }
    }
  }

  std::shared_ptr<const MappedFile> file_;
  const std::string& path_;
  TorchReadOptions options_;
  uint64_t pos_ = 0;  // legacy: where the next pickle or storage starts
  std::vector<StorageSpec> storages_;
  std::vector<size_t> first_users_;  // per storage: index into specs_ of its first tensor
  std::map<std::string, size_t, std::less<>> storage_by_key_;
  std::vector<TensorSpec> specs_;
  uint64_t copied_bytes_ = 0;
  TorchCheckpoint out_;
};

std::string_view torch_format_name(TorchFormat format) {
  return format == TorchFormat::kZip ? "pytorch (zip)" : "pytorch (legacy)";
}

Result<TorchCheckpoint> TorchCheckpoint::open(const std::string& path,
                                              const TorchReadOptions& options) {
  RINFER_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  return parse(std::move(file), options);
}

Result<TorchCheckpoint> TorchCheckpoint::parse(std::shared_ptr<const MappedFile> file,
                                               const TorchReadOptions& options) {
  if (file == nullptr) return invalid_argument("TorchCheckpoint::parse: null file");
  const std::string path = file->path();
  try {
    return TorchReader(std::move(file), options).run();
  } catch (const std::bad_alloc&) {
    return out_of_memory("{}: out of memory", path);
  } catch (const std::exception& e) {
    return internal_error("{}: unexpected exception: {}", path, e.what());
  }
}

Result<TorchCheckpoint> TorchCheckpoint::from_f32_tensors(std::string name,
                                                          std::vector<F32Tensor> tensors) {
  TorchCheckpoint c;
  c.file_ = MappedFile::from_bytes(name, "");
  c.format_ = TorchFormat::kZip;
  for (F32Tensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return invalid_argument("{}: tensor '{}' has a negative dimension", name, t.name);
      numel *= static_cast<uint64_t>(d);
    }
    if (numel != t.values.size()) {
      return invalid_argument("{}: tensor '{}' has {} values for {} elements", name, t.name,
                              t.values.size(), numel);
    }
    if (!c.by_name_.emplace(t.name, c.tensors_.size()).second) {
      return invalid_argument("{}: two tensors named '{}'", name, t.name);
    }
    auto bytes = std::make_shared<std::vector<uint8_t>>(numel * sizeof(float));
    if (numel > 0) std::memcpy(bytes->data(), t.values.data(), bytes->size());
    TorchTensor tt;
    tt.name = std::move(t.name);
    tt.dtype = DType::kF32;
    tt.shape = std::move(t.shape);
    tt.numel = numel;
    tt.nbytes = bytes->size();
    tt.data = bytes->data();
    tt.copied = true;
    c.copies_.push_back(std::move(bytes));
    c.tensors_.push_back(std::move(tt));
    t.values = {};
  }
  return c;
}

bool TorchCheckpoint::sniff(std::span<const uint8_t> head) {
  if (head.size() >= 4 && std::memcmp(head.data(), "PK\x03\x04", 4) == 0) return true;
  // PROTO 2..5, an optional FRAME, then LONG1 of 10 bytes: the magic number.
  if (head.size() < 2 || head[0] != 0x80 || head[1] < 2 || head[1] > 5) return false;
  size_t at = 2;
  if (head.size() > at && head[at] == 0x95) at += 9;
  if (head.size() < at + 2 + kLegacyMagic.size() || head[at] != 0x8a || head[at + 1] != 10) {
    return false;
  }
  return std::memcmp(head.data() + at + 2, kLegacyMagic.data(), kLegacyMagic.size()) == 0;
}

const TorchTensor* TorchCheckpoint::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace rinfer
