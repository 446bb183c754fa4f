// The restricted unpickler: a loop over opcodes with an explicit stack, marks and memo of value
// indices. Every read is bounds-checked; every new value and every nesting level counted.
#include "formats/pickle.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "core/strings.h"

namespace rinfer {

static_assert(std::endian::native == std::endian::little,
              "the pickle reader assumes little-endian");

namespace {

// The opcodes this reader handles.
enum Op : uint8_t {
  kMark = '(',
  kStop = '.',
  kBinFloat = 'G',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNoneOp = 'N',
  kBinPersId = 'Q',
  kReduce = 'R',
  kBinString = 'T',
  kShortBinString = 'U',
  kBinUnicode = 'X',
  kAppend = 'a',
  kBuild = 'b',
  kGlobalOp = 'c',
  kAppends = 'e',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTupleOp = 't',
  kSetItems = 'u',
  kEmptyDict = '}',
  kEmptyList = ']',
  kEmptyTuple = ')',
  kShortBinBytes = 'C',
  kBinBytes = 'B',
  kProto = 0x80,
  kNewObj = 0x81,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kBinBytes8 = 0x8e,
  kStackGlobal = 0x93,
  kMemoize = 0x94,
  kFrame = 0x95,
};

// Names of the standard opcodes this reader refuses, for messages.
std::string_view refused_opcode_name(uint8_t op) {
  switch (op) {
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 'P': return "PERSID";
    case 'd': return "DICT";
    case 'l': return "LIST";
    case 'g': return "GET";
    case 'p': return "PUT";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case '0': return "POP";
    case '2': return "DUP";
    case '1': return "POP_MARK";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x8b: return "LONG4";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return {};
  }
}

class Unpickler {
 public:
  Unpickler(std::span<const uint8_t> bytes, uint64_t base, std::span<const PickleGlobal> allowed,
            const PickleLimits& limits)
      : bytes_(bytes), base_(base), allowed_(allowed), limits_(limits) {}

  Result<Pickle> run() {
    while (true) {
      op_at_ = pos_;
      if (pos_ >= bytes_.size()) {
        return data_loss("offset {}: the pickle ends without a STOP opcode", base_ + pos_);
      }
      const uint8_t op = bytes_[pos_++];
      if (op == kStop) break;
      Status s = step(op);
      if (!s.ok()) return s;
    }
    if (!marks_.empty() || stack_.size() != 1) {
      return fail(
          "STOP with {} value{} on the stack and {} open MARK{} (expected exactly one value)",
          stack_.size(), stack_.size() == 1 ? "" : "s", marks_.size(),
          marks_.size() == 1 ? "" : "s");
    }
    out_.root = stack_.back();
    out_.end = pos_;
    return std::move(out_);
  }

 private:
  template <typename... Args>
  Status fail(fmt::format_string<Args...> f, Args&&... args) const {
    return data_loss("offset {}: {}", base_ + op_at_, fmt::format(f, std::forward<Args>(args)...));
  }

  uint64_t remaining() const { return bytes_.size() - pos_; }

  Status need(uint64_t n, std::string_view what) const {
    if (n <= remaining()) return ok_status();
    return fail("{} needs {} bytes, but the pickle has {} left", what, n, remaining());
  }

  template <typename T>
  Status read(T* out, std::string_view what) {
    RINFER_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return ok_status();
  }

  Status read_view(uint64_t n, std::string_view what, std::string_view* out) {
    if (n > remaining()) {
      return fail("{} length {} runs past the end of the pickle ({} bytes left)", what, n,
                  remaining());
    }
    *out = std::string_view(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return ok_status();
  }

  // A new value of `kind`; its index in *id.
  Status make(PickleKind kind, uint32_t* id) {
    if (out_.values.size() >= limits_.max_values) {
      return fail("more than {} values: refused", limits_.max_values);
    }
    *id = static_cast<uint32_t>(out_.values.size());
    PickleValue& v = out_.values.emplace_back();
    v.kind = kind;
    v.offset = base_ + op_at_;
    return ok_status();
  }

  Status push_new(PickleKind kind, PickleValue** v) {
    uint32_t id = 0;
    RINFER_RETURN_IF_ERROR(make(kind, &id));
    stack_.push_back(id);
    *v = &out_.values[id];
    return ok_status();
  }

  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }

  Status pop(uint32_t* id) {
    if (stack_.size() <= floor()) return fail("stack underflow");
    *id = stack_.back();
    stack_.pop_back();
    return ok_status();
  }

  Status top(uint32_t* id) const {
    if (stack_.size() <= floor()) return fail("stack underflow");
    *id = stack_.back();
    return ok_status();
  }

