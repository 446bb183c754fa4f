#include "strategies/yaml_fields.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace rinfer {

namespace {

bool is_plain(const YAML::Node& n) { return n.IsScalar() && n.Tag() == "?"; }

// Values quoted in messages are cut, so that an error about a huge value stays one short line.
constexpr size_t kMaxShown = 80;

std::string cut_note(std::string_view s) {
  return s.size() > kMaxShown ? fmt::format("... ({} bytes)", s.size()) : std::string();
}

// A plain value as the user wrote it, cut to kMaxShown bytes.
std::string shown(std::string_view s) { return std::string(s.substr(0, kMaxShown)) + cut_note(s); }

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s.substr(0, kMaxShown)) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"" + cut_note(s);
}

std::string allowed_list(const std::vector<std::string_view>& allowed) {
  std::string s;
  for (std::string_view k : allowed) {
    if (!s.empty()) s += ", ";
    s += k;
  }
  return s;
}

// YAML 1.2 core schema number: decimal integers, decimals, exponents; no nan/inf/hex.
std::optional<double> parse_number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  for (char c : s) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' ||
          c == 'e' || c == 'E')) {
      return std::nullopt;
    }
  }
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

bool NumberRange::contains(double v) const {
  const bool above = lo_open ? v > lo : v >= lo;
  const bool below = hi_open ? v < hi : v <= hi;
  return above && below;
}

std::string NumberRange::to_string() const {
  return fmt::format("{}{}, {}{}", lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
}

std::string describe_node(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  if (node.IsScalar()) {
    if (is_plain(node)) return shown(node.Scalar());
    return "the string " + quoted(node.Scalar());
  }
  return "an unknown node";
}

Result<YamlMap> YamlMap::from(const YAML::Node& node, std::string file, std::string path,
                              const YAML::Node& key_node) {
  YamlMap m;
  m.file_ = std::move(file);
  m.path_ = std::move(path);
  m.key_node_ = key_node;
  if (!node.IsMap()) {
    const std::string what = m.path_.empty() ? std::string("the recipe") : m.path_;
    return m.error_at(
        node, key_node, "",
        fmt::format("{}: expected a mapping of keys, got {}", what, describe_node(node)));
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) {
      return m.error_at(
          it->first, key_node, "",
          fmt::format("{}: keys must be plain names, got {}",
                      m.path_.empty() ? "the recipe" : m.path_, describe_node(it->first)));
    }
    m.entries_.push_back({it->first.Scalar(), it->first, it->second});
  }
  return m;
}

std::string YamlMap::key_path(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  if (key.empty()) return path_;
  return path_ + "." + std::string(key);
}

Status YamlMap::error_at(const YAML::Node& node, const YAML::Node& fallback, std::string_view key,
                         const std::string& message) const {
  YAML::Mark mark;
  bool have_mark = false;
  for (const YAML::Node* n : {&node, &fallback}) {
    if (n->IsDefined() && !n->IsNull() && n->Mark().line >= 0) {
      mark = n->Mark();
      have_mark = true;
      break;
    }
  }
  if (!have_mark && fallback.IsDefined() && fallback.Mark().line >= 0) {
    mark = fallback.Mark();
    have_mark = true;
  }
  const std::string where =
      have_mark ? fmt::format("{}:{}:{}", file_, mark.line + 1, mark.column + 1) : file_;
  if (key.empty()) return invalid_argument("{}: {}", where, message);
  return invalid_argument("{}: {}: {}", where, shown(key_path(key)), message);
}

std::string YamlMap::location(std::string_view key) const {
  const Entry* e = find(key);
  for (const YAML::Node* n : {e ? &e->value : nullptr, e ? &e->key_node : nullptr, &key_node_}) {
    if (n != nullptr && n->IsDefined() && !n->IsNull() && n->Mark().line >= 0) {
      return fmt::format("{}:{}:{}", file_, n->Mark().line + 1, n->Mark().column + 1);
    }
  }
  return file_;
}

std::vector<std::string> YamlMap::keys() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(e.key);
  return out;
}

Status YamlMap::error(std::string_view key, const std::string& message) const {
  const Entry* e = find(key);
  if (e == nullptr) return error_at(YAML::Node(), key_node_, key, message);
  return error_at(e->value, e->key_node, key, message);
}

