#include "core/strings.h"

#include <fmt/format.h>

#include <cstdint>

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

// The length of the valid UTF-8 sequence at s[i] (2..4 bytes; no overlongs, surrogates or
// code points above U+10FFFF) and its code point, or 0.
size_t utf8_sequence(std::string_view s, size_t i, uint32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t len = 0;
  uint32_t v = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    v = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    v = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    v = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
      (v >= 0xD800 && v <= 0xDFFF)) {
    return 0;
  }
  *cp = v;
  return len;
}

}  // namespace

std::string display_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp = 0;
    size_t len = 0;
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7F) {
      out.push_back(static_cast<char>(c));
    } else if (c >= 0x80 && (len = utf8_sequence(s, i, &cp)) > 0 && !(cp >= 0x80 && cp < 0xA0)) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
    ++i;
  }
  return out;
}

std::string printable(std::string_view s, size_t max_chars) {
  return escape(s, max_chars, /*escape_quotes=*/false);
}

std::string quoted(std::string_view s, size_t max_chars) {
  return "'" + escape(s, max_chars, /*escape_quotes=*/true) + "'";
}

std::string_view trim_space(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

}  // namespace rinfer