  // The values above the last MARK, which is removed.
  Status pop_mark(std::vector<uint32_t>* items) {
    if (marks_.empty()) return fail("no MARK to pop to");
    const size_t m = marks_.back();
    marks_.pop_back();
    items->assign(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return ok_status();
  }

  // Appends `child` to container `parent`, keeping the depth bounded.
  Status add_child(uint32_t parent, uint32_t child) {
    PickleValue& p = out_.values[parent];
    const uint32_t d = out_.values[child].depth + 1;
    if (d > limits_.max_depth)
      return fail("values nested deeper than {}: refused", limits_.max_depth);
    p.depth = std::max(p.depth, d);
    p.items.push_back(child);
    return ok_status();
  }

  Status make_tuple(const std::vector<uint32_t>& items) {
    uint32_t id = 0;
    RINFER_RETURN_IF_ERROR(make(PickleKind::kTuple, &id));
    out_.values[id].items.reserve(items.size());
    for (uint32_t c : items) RINFER_RETURN_IF_ERROR(add_child(id, c));
    stack_.push_back(id);
    return ok_status();
  }

  Status tuple_n(size_t n) {
    if (stack_.size() < floor() + n) return fail("stack underflow (TUPLE{} needs {} values)", n, n);
    std::vector<uint32_t> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return make_tuple(items);
  }

  Status memo_put(uint64_t key) {
    uint32_t id = 0;
    RINFER_RETURN_IF_ERROR(top(&id));
    if (memo_.size() >= limits_.max_values && memo_.find(key) == memo_.end()) {
      return fail("more than {} memo entries: refused", limits_.max_values);
    }
    memo_[key] = id;
    return ok_status();
  }

  Status memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) return fail("memo key {} was never stored", key);
    stack_.push_back(it->second);
    return ok_status();
  }

  Status string_value(PickleKind kind, uint64_t len, std::string_view what) {
    std::string_view text;
    RINFER_RETURN_IF_ERROR(read_view(len, what, &text));
    PickleValue* v = nullptr;
    RINFER_RETURN_IF_ERROR(push_new(kind, &v));
    v->text = text;
    return ok_status();
  }

  Status int_value(int64_t n) {
    PickleValue* v = nullptr;
    RINFER_RETURN_IF_ERROR(push_new(PickleKind::kInt, &v));
    v->int_value = n;
    return ok_status();
  }

  Status long1() {
    uint8_t n = 0;
    RINFER_RETURN_IF_ERROR(read(&n, "LONG1 length"));
    std::string_view b;
    RINFER_RETURN_IF_ERROR(read_view(n, "LONG1", &b));
    if (n > 8) {
      PickleValue* v = nullptr;
      RINFER_RETURN_IF_ERROR(push_new(PickleKind::kBigInt, &v));
      v->text = b;
      return ok_status();
    }
    uint64_t u = 0;
    for (size_t i = 0; i < n; ++i) u |= uint64_t{static_cast<uint8_t>(b[i])} << (8 * i);
    if (n > 0 && n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80) != 0) {
      u |= ~uint64_t{0} << (8 * n);  // sign-extend
    }
    return int_value(static_cast<int64_t>(u));
  }

  Status bin_float() {
    uint64_t bits = 0;
    RINFER_RETURN_IF_ERROR(read(&bits, "BINFLOAT"));
    PickleValue* v = nullptr;
    RINFER_RETURN_IF_ERROR(push_new(PickleKind::kFloat, &v));
    v->float_value = std::bit_cast<double>(__builtin_bswap64(bits));  // big-endian in the pickle
    return ok_status();
  }

  // A line of GLOBAL's text, without its newline.
  Status read_line(std::string_view what, std::string_view* out) {
    const uint64_t limit = std::min<uint64_t>(remaining(), limits_.max_name_bytes + 1);
    const auto* begin = reinterpret_cast<const char*>(bytes_.data() + pos_);
    const void* nl = std::memchr(begin, '\n', limit);
    if (nl == nullptr) {
      if (limit < remaining() || limit > limits_.max_name_bytes) {
        return fail("GLOBAL {} is longer than {} bytes", what, limits_.max_name_bytes);
      }
      return fail("GLOBAL {} runs past the end of the pickle (no newline)", what);
    }
    const size_t n = static_cast<size_t>(static_cast<const char*>(nl) - begin);
    *out = std::string_view(begin, n);
    pos_ += n + 1;
    return ok_status();
  }