const YamlMap::Entry* YamlMap::find(std::string_view key) const {
  for (const Entry& e : entries_) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

Status YamlMap::check_keys(std::initializer_list<std::string_view> allowed) const {
  return check_keys(std::vector<std::string_view>(allowed));
}

Status YamlMap::check_keys(const std::vector<std::string_view>& allowed) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    bool known = false;
    for (std::string_view k : allowed) known = known || k == e.key;
    if (!known) {
      return error_at(e.key_node, key_node_, e.key,
                      fmt::format("unknown key (allowed here: {})", allowed_list(allowed)));
    }
    for (size_t j = 0; j < i; ++j) {
      if (entries_[j].key == e.key) {
        return error_at(e.key_node, key_node_, e.key,
                        fmt::format("duplicate key (first set on line {})",
                                    entries_[j].key_node.Mark().line + 1));
      }
    }
  }
  return ok_status();
}

Status YamlMap::require(std::string_view key) const {
  if (has(key)) return ok_status();
  return error_at(YAML::Node(), key_node_, key, "missing (required)");
}

Result<std::string> YamlMap::plain_scalar(const Entry& e, std::string_view what) const {
  if (!is_plain(e.value)) {
    return error_at(e.value, e.key_node, e.key,
                    fmt::format("expected {}, got {}", what, describe_node(e.value)));
  }
  return e.value.Scalar();
}

Result<std::optional<bool>> YamlMap::get_bool(std::string_view key) const {
  const Entry* e = find(key);
  if (e == nullptr) return std::optional<bool>();
  RINFER_ASSIGN_OR_RETURN(std::string s, plain_scalar(*e, "true or false"));
  if (s == "true" || s == "True" || s == "TRUE") return std::optional<bool>(true);
  if (s == "false" || s == "False" || s == "FALSE") return std::optional<bool>(false);
  return error_at(e->value, e->key_node, key,
                  fmt::format("expected true or false, got {}", shown(s)));
}

Result<std::optional<int64_t>> YamlMap::get_int(std::string_view key, int64_t lo,
                                                int64_t hi) const {
  const Entry* e = find(key);
  if (e == nullptr) return std::optional<int64_t>();
  const std::string what = fmt::format("an integer in [{}, {}]", lo, hi);
  RINFER_ASSIGN_OR_RETURN(std::string s, plain_scalar(*e, what));
  int64_t v = 0;
  const char* b = s.data() + (s.starts_with('+') ? 1 : 0);
  const auto [ptr, ec] = std::from_chars(b, s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v < lo || v > hi) {
    return error_at(e->value, e->key_node, key, fmt::format("expected {}, got {}", what, shown(s)));
  }
  return std::optional<int64_t>(v);
}

Result<std::optional<double>> YamlMap::get_number(std::string_view key,
                                                  const NumberRange& r) const {
  const Entry* e = find(key);
  if (e == nullptr) return std::optional<double>();
  const std::string what = "a number in " + r.to_string();
  RINFER_ASSIGN_OR_RETURN(std::string s, plain_scalar(*e, what));
  const std::optional<double> v = parse_number(s);
  if (!v || !r.contains(*v)) {
    return error_at(e->value, e->key_node, key, fmt::format("expected {}, got {}", what, shown(s)));
  }
  return v;
}

Result<std::optional<std::string>> YamlMap::get_string(std::string_view key) const {
  const Entry* e = find(key);
  if (e == nullptr) return std::optional<std::string>();
  if (!e->value.IsScalar() || e->value.Scalar().empty()) {
    return error_at(e->value, e->key_node, key,
                    fmt::format("expected a non-empty string, got {}", describe_node(e->value)));
  }
  if (e->value.Scalar().size() > kMaxStringBytes) {
    return error_at(e->value, e->key_node, key,
                    fmt::format("a string of {} bytes, at most {} allowed",
                                e->value.Scalar().size(), kMaxStringBytes));
  }
  return std::optional<std::string>(e->value.Scalar());
}

Result<std::string> YamlMap::get_string_or(std::string_view key, std::string fallback) const {
  RINFER_ASSIGN_OR_RETURN(std::optional<std::string> v, get_string(key));
  if (v.has_value()) return std::move(v).value();
  return fallback;
}

