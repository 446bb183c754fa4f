// A restricted reader of Python pickles: the opcodes that a `torch.save`d state dict uses
// (protocols 2 to 5) and nothing else. It never executes anything: a global is looked up in an
// allow-list given by the caller and becomes a value; REDUCE of an allowed callable becomes a
// kCall value holding the callable and its arguments, for the caller to interpret.
//
// Values live in one flat array and refer to each other by index, so nothing recurses over
// values and shared references (the memo) cost nothing. Every length is checked against the
// bytes that remain before anything is read; nesting, the memo and the value count are capped.
// Strings and bytes are views into the input, which must outlive the result.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

enum class PickleKind : uint8_t {
  kNone,
  kBool,
  kInt,     // fits in int64
  kBigInt,  // LONG1 of more than 8 bytes: `text` holds its little-endian two's complement bytes
  kFloat,
  kString,  // BINUNICODE and friends, and protocol 0-2 BINSTRING (text as in the file)
  kBytes,
  kTuple,
  kList,
  kDict,          // dict or collections.OrderedDict, in insertion order
  kGlobal,        // an allowed global: `global` indexes the allow-list
  kCall,          // REDUCE of an allowed callable `global` with the arguments tuple `ref`
  kPersistentId,  // BINPERSID of the value `ref`
};

inline constexpr uint32_t kNoPickleValue = UINT32_MAX;

// How an allowed global may be used.
enum class PickleGlobalUse : uint8_t {
  kValue,     // only pushed as a value (a storage type, a dtype): REDUCE of it is refused
  kCallable,  // REDUCE makes a kCall value (nothing is called)
  kDictType,  // REDUCE (or NEWOBJ) with no arguments makes an empty dict: collections.OrderedDict
};

struct PickleGlobal {
  std::string_view module;  // "torch._utils"
  std::string_view name;    // "_rebuild_tensor_v2"
  PickleGlobalUse use = PickleGlobalUse::kValue;
  int tag = 0;  // for the caller: what this global stands for
};

struct PickleValue {
  PickleKind kind = PickleKind::kNone;
  bool flag = false;                // kBool
  int64_t int_value = 0;            // kInt
  double float_value = 0;           // kFloat
  std::string_view text;            // kString, kBytes, kBigInt
  uint32_t global = 0;              // kGlobal, kCall: index into the allow-list
  uint32_t ref = kNoPickleValue;    // kCall: the arguments tuple; kPersistentId: the id
  uint32_t state = kNoPickleValue;  // kDict, kCall: the state BUILD gave it (attributes)
  uint32_t depth = 0;               // containers: 1 + the deepest element
  std::vector<uint32_t> items;      // kTuple, kList: elements; kDict: key, value, key, value...
  uint64_t offset = 0;              // where it was made (base_offset + position of the opcode)
};

struct PickleLimits {
  uint32_t max_values = uint32_t{1} << 22;  // values made (and memo entries)
  uint32_t max_depth = 64;                  // nesting of containers, and open MARKs
  uint32_t max_name_bytes = 512;            // a GLOBAL's module or name
};

struct Pickle {
  std::vector<PickleValue> values;
  uint32_t root = kNoPickleValue;
  uint64_t end = 0;  // offset just past STOP, relative to the start of the bytes read

  const PickleValue& at(uint32_t id) const { return values[id]; }
  const PickleValue& root_value() const { return values[root]; }
  // True when value `id` is the string `s`.
  bool is_string(uint32_t id, std::string_view s) const;
  // "the string 'abc'", "an int (3)", "a tuple of 2", ... for messages.
  std::string describe(uint32_t id, std::span<const PickleGlobal> globals) const;
};

// "a tuple", "None", ... for messages.
std::string_view pickle_kind_name(PickleKind kind);

// Reads one pickle from the start of `bytes` up to and including its STOP opcode; bytes after it
// are left alone (Pickle::end says where it stopped). Messages name the offset as
// `base_offset + position` ("offset 78: global 'posix.system' is not allowed ...") and carry no
// file name: the caller adds that context.
Result<Pickle> read_pickle(std::span<const uint8_t> bytes, uint64_t base_offset,
                           std::span<const PickleGlobal> allowed, const PickleLimits& limits = {});

}  // namespace rinfer