  Status push_global(std::string_view module, std::string_view name) {
    for (size_t i = 0; i < allowed_.size(); ++i) {
      if (allowed_[i].module == module && allowed_[i].name == name) {
        PickleValue* v = nullptr;
        RINFER_RETURN_IF_ERROR(push_new(PickleKind::kGlobal, &v));
        v->global = static_cast<uint32_t>(i);
        return ok_status();
      }
    }
    return fail("global '{}.{}' is not allowed (only the globals a state dict needs are)",
                printable(module, 120), printable(name, 120));
  }

  Status stack_global() {
    uint32_t name = 0;
    uint32_t module = 0;
    RINFER_RETURN_IF_ERROR(pop(&name));
    RINFER_RETURN_IF_ERROR(pop(&module));
    const PickleValue& n = out_.values[name];
    const PickleValue& m = out_.values[module];
    if (n.kind != PickleKind::kString || m.kind != PickleKind::kString) {
      return fail("STACK_GLOBAL needs two strings, got {} and {}", out_.describe(module, allowed_),
                  out_.describe(name, allowed_));
    }
    return push_global(m.text, n.text);
  }

  std::string global_name(uint32_t g) const {
    return fmt::format("{}.{}", allowed_[g].module, allowed_[g].name);
  }

  // REDUCE (and NEWOBJ, which only makes dicts): callable(*args) as a value.
  Status reduce(bool newobj) {
    uint32_t args = 0;
    uint32_t callable = 0;
    RINFER_RETURN_IF_ERROR(pop(&args));
    RINFER_RETURN_IF_ERROR(pop(&callable));
    const PickleValue& c = out_.values[callable];
    const char* opname = newobj ? "NEWOBJ" : "REDUCE";
    if (c.kind != PickleKind::kGlobal) {
      return fail("{} of {}: only allowed globals can be called", opname,
                  out_.describe(callable, allowed_));
    }
    if (out_.values[args].kind != PickleKind::kTuple) {
      return fail("{} of '{}' with {} as arguments, expected a tuple", opname,
                  global_name(c.global), out_.describe(args, allowed_));
    }
    const uint32_t g = c.global;
    const PickleGlobalUse use = allowed_[g].use;
    if (use == PickleGlobalUse::kDictType) {
      if (!out_.values[args].items.empty()) {
        return fail("{} of '{}' with arguments: only an empty one is allowed", opname,
                    global_name(g));
      }
      PickleValue* v = nullptr;
      return push_new(PickleKind::kDict, &v);
    }
    if (use != PickleGlobalUse::kCallable || newobj) {
      return fail("{} of '{}' is not allowed: it is not a callable a state dict uses", opname,
                  global_name(g));
    }
    uint32_t id = 0;
    RINFER_RETURN_IF_ERROR(make(PickleKind::kCall, &id));
    PickleValue& v = out_.values[id];
    v.global = g;
    v.ref = args;
    v.depth = out_.values[args].depth + 1;
    if (v.depth > limits_.max_depth) {
      return fail("values nested deeper than {}: refused", limits_.max_depth);
    }
    stack_.push_back(id);
    return ok_status();
  }

  Status build() {
    uint32_t state = 0;
    uint32_t target = 0;
    RINFER_RETURN_IF_ERROR(pop(&state));
    RINFER_RETURN_IF_ERROR(top(&target));
    PickleValue& t = out_.values[target];
    if (t.kind != PickleKind::kDict && t.kind != PickleKind::kCall) {
      return fail("BUILD on {}: only dicts and rebuilt objects take a state",
                  out_.describe(target, allowed_));
    }
    t.state = state;
    return ok_status();
  }

  Status set_items(bool many) {
    std::vector<uint32_t> items;
    if (many) {
      RINFER_RETURN_IF_ERROR(pop_mark(&items));
      if (items.size() % 2 != 0)
        return fail("SETITEMS with an odd number ({}) of values", items.size());
    } else {
      items.resize(2);
      RINFER_RETURN_IF_ERROR(pop(&items[1]));
      RINFER_RETURN_IF_ERROR(pop(&items[0]));
    }
    uint32_t dict = 0;
    RINFER_RETURN_IF_ERROR(top(&dict));
    if (out_.values[dict].kind != PickleKind::kDict) {
      return fail("{} on {}, expected a dict", many ? "SETITEMS" : "SETITEM",
                  out_.describe(dict, allowed_));
    }
    for (uint32_t c : items) RINFER_RETURN_IF_ERROR(add_child(dict, c));
    return ok_status();
  }