Result<std::optional<std::vector<std::string>>> YamlMap::get_string_list(std::string_view key,
                                                                         size_t max_items,
                                                                         size_t max_bytes) const {
  const Entry* e = find(key);
  if (e == nullptr) return std::optional<std::vector<std::string>>();
  if (!e->value.IsSequence()) {
    return error_at(e->value, e->key_node, key,
                    fmt::format("expected a list of strings, got {}", describe_node(e->value)));
  }
  if (e->value.size() > max_items) {
    return error_at(e->value, e->key_node, key,
                    fmt::format("{} items, at most {} allowed", e->value.size(), max_items));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < e->value.size(); ++i) {
    const YAML::Node item = e->value[i];
    if (!item.IsScalar() || item.Scalar().empty()) {
      return error_at(
          item, e->key_node, key,
          fmt::format("item {}: expected a non-empty string, got {}", i, describe_node(item)));
    }
    if (item.Scalar().size() > max_bytes) {
      return error_at(
          item, e->key_node, key,
          fmt::format("item {}: {} bytes, at most {} allowed", i, item.Scalar().size(), max_bytes));
    }
    out.push_back(item.Scalar());
  }
  return std::optional<std::vector<std::string>>(std::move(out));
}

Result<std::optional<std::vector<double>>> YamlMap::get_number_list(std::string_view key,
                                                                    const NumberRange& r) const {
  const Entry* e = find(key);
  if (e == nullptr) return std::optional<std::vector<double>>();
  const std::string what = "a number in " + r.to_string();
  if (!e->value.IsSequence()) {
    return error_at(e->value, e->key_node, key,
                    fmt::format("expected a list of numbers in {}, got {}", r.to_string(),
                                describe_node(e->value)));
  }
  if (e->value.size() > kMaxListItems) {
    return error_at(e->value, e->key_node, key,
                    fmt::format("{} items, at most {} allowed", e->value.size(), kMaxListItems));
  }
  std::vector<double> out;
  for (size_t i = 0; i < e->value.size(); ++i) {
    const YAML::Node item = e->value[i];
    const std::optional<double> v = is_plain(item) ? parse_number(item.Scalar()) : std::nullopt;
    if (!v || !r.contains(*v)) {
      return error_at(item, e->key_node, key,
                      fmt::format("item {}: expected {}, got {}", i, what, describe_node(item)));
    }
    out.push_back(*v);
  }
  return std::optional<std::vector<double>>(std::move(out));
}

Result<std::optional<std::vector<int64_t>>> YamlMap::get_int_list(std::string_view key, int64_t lo,
                                                                  int64_t hi) const {
  const Entry* e = find(key);
  if (e == nullptr) return std::optional<std::vector<int64_t>>();
  const std::string what = fmt::format("an integer in [{}, {}]", lo, hi);
  if (!e->value.IsSequence()) {
    return error_at(e->value, e->key_node, key,
                    fmt::format("expected a list of integers in [{}, {}], got {}", lo, hi,
                                describe_node(e->value)));
  }
  if (e->value.size() > kMaxListItems) {
    return error_at(e->value, e->key_node, key,
                    fmt::format("{} items, at most {} allowed", e->value.size(), kMaxListItems));
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < e->value.size(); ++i) {
    const YAML::Node item = e->value[i];
    int64_t v = 0;
    bool good = is_plain(item);
    if (good) {
      const std::string& s = item.Scalar();
      const char* b = s.data() + (s.starts_with('+') ? 1 : 0);
      const auto [ptr, ec] = std::from_chars(b, s.data() + s.size(), v);
      good = ec == std::errc() && ptr == s.data() + s.size() && v >= lo && v <= hi;
    }
    if (!good) {
      return error_at(item, e->key_node, key,
                      fmt::format("item {}: expected {}, got {}", i, what, describe_node(item)));
    }
    out.push_back(v);
  }
  return std::optional<std::vector<int64_t>>(std::move(out));
}

Result<std::optional<size_t>> YamlMap::get_enum(std::string_view key,
                                                const std::vector<std::string_view>& names) const {
  const Entry* e = find(key);
  if (e == nullptr) return std::optional<size_t>();
  std::string what = names.size() > 2 ? "one of " : "";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) what += i + 1 == names.size() ? " or " : ", ";
    what += names[i];
  }
  RINFER_ASSIGN_OR_RETURN(std::string s, plain_scalar(*e, what));
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == s) return std::optional<size_t>(i);
  }
  return error_at(e->value, e->key_node, key, fmt::format("expected {}, got {}", what, shown(s)));
}

Result<std::optional<YamlMap>> YamlMap::get_map(std::string_view key) const {
  const Entry* e = find(key);
  if (e == nullptr) return std::optional<YamlMap>();
  auto m = YamlMap::from(e->value, file_, key_path(key), e->key_node);
  if (!m.ok()) return m.status();
  return std::optional<YamlMap>(std::move(m).value());
}

}  // namespace rinfer
