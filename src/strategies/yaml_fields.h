// Strict reading of YAML mappings for recipes (and, later, every config schema): each mapping
// declares its keys; values are type- and range-checked; every error names the file, the line
// and column, and the key path ("sampling.top_p").
//
// Types follow YAML 1.2's core schema on plain scalars only: a quoted scalar is always a
// string, so `top_p: "0.9"` is a type error rather than a silent conversion.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rinfer/status.h"

namespace rinfer {

// A numeric range for messages and checks: "a number in (0, 1]".
struct NumberRange {
  double lo;
  double hi;
  bool lo_open = false;
  bool hi_open = false;
  bool contains(double v) const;
  std::string to_string() const;
};

class YamlMap {
 public:
  // Limits on what a config may hold, so that a huge file fails fast and small.
  static constexpr size_t kMaxListItems = 1024;
  static constexpr size_t kMaxStringBytes = 4096;

  // `node` must be a mapping (error otherwise); `path` is its key path ("" for the root),
  // `key_node` the node that named it (for the line number when it is null).
  static Result<YamlMap> from(const YAML::Node& node, std::string file, std::string path,
                              const YAML::Node& key_node = YAML::Node());

  // Unknown and duplicated keys are errors; the message lists the allowed keys.
  Status check_keys(std::initializer_list<std::string_view> allowed) const;
  Status check_keys(const std::vector<std::string_view>& allowed) const;
  // A key that must be present.
  Status require(std::string_view key) const;

  bool has(std::string_view key) const { return find(key) != nullptr; }
  const std::string& path() const { return path_; }
  std::string key_path(std::string_view key) const;
  const std::string& file() const { return file_; }
  // "file:line:col" of a key's value (the key itself when the value is empty), or the file.
  std::string location(std::string_view key) const;
  // The keys present, in file order.
  std::vector<std::string> keys() const;

  // Absent keys give nullopt; present ones must have the right type and range.
  Result<std::optional<bool>> get_bool(std::string_view key) const;
  Result<std::optional<int64_t>> get_int(std::string_view key, int64_t lo, int64_t hi) const;
  Result<std::optional<double>> get_number(std::string_view key, const NumberRange& r) const;
  Result<std::optional<std::string>> get_string(std::string_view key) const;
  // get_string with a value for an absent key.
  Result<std::string> get_string_or(std::string_view key, std::string fallback) const;
  // A list of at most max_items non-empty strings of at most max_bytes each.
  Result<std::optional<std::vector<std::string>>> get_string_list(
      std::string_view key, size_t max_items = kMaxListItems,
      size_t max_bytes = kMaxStringBytes) const;
  // A list of integers, each in [lo, hi].
  Result<std::optional<std::vector<int64_t>>> get_int_list(std::string_view key, int64_t lo,
                                                           int64_t hi) const;
  // A list of numbers, each in r.
  Result<std::optional<std::vector<double>>> get_number_list(std::string_view key,
                                                             const NumberRange& r) const;
  // A plain string that must be one of `names`; returns its index.
  Result<std::optional<size_t>> get_enum(std::string_view key,
                                         const std::vector<std::string_view>& names) const;
  Result<std::optional<YamlMap>> get_map(std::string_view key) const;

  // "file:line:col: key.path: message" as kInvalidArgument.
  Status error(std::string_view key, const std::string& message) const;

 private:
  struct Entry {
    std::string key;
    YAML::Node key_node;
    YAML::Node value;
  };
  const Entry* find(std::string_view key) const;
  // The plain scalar text of a value, or an error saying a `what` was expected.
  Result<std::string> plain_scalar(const Entry& e, std::string_view what) const;
  Status error_at(const YAML::Node& node, const YAML::Node& fallback, std::string_view key,
                  const std::string& message) const;

  std::string file_;
  std::string path_;
  YAML::Node key_node_;
  std::vector<Entry> entries_;
};

// What a node holds, for "got ..." messages: "a mapping", "a list", "nothing", "the string
// \"0.5\"", "1.5".
std::string describe_node(const YAML::Node& node);

}  // namespace rinfer