  Status append(bool many) {
    std::vector<uint32_t> items;
    if (many) {
      RINFER_RETURN_IF_ERROR(pop_mark(&items));
    } else {
      items.resize(1);
      RINFER_RETURN_IF_ERROR(pop(&items[0]));
    }
    uint32_t list = 0;
    RINFER_RETURN_IF_ERROR(top(&list));
    if (out_.values[list].kind != PickleKind::kList) {
      return fail("{} on {}, expected a list", many ? "APPENDS" : "APPEND",
                  out_.describe(list, allowed_));
    }
    for (uint32_t c : items) RINFER_RETURN_IF_ERROR(add_child(list, c));
    return ok_status();
  }

  Status step(uint8_t op) {
    PickleValue* v = nullptr;
    switch (op) {
      case kProto: {
        uint8_t version = 0;
        RINFER_RETURN_IF_ERROR(read(&version, "PROTO"));
        if (version > 5)
          return unsupported("offset {}: pickle protocol {}", base_ + op_at_, version);
        return ok_status();
      }
      case kFrame: {
        uint64_t n = 0;
        RINFER_RETURN_IF_ERROR(read(&n, "FRAME"));
        if (n > remaining()) {
          return fail("FRAME of {} bytes runs past the end of the pickle ({} bytes left)", n,
                      remaining());
        }
        return ok_status();  // frames only group opcodes; nothing to do
      }
      case kMark:
        if (marks_.size() >= limits_.max_depth) {
          return fail("more than {} open MARKs: refused", limits_.max_depth);
        }
        marks_.push_back(stack_.size());
        return ok_status();
      case kEmptyDict: return push_new(PickleKind::kDict, &v);
      case kEmptyList: return push_new(PickleKind::kList, &v);
      case kEmptyTuple: return push_new(PickleKind::kTuple, &v);
      case kNoneOp: return push_new(PickleKind::kNone, &v);
      case kNewTrue:
      case kNewFalse:
        RINFER_RETURN_IF_ERROR(push_new(PickleKind::kBool, &v));
        v->flag = op == kNewTrue;
        return ok_status();
      case kBinPut: {
        uint8_t k = 0;
        RINFER_RETURN_IF_ERROR(read(&k, "BINPUT"));
        return memo_put(k);
      }
      case kLongBinPut: {
        uint32_t k = 0;
        RINFER_RETURN_IF_ERROR(read(&k, "LONG_BINPUT"));
        return memo_put(k);
      }
      case kMemoize: return memo_put(memo_.size());
      case kBinGet: {
        uint8_t k = 0;
        RINFER_RETURN_IF_ERROR(read(&k, "BINGET"));
        return memo_get(k);
      }
      case kLongBinGet: {
        uint32_t k = 0;
        RINFER_RETURN_IF_ERROR(read(&k, "LONG_BINGET"));
        return memo_get(k);
      }
      case kBinInt: {
        int32_t n = 0;
        RINFER_RETURN_IF_ERROR(read(&n, "BININT"));
        return int_value(n);
      }
      case kBinInt1: {
        uint8_t n = 0;
        RINFER_RETURN_IF_ERROR(read(&n, "BININT1"));
        return int_value(n);
      }
      case kBinInt2: {
        uint16_t n = 0;
        RINFER_RETURN_IF_ERROR(read(&n, "BININT2"));
        return int_value(n);
      }
      case kLong1: return long1();
      case kBinFloat: return bin_float();
      case kShortBinUnicode:
      case kShortBinString:
      case kShortBinBytes: {
        uint8_t n = 0;
        RINFER_RETURN_IF_ERROR(read(&n, "string length"));
        return string_value(op == kShortBinBytes ? PickleKind::kBytes : PickleKind::kString, n,
                            op == kShortBinBytes ? "SHORT_BINBYTES" : "SHORT_BINUNICODE");
      }
      case kBinUnicode:
      case kBinBytes: {
        uint32_t n = 0;
        RINFER_RETURN_IF_ERROR(read(&n, "string length"));
        return string_value(op == kBinBytes ? PickleKind::kBytes : PickleKind::kString, n,
                            op == kBinBytes ? "BINBYTES" : "BINUNICODE");
      }
      case kBinString: {
        int32_t n = 0;
        RINFER_RETURN_IF_ERROR(read(&n, "BINSTRING length"));
        if (n < 0) return fail("BINSTRING length {} is negative", n);
        return string_value(PickleKind::kString, static_cast<uint64_t>(n), "BINSTRING");
      }
      case kBinUnicode8:
      case kBinBytes8: {
        uint64_t n = 0;
        RINFER_RETURN_IF_ERROR(read(&n, "string length"));
        return string_value(op == kBinBytes8 ? PickleKind::kBytes : PickleKind::kString, n,
                            op == kBinBytes8 ? "BINBYTES8" : "BINUNICODE8");
      }
      case kTupleOp: {
        std::vector<uint32_t> items;
        RINFER_RETURN_IF_ERROR(pop_mark(&items));
        return make_tuple(items);
      }
      case kTuple1: return tuple_n(1);
      case kTuple2: return tuple_n(2);
      case kTuple3: return tuple_n(3);
      case kGlobalOp: {
        std::string_view module;
        std::string_view name;
        RINFER_RETURN_IF_ERROR(read_line("module", &module));
        RINFER_RETURN_IF_ERROR(read_line("name", &name));
        return push_global(module, name);
      }
      case kStackGlobal: return stack_global();
      case kReduce: return reduce(false);
      case kNewObj: return reduce(true);
      case kBuild: return build();
      case kSetItem: return set_items(false);
      case kSetItems: return set_items(true);
      case kAppend: return append(false);
      case kAppends: return append(true);
      case kBinPersId: {
        uint32_t pid = 0;
        RINFER_RETURN_IF_ERROR(pop(&pid));
        const uint32_t depth = out_.values[pid].depth + 1;
        if (depth > limits_.max_depth) {
          return fail("values nested deeper than {}: refused", limits_.max_depth);
        }
        uint32_t id = 0;
        RINFER_RETURN_IF_ERROR(make(PickleKind::kPersistentId, &id));
        out_.values[id].ref = pid;
        out_.values[id].depth = depth;
        stack_.push_back(id);
        return ok_status();
      }
      default: {
        const std::string_view name = refused_opcode_name(op);
        if (!name.empty()) return fail("opcode {} (0x{:02x}) is not allowed", name, op);
        return fail("unknown opcode 0x{:02x}", op);
      }
    }
  }

