#include "core/strings.h"

#include <fmt/format.h>

namespace rinfer {

namespace {

std::string escape(std::string_view s, size_t max_chars, bool escape_quotes) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i >= max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    const bool plain = c >= 0x20 && c < 0x7f && !(escape_quotes && (c == '\'' || c == '\\'));
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

}  // namespace

std::string printable(std::string_view s, size_t max_chars) {
  return escape(s, max_chars, /*escape_quotes=*/false);
}

std::string quoted(std::string_view s, size_t max_chars) {
  return "'" + escape(s, max_chars, /*escape_quotes=*/true) + "'";
}

}  // namespace rinfer