  std::span<const uint8_t> bytes_;
  uint64_t base_ = 0;
  std::span<const PickleGlobal> allowed_;
  PickleLimits limits_;
  uint64_t pos_ = 0;
  uint64_t op_at_ = 0;  // where the current opcode starts
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;  // stack sizes at each MARK
  std::unordered_map<uint64_t, uint32_t> memo_;
  Pickle out_;
};

}  // namespace

std::string_view pickle_kind_name(PickleKind kind) {
  switch (kind) {
    case PickleKind::kNone: return "None";
    case PickleKind::kBool: return "a bool";
    case PickleKind::kInt: return "an int";
    case PickleKind::kBigInt: return "a big int";
    case PickleKind::kFloat: return "a float";
    case PickleKind::kString: return "a string";
    case PickleKind::kBytes: return "bytes";
    case PickleKind::kTuple: return "a tuple";
    case PickleKind::kList: return "a list";
    case PickleKind::kDict: return "a dict";
    case PickleKind::kGlobal: return "a global";
    case PickleKind::kCall: return "an object";
    case PickleKind::kPersistentId: return "a persistent id";
  }
  return "a value";
}

bool Pickle::is_string(uint32_t id, std::string_view s) const {
  return values[id].kind == PickleKind::kString && values[id].text == s;
}

std::string Pickle::describe(uint32_t id, std::span<const PickleGlobal> globals) const {
  const PickleValue& v = values[id];
  switch (v.kind) {
    case PickleKind::kBool: return v.flag ? "True" : "False";
    case PickleKind::kInt: return fmt::format("the int {}", v.int_value);
    case PickleKind::kFloat: return fmt::format("the float {}", v.float_value);
    case PickleKind::kString: return fmt::format("the string {}", quoted(v.text, 60));
    case PickleKind::kTuple:
    case PickleKind::kList:
    case PickleKind::kDict: {
      const size_t n = v.kind == PickleKind::kDict ? v.items.size() / 2 : v.items.size();
      return fmt::format("{} of {}", pickle_kind_name(v.kind), n);
    }
    case PickleKind::kGlobal:
    case PickleKind::kCall:
      if (v.global < globals.size()) {
        return fmt::format("{} '{}.{}'", v.kind == PickleKind::kGlobal ? "the global" : "a call of",
                           globals[v.global].module, globals[v.global].name);
      }
      return std::string(pickle_kind_name(v.kind));
    default: return std::string(pickle_kind_name(v.kind));
  }
}

Result<Pickle> read_pickle(std::span<const uint8_t> bytes, uint64_t base_offset,
                           std::span<const PickleGlobal> allowed, const PickleLimits& limits) {
  return Unpickler(bytes, base_offset, allowed, limits).run();
}

}  // namespace rinfer
